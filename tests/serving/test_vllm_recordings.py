"""Real vLLM is the reference. tests/recordings/vllm-*-answers.json holds what a real vLLM replica answered on a GPU
node (written by tests/serving/test_gpu_fleet.py: a good request as our client builds it, the preset v1 schema, each
kind of bad input; its metric names). Two checks replay it on the CPU:
- the client handles every recorded answer as it should: a caption from the good one, and for every bad input
  an error that is not retried (the clip's fault never costs more GPU time);
- the simulated fleet answers the same requests the same way: same status, same error type, the same message
  once the clip root is written as <root>, and a good answer of the same shape.

The answer with token logprobs (`good_logprobs`) and the 400 for too many (`logprobs_over_max`) are checked the
same way once a GPU run has recorded them (tests/serving/test_gpu_fleet.py records both): until then their tests are not
defined, so they are neither collected nor reported as passing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from data import taxonomy
from data.job_params import MAX_TOP_LOGPROBS, JobParams
from data.library import hostile
from data.settings import Settings
from serving import simfleet
from serving.client import CaptionRequest, FleetClient, content_part
from serving.errors import FleetError
from tests.support.fleet_fixtures import write_clip

RECORDINGS = sorted((Path(__file__).resolve().parents[1] / "recordings").glob("vllm-*-answers.json"))
REC = json.loads(RECORDINGS[-1].read_text()) if RECORDINGS else {}
ANSWERS = REC.get("answers", {})
LOGPROB_CASES = ("good_logprobs", "logprobs_over_max")
BAD = sorted(k for k in ANSWERS if k not in ("good", *LOGPROB_CASES))
# metric samples the fleet view reads (serving.fleet.health); vLLM names the KV-cache gauge one of two ways
USED_METRICS = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
}


def test_a_recording_of_real_vllm_is_committed():
    assert RECORDINGS, (
        "tests/recordings/vllm-<version>-answers.json is missing: run tests/serving/test_gpu_fleet.py on a GPU"
    )
    assert REC["vllm_version"][0].isdigit(), "the recording must come from real vLLM, not the simulated fleet"
    assert {
        "good",
        "unsupported_schema",
        "missing_file",
        "outside_root",
        "html_named",
        "zero_length",
        "truncated",
    } <= set(ANSWERS)
    assert ANSWERS["good"]["status"] == 200 and ANSWERS["unsupported_schema"]["status"] == 400


def replay(settings, answer: dict, *, max_tokens: int):
    """Our client's outcome for one recorded answer: a CaptionResult or the FleetError it raised."""
    body = answer["body"]
    transport = httpx.MockTransport(
        lambda req: httpx.Response(
            answer["status"], **({"json": body} if isinstance(body, (dict, list)) else {"text": str(body)})
        )
    )

    async def go():
        client = FleetClient(settings, transport=transport)
        try:
            return await client.caption(
                "http://replica", CaptionRequest("a.mp4", PROMPT_V2, JobParams(max_tokens=max_tokens))
            )
        except FleetError as e:
            return e
        finally:
            await client.aclose()

    return asyncio.run(go())


PROMPT_V2 = {
    "id": 2,
    "name": "av-hazard",
    "version": 2,
    "system": "s",
    "user": "u {camera}",
    "schema": taxonomy.model_schema(taxonomy.CAPTION_SCHEMA),
}


def test_the_client_captions_the_recorded_good_answer(fleet_settings):
    got = replay(fleet_settings, ANSWERS["good"], max_tokens=2048)
    assert not isinstance(got, FleetError), got
    assert got.text and set(got.labels) == set(taxonomy.ENUMS)
    assert got.provenance["finish_reason"] == "stop" and got.provenance["completion_tokens"] > 0
    assert got.provenance["prompt_tokens"] > 1000  # 16 frames of video went in
    assert got.provenance["simulated"] is False


@pytest.mark.parametrize("case", BAD)
def test_the_client_never_retries_a_recorded_bad_input(fleet_settings, case):
    answer = ANSWERS[case]
    got = replay(fleet_settings, answer, max_tokens=16 if case != "truncated_library_half" else 2048)
    if answer["status"] == 200:  # the decoder coped (e.g. the frames that are there): a caption or a short answer
        assert not isinstance(got, FleetError) or got.kind in ("truncated", "invalid_json"), got
        return
    assert isinstance(got, FleetError), got
    assert not got.retryable, f"{case}: HTTP {answer['status']} would be retried: {got!r}"
    assert str(answer["status"]) in str(got)


# ---- the simulated fleet against the recording -----------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_root(tmp_path_factory):
    """A clip root laid out like the GPU test's: a library clip and the hostile corpus."""
    root = tmp_path_factory.mktemp("rec") / "clips"
    clip = write_clip(root / "library" / "R001" / "front_center_0000.mp4", 640, 360, seconds=2)
    hostile.write_hostile_corpus(root / "hostile")
    data = clip.read_bytes()
    (root / "hostile" / "library_clip_cut_in_half.mp4").write_bytes(data[: len(data) // 2])
    return root


@pytest.fixture(scope="module")
def sim_fleet(sim_root):
    handle = simfleet.start_fleet(1, 0, sim_root, mode="thread", speed=0, model=REC.get("served_model_name", "m"))
    yield handle
    handle.stop()


def request_for(case: str, root: Path) -> dict:
    """The recorded request of `case`, re-pointed at `root`."""
    settings = Settings.load(environ={}).replace(clip_root=root, served_model_name=REC.get("served_model_name", "m"))
    good = FleetClient(settings).build_body(
        CaptionRequest(
            "library/R001/front_center_0000.mp4", PROMPT_V2, JobParams(max_tokens=2048), camera="front_center"
        )
    )
    if case == "unsupported_schema":
        good["response_format"]["json_schema"]["schema"] = taxonomy.CAPTION_SCHEMA
    elif case != "good":
        url = ANSWERS[case]["video_url"].replace("file://<root>", root.resolve().as_uri())
        if case == "truncated":
            cut = sorted((root / "hostile").glob("truncated_faststart_*pct.mp4"))
            url = cut[len(cut) // 2].resolve().as_uri()
        content_part(good, "video_url")["video_url"]["url"] = url
        good["max_completion_tokens"] = 16 if case != "truncated_library_half" else 2048
    return good


def normalised(message: str, root: Path) -> str:
    return message.replace(str(root.resolve()), "<root>").replace(str(root), "<root>")


@pytest.mark.parametrize("case", ["good", *BAD])
def test_the_simulated_fleet_answers_as_real_vllm_did(sim_fleet, sim_root, case):
    real = ANSWERS[case]
    r = httpx.post(
        sim_fleet.urls[0] + "/v1/chat/completions", json=request_for(case, sim_root), timeout=30, trust_env=False
    )
    assert r.status_code == real["status"], (case, r.text[:300], str(real["body"])[:300])
    body = r.json()
    if real["status"] == 200:
        want = real["body"]
        assert set(want) <= set(body) <= set(want) | {"simulated"}
        assert set(want["choices"][0]) <= set(body["choices"][0])
        assert set(want["choices"][0]["message"]) <= set(body["choices"][0]["message"])
        assert set(want["usage"]) <= set(body["usage"]) | {"prompt_tokens_details"}
        assert body["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"]
        return
    err, want = body["error"], real["body"]["error"]
    assert set(err) == set(want) and err["type"] == want["type"] and err["code"] == want["code"]
    assert normalised(err["message"], sim_root) == want["message"], (case, err["message"], want["message"])


def test_the_simulated_fleet_exposes_the_metrics_we_read_under_real_names(sim_fleet):
    names = {
        s.name
        for f in text_string_to_metric_families(httpx.get(sim_fleet.urls[0] + "/metrics").text)
        for s in f.samples
    }
    real = set(REC["metric_names"])
    assert USED_METRICS <= real, USED_METRICS - real  # what we read exists on real vLLM
    assert USED_METRICS <= names, USED_METRICS - names
    assert {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} & real & names


# ---- token logprobs (docs/CONFIDENCE.md), once a GPU run recorded them -------------------------------------------
def logprobs_request(root: Path, top_logprobs: int, schema: dict) -> dict:
    """The recorded good request, re-pointed at `root`, asking for token logprobs under `schema`."""
    body = request_for("good", root)
    body["response_format"]["json_schema"]["schema"] = schema
    return body | {"logprobs": True, "top_logprobs": top_logprobs}


def check_logprobs_shape(body: dict, k: int) -> None:
    """What docs/CONFIDENCE.md says vLLM 0.25 returns: the sampled tokens spell the text, then (an answer that
    stopped) the stop token; each with exactly k alternatives, the sampled one first, `bytes` the UTF-8 of the token
    string, -9999.0 for forbidden tokens; one entry per completion token."""
    choice = body["choices"][0]
    entries = choice["logprobs"]["content"]
    stop = "<|im_end|>" if choice["finish_reason"] == "stop" else ""
    assert "".join(e["token"] for e in entries) == choice["message"]["content"] + stop
    assert len(entries) == body["usage"]["completion_tokens"]
    for e in entries:
        assert {"token", "logprob", "bytes", "top_logprobs"} <= set(e)
        assert e["bytes"] == list(e["token"].encode("utf-8", "replace"))
        assert len(e["top_logprobs"]) == k and e["top_logprobs"][0]["token"] == e["token"]
        for a in e["top_logprobs"]:
            assert a["logprob"] == -9999.0 or -9999.0 < a["logprob"] <= 0.0


if "good_logprobs" in ANSWERS:  # recorded by tests/serving/test_gpu_fleet.py on a GPU: see the module docstring
    REAL_LOGPROBS = ANSWERS["good_logprobs"]

    def test_real_vllm_logprobs_have_the_shape_docs_confidence_describes():
        assert REAL_LOGPROBS["status"] == 200
        check_logprobs_shape(REAL_LOGPROBS["body"], REAL_LOGPROBS["request"]["top_logprobs"])
        forced = [e for e in REAL_LOGPROBS["body"]["choices"][0]["logprobs"]["content"] if e["logprob"] == 0.0]
        assert any(a["logprob"] == -9999.0 for e in forced for a in e["top_logprobs"]), "no forbidden alternative"

    def test_the_client_reads_a_confidence_for_every_label_from_real_vllm(fleet_settings):
        asked = REAL_LOGPROBS["request"]
        transport = httpx.MockTransport(lambda req: httpx.Response(200, json=REAL_LOGPROBS["body"]))

        async def go():
            client = FleetClient(fleet_settings, transport=transport)
            try:
                prompt = {**PROMPT_V2, "schema": asked["schema"]}
                params = JobParams(max_tokens=asked["max_completion_tokens"], top_logprobs=asked["top_logprobs"])
                return await client.caption("http://replica", CaptionRequest("a.mp4", prompt, params))
            finally:
                await client.aclose()

        conf = asyncio.run(go()).provenance["confidence"]
        assert "note" not in conf, conf
        assert set(conf["labels"]) == set(taxonomy.ENUMS) and None not in conf["labels"].values(), conf

    def test_the_simulated_fleet_answers_logprobs_in_the_recorded_shape(sim_fleet, sim_root):
        asked = REAL_LOGPROBS["request"]
        body = logprobs_request(sim_root, asked["top_logprobs"], asked["schema"])
        r = httpx.post(sim_fleet.urls[0] + "/v1/chat/completions", json=body, timeout=30, trust_env=False)
        assert r.status_code == 200, r.text[:300]
        check_logprobs_shape(r.json(), asked["top_logprobs"])
        real = REAL_LOGPROBS["body"]["choices"][0]["logprobs"]
        sim = r.json()["choices"][0]["logprobs"]
        assert set(sim) == set(real)
        assert set(sim["content"][0]) == set(real["content"][0])
        assert set(sim["content"][0]["top_logprobs"][0]) == set(real["content"][0]["top_logprobs"][0])


if "logprobs_over_max" in ANSWERS:  # recorded by tests/serving/test_gpu_fleet.py on a GPU: see the module docstring

    def test_the_simulated_fleet_refuses_too_many_logprobs_as_real_vllm_did(sim_fleet, sim_root):
        real = ANSWERS["logprobs_over_max"]
        body = request_for("good", sim_root) | {"logprobs": True, "top_logprobs": MAX_TOP_LOGPROBS + 1}
        r = httpx.post(sim_fleet.urls[0] + "/v1/chat/completions", json=body, timeout=30, trust_env=False)
        assert r.status_code == real["status"] == 400
        assert r.json() == real["body"]


# ---- http media: how a failed fetch of the app's signed URLs reaches the job -------------------------------------
# Real vLLM 0.25 fetches an http(s) clip itself (vllm/multimodal/media/connector.py): the origin's 4xx (but 408/429)
# is a 422 `Failed to fetch media from URL: HTTP <status> error (parameter=image_url, value=<url>)`; its 5xx, a
# timeout past VLLM_VIDEO_FETCH_TIMEOUT or a refused connection a 500 with the client library's text; a host outside
# --allowed-media-domains a 400. The source says so; a recording says so for good once a GPU run wrote "http_media"
# (tests/serving/test_gpu_fleet.py, CW_GPU_TOPOLOGY=nodehead), and each recorded case is then replayed below.
HTTP_MEDIA = REC.get("http_media", {})
FROM_SOURCE = {
    # case: (what the origin does, status, error type, message with the URL as <url>)
    "tampered": (
        {"status": 403},
        422,
        "UnprocessableEntityError",
        "Failed to fetch media from URL: HTTP 403 error (parameter=image_url, value=<url>)",
    ),
    "unknown_clip": (
        {"status": 404},
        422,
        "UnprocessableEntityError",
        "Failed to fetch media from URL: HTTP 404 error (parameter=image_url, value=<url>)",
    ),
    "origin_error": ({"status": 500}, 500, "InternalServerError", "500, message='Internal Server Error', url='<url>'"),
    "overloaded_origin": ({"status": 429}, 500, "InternalServerError", "429, message='Too Many Requests', url='<url>'"),
    "slow": ({"delay_s": 3}, 500, "InternalServerError", ""),
    "another_host": (
        {"serve": "clip", "host": "foreign"},
        400,
        "BadRequestError",
        "The URL must be from one of the allowed domains: ['<app-host>']. Input URL domain: <foreign-host>",
    ),
}


def as_recorded(message: str, url: str) -> str:
    """A message with the URL and hosts written as the recording writes them."""
    return message.replace(url, "<url>").replace("127.0.0.1", "<app-host>").replace("127.0.0.9", "<foreign-host>")


def fetch_through_the_simulated_fleet(origin_spec: dict, clip: bytes, monkeypatch) -> tuple[httpx.Response, str]:
    """Post our client's good request with a video URL of a stand-in origin behaving as `origin_spec` to a simulated
    replica allowed 127.0.0.1 (a "foreign" origin listens on 127.0.0.9); (its answer, the URL)."""
    from tests.support.media_origin import MediaOrigin, spec_url

    host = "127.0.0.9" if origin_spec.get("host") == "foreign" else "127.0.0.1"
    spec = origin_spec
    if "delay_s" in origin_spec:  # a slow origin outlasts the fetch timeout: the recording's seconds shrink to a test's
        monkeypatch.setenv("VLLM_VIDEO_FETCH_TIMEOUT", "1")
        spec = {**origin_spec, "delay_s": 3}
    with (
        MediaOrigin(host, clip) as origin,
        simfleet.start_fleet(
            1, 0, Path(__file__).parent, mode="thread", speed=0, allowed_media_domains="127.0.0.1"
        ) as fleet,
    ):
        url = spec_url(origin, spec)
        settings = Settings.load(environ={}).replace(media_url_base=origin.base)
        body = FleetClient(settings).build_body(CaptionRequest("a.mp4", PROMPT_V2, JobParams(), media_url=url))
        return httpx.post(fleet.urls[0] + "/v1/chat/completions", json=body, timeout=30, trust_env=False), url


@pytest.mark.parametrize("case", sorted(FROM_SOURCE))
def test_the_simulated_fleet_fails_http_media_as_vllms_source_does(case, sim_root, monkeypatch):
    spec, status, kind, message = FROM_SOURCE[case]
    clip = (sim_root / "library" / "R001" / "front_center_0000.mp4").read_bytes()
    r, url = fetch_through_the_simulated_fleet(spec, clip, monkeypatch)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == kind and as_recorded(err["message"], url) == message, err
    # and what reaches the job: the clip's fault is never retried, the origin's trouble is
    from serving.answers import classify_status, error_message

    assert classify_status(r.status_code, error_message(r)).retryable == (status == 500)


if HTTP_MEDIA:  # written by a nodehead GPU run; until one is committed there is nothing to replay

    @pytest.mark.parametrize("case", sorted(HTTP_MEDIA))
    def test_the_simulated_fleet_fetches_http_media_as_real_vllm_did(case, sim_root, monkeypatch):
        real = HTTP_MEDIA[case]
        clip = (sim_root / "library" / "R001" / "front_center_0000.mp4").read_bytes()
        r, url = fetch_through_the_simulated_fleet(real["origin"], clip, monkeypatch)
        assert r.status_code == real["status"], (case, r.text[:300], str(real["body"])[:300])
        if real["status"] == 200:
            assert set(real["body"]) <= set(r.json()) <= set(real["body"]) | {"simulated"}
            return
        err, want = r.json()["error"], real["body"]["error"]
        assert (err["type"], err["code"], err["param"]) == (want["type"], want["code"], want["param"]), (case, err)
        assert as_recorded(err["message"], url) == want["message"], (case, err["message"], want["message"])
