"""Fleet health and metrics: parsing vLLM's Prometheus text, scraping live (simulated) replicas, a dead or
unhealthy replica, and the real vllm-router's status and request spread; every read through a
serving.fleet.reader.FleetReader (the one way to read a fleet)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from serving import procs
from serving.fleet import health
from serving.fleet.reader import FleetReader
from serving.procs import free_port
from tests.support.fleet_fixtures import caption

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
