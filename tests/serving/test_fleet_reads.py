"""Reads of the fleet (serving.fleet.reader.FleetReader, the one way to read a fleet): replicas' health and metrics,
the router's status, made with the fleet key, over TLS, and bounded. One module per subject: what was
test_fleet_metrics, test_fleet_reads_keyed, test_fleet_reads_tls and test_fleet_reads_bounded, in that order.

Health and metrics: parsing vLLM's Prometheus text, scraping live (simulated) replicas, a dead or
unhealthy replica, and the real vllm-router's status and request spread; every read through a
serving.fleet.reader.FleetReader (the one way to read a fleet).

Keyed: issue 26, point 1: every health read of the runner went through the router gate without the fleet key and got
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
The same on the whole stack ./launch.sh starts, in a browser: tests/browser/test_browser_launched_fleet.py.

TLS: the captioning client and the FleetReader trust the same CAs (serving.fleet.tls), and a reader
makes its context once.

Each httpx client builds an SSL context of its own, loading a CA bundle (~20 ms of CPU), and the reader made a
client per read; the app and the runner read their fleet every few seconds. The reader makes the context once and
gives it to each client. Which CAs: the captioning client read SSL_CERT_FILE (httpx's default) while the reader did
not, so a fleet behind a private CA was captioned on while the Fleet tab showed every replica down with
CERTIFICATE_VERIFY_FAILED. Both now verify with serving.fleet.tls: SSL_CERT_FILE/DIR, else certifi's CAs; an
untrusted certificate is refused by both. The CPU per read, before and after: `python
benchmarks/bench_fleet_reads.py` (docs/BENCHMARKS.md).

Bounded: issue 21, class 2: every read from a fleet is bounded by decompressed size as it streams, by time, and by
fan-out. A hostile fleet on loopback (tests/support/hostile_fleet.py) answers with compression bombs, endless
bodies, trickles, huge labels and a router listing 300 workers; the runner's client and the Fleet tab read it.

Memory is measured with tracemalloc (Python allocations of this process: the decoded bytes live there), so the
figure does not depend on what else the machine runs. The benchmark with process RSS before/after is
benchmarks/bench_hostile_fleet.py.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from data import db as dbmod, heartbeats, limits
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import bounded, procs
from serving.client import CaptionRequest, FleetClient
from serving.errors import ReplicaError
from serving.fleet import health
from serving.fleet.reader import FleetReader
from serving.launch import addresses as fleet_addresses, cli as launcher, recorded as recorded_fleet
from serving.procs import free_port
from tests.support.fleet_fixtures import PROMPT, caption
from tests.support.hostile_fleet import HostileFleet, bomb
from tests.support.reliability_fixtures import GradioSession, dependencies
from tests.support.waiting import wait_until
from tests.support.webapp_fixtures import AppServer, add_users, build_library
from webapp.fleet import tab as fleet_tab
from webapp.fleet.tab import snapshot
from webapp.jobs import fleet_notice, progress as jobs_progress

# Shaped like vLLM 0.25's exposition with two engines (data parallel): series are summed.
VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-VL-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 10.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-VL-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-VL-8B-Instruct"} 0.5
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="Qwen/Qwen3-VL-8B-Instruct"} 500.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 200.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="Qwen/Qwen3-VL-8B-Instruct"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="Qwen/Qwen3-VL-8B-Instruct"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="Qwen/Qwen3-VL-8B-Instruct"} 2.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 4.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-VL-8B-Instruct"} 10.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 10.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct"} 15.0
"""

# a status 401, not the digits inside a figure (a runner heartbeat's rate once read 1.0375397401303705)
STATUS_401 = re.compile(r"(?<![\d.])401(?![\d.])")


def test_parse_metrics_sums_engines_and_reasons():
    m = health.parse_metrics(VLLM_TEXT)
    assert m["running"] == 7 and m["waiting"] == 10
    assert m["kv_cache_usage"] == 0.5
    assert m["prompt_tokens"] == 1500 and m["generation_tokens"] == 200
    assert m["success"] == {"stop": 9.0, "length": 1.0} and m["success_total"] == 10
    assert m["e2e_latency_mean"] == pytest.approx(1.5)
    assert m["model"] == "Qwen/Qwen3-VL-8B-Instruct"


@pytest.fixture
def reader(settings):
    return FleetReader(settings)


def test_scrape_real_vllm_shaped_replica_via_transport(settings):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="" if request.url.path == "/health" else VLLM_TEXT)

    st = FleetReader(settings, transport=httpx.MockTransport(handler)).scrape("http://gpu-node:8000/v1")
    assert st.healthy and st.state == "up" and st.running == 7 and st.simulated is False
    assert st.error is None


def test_scrape_reports_broken_metrics_without_raising(settings):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200 if request.url.path == "/health" else 500, text="oops")

    st = FleetReader(settings, transport=httpx.MockTransport(handler)).scrape("http://gpu-node:8000")
    assert st.healthy and "/metrics answered 500" in st.error


def test_scrape_live_simulated_replicas_after_traffic(fleet_settings, sim, reader):
    for _ in range(3):
        caption(fleet_settings, sim.urls[0], "a.mp4")
    statuses = reader.fleet_status(sim.urls, timeout=2)
    assert [s.url for s in statuses] == sim.urls
    s0, s1 = statuses
    assert s0.healthy and s0.simulated and s0.success_total == 3 and s0.success["stop"] == 3
    assert s0.generation_tokens > 0 and s0.prompt_tokens > 0 and s0.e2e_latency_mean is not None
    assert s0.running == 0 and s0.waiting == 0
    assert s1.success_total == 0 and s1.healthy


def test_failed_caption_requests_are_counted_as_vllm_counts_them(fleet_settings, sim, reader):
    """vLLM's own series count only what succeeded; its HTTP instrumentation (prometheus-fastapi-instrumentator,
    serving/simfleet/metrics.py) counts every answer by handler, method and grouped status: a replica that fails
    every request shows it there, and the Fleet tab reads it (issue 45)."""
    from serving.errors import ReplicaError

    sim.set_knobs(0, error_rate=1.0)
    for _ in range(3):
        with pytest.raises(ReplicaError):
            caption(fleet_settings, sim.urls[0], "a.mp4")
    caption(fleet_settings, sim.urls[1], "a.mp4")
    text = httpx.get(sim.urls[0] + "/metrics").text
    assert 'http_requests_total{handler="/v1/chat/completions",method="POST",status="5xx"} 3.0' in text, text[-800:]
    assert 'handler="/health"' not in text and 'handler="/metrics"' not in text  # excluded, as on vLLM
    s0, s1 = reader.fleet_status(sim.urls, timeout=2)
    assert (s0.failed_total, s0.success_total, s1.failed_total, s1.success_total) == (3, 0, 0, 1)
    m = health.parse_metrics(
        'http_requests_total{handler="/v1/chat/completions",method="POST",status="4xx"} 2.0\n'
        'http_requests_total{handler="/v1/models",method="GET",status="5xx"} 9.0\n'
    )
    assert m["refused_total"] == 2 and m["failed_total"] == 0  # only caption requests count


def test_dead_and_unhealthy_replicas_are_reported_fast(sim, reader):
    sim.set_knobs(0, unhealthy=True)
    sim.kill_replica(1)
    t0 = time.monotonic()
    statuses = reader.fleet_status(sim.urls + [f"http://127.0.0.1:{free_port()}"], timeout=1.0)
    assert time.monotonic() - t0 < 3
    assert [s.state for s in statuses] == ["unhealthy", "down", "down"]
    assert "/health answered 503" in statuses[0].error
    assert all(not s.healthy for s in statuses)


def test_a_read_from_inside_an_event_loop_gets_the_same_answer(sim, reader):
    async def go():
        return reader.fleet_status(sim.urls, timeout=2)

    statuses = asyncio.run(go())
    assert len(statuses) == 2 and all(s.healthy and s.simulated for s in statuses)


def test_rates_between_two_scrapes(fleet_settings, sim, reader):
    before = reader.scrape(sim.urls[0])
    for _ in range(4):
        caption(fleet_settings, sim.urls[0], "a.mp4")
    after = reader.scrape(sim.urls[0])
    r = health.rates(before, after)
    assert r["requests_per_s"] > 0 and r["tokens_per_s"] > 0
    assert health.rates(after, after)["requests_per_s"] is None


def test_a_watch_marks_a_simulated_fleet(sim, reader):
    snap = reader.watch(sim.urls, timeout=2)
    assert snap["simulated"] is True and snap["healthy"] == 2 and snap["total"] == 2
    assert snap["router"] is None and snap["replicas"][0]["state"] == "up"


@pytest.fixture
def router(sim):
    """The real vllm-router (round robin) in front of the two simulated replicas."""
    exe = shutil.which("vllm-router")
    assert exe, "vllm-router must be installed (pip install vllm-router): it is part of the test extra"
    port, prom = free_port(), free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-urls",
            *sim.urls,
            "--policy",
            "round_robin",
            "--worker-startup-timeout-secs",
            "20",
            "--health-check-interval-secs",
            "1",
            "--prometheus-port",
            str(prom),
            "--retry-max-retries",
            "1",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")[-1500:]
            try:
                if httpx.get(url + "/readiness", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail("vllm-router did not become ready within 30 s")
        yield url
    finally:
        procs.stop_group(proc.pid, proc.pid, grace=5, popen=proc)
        proc.stderr.close()


def test_router_status_and_request_spread(fleet_settings, sim, router, reader):
    st = reader.router_status(router, timeout=2)
    assert st.live and st.ready and st.total_workers == 2 and st.healthy_workers == 2
    assert sorted(w["url"] for w in st.workers) == sorted(sim.urls)
    replicas = [caption(fleet_settings, router, f"many/{i % 6:02d}.mp4").provenance["replica"] for i in range(20)]
    assert set(replicas) == set(sim.urls)
    counts = [s.success_total for s in reader.fleet_status(sim.urls)]
    assert counts == [10, 10]  # round robin: an even spread, seen in each replica's own metrics


def test_discover_looks_through_a_router_to_its_workers(sim, router, reader):
    replicas, router_url = reader.discover([router], timeout=2)
    assert router_url == router and sorted(replicas) == sorted(sim.urls)
    # replica URLs given directly stay replicas; no router is invented
    assert reader.discover(sim.urls, timeout=2) == (list(sim.urls), None)


def test_router_status_of_nothing_is_not_live(reader):
    st = reader.router_status(f"http://127.0.0.1:{free_port()}", timeout=0.5)
    assert st.live is False and st.error


ROUTER_RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "recordings" / "vllm-router-0.1.17-readiness.json").read_text()
)
READY, NOT_READY = (ROUTER_RECORDED["answers"][k] for k in ("readiness_ready", "readiness_not_ready"))


@pytest.mark.parametrize(
    "readiness, expected, router_healthy",
    [
        ((READY["status"], READY["body"]), 2, 2),  # the real router, both admitted
        ((200, {"status": "ready", "healthy_workers": 1, "total_workers": 2}), 1, 1),
        ((NOT_READY["status"], NOT_READY["body"]), 0, 0),  # the real router's 503 names no count: none admitted
        ((200, {"total_workers": 2}), 2, None),  # a router that does not say caps nothing
        ((404, {"detail": "Not Found"}), 2, None),  # nor one without /readiness (a 404 is no verdict)
    ],
)
def test_a_look_through_a_router_counts_no_more_than_the_router_admits(settings, readiness, expected, router_healthy):
    """Replicas back up answer /health 200 before vllm-router's own health check re-admits them; until it does,
    the router refuses the runner's requests, so a look counts no more healthy replicas than the router does (the
    runner's outage then lasts until the router serves, and no clip spends an attempt on its refusals). The real
    router's not-ready answer (tests/recordings/vllm-router-0.1.17-readiness.json) gives no count: it admits none.
    Before, that answer counted as "does not say", and a clip sent in those ~2 s spent an attempt (the fleet-down
    browser test caught it, 2026-12-03)."""
    replicas = ["http://gpu-a:8000", "http://gpu-b:8000"]

    def handler(request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        if host == "router":
            if path == "/liveness":
                return httpx.Response(200, text="ok")
            if path == "/readiness":
                return httpx.Response(readiness[0], json=readiness[1])
            if path == "/workers":
                return httpx.Response(200, json={"workers": [{"url": u} for u in replicas]})
        if path == "/health":
            return httpx.Response(200, text="")
        return httpx.Response(404)

    look = FleetReader(settings, transport=httpx.MockTransport(handler)).look(["http://router:30000"])
    assert look["router"] == "http://router:30000" and look["total"] == 2 and look["looked"] == 2
    assert look["healthy"] == expected and look["router_healthy"] == router_healthy


def test_the_real_router_answers_as_recorded_and_a_look_in_its_lag_counts_none(sim, router, reader):
    """The installed vllm-router answers /readiness as recorded, ready and not ready; and in the seconds after
    its workers' /health is back but before it re-admits them (its check runs every second here), a look sees
    the replicas healthy and counts 0 of them, not 2."""
    ready = httpx.get(router + "/readiness", timeout=2, trust_env=False)
    assert (ready.status_code, ready.json()) == (READY["status"], READY["body"])
    in_lag = []
    for _cycle in range(3):  # a look that misses the lag (a stalled machine) makes another cycle
        for i in range(2):
            sim.set_knobs(i, unhealthy=True)
        deadline = time.monotonic() + 15
        while (r := httpx.get(router + "/readiness", timeout=2, trust_env=False)).status_code != 503:
            assert time.monotonic() < deadline, "the router never noticed its workers down"
            time.sleep(0.1)
        assert (r.status_code, r.json()) == (NOT_READY["status"], NOT_READY["body"])
        for i in range(2):
            sim.set_knobs(i, unhealthy=False)
        look = reader.look([router], timeout=2)
        assert [x["healthy"] for x in look["replicas"]] == [True, True]  # the replicas are back
        if httpx.get(router + "/readiness", timeout=2, trust_env=False).status_code == 503:
            in_lag.append(look)  # not ready before the look and after it: the whole look fell in the lag
            break
        deadline = time.monotonic() + 15
        while httpx.get(router + "/readiness", timeout=2, trust_env=False).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert in_lag, "no look landed in the router's lag in 3 cycles"
    assert in_lag[0]["healthy"] == 0 and in_lag[0]["router_healthy"] == 0 and in_lag[0]["total"] == 2


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
    assert not STATUS_401.search(gate_log), gate_log[-2000:]  # the gate says every request refused for want of the key
    # the runner says what its looks found when it changes (not each read: serving.runner.fleet_log); a read
    # without the key would have found the replicas unhealthy, "/health answered 401"
    said = log.read_text()
    assert "fleet: 2 of 2 replicas healthy by /health" in said and not STATUS_401.search(said), said[-2000:]


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _serve(tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    if tls is not None:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def self_signed(tmp_path):
    """(URL of an https server on loopback with a self-signed certificate for 127.0.0.1, the certificate's file)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv = _serve(tls)
    try:
        yield f"https://127.0.0.1:{srv.server_port}", cert
    finally:
        srv.shutdown()
        srv.server_close()


async def _client_get(settings, url: str) -> httpx.Response | Exception:
    """A GET through the captioning client's own connection pool (its TLS context included)."""
    client = FleetClient(settings)
    try:
        async with client._pool(url) as c:
            return await c.get(url + "/health")
    except httpx.HTTPError as e:
        return e
    finally:
        await client.aclose()


def test_an_https_fleet_with_an_untrusted_certificate_is_refused_by_captioning_and_the_fleet_tab(
    settings, self_signed, monkeypatch
):
    url, cert = self_signed
    trusting = httpx.get(url + "/health", verify=ssl.create_default_context(cafile=cert), trust_env=False)
    assert trusting.status_code == 200  # the server answers whoever trusts its certificate
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    reader = FleetReader(settings)
    for _ in range(2):  # the first read makes the reader's context, the second uses it
        r = reader.get(url + "/health")
        assert isinstance(r, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(r), r
    (status,) = reader.fleet_status([url])
    assert not status.healthy and "CERTIFICATE_VERIFY_FAILED" in status.error
    r = asyncio.run(_client_get(settings, url))
    assert isinstance(r, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(r), r


def test_a_fleet_behind_a_private_ca_named_by_ssl_cert_file_is_captioned_on_and_shown_up(
    settings, self_signed, monkeypatch
):
    """The CA file a deployment names for the captioning client is the one the Fleet tab verifies with: the tab
    never shows a fleet down that the runner captions on."""
    url, cert = self_signed
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    r = asyncio.run(_client_get(settings, url))
    assert isinstance(r, httpx.Response) and r.status_code == 200, r
    reader = FleetReader(settings)
    assert reader.get(url + "/health").status_code == 200
    (status,) = reader.fleet_status([url])
    assert status.healthy, status.error


# in a child process: the tests' conftest shares one default SSL context among all of httpx's clients
COUNT = r"""
import ssl, sys
made = []
_create = ssl.create_default_context
def counting(*args, **kwargs):
    made.append(1)
    return _create(*args, **kwargs)
ssl.create_default_context = counting
import httpx
from data.settings import Settings
from serving.fleet.reader import FleetReader
url = sys.argv[2]
reader = FleetReader(Settings.load({"data_dir": sys.argv[1]}, environ={}))
codes = [reader.get(url + "/health").status_code for _ in range(3)]
healthy = [s.healthy for s in reader.fleet_status([url, url])] + [reader.look([url])["healthy"]]
print(codes, healthy, len(made))
"""


def test_a_reader_makes_one_tls_context_for_all_its_reads(tmp_path):
    srv = _serve()
    try:
        out = subprocess.run(
            [sys.executable, "-c", COUNT, str(tmp_path / "var"), f"http://127.0.0.1:{srv.server_port}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    finally:
        srv.shutdown()
        srv.server_close()
    assert out.stdout.split("]")[-1].strip() == "1", out.stdout  # 5 reads (3 gets, fleet_status, look): 1 context
    assert out.stdout.startswith("[200, 200, 200] [True, True, 1]"), out.stdout


MiB = 1 << 20


def _peak(fn):
    """(fn(), the peak of Python allocations while it ran, in bytes)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compression_bomb_is_refused_after_about_the_limit_decoded(encoding):
    data = bomb(encoding, 64)  # 64 MiB once decoded, a few KiB on the wire

    def read():
        reader = bounded.Reader({"content-encoding": encoding}, MiB)
        with pytest.raises(bounded.Oversized, match="longer than 1,048,576 bytes"):
            for i in range(0, len(data), 65536):  # the network's chunks
                reader.add(data[i : i + 65536])
            reader.finish()
        return reader.size

    size, peak = _peak(read)
    print(f"{encoding} bomb of 64 MiB: refused after {size:,} decoded bytes, peak {peak / MiB:.1f} MiB")
    assert size <= MiB + 65536 + 1
    assert peak < 4 * MiB  # httpx decodes each chunk whole: ~64 MiB for this one


@pytest.mark.parametrize(
    "headers",
    [{"content-encoding": "zstd"}, {"content-encoding": "gzip, gzip"}, {"content-encoding": "compress"}],
)
def test_an_encoding_that_cannot_be_bounded_is_refused(headers):
    with pytest.raises(bounded.BadEncoding):
        bounded.Reader(headers, MiB)


def test_valid_compressed_answers_still_decode():
    import gzip
    import zlib

    import brotli

    text = json.dumps({"caption": "a car " * 2000}).encode()
    for enc, data in {
        "gzip": gzip.compress(text),
        "gzip-members": gzip.compress(text[:500]) + gzip.compress(text[500:]),
        "deflate": zlib.compress(text),
        "br": brotli.compress(text),
    }.items():
        reader = bounded.Reader({"content-encoding": enc.split("-")[0]}, MiB)
        for i in range(0, len(data), 100):
            reader.add(data[i : i + 100])
        assert reader.finish() == text, enc
    raw = zlib.compressobj(wbits=-15)
    reader = bounded.Reader({"content-encoding": "deflate"}, MiB)  # raw deflate, as some servers send it
    reader.add(raw.compress(text) + raw.flush())
    assert reader.finish() == text


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_the_runner_client_refuses_a_compressed_bomb_answer_without_holding_it(fleet_settings, encoding):
    with HostileFleet(encoding, bomb_mib=256) as hf:

        async def go():
            async with FleetClient(fleet_settings) as client:
                results = await asyncio.gather(
                    *(client.caption(hf.url, CaptionRequest("a.mp4", PROMPT)) for _ in range(3)),
                    return_exceptions=True,
                )
            return results

        results, peak = _peak(lambda: asyncio.run(go()))
    print(f"runner client, 3 {encoding} bombs of 256 MiB at once: peak {peak / MiB:.1f} MiB of Python allocations")
    for r in results:
        assert isinstance(r, ReplicaError) and r.kind == "oversized", r
    assert peak < 3 * limits.MAX_ANSWER_BYTES + 16 * MiB  # before: ~256 MiB per answer


def test_the_fleet_tab_calls_at_most_max_scraped_of_300_workers(reader):
    with HostileFleet("ok", workers=300) as hf:
        t = time.monotonic()
        rows, router = fleet_tab.snapshot(reader, [hf.url])
        took = time.monotonic() - t
        called = len(hf.called())
    print(f"router with 300 workers: {called} workers called, {len(rows)} rows, {took:.2f} s")
    assert called <= health.MAX_SCRAPED  # before: 300 on every refresh
    assert len(rows) == health.MAX_SCRAPED and all(r["healthy"] for r in rows)
    assert router["listed"] == 300 and router["total_workers"] == 300
    assert len(router["workers"]) <= health.MAX_LISTED_WORKERS


@pytest.mark.parametrize("mode", ["gzip", "br", "huge"])
def test_the_fleet_tab_reads_hostile_metrics_within_a_bounded_memory(mode, reader):
    with HostileFleet(mode, workers=40, bomb_mib=64, huge_mib=400) as hf:
        (rows, router), peak = _peak(lambda: fleet_tab.snapshot(reader, [hf.url]))
        time.sleep(0.5)  # the server notices the closed connections
        sent = hf.sent()
    print(f"Fleet tab, 40 workers answering {mode}: peak {peak / MiB:.1f} MiB, {sent / MiB:.1f} MiB sent to the app")
    assert len(rows) == health.MAX_SCRAPED
    for r in rows:
        # refused past the size bound (or, on a loaded machine, the time bound)
        assert "longer than" in (r["error"] or "") or "no complete answer" in (r["error"] or ""), r["error"]
    bound = health.SCRAPE_CONCURRENCY * health.MAX_METRICS_BYTES
    assert peak < bound + 32 * MiB  # before: 64-400 MiB per replica, 40 replicas at once


def test_a_trickling_fleet_cannot_hold_a_refresh_past_its_deadline(reader):
    with HostileFleet("trickle", workers=3) as hf:
        t = time.monotonic()
        rows, _ = fleet_tab.snapshot(reader, [hf.url], timeout=1.0)
        took = time.monotonic() - t
    print(f"trickling /metrics: refresh took {took:.2f} s")
    assert took < health.REFRESH_ROUNDS * 1.0 + 5.0  # before: for ever (a byte every 0.2 s)
    assert all("no complete answer within" in (r["error"] or "") for r in rows), [r["error"] for r in rows]


def test_the_sync_helpers_are_bounded_too(reader):
    with HostileFleet("gzip", bomb_mib=64) as hf:
        st, peak = _peak(lambda: reader.scrape(hf.url))
        assert "longer than" in st.error and peak < 2 * health.MAX_METRICS_BYTES + 8 * MiB
        with httpx.Client(trust_env=False) as c:
            with pytest.raises(bounded.Oversized):
                bounded.fetch_sync(c, "GET", hf.url + "/metrics", max_bytes=MiB, seconds=5)


def test_a_fleet_tab_refresh_sends_a_bounded_page_to_the_browser(tmp_path):
    from data.settings import Settings

    s = Settings.load({"data_dir": str(tmp_path / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=2)
    add_users(s)
    with HostileFleet("labels", workers=40, label_kib=1024) as hf, AppServer(s, fleet_urls=[hf.url]) as srv:
        c = srv.client("ann")
        cookie = c.cookies["cw_session"]
        session = GradioSession(srv.url, cookie, dependencies(srv.url, cookie))
        try:
            dep = session.deps["fleet_refresh"]
            join = {"data": [], "fn_index": dep["id"], "session_hash": session.hash, "trigger_id": None}
            assert session.http.post("/gradio_api/queue/join", json=join).status_code == 200
            with session.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session.hash}) as r:
                body = b""
                for line in r.iter_lines():  # the whole stream the browser reads, up to the answer
                    body += line.encode() + b"\n"
                    if "process_completed" in line:
                        break
        finally:
            session.close()
            c.close()
    print(f"Fleet tab refresh, 40 replicas naming a 1 MiB model: {len(body) / 1024:.0f} KiB to the browser")
    assert b'"success":true' in body.replace(b" ", b"")
    assert len(body) < 512 * 1024  # before: the 1 MiB name once per replica (40 MiB)
