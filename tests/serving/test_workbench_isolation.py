"""R14: one machine, many workbenches. A second launch with its own data dir never talks to the first one's
fleet or router: busy ports are replaced by free ones, and the launcher checks that the processes it started
are the ones listening. Plus R12's second half: a runner that dies is restarted, and shows as alive again."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from data import db as dbmod, heartbeats
from data.settings import Settings
from serving import fleet_key, procs
from serving.launch import (
    addresses as fleet_addresses,
    cli as launcher,
    commands as fleet_commands,
    record as fleet_record,
    recorded as recorded_fleet,
)


def _up(data_dir: Path, fleet_port: int, router_port: int, prom_port: int) -> int:
    return launcher.main(
        [
            "up",
            "--fleet-mode",
            "sim",
            "--replicas",
            "2",
            "--sim-arg=--speed 0",
            "--data-dir",
            str(data_dir),
            "--clip-root",
            str(data_dir.parent / "clips"),
            "--fleet-port",
            str(fleet_port),
            "--router-port",
            str(router_port),
            "--router-prometheus-port",
            str(prom_port),
            "--startup-timeout",
            "60",
        ]
    )


def _block(n: int) -> int:
    return fleet_addresses.free_block("127.0.0.1", n, procs.free_port())


def test_second_workbench_with_the_same_ports_gets_its_own_fleet_and_router(tmp_path, capsys):
    (tmp_path / "clips").mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    fleet_port, router_port, prom_port = _block(2), procs.free_port(), procs.free_port()
    try:
        assert _up(a, fleet_port, router_port, prom_port) == 0
        # the second workbench asks for exactly the same ports (as two ./launch.sh with defaults would)
        assert _up(b, fleet_port, router_port, prom_port) == 0
        out = capsys.readouterr().out
        assert "in use (another workbench?)" in out
        ra = json.loads((a / "run" / "fleet.json").read_text())
        rb = json.loads((b / "run" / "fleet.json").read_text())
        assert ra["router_url"] == f"http://127.0.0.1:{router_port}"
        assert rb["router_url"] != ra["router_url"]
        assert not set(ra["replica_urls"]) & set(rb["replica_urls"])
        prom_b = [c for c in rb["procs"] if c["name"] == "router"][0]["cmd"]
        assert prom_b[prom_b.index("--prometheus-port") + 1] != str(prom_port)
        # each router (behind its gate) is its launcher's own process and routes only to its own replicas
        keys = {d: fleet_key.headers(Settings.load({"data_dir": str(d)}, environ={})) for d in (a, b)}
        for d, rec in ((a, ra), (b, rb)):
            gate = [c for c in rec["procs"] if c["name"] == "router-gate"][0]
            router = [c for c in rec["procs"] if c["name"] == "router"][0]
            assert procs.group_listens(gate["pgid"], httpx.URL(rec["router_url"]).port)
            assert procs.group_listens(router["pgid"], httpx.URL(router["url"]).port)
            workers = httpx.get(rec["router_url"] + "/workers", headers=keys[d], timeout=5).json()["workers"]
            assert sorted(w["url"] for w in workers) == sorted(rec["replica_urls"])
        assert keys[a] != keys[b]  # each workbench's fleet takes its own key
        # what `launch.sh` hands the second runner and app is the second router
        s_b = Settings.load({"data_dir": str(b)}, environ={})
        assert fleet_record.fleet_url(s_b) == rb["router_url"]
        before_a = [httpx.get(u + "/sim/stats", timeout=5).json()["chat_requests"] for u in ra["replica_urls"]]
        for _ in range(4):
            r = httpx.post(
                rb["router_url"] + "/v1/chat/completions",
                timeout=10,
                headers=keys[b],
                json={"messages": [{"role": "user", "content": "hello"}]},
            )
            assert r.status_code == 200, r.text
        after_a = [httpx.get(u + "/sim/stats", timeout=5).json()["chat_requests"] for u in ra["replica_urls"]]
        after_b = [httpx.get(u + "/sim/stats", timeout=5).json()["chat_requests"] for u in rb["replica_urls"]]
        assert after_a == before_a and sum(after_b) == 4
    finally:
        for d in (b, a):
            recorded_fleet.down(Settings.load({"data_dir": str(d)}, environ={}), quiet=True)


def test_launcher_refuses_a_port_answered_by_someone_else(tmp_path):
    """The start-up race of issue 11: our process did not get the port, another workbench's server answers
    there. Health says 200; the ownership check says no."""
    port = procs.free_port()
    foreign = procs.start(
        "foreign",
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        log=tmp_path / "foreign.log",
        health=f"http://127.0.0.1:{port}/",
    )
    ours = procs.start(
        "router",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        log=tmp_path / "ours.log",
        url=f"http://127.0.0.1:{port}",
        health=f"http://127.0.0.1:{port}/",
    )
    try:
        procs.wait_healthy([foreign, ours], timeout=20)  # health alone is fooled
        with pytest.raises(procs.StartupError, match="not by the router this launcher started"):
            fleet_addresses.verify_owners([ours])
        fleet_addresses.verify_owners(
            [procs.Child("foreign", foreign.pid, foreign.pgid, [], foreign.log, url=f"http://127.0.0.1:{port}")]
        )  # the owner passes
    finally:
        for c in (ours, foreign):
            procs.stop_group(c.pgid, c.pid, grace=2, popen=c.popen)


def test_a_gpu_node_keeps_its_ports_and_says_so(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        settings = Settings.load(
            {"data_dir": str(tmp_path), "role": "node", "fleet_mode": "sim", "fleet_port": port}, environ={}
        )
        with pytest.raises(SystemExit, match="GPU node keeps the ports"):
            fleet_addresses.resolve_ports(settings, 1)


def _runner_beats(db_path) -> list[dict]:
    d = dbmod.connect(db_path)
    try:
        return heartbeats.heartbeats(d)
    finally:
        d.close()


def test_a_killed_runner_is_restarted_by_its_supervisor(settings, tmp_path):
    dbmod.connect(settings.db).close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [
        sys.executable,
        "-m",
        "serving.supervisor",
        "--name",
        "runner",
        "--data-dir",
        str(settings.data_dir),
        "--first-backoff",
        "0.2",
        "--",
        *fleet_commands.runner_command(settings, "http://127.0.0.1:9"),
    ]
    sup = subprocess.Popen(
        cmd, start_new_session=True, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "sup.log", "wb")
    )
    try:

        def runner_pid(not_pid=None, timeout=40.0):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                beats = [
                    b
                    for b in _runner_beats(settings.db)
                    if b["kind"] == "runner" and b["pid"] != not_pid and procs.pid_alive(b["pid"])
                ]
                if beats:
                    return beats[0]["pid"]
                time.sleep(0.2)
            raise AssertionError("no live runner heartbeat: " + (tmp_path / "sup.log").read_text()[-2000:])

        first = runner_pid()
        os.kill(first, signal.SIGKILL)  # what the OOM killer does
        second = runner_pid(not_pid=first)
        assert second != first and os.getpgid(second) == sup.pid  # restarted, in the group launch.sh stops
        sv = [b for b in _runner_beats(settings.db) if b["kind"] == "supervisor"]
        assert sv and sv[0]["info"]["restarts"] >= 1 and sv[0]["info"]["last_exit"] == -signal.SIGKILL
        # the Jobs tab's liveness line sees the new runner
        from webapp.jobs.progress import runner_line

        d = dbmod.connect(settings.db)
        try:
            line = runner_line(heartbeats.heartbeats(d, "runner"), settings)
        finally:
            d.close()
        assert "Runner alive" in line and str(second) in line
    finally:
        os.killpg(sup.pid, signal.SIGTERM)
        try:
            sup.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait(5)
    assert sup.returncode == 0
    time.sleep(0.3)
    assert not procs._group_alive(sup.pid)  # stopping the group stops the runner too: nothing restarted


def test_owns_says_who_answers_the_apps_port(tmp_path):
    """What launch.sh runs after the app's /healthz answers: exit 0 only if the app it started holds the port."""
    port = procs.free_port()
    other = procs.start(
        "other-app",
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        log=tmp_path / "other.log",
        health=f"http://127.0.0.1:{port}/",
    )
    ours = procs.start("app", [sys.executable, "-c", "import time; time.sleep(60)"], log=tmp_path / "app.log")
    try:
        procs.wait_healthy([other], timeout=20)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

        def run(pgid):
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "serving.launcher",
                    "owns",
                    "--data-dir",
                    str(tmp_path),
                    "--pgid",
                    str(pgid),
                    "--listen-port",
                    str(port),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )

        r = run(ours.pgid)
        assert r.returncode == 1 and f"not by the process group {ours.pgid}" in r.stderr
        assert str(other.pid) in r.stderr
        assert run(other.pgid).returncode == 0
    finally:
        for c in (ours, other):
            procs.stop_group(c.pgid, c.pid, grace=2, popen=c.popen)


def test_dry_run_prints_the_configured_ports_and_says_which_would_move(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        assert (
            launcher.main(
                [
                    "up",
                    "--fleet-mode",
                    "sim",
                    "--replicas",
                    "1",
                    "--dry-run",
                    "--data-dir",
                    str(tmp_path),
                    "--fleet-port",
                    str(busy),
                    "--router-port",
                    str(procs.free_port()),
                ]
            )
            == 0
        )
    lines = capsys.readouterr().out.splitlines()
    assert f"--port {busy}" in lines[0]  # the commands as configured (maybe meant for another machine)
    assert lines[-1].startswith(f"# note: replica ports {busy}..{busy} are in use") and "would pick free" in lines[-1]
