"""The simulated fleet behaves like vLLM where the workbench depends on it: endpoints, error bodies and
messages, metrics, determinism, limits, latency model and failure knobs. Real servers on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from data import taxonomy
from serving import simfleet
from serving.client import CaptionRequest, FleetClient
from serving.errors import Overloaded, ReplicaError, Unreachable
from serving.simfleet import costs
from tests.support.fleet_fixtures import PROMPT, caption
from tests.support.waiting import wait_until

METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_to_first_token_seconds_count",
)


def chat_body(url: str, **kw) -> dict:
    body = {
        "model": "Qwen/Qwen3-VL-8B-Instruct",
        "messages": [
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": "u"}],
            },
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "c", "schema": taxonomy.model_schema(taxonomy.CAPTION_SCHEMA), "strict": True},
        },
        "max_completion_tokens": 320,
    }
    body.update(kw)
    return body


def post(url: str, body: dict, timeout: float = 10) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout, trust_env=False)


def test_endpoints_answer_like_vllm_and_are_marked_simulated(sim):
    url = sim.urls[0]
    h = httpx.get(url + "/health", trust_env=False)
    assert h.status_code == 200 and h.headers["x-simulated"] == "1"
    models = httpx.get(url + "/v1/models", trust_env=False).json()
    assert models["object"] == "list" and models["data"][0]["id"].endswith("(simulated)")
    missing = httpx.get(url + "/nope", trust_env=False)
    assert missing.status_code == 404 and set(missing.json()["error"]) == {"message", "type", "param", "code"}


def test_metrics_have_vllm_names_labels_and_parse(fleet_settings, sim):
    caption(fleet_settings, sim.urls[0], "a.mp4")
    text = httpx.get(sim.urls[0] + "/metrics", trust_env=False).text
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    for name in METRICS:
        assert name in samples, name
    assert samples["vllm:num_requests_running"].labels == {
        "model_name": "Qwen/Qwen3-VL-8B-Instruct (simulated)",
        "engine": "0",
    }
    stops = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "vllm:request_success_total" and s.labels["finished_reason"] == "stop"
    ]
    assert stops[0].value == 1
    assert samples["vllm:generation_tokens_total"].value > 0


def test_answer_is_deterministic_per_clip_and_schema_valid(fleet_settings, sim, clip_root):
    first = caption(fleet_settings, sim.urls[0], "a.mp4")
    again = caption(fleet_settings, sim.urls[1], "a.mp4")
    assert (first.text, first.labels) == (again.text, again.labels)
    label_sets = {
        json.dumps(caption(fleet_settings, sim.urls[0], f"many/{i:02d}.mp4").labels, sort_keys=True) for i in range(6)
    }
    assert len(label_sets) > 1  # derived from the clip, not constant
    taxonomy.split_answer({"caption": first.text, **first.labels})
    assert first.text.startswith("[SIMULATED]")


def test_corrupt_clip_fails_as_vllm_025_nvdec_does(sim, clip_root):
    r = post(sim.urls[0], chat_body(f"file://{clip_root}/corrupt.mp4"))
    assert r.status_code == 500
    err = r.json()["error"]
    # the text real vLLM 0.25.0 + NVDEC gave on an H200 (docs/gpu-runs/2026-11-30-h200/bench-1-vllm-tails.log)
    assert err["message"].startswith("CreateFormatContext : \nError code : -1094995529\n")
    assert 'returned error " Invalid data found when processing input"' in err["message"]
    assert err["type"] == "InternalServerError" and err["code"] == 500


@pytest.mark.parametrize("suffix", ["/../outside.mp4", "/link_out.mp4", "/../../../../etc/passwd"])
def test_path_outside_allowed_root_is_400_with_vllm_message(sim, clip_root, suffix):
    r = post(sim.urls[0], chat_body(f"file://{clip_root}{suffix}"))
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "must be a subpath of `--allowed-local-media-path" in msg and str(clip_root) in msg


def test_absolute_path_elsewhere_and_other_schemes_are_refused(sim):
    assert post(sim.urls[0], chat_body("file:///etc/passwd")).status_code == 400
    r = post(sim.urls[0], chat_body("ftp://example.com/a.mp4"))
    assert r.status_code == 400 and "HTTP, data or file URL" in r.json()["error"]["message"]


def test_missing_file_is_500_with_oserror_text(sim, clip_root):
    r = post(sim.urls[0], chat_body(f"file://{clip_root}/gone.mp4"))
    assert r.status_code == 500 and "No such file or directory" in r.json()["error"]["message"]


def test_fifo_is_refused_without_blocking(sim, clip_root, tmp_path):
    fifo = clip_root / "pipe.mp4"
    if not fifo.exists():
        os.mkfifo(fifo)
    t0 = time.monotonic()
    r = post(sim.urls[0], chat_body(f"file://{fifo}"), timeout=5)
    assert r.status_code == 500 and time.monotonic() - t0 < 2


def test_max_completion_tokens_is_enforced(sim, clip_root):
    r = post(sim.urls[0], chat_body(f"file://{clip_root}/a.mp4", max_completion_tokens=10)).json()
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 10
    assert len(r["choices"][0]["message"]["content"]) <= 10 * simfleet.CHARS_PER_TOKEN


def test_unknown_model_is_404_like_vllm(sim, clip_root):
    r = post(sim.urls[0], chat_body(f"file://{clip_root}/a.mp4", model="gpt-4"))
    assert r.status_code == 404 and r.json()["error"]["message"] == "The model `gpt-4` does not exist."


def test_latency_model_is_calibrated():
    # 1080p, 16 frames: ~0.25 s decode; saturated throughput per replica in the 4-7 clips/s band
    info = simfleet.ClipInfo(1920, 1080, 300, 10.0, 5_000_000)
    decode = simfleet.REF_DECODE_S * info.width * info.height * 16 / simfleet.REF_PIXELS_FRAMES
    assert decode == pytest.approx(0.25)
    answer = json.dumps(simfleet.synthetic_answer("x.mp4", info, None))
    tokens = len(answer) / simfleet.CHARS_PER_TOKEN
    service = (
        decode + simfleet.prefill_s(simfleet.estimate_prompt_tokens({}, info, 16)) + tokens * simfleet.GEN_S_PER_TOKEN
    )
    assert 4.0 <= simfleet.DEFAULT_CAPACITY / service <= 7.0


def test_capacity_queues_requests_and_shows_waiting(fleet_settings, clip_root):
    handle = simfleet.start_fleet(1, 0, clip_root, mode="thread", speed=0.5, capacity=1)
    try:

        async def go():
            client = FleetClient(fleet_settings)
            try:
                tasks = [
                    asyncio.ensure_future(client.caption(handle.urls[0], CaptionRequest("a.mp4", PROMPT)))
                    for _ in range(4)
                ]
                # sample until the requests have arrived (on a loaded machine that takes more than the 0.3 s it
                # takes on a quiet one): every sample must show at most `capacity` running
                samples = []
                deadline = time.monotonic() + 10
                async with httpx.AsyncClient(trust_env=False) as c:
                    while time.monotonic() < deadline:
                        text = (await c.get(handle.urls[0] + "/metrics")).text
                        samples.append(
                            {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
                        )
                        if samples[-1]["vllm:num_requests_waiting"] >= 2:
                            break
                        await asyncio.sleep(0.05)
                await asyncio.gather(*tasks)
                return samples
            finally:
                await client.aclose()

        samples = asyncio.run(go())
        assert all(v["vllm:num_requests_running"] <= 1 for v in samples), samples
        assert samples[-1]["vllm:num_requests_running"] == 1
        assert samples[-1]["vllm:num_requests_waiting"] >= 2, samples[-1]
    finally:
        handle.stop()


def test_knob_503_window_then_recovers(fleet_settings, sim):
    window = 3.0  # long enough that the first request lands in it on a loaded machine
    t0 = time.monotonic()
    sim.set_knobs(0, unavailable_for=window)
    with pytest.raises(Overloaded):
        caption(fleet_settings, sim.urls[0], "a.mp4")
    answers = []

    def answered() -> bool:
        try:
            answers.append(caption(fleet_settings, sim.urls[0], "a.mp4"))
            return True
        except Overloaded:
            return False

    wait_until(answered, timeout=60, step=0.2, what="the replica answering again after its 503 window")
    assert time.monotonic() - t0 >= window * 0.95  # not before the window ended: it is a lower bound
    assert answers[0].text.startswith("[SIMULATED]")


def test_knob_error_rate_gives_500s(fleet_settings, sim):
    sim.set_knobs(1, error_rate=1.0)
    with pytest.raises(ReplicaError) as info:
        caption(fleet_settings, sim.urls[1], "a.mp4")
    assert info.value.status == 500 and info.value.retryable
    sim.set_knobs(1, error_rate=0.0)
    caption(fleet_settings, sim.urls[1], "a.mp4")


def test_knob_hang_is_cut_by_the_client_timeout(fleet_settings, sim):
    sim.set_knobs(0, hang=True)
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as info:
        caption(fleet_settings.replace(request_timeout=0.4), sim.urls[0], "a.mp4")
    assert info.value.kind == "timeout" and time.monotonic() - t0 < 3
    assert httpx.get(sim.urls[0] + "/health", trust_env=False).status_code == 200  # /health still passes
    sim.set_knobs(0, hang=False)
    caption(fleet_settings, sim.urls[0], "a.mp4")


def test_knob_die_after_n_requests_stops_listening(fleet_settings, sim):
    sim.set_knobs(1, die_after=3)
    for _ in range(3):
        caption(fleet_settings, sim.urls[1], "a.mp4")
    with pytest.raises(Unreachable):
        caption(fleet_settings, sim.urls[1], "a.mp4")
    with pytest.raises(Unreachable) as info:
        caption(fleet_settings, sim.urls[1], "a.mp4")
    assert info.value.kind == "connect"
    caption(fleet_settings, sim.urls[0], "a.mp4")  # the other replica lives on


def test_kill_replica_and_slow_factor(fleet_settings, clip_root):
    speed, slow = 0.1, 20
    handle = simfleet.start_fleet(2, 0, clip_root, mode="thread", speed=speed)
    try:
        tokens = caption(fleet_settings, handle.urls[0], "a.mp4").provenance["completion_tokens"]
        handle.set_knobs(0, slow=slow)
        t0 = time.monotonic()
        caption(fleet_settings, handle.urls[0], "a.mp4")
        took = time.monotonic() - t0
        # a lower bound from the latency model, which load cannot break: generation alone at speed x slow
        assert took >= costs.generation_s(tokens) * speed * slow * 0.95, (took, tokens)
        handle.kill_replica(1)
        with pytest.raises(Unreachable):
            caption(fleet_settings, handle.urls[1], "a.mp4")
    finally:
        handle.stop()


def test_unknown_knob_is_refused(sim):
    with pytest.raises(httpx.HTTPStatusError) as e:
        sim.set_knobs(0, explode=True)
    r = e.value.response
    assert r.status_code == 400 and "explode" in r.json()["error"]["message"]


def test_cli_process_mode_binds_consecutive_ports_and_stops_its_group(clip_root, fleet_settings):
    from serving.procs import free_port

    for _ in range(5):  # two consecutive free ports: another process may take port + 1 between check and bind
        port = free_port()
        try:
            handle = simfleet.start_fleet(2, port, clip_root, mode="process", speed=0)
            break
        except RuntimeError as e:
            if "Address already in use" not in str(e):
                raise
    else:
        pytest.fail("no two consecutive free ports in 5 tries")
    try:
        assert handle.urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        assert caption(fleet_settings, handle.urls[1], "day/b c.mp4").provenance["simulated"] is True
        pid = handle.process.pid
        assert os.getpgid(pid) == pid  # own process group
    finally:
        handle.stop()
    assert handle.process.poll() is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(handle.urls[0] + "/health", trust_env=False)


def test_cli_help_has_an_example():
    out = subprocess.run(
        [sys.executable, "-m", "serving.simfleet", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "example:" in out.stdout and "--allowed-local-media-path" in out.stdout


def test_cli_refuses_a_missing_media_root(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "serving.simfleet",
            "--replicas",
            "1",
            "--port",
            "0",
            "--allowed-local-media-path",
            str(tmp_path / "nope"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "not a directory" in proc.stderr


def test_sigterm_stops_the_cli(clip_root, tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serving.simfleet",
            "--replicas",
            "1",
            "--port",
            "0",
            "--allowed-local-media-path",
            str(clip_root),
            "--ready-file",
            str(ready),
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
