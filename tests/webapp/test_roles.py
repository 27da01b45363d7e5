"""Roles hold at the API, not just in the UI: who may do what once signed in (signing in and sessions:
tests/webapp/test_login_and_sessions.py). What was test_webapp_roles and test_roles_at_the_api, in that order.

Every Gradio event is an HTTP endpoint, so the checks live in the handlers. An annotator calling the start-job or
job-control endpoints directly (a raw join of Gradio's queue, as the page makes; the REST `call/` route is closed
since issue 27) is refused and nothing is written; export answers 403; anonymous callers get 401 everywhere.

S2: `docs/roles.csv` lists every endpoint (each Gradio event by its api_name, each route of the app, every route
of the Gradio app it mounts) x role (anonymous, annotator, lead, admin) -> allow/deny. The tests below are
generated from it and call each endpoint directly over HTTP (Gradio events through the queue, like a browser). The
routes are read from the app itself (its own and Gradio's router: tests/support/app_routes.py), so a route the
table does not list, one a new Gradio adds included, fails `test_table_lists_every_endpoint` until someone
classifies it; of Gradio's routes only those the page uses are open (issue 27: webapp.guard), the rest answer 403
to every role.
"""

from __future__ import annotations

import csv
import uuid
from pathlib import Path

import gradio
import httpx
import pytest

from data import db as dbmod, jobs, users
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from tests.support.app_routes import app_routes, concrete
from tests.support.examples import quick_share
from tests.support.reliability_fixtures import GradioError, GradioSession, dependencies
from tests.support.webapp_fixtures import PASSWORD


def session_as(server, user: str) -> GradioSession:
    cookie = server.client(user).cookies["cw_session"]
    return GradioSession(server.url, cookie, dependencies(server.url, cookie))


def job_count(settings) -> int:
    db = dbmod.connect(settings.db)
    try:
        return len(job_queries.list_jobs(db, limit=1000))
    finally:
        db.close()


# name, clips, prompt, frames, max tokens, pixels per clip (None: the default), the Browse filter, the preview shown
START_ARGS = ("sneaky job", "everything uncaptioned", None, 16, 320, None, {}, None)


def test_annotator_cannot_start_a_job_through_the_api(server, web_settings):
    before = job_count(web_settings)
    with pytest.raises(Exception, match="lead role"):
        session_as(server, "ann").call("start_job", list(START_ARGS))
    assert job_count(web_settings) == before


@pytest.mark.parametrize("endpoint", ["/job_pause", "/job_resume", "/job_cancel", "/job_retry"])
def test_annotator_cannot_control_jobs(server, web_settings, endpoint):
    db = dbmod.connect(web_settings.db)
    job_id = jobs.create(
        db,
        name="a lead's job",
        created_by="lead",
        selection=Selection.of_clips([1]),
        prompt_id=None,
        params=JobParams(),
    )
    state = job_queries.get(db, job_id)["state"]
    with pytest.raises(Exception, match="lead role"):
        session_as(server, "ann").call(endpoint.lstrip("/"), [job_id])
    assert job_queries.get(db, job_id)["state"] == state
    db.close()


def test_lead_can_start_a_job(server, web_settings):
    before = job_count(web_settings)
    msg, job_id, *_preview = session_as(server, "lead").call("start_job", list(START_ARGS))
    assert "Started job" in msg and job_count(web_settings) == before + 1


def test_raw_http_event_call_as_annotator_is_refused(server, web_settings):
    """Straight to Gradio's REST call route, no client library: closed for every role (issue 27)."""
    before = job_count(web_settings)
    for user in ("ann", "lead"):
        c = server.client(user)
        r = c.post("/gradio_api/call/start_job", json={"data": list(START_ARGS)})
        assert r.status_code == 403 and "closed" in r.json()["detail"]
    assert job_count(web_settings) == before


def test_export_needs_lead(server):
    assert server.client("ann").get("/export?fmt=jsonl").status_code == 403
    assert server.client().get("/export?fmt=jsonl").status_code == 401
    r = server.client("lead").get("/export?fmt=jsonl&filter=%7B%22has_caption%22%3A%20true%7D")
    assert r.status_code == 200
    assert r.text.count("\n") >= 2 and "drive/clip_" in r.text


@pytest.mark.parametrize("path", ["/", "/config", "/gradio_api/info", "/media/1", "/thumb/1", "/export"])
def test_anonymous_is_kept_out(server, path):
    r = httpx.get(server.url + path, follow_redirects=False)
    assert r.status_code in (303, 401, 403), (path, r.status_code)
    if path == "/":
        assert r.headers["location"].startswith("/login")


def test_anonymous_event_call_is_refused(server, web_settings):
    before = job_count(web_settings)
    r = httpx.post(server.url + "/gradio_api/queue/join", json={"data": list(START_ARGS), "fn_index": 0})
    assert r.status_code == 401
    assert job_count(web_settings) == before


TABLE = Path(__file__).resolve().parents[2] / "docs" / "roles.csv"
ROLES = {"anonymous": None, "annotator": "ann", "lead": "lead", "admin": "admin"}
ROWS = list(csv.DictReader(TABLE.open()))
FILTER = ["any"] * 7 + [None, "", "any", "newest"]
JOB_LIST = ["jobs", "", ""]  # the Jobs tab's list filter: kind, state, creator
REVIEW = {
    "/save_caption",
    "/assign_clip",
    "/unassign_clip",
    "/approve",
    "/reject",
    "/adopt",
    "/reload_clip",
    "/next_clip",
    "/previous_clip",
    "/recaption",
    "/next_unreviewed",
    "/goto_clip",
    "/draft_restore",
    "/draft_discard",
    "/draft_check",
    "/conflict_keep_mine",
    "/conflict_take_theirs",
    "/conflict_edit_merged",
    "/flag_broken",
    "/clear_broken",
}


def _inputs(endpoint: str, job_id: int) -> tuple[list, dict | None]:
    """Valid-looking inputs for one event (state inputs are None: the server keeps them per session)."""
    name = endpoint.lstrip("/")
    if name.startswith("apply") or name in ("browse_search", "browse_assignee"):
        return list(FILTER), None
    if name == "save_caption":
        return [
            None,
            None,
            None,
            "S2: a caption written by the role test",
            "pedestrian_crossing",
            "high",
            ["car"],
            "slowing",
            "rain",
            "daylight",
            "urban",
        ], None
    if name == "start_job":
        return ["S2 job", "everything uncaptioned", None, 16, 320, None, None, None], None
    if name == "job_select":
        return [], {"index": [0, 0], "value": job_id, "row_value": [job_id]}
    if name == "job_preview":
        return ["everything uncaptioned", 16, None, None], None
    if name == "jobs_show":
        return [job_id, *JOB_LIST, None, "everything uncaptioned", 16, None, None], None
    if name == "job_preview_tick":
        return ["everything uncaptioned", 16, None, None, None], None
    if name in ("job_pause", "job_resume", "job_cancel", "job_retry"):
        return [job_id, None], None
    if name == "assign_clips":
        return [None, None, "ann2", 1, None], None
    if name == "assign_clip":
        return [None, None, None, "ann2"], None
    if name == "unassign_clip":
        return [None, None, None], None
    if name == "goto_clip":
        return ["3"], None
    if name == "flag_broken":  # the form as a script sends it (no edit), the filter, the sort, the reason
        return [None] * 11 + [None, "newest", "S2: the role test flags this video"], None
    if (name.startswith("job") and name.endswith("_refresh")) or name in ("refresh", "jobs_list"):
        return [job_id, *JOB_LIST, None], None
    if name.startswith("job_"):
        return [job_id], None
    if name == "quality_show":
        return [["model", "prompt"], "", "", True, None, None, "hazard_level", None, 5], None
    if name == "quality_refresh":
        return [["model", "prompt"], "", "", True, None, None, "hazard_level"], None
    if name == "quality_compare":
        return [None, None, True, None], None
    if name in ("quality_estimate", "quality_draw_more"):
        return [None, 5], None
    if name == "quality_target":  # the hazard level's default, set again: a write a lead may make
        return ["hazard_level", "0.95", "", None, 5], None
    if name == "team_stats":
        return ["all time"], None
    if name == "open_clip":
        return [], {"clip": 1}
    return [], None


def _cookie(server, user):
    return server.client(user).cookies["cw_session"] if user else None


@pytest.fixture(scope="module")
def cookies(server):
    return {role: _cookie(server, user) for role, user in ROLES.items()}


@pytest.fixture(scope="module")
def deps(server, cookies):
    return dependencies(server.url, cookies["admin"])


@pytest.fixture(scope="module")
def job_id(web_settings):
    db = dbmod.connect(web_settings.db)
    try:
        return jobs.create(
            db,
            name="S2 target job",
            created_by="lead",
            selection=Selection.of_clips([1, 2]),
            prompt_id=None,
            params=JobParams(),
        )
    finally:
        db.close()


def call_event(server, deps, cookie, endpoint: str, job_id: int) -> str:
    """'allow' or 'deny' as the server answered (deny = 401/403, not logged in, or a role refusal)."""
    session = GradioSession(server.url, cookie, deps)
    try:
        if endpoint in REVIEW:
            try:
                session.call("open_clip", event_data={"clip": 2})
            except GradioError as e:
                if e.status in (401, 403) or "not logged in" in str(e).lower():
                    return "deny"
                raise
        data, event = _inputs(endpoint, job_id)
        try:
            session.call(endpoint.lstrip("/"), data, event_data=event)
        except GradioError as e:
            if e.status in (401, 403) or "needs the" in str(e) or "not logged in" in str(e).lower():
                return "deny"
            raise AssertionError(f"{endpoint}: unexpected error {e}") from None
        return "allow"
    finally:
        session.close()


FRONTEND = Path(gradio.__file__).parent / "templates" / "frontend"
# a real file behind each of Gradio's file-serving routes the page uses (a placeholder would be a plain 404)
REAL_FILES = {
    "/assets/{path:path}": "/assets/" + sorted(p.name for p in (FRONTEND / "assets").iterdir() if p.is_file())[0],
    "/static/{path:path}": "/static/"
    + next(str(p.relative_to(FRONTEND / "static")) for p in sorted((FRONTEND / "static").rglob("*")) if p.is_file()),
}
QUEUE = ("/gradio_api/queue/data", "/gradio_api/cancel", "/gradio_api/reset", "/gradio_api/reset/")


def _queue_request(c: httpx.Client, path: str) -> httpx.Response:
    """A request to one of the queue's routes as the page makes it: for the data stream, cancel and reset, after
    a join of the caller's own (an event that writes nothing: the tab timers)."""
    session = uuid.uuid4().hex[:11]
    dep = dependencies(str(c.base_url).rstrip("/"), c.cookies.get("cw_session"))["timers_browse"]
    join = c.post(
        "/gradio_api/queue/join", json={"data": [], "fn_index": dep["id"], "session_hash": session, "trigger_id": None}
    )
    if path == "/gradio_api/queue/join" or join.status_code != 200:
        return join
    event = join.json()["event_id"]
    if path == "/gradio_api/queue/data":
        with c.stream("GET", path, params={"session_hash": session}) as r:
            return r  # an event stream: its status is the answer
    return c.post(path, json={"session_hash": session, "fn_index": dep["id"], "event_id": event})


def call_route(server, cookie, endpoint: str, clip_id: int = 1) -> str:
    method, path = endpoint.split(" ", 1)
    if method == "MOUNT":
        path = "/cw-static/app.css" if path == "/cw-static" else "/config"
        method = "GET"
    path = REAL_FILES.get(path, path).replace("{clip_id}", str(clip_id))
    path = path.replace("{session_hash}", uuid.uuid4().hex[:11])  # a session id of the caller's own
    kwargs = {}
    if endpoint == "POST /login":
        kwargs["data"] = {"username": "ann", "password": PASSWORD}
    if endpoint == "PUT /drafts/{clip_id}":
        kwargs["json"] = {"base": None, "text": "S2: a draft written by the role test", "labels": {}}
    if endpoint == "POST /gradio_api/upload":
        kwargs["files"] = {"files": ("s2.txt", b"role test")}
    with httpx.Client(
        base_url=server.url,
        cookies={"cw_session": cookie} if cookie else None,
        follow_redirects=False,
        timeout=30,
        trust_env=False,
    ) as c:
        if cookie and (path in QUEUE or path == "/gradio_api/queue/join"):
            r = _queue_request(c, path)
        else:
            with c.stream(method, concrete(path), **kwargs) as r:  # event streams (heartbeat) never end
                pass
    if r.status_code in (401, 403):
        return "deny"
    if r.status_code == 303 and r.headers.get("location", "").startswith("/login") and endpoint != "POST /logout":
        return "deny"
    assert r.status_code < 400 or r.status_code == 416, (endpoint, r.status_code)
    return "allow"


# the full run calls every endpoint as every role; the quick run every endpoint as one role, the role rotating from
# one endpoint to the next (tests/support/examples.py)
CASES = [
    (row["endpoint"], row["kind"], role, row[role])
    for i, row in enumerate(ROWS)
    for role in quick_share(list(ROLES), share=len(ROLES), offset=i)
]


@pytest.mark.parametrize("endpoint,kind,role,expected", CASES, ids=[f"{e}-{r}" for e, _, r, _ in CASES])
def test_endpoint_role_matches_the_table(
    server,
    cookies,
    deps,
    job_id,
    web_settings,
    endpoint,
    kind,
    role,
    expected,
):
    if kind == "gradio":
        got = call_event(server, deps, cookies[role], endpoint, job_id)
    else:
        clip_id = 1
        if endpoint.startswith("GET /preview/"):  # only an HEVC clip with a preview has one to serve
            db = dbmod.connect(web_settings.db)
            clip_id = next(db.query("SELECT id FROM clips WHERE preview IS NOT NULL"))["id"]
            db.close()
        cookie = cookies[role]
        if endpoint == "POST /logout" and cookie:  # logout ends the session server side: not the shared one
            cookie = _cookie(server, {"annotator": "ann", "lead": "lead", "admin": "admin"}[role])
        got = call_route(server, cookie, endpoint, clip_id)
    assert got == expected, f"{endpoint} as {role}: {got}, table says {expected}"


def test_table_lists_every_endpoint(server, deps):
    """Every Gradio event and every route of the app and of the Gradio app it mounts is in the table, and the
    table lists nothing else."""
    own, gradio_routes = app_routes(server.app)
    listed = {r["endpoint"] for r in ROWS}
    events = {"/" + name for name in deps}
    want = events | own | gradio_routes
    assert want - listed == set(), f"endpoints missing from docs/roles.csv: {sorted(want - listed)}"
    assert listed - want == set(), f"docs/roles.csv lists endpoints that do not exist: {sorted(listed - want)}"


def test_only_the_routes_the_page_uses_are_open(server):
    """Issue 27: of Gradio's routes, an annotator reaches only those the page uses (the page, its assets and
    config, the queue); `call/` was still open before. Each closed one answers 403 (or 404) before any work."""
    _, gradio_routes = app_routes(server.app)
    table = {r["endpoint"]: r for r in ROWS}
    open_ = {e for e in gradio_routes if table[e]["annotator"] == "allow"} - {"POST /login", "GET /logout"}
    assert open_ == set(
        [
            "GET /",
            "GET /assets/{path:path}",
            "GET /config",
            "GET /config/",
            "GET /favicon.ico",
            "GET /gradio_api/heartbeat/{session_hash}",
            "GET /gradio_api/queue/data",
            "GET /static/{path:path}",
            "GET /theme.css",
            "POST /gradio_api/cancel",
            "POST /gradio_api/queue/join",
            "POST /gradio_api/reset",
            "POST /gradio_api/reset/",
        ]
    )  # Gradio's own POST /login and GET /logout are behind the app's routes of the same name
    cookie = server.client("ann").cookies["cw_session"]
    with httpx.Client(base_url=server.url, cookies={"cw_session": cookie}, timeout=30, trust_env=False) as c:
        for endpoint in sorted(gradio_routes - open_ - {"POST /login", "GET /logout"}):
            method, path = endpoint.split(" ", 1)
            r = c.request(method, concrete(path), json={"data": [], "session_hash": "abc"})
            assert r.status_code in (403, 404), (endpoint, r.status_code, r.text[:200])


def test_lead_only_actions_write_nothing_for_an_annotator(server, cookies, deps, web_settings):
    db = dbmod.connect(web_settings.db)
    try:

        def counts():
            return (
                len(job_queries.list_jobs(db, 1000)),
                db.execute("SELECT COUNT(*) FROM events").fetchone()[0],
                db.execute("SELECT COUNT(*) FROM releases").fetchone()[0],
                db.execute("SELECT COUNT(*) FROM quality_targets").fetchone()[0],
            )

        before = counts()
        lead_only = (
            "/start_job",
            "/job_cancel",
            "/job_pause",
            "/job_retry",
            "/release_set",
            "/quality_target",
            "/quality_draw_more",
        )
        for endpoint in lead_only:
            assert call_event(server, deps, cookies["annotator"], endpoint, 1) == "deny"
        assert call_route(server, cookies["annotator"], "GET /export") == "deny"
        after = counts()
        assert after == before
    finally:
        db.close()


def test_annotator_sees_no_job_table(server, cookies, deps, job_id):
    s = GradioSession(server.url, cookies["annotator"], deps)
    try:
        out = s.call("jobs_refresh", [job_id])
    finally:
        s.close()
    assert "S2 target job" not in str(out) and "Jobs are run by leads" in str(out)


def test_roles_are_ordered():
    assert users.at_least("admin", "lead") and users.at_least("lead", "lead")
    assert not users.at_least("annotator", "lead") and not users.at_least(None, "annotator")
