"""Roles hold at the API: every Gradio event is an HTTP endpoint, so the checks live in the handlers.

An annotator calling the start-job or job-control endpoints directly (a raw join of Gradio's queue, as the page
makes; the REST `call/` route is closed since issue 27) is refused and nothing is written; export answers 403;
anonymous callers get 401 everywhere.
"""

from __future__ import annotations

import httpx
import pytest

from data import db as dbmod, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from tests.support.reliability_fixtures import GradioSession, dependencies


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


def test_login_rate_limit(server):
    c = httpx.Client(base_url=server.url)
    codes = [c.post("/login", data={"username": "admin", "password": "guess-" + str(i)}).status_code for i in range(7)]
    assert codes[:5] == [401] * 5 and codes[5:] == [429, 429]
    # even the right password is refused while limited
    r = c.post("/login", data={"username": "admin", "password": "correct horse battery"})
    assert r.status_code == 429
