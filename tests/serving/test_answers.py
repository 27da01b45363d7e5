"""Readers of what the fleet sends never raise (issue 27, item 3): a good caption stays a good caption whatever
its token logprobs, usage or model name hold; what cannot be read is None, or a confidence with a note.

Starts from the answer real vLLM 0.25 gave with logprobs (tests/recordings/vllm-0.25.0-answers.json, `good_logprobs`)
and puts hostile values where vLLM puts numbers and lists: huge, negative, NaN, infinite and 400-digit numbers,
deep nesting, wrong types. Through `serving.answers.read_answer` (what the runner's checker runs) and through
`FleetClient.caption` on an httpx MockTransport (the HTTP boundary)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from serving.answers import read_answer
from serving.errors import BadAnswer, FleetError, ReplicaError
from serving.logprobs import enum_labels, label_confidence
from tests.support.examples import examples
from tests.support.fleet_fixtures import caption

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "recordings" / "vllm-0.25.0-answers.json").read_text())
GOOD = RECORDED["answers"]["good_logprobs"]["body"]
SCHEMA = RECORDED["answers"]["good_logprobs"]["request"]["schema"]
PROMPT = {"id": 2, "name": "av-hazard", "version": 2, "system": "s", "user": "u", "schema": SCHEMA}
CLEAN = read_answer(json.dumps(GOOD).encode(), SCHEMA, confidence=True)
CLEAN_CONTENT = GOOD["choices"][0]["message"]["content"]
LABELS = set(enum_labels(SCHEMA))

# what a hostile or broken fleet puts where vLLM puts a number (a JSON text each: some are not Python floats)
HOSTILE_NUMBERS = [
    "710.0",  # math.exp overflows above ~709.78
    "1e308",
    "-1e308",
    "1" + "0" * 400,  # a 400-digit integer: math.isfinite raised OverflowError
    "-" + "9" * 400,
    "NaN",
    "Infinity",
    "-Infinity",
    "0.5",  # a logprob above 0: a probability above 1
    '"-0.1"',
    "true",
    "null",
    "[[[[[[[[[[-1.0]]]]]]]]]]",
    '{"logprob": -0.1}',
]


_RAW: list[str] = []


def raw(json_text: str) -> str:
    """A placeholder for JSON text that `body_with` splices in as it is (values Python's json cannot write)."""
    _RAW.append(json_text)
    return f"@@raw{len(_RAW) - 1}@@"


def body_with(mutate) -> bytes:
    """The recorded good answer as JSON text, after `mutate(body_dict)` (which may put `raw(...)` placeholders)."""
    body = copy.deepcopy(GOOD)
    mutate(body)
    return re.sub(r'"@@raw(\d+)@@"', lambda m: _RAW[int(m.group(1))], json.dumps(body)).encode()


def entries(body: dict) -> list[dict]:
    return body["choices"][0]["logprobs"]["content"]


def assert_confidence_sane(conf: dict | None) -> None:
    assert isinstance(conf, dict)
    assert set(conf["labels"]) == LABELS
    for p in conf["labels"].values():
        assert p is None or (isinstance(p, float) and 0.0 <= p <= 1.0)
    for per in conf.get("items", {}).values():
        assert all(p is None or 0.0 <= p <= 1.0 for p in per.values())
    if "note" in conf:
        assert all(p is None for p in conf["labels"].values())


def assert_same_caption(got) -> None:
    assert (got.text, got.labels) == (CLEAN.text, CLEAN.labels)


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
def test_a_hostile_logprob_leaves_a_good_caption_good(fleet_settings, value):
    """Through the client, as the runner called it before its checker: the caption is stored, the confidence
    says it could not be read. Before: OverflowError out of the confidence reader for 710.0 and 400 digits, and the
    runner recorded the good caption as an internal failure and sent it again."""

    def every_alternative(body):
        for e in entries(body):
            for a in e["top_logprobs"]:
                a["logprob"] = raw(value)

    answer = body_with(every_alternative)
    got = caption(
        fleet_settings,
        "http://replica.test:8000",
        "a.mp4",
        prompt=PROMPT,
        top_logprobs=5,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, content=answer)),
    )
    assert (got.text, got.labels) == (CLEAN.text, CLEAN.labels)
    conf = got.provenance["confidence"]
    assert_confidence_sane(conf)
    if value not in ("-1e308", "-Infinity", "null"):  # these read as "forbidden here": no decision left to read
        assert "note" in conf and "unreadable" in conf["note"], conf


def test_an_integer_past_pythons_digit_limit_leaves_a_good_caption_good():
    """json.loads refuses an integer of over 4,300 digits (ValueError for the whole answer); a logprob or a count
    of 5,000 digits is unreadable, the caption kept. (Through read_answer: at every alternative such an answer is
    past the client's size bound, R10.)"""

    def mutate(body):
        body["usage"]["completion_tokens"] = raw("7" * 5000)
        for e in entries(body):
            e["top_logprobs"][0]["logprob"] = raw("-" + "7" * 5000)

    got = read_answer(body_with(mutate), SCHEMA, confidence=True)
    assert_same_caption(got)
    assert got.completion_tokens is None
    assert_confidence_sane(got.confidence)


def test_the_recorded_answer_reads_a_confidence_for_every_label():
    assert_confidence_sane(CLEAN.confidence)
    assert "note" not in CLEAN.confidence and all(p is not None for p in CLEAN.confidence["labels"].values())


# JSON values of every shape, leaves included that Python's floats cannot hold
LEAVES = st.one_of(
    st.sampled_from(HOSTILE_NUMBERS),
    st.integers(min_value=-(10**500), max_value=10**500).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.text(max_size=30).map(json.dumps),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.dictionaries(
            st.sampled_from(["token", "logprob", "top_logprobs", "bytes", "content", "x"]), inner, max_size=4
        ).map(lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}"),
    ),
    max_leaves=20,
)
PLACES = st.sampled_from(["logprob", "top_logprobs", "token", "entry", "alternative", "logprobs", "content"])


@hsettings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(PLACES, st.integers(0, 10**6), st.integers(0, 20), VALUES), min_size=1, max_size=6))
@example(changes=[("alternative", 0, 15, "[]"), ("alternative", 0, 0, "{}")])  # once broke the mutation, not the reader
def test_no_logprobs_make_the_reader_raise_or_fail_the_caption(changes):
    def mutate(body):
        choice = body["choices"][0]
        for place, i, j, value in changes:
            es = entries(body) if isinstance(choice.get("logprobs"), dict) else None
            if place == "logprobs":
                choice["logprobs"] = raw(value)
            elif not isinstance(es, list) or not es:
                continue
            elif place == "content":
                choice["logprobs"]["content"] = raw(value)
            elif place == "entry":
                es[i % len(es)] = raw(value)
            elif isinstance(es[i % len(es)], dict):
                e = es[i % len(es)]
                if place in ("logprob", "token", "top_logprobs"):
                    e[place] = raw(value)
                elif isinstance(e.get("top_logprobs"), list) and e["top_logprobs"]:
                    alts, k = e["top_logprobs"], j % len(e["top_logprobs"])
                    # an alternative an earlier change replaced by a non-object is replaced again, not spread
                    keep = alts[k] if isinstance(alts[k], dict) else None
                    alts[k] = raw(value) if j % 2 or keep is None else {**keep, "logprob": raw(value)}

    got = read_answer(body_with(mutate), SCHEMA, confidence=True)
    assert_same_caption(got)
    assert_confidence_sane(got.confidence)


# 100 examples: a reader taking any usage for a dict, or any model for a string, failed this under every seed tried
@hsettings(max_examples=examples(100), deadline=None)
@given(usage=VALUES, model=VALUES, finish_extra=VALUES)
def test_hostile_usage_and_model_are_unreadable_not_a_failed_caption(usage, model, finish_extra):
    def mutate(body):
        body["usage"] = raw(usage)
        body["model"] = raw(model)
        body["metrics"] = raw(finish_extra)
        body["choices"][0]["stop_reason"] = raw(finish_extra)

    got = read_answer(body_with(mutate), SCHEMA, confidence=True)
    assert_same_caption(got)
    for n in (got.prompt_tokens, got.completion_tokens):
        assert n is None or (isinstance(n, int) and 0 <= n < 10**9)
    assert got.model is None or (isinstance(got.model, str) and len(got.model) <= 256)


@hsettings(max_examples=examples(300), deadline=None)
@given(text=VALUES)
def test_any_body_is_read_or_refused_with_a_fleet_error(text):
    try:
        got = read_answer(text.encode(), SCHEMA, confidence=True)
    except FleetError:
        return
    raise AssertionError(f"a body that is no chat completion was read: {got!r}")


@pytest.mark.parametrize("depth", [500, 5_000, 200_000])
def test_deep_nesting_anywhere_is_an_answer_error_never_a_crash(depth):
    nested = "[" * depth + "]" * depth
    cases = {
        "body": nested.encode(),
        "logprobs": body_with(lambda b: b["choices"][0].update(logprobs=raw(nested))),
        "usage": body_with(lambda b: b.update(usage=raw(nested))),
    }
    for where, body in cases.items():
        try:
            got = read_answer(body, SCHEMA, confidence=True)
        except ReplicaError as e:  # past the JSON parser's depth: the body is no chat completion, retried elsewhere
            assert where == "body" or depth > 500, (where, e)
            continue
        assert_same_caption(got)
        assert_confidence_sane(got.confidence)
    content = json.dumps({**json.loads(GOOD["choices"][0]["message"]["content"]), "weather": [nested]})
    with pytest.raises(BadAnswer):
        read_answer(body_with(lambda b: b["choices"][0]["message"].update(content=content)), SCHEMA, confidence=True)


def test_a_token_far_longer_than_any_tokenizer_makes_the_confidence_unreadable_not_slow():
    """One "token" holding the whole answer and a list of 20,000 items: each item's decision would re-read the
    token's text (quadratic); the reader refuses such a token instead."""
    content = json.dumps({**json.loads(CLEAN_CONTENT), "road_users": ["car"] * 20_000})
    alts = [{"token": content, "logprob": 0.0, "bytes": []}]
    conf = label_confidence(content, {"content": [{"token": content, "logprob": 0.0, "top_logprobs": alts}]}, SCHEMA)
    assert_confidence_sane(conf)
    assert "longer than" in conf["note"]
