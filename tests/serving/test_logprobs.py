"""Each label's confidence from vLLM's token logprobs (serving.logprobs), the request that asks for them
(serving.client), and the simulated fleet's logprobs (serving.simfleet.logprobs), which must have vLLM 0.25's
shape (docs/CONFIDENCE.md: sampled token first in `top_logprobs`, k entries, -9999.0 for tokens the grammar
forbids, `bytes` the UTF-8 of the token string) and carry exactly the confidence the reader reads back.

The hand-built answers below are cut into tokens the way Qwen's tokenizer cuts JSON (a quote with the space
before it, a word, `_word` pieces, a closing quote with the comma after it), and some the ways it may also cut
them (a quote glued to the value's first letters, a closing quote glued to the next key), with probabilities
worked by hand."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from data import taxonomy
from data.job_params import JobParams
from serving.client import MAX_ANSWER_BYTES, CaptionRequest, FleetClient, answer_limit
from serving.logprobs import FORBIDDEN, label_confidence
from serving.simfleet import answers as sim_answers
from serving.simfleet.logprobs import MAX_LOGPROBS, simulate
from tests.support.examples import examples
from tests.support.fleet_fixtures import PROMPT, caption

SCHEMA = taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)
LIGHTING = {"type": "object", "properties": {"lighting": SCHEMA["properties"]["lighting"]}}
USERS = {"type": "object", "properties": {"road_users": SCHEMA["properties"]["road_users"]}}


def alt(token: str, p: float) -> dict:
    return {"token": token, "logprob": math.log(p) if p > 0 else FORBIDDEN, "bytes": list(token.encode())}


def tok(token: str, *alternatives: tuple[str, float]) -> dict:
    """A sampled token with its alternatives: the first alternative is the sampled token itself (vLLM lists it
    first); none given: a forced token (probability 1, the rest forbidden)."""
    alternatives = alternatives or ((token, 1.0), ("!", 0), ('"', 0))
    p = next(q for t, q in alternatives if t == token)
    return {**alt(token, p), "top_logprobs": [alt(t, q) for t, q in alternatives]}


def read(entries: list[dict], schema: dict) -> dict:
    content = "".join(e["token"] for e in entries)
    json.loads(content)  # the hand-built answers are real JSON
    return label_confidence(content, {"content": entries}, schema)


def test_a_value_decided_at_one_token_reads_the_probability_there():
    got = read(
        [
            tok('{"'),
            tok("lighting"),
            tok('":'),
            tok(' "'),
            tok("daylight", ("daylight", 0.6), ("night", 0.3), ("d", 0.05), ("t", 0.05)),
            tok('"}'),
        ],
        LIGHTING,
    )
    # "d" is daylight or dawn_dusk: it still decides against night and tunnel, and counts for daylight
    assert got["labels"] == {"lighting": pytest.approx(0.65, abs=1e-4)}
    assert "note" not in got


def test_values_sharing_a_prefix_multiply_their_decisions():
    """night_lit and night_dark share `night`: P(night) at the first token times P(_dark | night) at the second."""
    got = read(
        [
            tok('{"lighting":'),
            tok(' "'),
            tok("night", ("night", 0.8), ("day", 0.15), ("tunnel", 0.05)),
            tok("_dark", ("_dark", 0.4), ("_lit", 0.6)),  # the sampled token need not be the likeliest
            tok('"}'),
        ],
        LIGHTING,
    )
    assert got["labels"]["lighting"] == pytest.approx(0.8 * 0.4, abs=1e-4)


def test_forbidden_alternatives_and_bare_quotes_decide_nothing():
    """-9999.0 is vLLM's -inf (the grammar forbids the token there); an alternative that spells only what every
    value shares (the opening quote) decides nothing yet: both are left out of the normalisation."""
    got = read(
        [
            tok('{"lighting":'),
            tok(' "night', (' "night', 0.45), (' "', 0.5), (' "day', 0.05), ("!", 0), ("#", 0)),
            tok("_lit", ("_lit", 0.9), ("_dark", 0.1)),
            tok('"}'),
        ],
        LIGHTING,
    )
    assert got["labels"]["lighting"] == pytest.approx(0.45 / 0.5 * 0.9, abs=1e-4)


def test_a_value_spelled_in_many_tokens_decides_where_it_parts_from_the_others():
    """`construction_equipment` and `car` part at the second letter; the later tokens are forced."""
    got = read(
        [
            tok('{"road_users": ["'),
            tok("c", ("c", 0.9), ("b", 0.1)),  # c: car or construction_equipment; b: bus or bicycle
            tok("on", ("on", 0.7), ("ar", 0.3)),
            tok("struction"),
            tok("_e"),
            tok("quipment"),
            tok('"]}', ('"]}', 0.8), ('",', 0.2)),
        ],
        USERS,
    )
    assert got["items"]["road_users"] == {"construction_equipment": pytest.approx(0.9 * 0.7, abs=1e-4)}
    # the list's start ('["' forced here: its quote was decided with the opening bracket), its end
    assert got["end"]["road_users"] == pytest.approx(0.8)
    assert got["labels"]["road_users"] == pytest.approx(0.9 * 0.7 * 0.8, abs=1e-4)


def test_a_list_reads_each_item_each_continuation_and_its_end():
    got = read(
        [
            tok('{"road_users":'),
            tok(' ["', (' ["', 0.9), (" []", 0.1)),
            tok("car", ("car", 0.8), ("bus", 0.2)),
            tok('",', ('",', 0.75), ('"]', 0.25)),
            tok(' "'),
            tok("pedestrian", ("pedestrian", 0.5), ("p", 0.3), ("bicycle", 0.5)),
            tok('"]}', ('"]}', 0.6), ('",', 0.4)),
        ],
        USERS,
    )
    assert got["items"]["road_users"] == {"car": 0.8, "pedestrian": pytest.approx(0.8 / 1.3, abs=1e-4)}
    assert got["end"]["road_users"] == 0.6
    assert got["labels"]["road_users"] == pytest.approx(0.9 * 0.8 * 0.75 * (0.8 / 1.3) * 0.6, abs=1e-4)


def test_an_empty_list_is_one_decision_and_a_repeated_item_counts_once():
    empty = read([tok('{"road_users":'), tok(" []}", (" []}", 0.7), (' ["', 0.3))], USERS)
    assert empty["items"]["road_users"] == {} and empty["end"]["road_users"] == 0.7
    assert empty["labels"]["road_users"] == 0.7
    twice = read(
        [
            tok('{"road_users": ["'),
            tok("car", ("car", 0.9), ("bus", 0.1)),
            tok('", "'),
            tok("car", ("car", 0.6), ("truck", 0.4)),
            tok('"]}'),
        ],
        USERS,
    )
    assert twice["items"]["road_users"] == {"car": 0.9}  # as data.taxonomy reads "car, car": one car


def test_a_token_that_runs_past_the_value_into_the_next_key_still_reads():
    got = read(
        [
            tok('{"weather": "'),
            tok("fog", ("fog", 0.55), ("snow", 0.25), ("rain", 0.2)),
            tok('", "lighting": "'),
            tok("tunnel", ("tunnel", 0.99), ("unknown", 0.01)),
            tok('"}'),
        ],
        {"type": "object", "properties": {k: SCHEMA["properties"][k] for k in ("weather", "lighting")}},
    )
    assert got["labels"] == {"weather": 0.55, "lighting": 0.99}


def test_a_split_multibyte_character_in_the_caption_still_spells_the_text():
    """vLLM decodes a byte-fallback piece of a character as "" and gives the whole character to the piece that
    completes it (docs/CONFIDENCE.md): the sampled tokens still spell the text."""
    got = read(
        [
            tok('{"caption": "caf'),
            tok(""),
            tok("é"),
            tok('", "lighting": "'),
            tok("dawn", ("dawn", 0.5), ("daylight", 0.5)),
            tok('_dusk"}'),
        ],
        {
            "type": "object",
            "properties": {"caption": {"type": "string"}, "lighting": LIGHTING["properties"]["lighting"]},
        },
    )
    assert got["labels"] == {"lighting": 0.5}


def test_missing_alternatives_leave_that_label_unknown_not_guessed():
    entries = [tok('{"lighting": "'), tok("night", ("night", 0.9), ("day", 0.1)), tok("_lit"), tok('"}')]
    entries[1]["top_logprobs"] = []  # asked for top_logprobs 0: nothing to normalise over
    assert read(entries, LIGHTING)["labels"] == {"lighting": None}
    entries[1]["top_logprobs"] = [alt("night", 0.9), alt("!", 0)]  # only the sampled token is allowed: odd
    assert read(entries, LIGHTING)["labels"] == {"lighting": 1.0}


@pytest.mark.parametrize(
    "content, logprobs, why",
    [
        ('{"lighting": "tunnel"}', {"content": [tok('{"lighting": "'), tok("tun"), tok('nel"}')][:2]}, "spell"),
        ('{"lighting": "tunnel"}', {"content": [tok("token_id:1"), tok("token_id:2")]}, "spell"),
        ('{"lighting": "tunnel"}', {"content": []}, "no token logprobs"),
        ('{"lighting": "tunnel"}', {}, "no token logprobs"),
        ('["tunnel"]', {"content": [tok('["'), tok("tunnel"), tok('"]')]}, "not one JSON object"),
        ('{"lighting": "tunnel"}', {"content": [{"logprob": 0.0}]}, "no text"),
    ],
)
def test_logprobs_that_cannot_be_read_give_no_confidence_and_say_why(content, logprobs, why):
    got = label_confidence(content, logprobs, LIGHTING)
    assert got["labels"] == {"lighting": None} and why in got["note"]


def test_no_logprobs_asked_for_is_no_confidence():
    assert label_confidence('{"lighting": "tunnel"}', None, LIGHTING) is None


# ---- the simulated fleet: vLLM's shape, and the confidence it means ---------------------------------------------


@hsettings(max_examples=examples(80), deadline=None)
@given(clip=st.text(min_size=1, max_size=12), k=st.integers(0, MAX_LOGPROBS))
def test_the_simulated_logprobs_carry_what_the_reader_reads(clip, k):
    answer = sim_answers.synthetic_answer(clip, None, SCHEMA)
    content = json.dumps(answer, ensure_ascii=False)
    logprobs, planned = simulate(content, answer, SCHEMA, k, clip.encode("utf-8", "surrogatepass"))
    got = label_confidence(content, logprobs, SCHEMA)
    assert got == planned
    assert set(got["labels"]) == set(taxonomy.ENUMS)
    assert all((p is None) == (k == 0) for p in got["labels"].values())


def test_the_simulated_fleet_is_sure_of_most_labels_and_unsure_of_some():
    seen = []
    for i in range(200):
        answer = sim_answers.synthetic_answer(f"clip{i}.mp4", None, SCHEMA)
        content = json.dumps(answer, ensure_ascii=False)
        seen += simulate(content, answer, SCHEMA, 5, f"clip{i}".encode())[1]["labels"].values()
    sure = sum(p >= 0.9 for p in seen) / len(seen)
    unsure = sum(p < 0.75 for p in seen) / len(seen)
    assert 0.4 < sure < 0.9 and 0.1 < unsure < 0.6, (sure, unsure)
    again = sim_answers.synthetic_answer("clip7.mp4", None, SCHEMA)
    text = json.dumps(again, ensure_ascii=False)
    assert simulate(text, again, SCHEMA, 5, b"clip7") == simulate(text, again, SCHEMA, 5, b"clip7")


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30, trust_env=False)


def test_the_simulated_fleet_answers_logprobs_in_vllms_shape(fleet_settings, sim):
    body = FleetClient(fleet_settings).build_body(CaptionRequest("a.mp4", PROMPT, JobParams(top_logprobs=4)))
    assert body["logprobs"] is True and body["top_logprobs"] == 4
    r = _post(sim.urls[0], body)
    assert r.status_code == 200, r.text[:300]
    choice = r.json()["choices"][0]
    entries = choice["logprobs"]["content"]
    # as recorded on real vLLM: the text's tokens, then the stop token; one entry per generated token
    assert choice["finish_reason"] == "stop"
    assert "".join(e["token"] for e in entries) == choice["message"]["content"] + "<|im_end|>"
    assert r.json()["usage"]["completion_tokens"] == len(entries)
    for e in entries:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e["bytes"] == list(e["token"].encode("utf-8"))
        assert len(e["top_logprobs"]) == 4
        assert e["top_logprobs"][0] == {k: e[k] for k in ("token", "logprob", "bytes")}  # the sampled one first
        for a in e["top_logprobs"]:
            assert set(a) == {"token", "logprob", "bytes"} and a["bytes"] == list(a["token"].encode("utf-8"))
            assert a["logprob"] == FORBIDDEN or FORBIDDEN < a["logprob"] <= 0.0
        assert sum(math.exp(a["logprob"]) for a in e["top_logprobs"] if a["logprob"] > FORBIDDEN) <= 1.0 + 1e-9
    forced = [e for e in entries if e["logprob"] == 0.0]
    assert forced and all(a["logprob"] == FORBIDDEN for e in forced for a in e["top_logprobs"][1:])
    plain = body | {"logprobs": False}
    plain.pop("top_logprobs")
    assert _post(sim.urls[0], plain).json()["choices"][0]["logprobs"] is None


def test_the_simulated_fleet_refuses_more_logprobs_than_vllm_allows(fleet_settings, sim):
    body = FleetClient(fleet_settings).build_body(CaptionRequest("a.mp4", PROMPT))
    r = _post(sim.urls[0], body | {"logprobs": True, "top_logprobs": MAX_LOGPROBS + 1})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "Requested sample logprobs of 21, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=21)",
        "type": "BadRequestError",
        "param": "logprobs",
        "code": 400,
    }


# ---- the client: what it asks, what it keeps ---------------------------------------------------------------------


def test_the_request_asks_for_logprobs_by_default_and_not_when_told(fleet_settings):
    client = FleetClient(fleet_settings)
    body = client.build_body(CaptionRequest("a.mp4", PROMPT))
    assert body["logprobs"] is True and body["top_logprobs"] == JobParams().top_logprobs == 5
    off = client.build_body(CaptionRequest("a.mp4", PROMPT, JobParams(top_logprobs=0)))
    assert "logprobs" not in off and "top_logprobs" not in off
    # an answer with logprobs is larger: its bound grows with what was asked, and is the old one without
    assert answer_limit(JobParams(top_logprobs=0)) == MAX_ANSWER_BYTES
    assert MAX_ANSWER_BYTES < answer_limit(JobParams(top_logprobs=5)) < answer_limit(JobParams(top_logprobs=20))


def test_a_simulated_caption_carries_a_confidence_for_every_label(fleet_settings, sim):
    result = caption(fleet_settings, sim.urls[0], "a.mp4")
    conf = result.provenance["confidence"]
    assert set(conf["labels"]) == set(taxonomy.ENUMS) and "note" not in conf
    assert all(0.0 < p <= 1.0 for p in conf["labels"].values())
    assert set(conf["items"]["road_users"]) == set(result.labels["road_users"])
    assert caption(fleet_settings, sim.urls[0], "a.mp4", top_logprobs=0).provenance["confidence"] is None
