"""A handler's error reaches the browser as a sentence meant for a person, never as an object's repr, a library's
own text or a traceback (issue 27, class 2; issue 31, class 3). Every event the page has (read from /config, so a
new one is covered) is sent the wrong types, too few values and nonsense through the page's own path
(`/gradio_api/queue/join` + the event stream); then a handler is made to fail inside, as a bug would."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.support.examples import examples, quick_share
from tests.support.reliability_fixtures import LEAKS, GradioError, GradioSession, dependencies
from tests.support.webapp_fixtures import AppServer, add_users, build_library
from webapp import failures

FAILED = re.compile(re.escape(failures.FAILED).replace(r"\{ref\}", "[0-9a-f]{8}"))
VARIANTS = {
    "nothing": lambda n: [None] * n,
    "numbers": lambda n: [-(10**30)] * n,
    "objects": lambda n: [{"a": [1, {"b": "<b>x</b>"}]}] * n,
    "too few values": lambda n: [1],
}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from data.settings import Settings

    d = tmp_path_factory.mktemp("event-errors")
    s = Settings.load({"data_dir": str(d / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=6)
    add_users(s)
    with AppServer(s, fleet_urls=[]) as srv:
        yield srv


def run_raw(tab: GradioSession, dep: dict, data: list, event_data=None) -> str | None:
    """Send `data` as is (GradioSession.call pads it to the inputs); the error text, or None on success."""
    try:
        tab.call_raw(dep, data, event_data=event_data)
    except GradioError as e:
        return str(e)
    return None


def test_every_event_fed_the_wrong_inputs_answers_with_a_sentence(app):
    cookie = app.client("lead").cookies["cw_session"]
    deps = dependencies(app.url, cookie)
    assert len(deps) > 50  # every event of the page, as the page lists them
    seen: dict[str, list[str]] = {}
    leaked: list[tuple[str, str, str]] = []
    sent: dict[str, set[str]] = {}  # event -> the wrong inputs it was sent
    # every event; the full run sends each every wrong input, the quick one each event one of them in turn
    # (tests/support/examples.py), so that every event and every kind of wrong input is still sent
    for i, (name, dep) in enumerate(sorted(deps.items())):
        tab = GradioSession(app.url, cookie, deps)
        try:
            errors = {
                v: run_raw(tab, dep, VARIANTS[v](len(dep["inputs"])), event_data={"clip": [1]})
                for v in quick_share(list(VARIANTS), share=len(VARIANTS), offset=i)
            }
        finally:
            tab.close()
        sent[name] = set(errors)
        for variant, err in errors.items():
            if err is None:
                continue
            seen.setdefault(FAILED.sub("FAILED", err)[:100], []).append(f"{name}/{variant}")
            if LEAKS.search(err):
                leaked.append((name, variant, err[:300]))
    for text, where in sorted(seen.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(where):4d} {text!r} e.g. {where[:3]}")
    assert set().union(*sent.values()) == set(VARIANTS)  # each kind of wrong input, at least once
    assert not leaked, f"{len(leaked)} errors show internals, e.g. {leaked[:5]}"
    assert any("FAILED" in t for t in seen)  # the fixed sentence was what most of them got


def test_a_handler_that_fails_inside_says_the_fixed_sentence_and_logs_the_traceback(app, monkeypatch, caplog):
    from data import clips

    def broken(*_a, **_k):
        raise RuntimeError("internal detail <secret.Thing object at 0xdeadbeef>")

    cookie = app.client("ann").cookies["cw_session"]
    deps = dependencies(app.url, cookie)
    monkeypatch.setattr(clips, "get", broken)
    tab = GradioSession(app.url, cookie, deps)
    try:
        with pytest.raises(GradioError) as got:
            tab.call("open_clip", event_data={"clip": 2})
    finally:
        tab.close()
    text = str(got.value)
    assert FAILED.search(text) and "deadbeef" not in text and "RuntimeError" not in text, text
    ref = re.search(r"reference ([0-9a-f]{8})", text).group(1)
    logged = [r for r in caplog.records if ref in r.getMessage()]
    assert logged and logged[0].exc_info and "internal detail" in str(logged[0].exc_info[1])


def test_opening_the_clip_already_open_is_an_answer_not_an_error(app):
    """One return shape on every path of open_clip (issue 31, item 6). Before: Gradio's "Returned dictionary
    included some keys as Components..." for the second open."""
    cookie = app.client("ann").cookies["cw_session"]
    tab = GradioSession(app.url, cookie, dependencies(app.url, cookie))
    try:
        first = tab.call("open_clip", event_data={"clip": 3})
        again = tab.call("open_clip", event_data={"clip": 3})  # the session's form holds clip 3 now
        other = tab.call("open_clip", event_data={"clip": 4})
    finally:
        tab.close()
    assert any("version" in v for v in first if isinstance(v, str))
    assert len(again) == len(first)  # an answer for every output (nothing changes but the tab shown)
    assert any(isinstance(v, dict) and v.get("selected") == "review" for v in again), again
    assert any(isinstance(v, str) and "clip 4" in v.lower() or "/media/4" in str(v) for v in other)


BAD_JOINS = [
    b"not json",
    b"[1, 2]",
    b"null",
    b"{}",
    {"fn_index": 99999, "data": [], "session_hash": "s"},  # out of range: Gradio answered a 500 and a traceback
    {"fn_index": -1, "data": [], "session_hash": "s"},
    {"fn_index": "0", "data": [], "session_hash": "s"},
    {"fn_index": True, "data": [], "session_hash": "s"},
    {"fn_index": 1.5, "data": [], "session_hash": "s"},
    {"fn_index": 0, "data": "x", "session_hash": "s"},
    {"fn_index": 0, "data": [], "session_hash": 5},
    {"fn_index": 0, "data": [], "session_hash": "s", "trigger_id": "x"},
    {"fn_index": 0, "data": [], "session_hash": "s", "event_id": {"a": 1}},
    {"fn_index": 0, "data": [], "session_hash": "s", "simple_format": "yes"},
    {"fn_index": 0, "data": [], "session_hash": "s", "batched": [1]},
    {"fn_index": 0, "data": []},
]
BAD_CANCELS = [b"{", {}, {"event_id": 5}, {"session_hash": "s", "fn_index": "x", "event_id": "e"}, {"fn_index": 0}]
BAD_RESETS = [b"[]", {}, {"event_id": []}, {"event_id": ""}, {"event_id": None}]


def _post(client, route: str, body) -> "httpx.Response":  # noqa: F821
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(f"/gradio_api/{route}", content=content, headers={"content-type": "application/json"})


def _is_sentence(r) -> bool:
    try:
        detail = r.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(detail, str) and detail[:1].isupper() and detail.endswith(".") and not LEAKS.search(detail)


def test_every_malformed_queue_request_is_a_sentence_and_a_4xx_without_a_traceback(app, caplog):
    """Issue 46, point 5: an out-of-range `fn_index` at the queue's join answered a plain 500 with a 13.9 KB
    traceback in the log, and malformed cancel / reset / join bodies FastAPI's 422 lists. Each (and generated
    ones) is now answered by the guard with a sentence and a 400, before Gradio reads it (webapp.queue_requests),
    and nothing is logged with a traceback."""
    client = app.client("ann")
    seen = []
    try:
        with caplog.at_level("WARNING"):
            for route, bodies in (("queue/join", BAD_JOINS), ("cancel", BAD_CANCELS), ("reset", BAD_RESETS)):
                for body in bodies:
                    r = _post(client, route, body)
                    seen.append((route, body, r.status_code, r.text[:200]))
                    assert 400 <= r.status_code < 500 and _is_sentence(r), seen[-1]
            for query in ("", "?session_hash=a&session_hash=b"):
                r = client.get("/gradio_api/queue/data" + query)
                assert r.status_code == 400 and _is_sentence(r), (query, r.status_code, r.text[:200])
        logged = [rec for rec in caplog.records if rec.exc_info or "Traceback" in rec.getMessage()]
        assert not logged, [rec.getMessage()[:200] for rec in logged[:3]]
        fuzz_join_fields(client)
    finally:
        client.close()


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def fuzz_join_fields(client) -> None:
    """Generated joins, each a field of a well-formed join replaced with any JSON value: each is either answered as
    a join (200: the event then runs, and says what is wrong with its inputs as test_every_event_fed_the_wrong_
    inputs_answers_with_a_sentence checks) or refused with a sentence and a 4xx, never a 422 list or a 500."""

    @hsettings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(field=st.sampled_from(["fn_index", "data", "session_hash", "trigger_id", "event_id", "batched"]), v=VALUES)
    def one(field, v):
        body = {"fn_index": 0, "data": [], "session_hash": "fuzz", "trigger_id": None, field: v}
        r = _post(client, "queue/join", body)
        assert r.status_code == 200 or (400 <= r.status_code < 500 and _is_sentence(r)), (field, v, r.text[:200])

    one()
