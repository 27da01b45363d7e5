"""The fleet client: the request it builds, how it classifies every failure, and that it never sends a path
outside the clip root. Error classes through httpx.MockTransport (the HTTP boundary) and real sockets;
the happy path against the real simulated fleet on loopback."""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx
import pytest

from data import examples, taxonomy
from serving.client import DEFAULT_DECODE_BACKEND, FleetClient, backoff, clip_url, content_part
from serving.errors import BadAnswer, ClipRejected, FleetError, Overloaded, ReplicaError, Unreachable
from serving.procs import free_port
from tests.support.fleet_fixtures import PROMPT, caption

URL = "http://replica.test:8000"
GOOD = {"caption": "A car drives along an urban street in daylight.", **examples.LABELS}


def completion(content: str, finish: str = "stop", model: str = "Qwen/Qwen3-VL-8B-Instruct") -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290},
    }


def vllm_error(status: int, message: str, err_type: str = "BadRequestError") -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message, "type": err_type, "param": None, "code": status}})


class Recorder:
    """A MockTransport handler that answers with `response` and keeps every request it saw."""

    def __init__(self, response):
        self.response = response
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.response(request) if callable(self.response) else self.response


def run_mock(settings, response, clip="a.mp4", **kw):
    rec = Recorder(response)
    try:
        return caption(settings, URL, clip, transport=httpx.MockTransport(rec), **kw), rec
    except FleetError as e:
        e.recorder = rec
        raise


# ------------------------------------------------------------------ the request


def test_request_body_has_text_then_video_schema_frames_and_limits(fleet_settings, clip_root):
    result, rec = run_mock(
        fleet_settings,
        httpx.Response(200, json=completion(json.dumps(GOOD))),
        frames=12,
        max_tokens=300,
        temperature=0.2,
        seed=7,
    )
    body = json.loads(rec.requests[0].content)
    assert rec.requests[0].url == URL + "/v1/chat/completions"
    assert body["model"] == fleet_settings.model_name
    assert body["messages"][0] == {"role": "system", "content": PROMPT["system"]}
    # the instructions first: system + user text is a prefix every clip shares (vLLM's prefix cache)
    text, video = body["messages"][1]["content"]
    assert video["type"] == "video_url"
    assert video["video_url"]["url"] == "file://" + str(clip_root / "a.mp4")
    assert text == {"type": "text", "text": PROMPT["user"]}
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    # the backend-safe form: xgrammar refuses uniqueItems & co. with a 400 for every request
    assert rf["json_schema"]["schema"] == taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)
    assert taxonomy.unsupported_features(rf["json_schema"]["schema"]) == set()
    assert rf["json_schema"]["name"] == "av-hazard_v1"
    # num_frames for the generic sampler, min=max for Qwen3-VL's own sampler (which ignores num_frames)
    assert body["media_io_kwargs"] == {"video": {"num_frames": 12, "min_frames": 12, "max_frames": 12}}
    assert body["max_completion_tokens"] == 300 and body["temperature"] == 0.2 and body["seed"] == 7
    assert result.text == GOOD["caption"]
    assert result.labels == {k: v for k, v in GOOD.items() if k != "caption"}


def test_provenance_has_every_field_with_defaults_for_real_vllm(fleet_settings):
    from data.captions import PROVENANCE_FIELDS

    result, _ = run_mock(fleet_settings, httpx.Response(200, json=completion(json.dumps(GOOD))))
    prov = result.provenance
    assert set(PROVENANCE_FIELDS) <= set(prov)
    assert prov["replica"] == URL
    assert prov["decode_backend"] == DEFAULT_DECODE_BACKEND == "pynvvideocodec"
    assert prov["simulated"] is False
    assert prov["prompt_tokens"] == 1234 and prov["completion_tokens"] == 56
    assert prov["finish_reason"] == "stop" and prov["latency_ms"] >= 0
    # the job's parameters under their own names (data.job_params), defaults from JobParams, and the camera
    assert prov["params"] == {
        "frames": 16,
        "max_tokens": 640,
        "temperature": 0.0,
        "top_logprobs": 5,
        "max_pixels": 9_437_184,
        "camera": None,
    }
    # logprobs were asked for (JobParams' default) and this answer has none: every label unknown, and why
    assert set(prov["confidence"]["labels"]) == set(taxonomy.ENUMS)
    assert not any(prov["confidence"]["labels"].values()) and "no token logprobs" in prov["confidence"]["note"]
    assert prov["frames"] == 16
    assert (prov["prompt_id"], prov["prompt_name"], prov["prompt_version"]) == (1, "av-hazard", 1)


def test_provenance_takes_replica_backend_and_simulated_from_headers(fleet_settings):
    resp = httpx.Response(
        200,
        json=completion(json.dumps(GOOD)),
        headers={"x-replica": "http://10.0.0.7:8003", "x-decode-backend": "opencv", "x-simulated": "1"},
    )
    result, _ = run_mock(fleet_settings, resp)
    assert result.provenance["replica"] == "http://10.0.0.7:8003"
    assert result.provenance["decode_backend"] == "opencv"
    assert result.provenance["simulated"] is True


def test_decode_backend_constructor_argument_is_used(fleet_settings):
    result, _ = run_mock(
        fleet_settings, httpx.Response(200, json=completion(json.dumps(GOOD))), decode_backend="opencv"
    )
    assert result.provenance["decode_backend"] == "opencv"


def test_timeouts_are_explicit_and_pool_wait_unbounded(fleet_settings):
    client = FleetClient(fleet_settings.replace(request_timeout=123.0))
    assert client.timeout.connect == 5 and client.timeout.read == 123.0
    assert client.timeout.write == 30 and client.timeout.pool is None


def test_media_base_url_sends_quoted_http_url(fleet_settings):
    _, rec = run_mock(
        fleet_settings,
        httpx.Response(200, json=completion(json.dumps(GOOD))),
        clip="day/b c.mp4",
        media_base_url="https://media.example/clips/",
    )
    url = content_part(json.loads(rec.requests[0].content), "video_url")["video_url"]["url"]
    assert url == "https://media.example/clips/day/b%20c.mp4"


# ------------------------------------------------------------------ error classification


@pytest.mark.parametrize(
    "response, cls, kind",
    [
        (vllm_error(400, "This model's maximum context length is 32768 tokens"), ClipRejected, "bad_request"),
        (vllm_error(422, "Failed to fetch media from URL", "UnprocessableEntityError"), ClipRejected, "bad_request"),
        (
            vllm_error(
                500,
                'CreateFormatContext : failed to open "/c/x.mp4": "Invalid data found when processing input"',
                "InternalServerError",
            ),
            ClipRejected,
            "decode",
        ),
        (vllm_error(500, "Could not open video stream", "InternalServerError"), ClipRejected, "decode"),
        (
            vllm_error(500, "[Errno 2] No such file or directory: '/c/x.mp4'", "InternalServerError"),
            ClipRejected,
            "missing",
        ),
        (vllm_error(500, "EngineCore encountered an issue", "InternalServerError"), ReplicaError, "replica"),
        (httpx.Response(502, text="Bad Gateway"), ReplicaError, "replica"),
        (vllm_error(503, "Service Unavailable", "ServiceUnavailableError"), Overloaded, "overloaded"),
        (httpx.Response(429, text="Too Many Requests"), Overloaded, "overloaded"),
        (vllm_error(404, "The model `x` does not exist.", "NotFoundError"), ClipRejected, "http_404"),
    ],
)
def test_http_errors_are_classified(fleet_settings, response, cls, kind):
    with pytest.raises(FleetError) as info:
        run_mock(fleet_settings, response)
    err = info.value
    assert type(err) is cls and err.kind == kind
    assert err.status == response.status_code and err.replica == URL
    assert err.retryable == (cls in (ReplicaError, Overloaded))
    assert len(err.recorder.requests) == 1  # one attempt: retrying is the runner's decision


def test_error_message_comes_from_vllm_error_body(fleet_settings):
    with pytest.raises(ClipRejected, match="maximum context length"):
        run_mock(fleet_settings, vllm_error(400, "This model's maximum context length is 32768 tokens"))


@pytest.mark.parametrize(
    "content, finish, kind",
    [
        (json.dumps(GOOD)[:80], "length", "truncated"),
        (json.dumps(GOOD), "abort", "unfinished"),
        ('{"caption": "x", "hazard_level": ', "stop", "invalid_json"),
        ("Sure! Here is the caption: a car.", "stop", "invalid_json"),
        (json.dumps({**GOOD, "hazard_level": "apocalyptic"}), "stop", "schema"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "weather"}), "stop", "schema"),
        (json.dumps([GOOD]), "stop", "schema"),
    ],
)
def test_unusable_answers_are_bad_answers_not_retried(fleet_settings, content, finish, kind):
    with pytest.raises(BadAnswer) as info:
        run_mock(fleet_settings, httpx.Response(200, json=completion(content, finish)))
    assert info.value.kind == kind and info.value.retryable is False


def test_finish_reason_checked_before_parsing(fleet_settings):
    # valid JSON, but the model was cut off: a truncated answer must never be stored
    with pytest.raises(BadAnswer, match="finish_reason='length'"):
        run_mock(fleet_settings, httpx.Response(200, json=completion(json.dumps(GOOD), "length")))


def test_200_without_completion_body_is_replica_error(fleet_settings):
    with pytest.raises(ReplicaError):
        run_mock(fleet_settings, httpx.Response(200, text="<html>proxy page</html>"))


def test_connect_refused_is_unreachable(fleet_settings):
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as info:
        caption(fleet_settings, f"http://127.0.0.1:{port}", "a.mp4")
    assert info.value.kind == "connect" and info.value.retryable
    assert time.monotonic() - t0 < 5


def test_read_timeout_is_unreachable_within_the_deadline(fleet_settings):
    # A listening socket that never answers: the TCP connect succeeds (backlog), the read times out.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        t0 = time.monotonic()
        with pytest.raises(Unreachable) as info:
            caption(fleet_settings.replace(request_timeout=0.3), f"http://127.0.0.1:{srv.getsockname()[1]}", "a.mp4")
        elapsed = time.monotonic() - t0
    assert info.value.kind == "timeout" and info.value.retryable
    assert 0.25 < elapsed < 3


def test_remote_closing_the_connection_is_unreachable(fleet_settings):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(Unreachable) as info:
            caption(fleet_settings, f"http://127.0.0.1:{srv.getsockname()[1]}", "a.mp4")
    finally:
        t.join(5)
        srv.close()
    assert info.value.kind == "closed" and info.value.retryable


# ------------------------------------------------------------------ path safety

# 30+ paths (traversal, encodings, NUL, URLs, symlinks); each one is a case of the test below
HOSTILE_PATHS = [
    "../etc/passwd",
    "../../../../etc/passwd",
    "a/../../etc/passwd",
    "a/b/../../../x.mp4",
    "..",
    "../",
    "./../x",
    "day/./../../x.mp4",
    "/etc/passwd",
    "//etc/passwd",
    "/tmp/a.mp4",
    "\\etc\\passwd",
    "..\\..\\windows\\win.ini",
    "a\\..\\..\\x.mp4",
    "C:\\Windows\\win.ini",
    "C:/x.mp4",
    "~/x.mp4",
    "~root/.ssh/id_rsa",
    "%2e%2e/etc/passwd",
    "%2e%2e%2fetc%2fpasswd",
    "..%2fetc%2fpasswd",
    "%2E%2E%2F%2E%2E%2Fx",
    "%252e%252e%252fetc%252fpasswd",
    "%25252e%25252e%25252fx",
    "..%5c..%5cetc",
    "%2fetc%2fpasswd",
    "a.mp4\x00.txt",
    "\x00",
    "a\x00/../../etc/passwd",
    "a.mp4\n",
    "a\r\n.mp4",
    "file:///etc/passwd",
    "file://root/../x",
    "http://169.254.169.254/latest/meta-data/",
    "https://example.com/a.mp4",
    "data:video/mp4;base64,AAAA",
    "",
    " ",
    ".",
    "./",
    "link_out.mp4",
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_paths_are_refused_before_any_request(fleet_settings, path):
    rec = Recorder(httpx.Response(200, json=completion(json.dumps(GOOD))))
    with pytest.raises(ClipRejected) as info:
        caption(fleet_settings, URL, path, transport=httpx.MockTransport(rec))
    assert info.value.kind == "path" and info.value.retryable is False
    assert rec.requests == []
    with pytest.raises(ClipRejected):
        clip_url(fleet_settings, path, media_base_url="https://media.example/")


def test_symlink_out_of_root_is_refused_but_inside_is_resolved(fleet_settings, clip_root):
    with pytest.raises(ClipRejected, match="outside the clip root"):
        clip_url(fleet_settings, "link_out.mp4")
    assert clip_url(fleet_settings, "link_in.mp4") == "file://" + str(clip_root / "a.mp4")


def test_symlinked_directory_out_of_root_is_refused(fleet_settings, clip_root, tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "x.mp4").write_bytes(b"x")
    link = clip_root / "dir_link_out"
    if not link.is_symlink():
        link.symlink_to(tmp_path / "secret")
    try:
        with pytest.raises(ClipRejected):
            clip_url(fleet_settings, "dir_link_out/x.mp4")
    finally:
        link.unlink()


@pytest.mark.parametrize(
    "name", ["with space.mp4", "pct%20literal.mp4", "100%.mp4", "ünï cödé.mp4", "hash#frag?.mp4", "semi;colon&amp.mp4"]
)
def test_odd_but_legal_names_round_trip_through_the_url(fleet_settings, clip_root, name):
    url = clip_url(fleet_settings, "odd/" + name)
    parts = urlsplit(url)
    assert parts.scheme == "file" and not parts.query and not parts.fragment
    # what vLLM does with a file:// URL (vllm/multimodal/media/connector.py, _load_file_url)
    assert url2pathname(parts.netloc + parts.path) == str(clip_root / "odd" / name)


def test_non_utf8_name_is_refused_because_vllm_could_not_open_it(fleet_settings):
    with pytest.raises(ClipRejected, match="UTF-8"):
        clip_url(fleet_settings, os.fsdecode(b"bad_\xff\xfe.mp4"))


# ------------------------------------------------------------------ backoff


def test_backoff_is_full_jitter_and_capped():
    rng = random.Random(1)
    for attempt in range(1, 12):
        ceiling = min(30.0, 0.5 * 2 ** (attempt - 1))
        samples = [backoff(attempt, rng=rng) for _ in range(200)]
        assert all(0 <= s <= ceiling for s in samples)
        assert max(samples) > ceiling * 0.8  # uses the whole range, not a fixed delay
    assert backoff(100, cap=2.0, rng=rng) <= 2.0


# ------------------------------------------------------------------ against the real simulated fleet


def test_caption_from_simulated_fleet_is_schema_valid_and_marked(fleet_settings, sim):
    result = caption(fleet_settings, sim.urls[0], "a.mp4")
    assert result.text.startswith("[SIMULATED]")
    assert 100 <= len(result.text.split()) <= 200
    taxonomy.validate_labels(result.labels)
    prov = result.provenance
    assert prov["simulated"] is True and "(simulated)" in prov["model"]
    assert prov["replica"] == sim.urls[0] and prov["decode_backend"] == "simulated"
    assert prov["completion_tokens"] <= 320 and prov["prompt_tokens"] > 0 and prov["finish_reason"] == "stop"


def test_simulated_fleet_errors_classify_like_vllm(fleet_settings, sim):
    with pytest.raises(ClipRejected) as info:
        caption(fleet_settings, sim.urls[1], "corrupt.mp4")
    assert info.value.kind == "decode" and info.value.status == 500
    with pytest.raises(ClipRejected) as info:
        caption(fleet_settings, sim.urls[1], "no/such/clip.mp4")
    assert info.value.kind == "missing"
    with pytest.raises(BadAnswer) as info:
        caption(fleet_settings, sim.urls[1], "a.mp4", max_tokens=16)
    assert info.value.kind == "truncated"


def test_models_lists_the_simulated_model(fleet_settings, sim):
    import asyncio

    async def go():
        client = FleetClient(fleet_settings)
        try:
            return await client.models(sim.urls[0])
        finally:
            await client.aclose()

    assert asyncio.run(go()) == [fleet_settings.model_name + " (simulated)"]
