"""Issue 26, point 1: every health read of the runner went through the router gate without the fleet key and got
401, so the runner line said "fleet down: 0 of 1 healthy" on a healthy fleet (the router counted as one replica),
Start warned "No replica is healthy", and a fleet failing every request was taken for an outage. The tests looked
at the runner without the gate that ./launch.sh puts in front of it.

Now one reader, made from the data dir's settings, carries the key (serving.fleet.reader), and every reader uses
it. Here:
- the source: no module of serving/ or webapp/ makes an HTTP client for the fleet but the reader, the fleet
  client (with the key) and the parts that are no reader of a data dir's fleet; a fleet's health waits pass the
  reader;
- the fleet `serving.launcher up` starts (simulated replicas, vllm-router, the router gate, the key): the runner
  process, the Fleet tab's and the Jobs tab's reads, the launcher's `status` and `serving.caption` all see
  healthy == replicas through the gate, and neither the gate's log nor the runner's holds a 401.
The same on the whole stack ./launch.sh starts, in a browser: tests/browser/test_browser_launched_fleet.py."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data import db as dbmod, heartbeats
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import procs
from serving.fleet.reader import FleetReader
from serving.launch import addresses as fleet_addresses, cli as launcher, recorded as recorded_fleet
from tests.support.waiting import wait_until
from webapp.fleet.tab import snapshot
from webapp.jobs import fleet_notice, progress as jobs_progress

ROOT = Path(__file__).resolve().parents[2]
# the modules that may make an HTTP client, and why none of them reads a data dir's fleet without its key
HTTP_CLIENTS = {
    "serving.fleet.reader": "every read of a fleet's health, load and workers: with the data dir's key",
    "serving.client": "the caption requests (FleetClient): with the data dir's key, from the same fleet_key.auth",
    "serving.router_gate": "the gate's watchdog, on its own router's private address (which takes no key)",
    "serving.procs": "health waits of processes that are no fleet (the app); a fleet's go through a FleetReader",
    "serving.simfleet.replica": "the simulated replica's own media fetches (what vLLM fetches)",
    "serving.simfleet.harness": "the simulated fleet's test harness: its own knobs and health",
}
HTTPX_CALLS = {"Client", "AsyncClient", "get", "post", "put", "patch", "delete", "head", "options", "request", "stream"}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_no_module_reads_the_fleet_but_through_the_reader():
    """A new reader that builds its own client, or a health wait of a fleet without the reader, fails here."""
    clients, waits = {}, []
    for path in sorted(p for top in ("serving", "webapp") for p in (ROOT / top).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("httpx", "urllib.request", "requests"):
                clients.setdefault(_module(path), []).append(f"from {node.module} import ... (line {node.lineno})")
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            f = node.func
            if isinstance(f.value, ast.Name) and f.value.id == "httpx" and f.attr in HTTPX_CALLS:
                clients.setdefault(_module(path), []).append(f"httpx.{f.attr} (line {node.lineno})")
            if f.attr == "urlopen":
                clients.setdefault(_module(path), []).append(f"urlopen (line {node.lineno})")
            if f.attr == "wait_healthy" and _module(path) != "serving.procs":
                if not any(k.arg == "reader" for k in node.keywords):
                    waits.append(f"{_module(path)}:{node.lineno}")
    unknown = {m: where for m, where in clients.items() if m not in HTTP_CLIENTS}
    assert not unknown, f"HTTP clients outside serving.fleet.reader (read the fleet through a FleetReader): {unknown}"
    assert not waits, f"health waits of a fleet without its reader (the key): {waits}"
    assert "serving.fleet.reader" in clients  # the check looks where the clients are


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The fleet `./launch.sh` starts on one machine: 2 simulated replicas, vllm-router, the router gate, the
    key; and a small library to caption."""
    base = tmp_path_factory.mktemp("keyed")
    settings = Settings.load({"data_dir": str(base / "var")}, environ={})
    db = dbmod.connect(settings.db)
    tiny_library(settings, db, 6)
    db.close()
    port = fleet_addresses.free_block("127.0.0.1", 2, procs.free_port())
    args = ["up", "--fleet-mode", "sim", "--replicas", "2", "--sim-arg=--speed 0.05", "--data-dir", str(base / "var")]
    args += ["--fleet-port", str(port), "--router-port", str(procs.free_port())]
    args += ["--router-prometheus-port", str(procs.free_port()), "--startup-timeout", "60"]
    assert launcher.main(args) == 0
    rec = json.loads((settings.data_dir / "run" / "fleet.json").read_text())
    try:
        yield settings, rec["router_url"]
    finally:
        recorded_fleet.down(settings, grace=5, quiet=True)


def test_every_reader_sees_the_replicas_behind_the_gate_and_none_is_refused(fleet):
    settings, gate = fleet
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    env["PYTHONPATH"] = str(ROOT)
    log = settings.data_dir / "logs" / "runner.log"
    runner = subprocess.Popen(
        [sys.executable, "-m", "serving.runner", "--data-dir", str(settings.data_dir), "--fleet-urls", gate],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        d = dbmod.connect(settings.db)
        try:
            # the runner's look, as the Jobs tab reads it from the heartbeat
            def looked():
                beats = heartbeats.heartbeats(d, "runner")
                report = fleet_notice.report_for(beats)
                return beats if report and report.get("look") else None

            beats = wait_until(looked, timeout=60, what="a runner heartbeat with a look at the fleet")
            look = fleet_notice.report_for(beats)["look"]
            line = jobs_progress.runner_line(beats, settings)
            warning = fleet_notice.start_warning(beats)
        finally:
            d.close()
        # `serving.caption` (the runner's loop in the terminal) and `./launch.sh status` (the launcher's)
        cli = subprocess.run(
            [sys.executable, "-m", "serving.caption", "--data-dir", str(settings.data_dir)]
            + ["--fleet-urls", gate, "--has-caption", "no", "--no-progress"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = recorded_fleet.status(settings)
    finally:
        procs.stop_group(runner.pid, runner.pid, grace=10, popen=runner)
    reader = FleetReader(settings)
    rows, router = snapshot(reader, [gate])  # the Fleet tab
    print(f"look: {look['healthy']} of {look['total']} healthy; runner line: {line!r}")
    assert look["router"] == gate and look["healthy"] == look["total"] == 2, look
    assert "fleet: 2 of 2 healthy" in line and "down" not in line, line
    assert warning == "", warning
    assert cli.returncode == 0 and "6 captioned, 0 failed" in cli.stderr, cli.stderr[-2000:]
    assert status == 0 and " 401" not in out.getvalue(), out.getvalue()
    assert len(rows) == 2 and all(r["healthy"] for r in rows) and router["live"], (rows, router)
    assert reader.router_workers(gate) == 2  # the Jobs tab's replica count
    gate_log = (settings.data_dir / "logs" / "router-gate.log").read_text()
    assert "401" not in gate_log, gate_log[-2000:]  # the gate says every request refused for want of the key
    # the runner says what its looks found when it changes (not each read: serving.runner.fleet_log); a read
    # without the key would have found the replicas unhealthy, "/health answered 401"
    said = log.read_text()
    assert "fleet: 2 of 2 replicas healthy by /health" in said and "401" not in said, said[-2000:]
