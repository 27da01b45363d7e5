"""Issue 21, class 6: every Gradio entry point acts only on the authenticated user's own session state.

Before, `POST /gradio_api/run/<api>` (and `call/<api>`, whose body takes a `session_hash` too) accepted another
user's session id: an annotator moved a lead's open clip, and the lead's next save landed on another clip.
Now the routes the page does not use are closed (`call/` too since issue 27), every session id a request names
is its first user's, and every event id is its creator's."""

from __future__ import annotations

import re

import httpx
import pytest

from data import db as dbmod
from tests.support.reliability_fixtures import GradioSession, dependencies
from tests.support.webapp_fixtures import LABELS, AppServer, add_users, build_library
from webapp.guard import Owners

SAVE = [None, None, None, "the lead's edit", *[LABELS[k] for k in LABELS]]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from data.settings import Settings

    d = tmp_path_factory.mktemp("binding")
    s = Settings.load({"data_dir": str(d / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=6)
    add_users(s)
    with AppServer(s, fleet_urls=[]) as srv:
        yield srv


def _session(srv, user: str) -> GradioSession:
    cookie = srv.client(user).cookies["cw_session"]
    return GradioSession(srv.url, cookie, dependencies(srv.url, cookie))


def _authors(srv, clip_id: int) -> list[str]:
    db = dbmod.connect(srv.settings.db)
    try:
        return [r["author"] for r in db.query("SELECT author FROM captions WHERE clip_id = ?", [clip_id])]
    finally:
        db.close()


@pytest.mark.parametrize("route", ["run/open_clip", "call/open_clip", "api/open_clip", "queue/join"])
def test_another_users_session_id_moves_nothing_and_the_lead_saves_where_they_look(app, route):
    lead, ann = _session(app, "lead"), _session(app, "ann")
    try:
        lead.call("open_clip", event_data={"clip": 2})
        dep = ann.deps["open_clip"]
        body = {
            "data": [None] * len(dep["inputs"]),
            "event_data": {"clip": 5},
            "fn_index": dep["id"],
            "trigger_id": dep["targets"][0][0],
            "session_hash": lead.hash,  # the lead's tab, named by the annotator
        }
        r = ann.http.post(f"/gradio_api/{route}", json=body)
        assert r.status_code == 403, (route, r.status_code, r.text[:200])
        before = _authors(app, 5).count("lead")
        out = lead.call("save_caption", [*SAVE[:3], f"{SAVE[3]} ({route})", *SAVE[4:]])  # a change each time
        assert any("Saved as version" in v for v in out if isinstance(v, str))
        assert _authors(app, 5).count("lead") == before  # before the fix: the lead's save went to clip 5
        assert "lead" in _authors(app, 2)
    finally:
        lead.close()
        ann.close()


def test_event_ids_belong_to_their_creator(app):
    lead, ann = _session(app, "lead"), _session(app, "ann")
    try:
        dep = lead.deps["team_stats"]
        body = {"data": ["all time"], "fn_index": dep["id"], "session_hash": lead.hash, "trigger_id": None}
        r = lead.http.post("/gradio_api/queue/join", json=body)
        assert r.status_code == 200, r.text
        event = r.json()["event_id"]
        # the annotator can neither read the lead's answers, nor cancel or reset the lead's event
        assert ann.http.get("/gradio_api/queue/data", params={"session_hash": lead.hash}).status_code == 403
        cancel = {"session_hash": ann.hash, "fn_index": 0, "event_id": event}
        assert ann.http.post("/gradio_api/cancel", json=cancel).status_code == 403
        assert ann.http.post("/gradio_api/reset", json={"event_id": event}).status_code == 403
        assert ann.http.post("/gradio_api/reset", json={"event_id": "not-an-event"}).status_code == 403
        with lead.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": lead.hash}) as stream:
            assert stream.status_code == 200
            done = next(line for line in stream.iter_lines() if "process_completed" in line)
        assert event in done
    finally:
        lead.close()
        ann.close()


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/gradio_api/run/save_caption"),
        ("POST", "/gradio_api/api/save_caption"),
        ("POST", "/gradio_api/call/save_caption"),  # issue 27: open until then
        ("GET", "/gradio_api/call/save_caption/abc"),
        ("POST", "/gradio_api/call/v2/save_caption"),
        ("GET", "/gradio_api/info"),
        ("GET", "/gradio_api/file=/etc/hostname"),
        ("GET", "/gradio_api/openapi.json"),
        ("GET", "/openapi.json"),
        ("POST", "/gradio_api/upload"),
        ("POST", "/login/"),  # Gradio's own login route, behind the app's /login
        ("POST", "/gradio_api/component_server"),
        ("POST", "/gradio_api/stream/abc"),
        ("GET", "/gradio_api/stream/abc/run/1/playlist.m3u8"),
        ("GET", "/gradio_api/queue/status"),
        ("POST", "/gradio_api/vibe-edit"),
        ("GET", "/gradio_api/deep_link"),
        ("POST", "/gradio_api/process_recording"),
    ],
)
def test_routes_the_page_does_not_use_are_closed_for_everyone(app, method, path):
    c = app.client("admin")
    try:
        r = c.request(method, path, json={"data": [], "session_hash": "abc"})
    finally:
        c.close()
    assert r.status_code == 403 and "closed" in r.json()["detail"], (path, r.status_code, r.text[:200])


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("GET", "/gradio_api/heartbeat/abcdef", None),
        ("POST", "/gradio_api/cancel", {"session_hash": "abcdef", "fn_index": 0, "event_id": "e"}),
        ("POST", "/gradio_api/reset", {"event_id": "e"}),
        ("GET", "/gradio_api/queue/data?session_hash=abcdef", None),
    ],
)
def test_nothing_acts_for_an_anonymous_caller(app, method, path, body):
    r = httpx.request(method, app.url + path, json=body, timeout=30, trust_env=False)
    assert r.status_code == 401  # before: Gradio's heartbeat, cancel and reset checked no login


def test_the_page_uses_no_closed_route(tmp_path):
    from data.settings import Settings
    from webapp.app import Workbench
    from webapp.context import AppContext

    s = Settings.load({"data_dir": str(tmp_path / "var"), "fleet_mode": "sim"}, environ={})
    demo = Workbench(AppContext(s)).build()
    # an event outside the queue would be sent by the page to /gradio_api/run, which is closed
    assert all(f.queue for f in demo.fns.values())


def test_one_user_cannot_push_another_users_ids_out_of_the_owner_table():
    owners = Owners(per_user=3)
    assert owners.claim("lead-tab", "lead")
    for i in range(50):  # a flood of the attacker's own ids
        assert owners.claim(f"ann-{i}", "ann")
    assert not owners.claim("lead-tab", "ann")  # before: the oldest entries of everyone were forgotten first
    assert owners.owns("lead-tab", "lead")
    assert not owners.owns("never-made", "ann")


def test_the_guard_names_every_open_gradio_route():
    from webapp import guard

    names = {p.pattern for _, p in guard.GRADIO_ROUTES}
    for closed in ("/gradio_api/run/save_caption", "/gradio_api/call/save_caption", "/gradio_api/info"):
        assert not any(re.fullmatch(p, closed) for p in names)
    assert any(re.fullmatch(p, "/gradio_api/queue/join") for p in names)
