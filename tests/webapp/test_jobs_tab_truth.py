"""The Jobs and Fleet tabs say what is true (issue 18 points 10 and 11): clips/s over the time a job really ran,
messages that go with the state they describe, "cancelled" spelt right, a resume or a retry of a cancelled job
that asks first, a start preview that is counted again and a start that gives the true count, "Retry failed"
that sends only what can succeed and says why the rest stays, a job list that hides re-caption jobs (with a
count) and filters, and a job waiting for the fleet that says why (the Fleet tab: test_fleet_tab_readable.py).

The handlers are called in-process on the app `build_app` makes (login off), over a real SQLite file; the fleet
report is made by the runner's own ReplicaHealth."""

from __future__ import annotations

import re
import time

import pytest

from data import captions, examples, heartbeats, jobs
from data.errors import DataError
from data.job_params import JobParams
from data.jobs import items as job_items, queries as job_queries
from data.jobs.selection import Selection
from serving.errors import Overloaded
from serving.runner.replicas import ReplicaHealth
from tests.support.runner_fixtures import add_clips

PROV = {"model": "m", "latency_ms": 1.0}


@pytest.fixture
def workbench(settings):
    """The app built in-process (login off: the caller is a local admin)."""
    from webapp.app import build_app

    app = build_app(settings.replace(auth="off"))
    yield app.state.workbench
    app.state.ctx.close()


def make_job(db, ids, name="t", created_by="lead") -> int:
    return jobs.create(
        db, name=name, created_by=created_by, selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )


def finish(db, job_id, clip_ids) -> None:
    for c in clip_ids:
        job_items.complete(db, job_id, c, text=f"clip {c}", labels=examples.LABELS, provenance=PROV)


class Clock:
    """`now()` of the data layer, moved by hand."""

    def __init__(self, monkeypatch, t: float = 1_000_000.0):
        self.t = t
        for mod in ("data.jobs.items", "data.jobs.lifecycle", "data.jobs.queries", "data.captions", "data.events"):
            monkeypatch.setattr(f"{mod}.now", lambda: self.t)


def test_clips_per_second_of_a_paused_or_done_job_is_over_the_time_it_ran(db, monkeypatch):
    clock = Clock(monkeypatch)
    ids = add_clips(db, 10)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    clock.t += 2
    finish(db, job_id, ids[:4])  # 4 clips in 2 s of running
    jobs.change_state(db, job_id, "pause", "lead")
    clock.t += 300  # paused for 5 minutes: the job did not run
    p = job_queries.progress(db, job_id)
    assert p["state"] == "paused" and p["run_seconds"] == pytest.approx(2.0)
    assert p["rate"] == pytest.approx(2.0)  # not 0 because nothing finished in the last minute
    jobs.change_state(db, job_id, "resume", "lead")
    clock.t += 100  # queued, waiting for a runner: not running either
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    clock.t += 3
    finish(db, job_id, ids[4:])  # 6 more in 3 s
    clock.t += 30
    p = job_queries.progress(db, job_id)
    assert p["state"] == "done" and p["run_seconds"] == pytest.approx(5.0)
    assert p["rate"] == pytest.approx(2.0)  # 10 clips over 5 s of running, not 10 / 60
    clock.t += 3600
    assert job_queries.progress(db, job_id)["rate"] == pytest.approx(2.0)  # and it does not decay


def test_the_clips_per_second_of_a_running_job_is_that_of_its_current_stretch(db, monkeypatch):
    clock = Clock(monkeypatch)
    ids = add_clips(db, 10)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    clock.t += 10
    finish(db, job_id, ids[:5])
    p = job_queries.progress(db, job_id)
    assert p["state"] == "running" and p["rate"] == pytest.approx(0.5) and p["run_seconds"] == pytest.approx(10.0)


def test_a_refused_state_change_is_spelt_right(db):
    job_id = make_job(db, add_clips(db, 1))
    jobs.change_state(db, job_id, "cancel", "lead")
    with pytest.raises(DataError) as e:
        jobs.change_state(db, job_id, "cancel", "lead")
    assert str(e.value) == f"Job {job_id} is cancelled: it cannot be cancelled."
    with pytest.raises(DataError, match="it cannot be paused"):
        jobs.change_state(db, job_id, "pause", "lead")


def test_a_message_goes_with_the_state_it_describes(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 3)
    job_id = make_job(db, ids)
    out = tab.control.action("pause")(job_id, None, None)
    assert "is now paused" in out[tab.control.msg]
    shown = tab.progress.refresh(job_id, "jobs", "", "", out[tab.control.msg_for], None)
    assert tab.control.msg not in shown  # still paused: the message stays
    out = tab.control.action("resume")(job_id, None, None)
    assert "resumed" in out[tab.control.msg] and "queued" not in out[tab.control.msg]
    msg_for = out[tab.control.msg_for]
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    assert tab.control.msg not in tab.progress.refresh(job_id, "jobs", "", "", msg_for, None)  # running: still true
    finish(db, job_id, ids)
    shown = tab.progress.refresh(job_id, "jobs", "", "", msg_for, None)
    assert shown[tab.control.msg] == "" and shown[tab.control.msg_for] is None  # done: the message is gone


def test_resuming_or_retrying_a_cancelled_job_asks_first_and_says_what_it_sends(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 6)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    finish(db, job_id, ids[:2])
    job_items.fail(db, job_id, ids[2], error="HTTP 400: bad", kind="bad_request", retryable=False, max_attempts=3)
    jobs.change_state(db, job_id, "cancel", "lead")
    out = tab.control.action("resume")(job_id, None, None)
    text = out[tab.control.msg]
    assert "was cancelled" in text and "3 clip(s) not captioned yet are sent" in text and "again" in text
    assert "cw-msg-warn" in text and job_queries.get(db, job_id)["state"] == "cancelled"  # nothing done yet
    # another button in between does not count as the confirmation
    assert "was cancelled" in tab.control.action("retry")(job_id, out[tab.control.confirm], None)[tab.control.msg]
    again = tab.control.action("resume")(job_id, out[tab.control.confirm], None)
    assert job_queries.get(db, job_id)["state"] == "queued" and "runs again" in again[tab.control.msg]
    assert again[tab.control.confirm] is None
    # a done job has nothing to resume: it says so instead of "is now queued"
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    finish(db, job_id, ids[3:])
    out = tab.control.action("resume")(job_id, None, None)
    assert "is done: nothing is left to resume" in out[tab.control.msg] and "1 failed" in out[tab.control.msg]


def test_retry_failed_sends_only_what_can_succeed_and_says_why_the_rest_stays(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 7, probe_errors={0: "moov atom not found", 5: "truncated"})
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
    kinds = {
        ids[0]: ("ingest: moov atom not found", "ingest", False),  # still fails ingest
        ids[1]: ("HTTP 503 (gave up after 3 attempts)", "overloaded", True),  # the fleet's fault
        ids[2]: ("HTTP 500: CreateFormatContext", "decode", False),  # the clip as sent
        ids[3]: ("finish_reason='length'", "truncated", False),  # the answer
        ids[4]: ("HTTP 404: model does not exist", "http_404", False),  # the fleet's configuration
        ids[5]: ("ingest: truncated", "ingest", False),  # ingested again since, and fine: see below
    }
    for clip, (error, kind, retryable) in kinds.items():
        job_items.fail(db, job_id, clip, error=error, kind=kind, retryable=retryable, max_attempts=1)
    db.execute("UPDATE clips SET probe_error = NULL WHERE id = ?", [ids[5]])
    db.execute("UPDATE clips SET missing = 1 WHERE id = ?", [ids[6]])
    job_items.fail(db, job_id, ids[6], error="HTTP 500: No such file", kind="missing", retryable=False, max_attempts=1)
    db.conn.commit()
    out = tab.control.action("retry")(job_id, None, None)
    text = out[tab.control.msg]
    pending = {r[0] for r in db.execute("SELECT clip_id FROM job_items WHERE job_id=? AND state='pending'", [job_id])}
    assert pending == {ids[1], ids[4], ids[5]}
    assert "3 failed clip(s) queued again" in text
    for words in ("1 failed ingest", "1 were refused by the fleet", "1 got an unusable answer", "1 have no file"):
        assert words in text, text
    assert job_queries.get(db, job_id)["failed"] == 4
    # nothing left that a retry can help: it says so and changes nothing
    for c in (ids[1], ids[4], ids[5]):
        job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=3)
        job_items.fail(db, job_id, c, error="decode", kind="decode", retryable=False, max_attempts=3)
    out = tab.control.action("retry")(job_id, None, None)
    assert "no failed clip a retry can help" in out[tab.control.msg]
    assert job_queries.get(db, job_id)["state"] == "failed"  # not one clip captioned: the job failed, not "done"


def test_the_preview_is_counted_again_and_a_start_gives_the_true_count(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    form = tab.form
    add_clips(db, 5)
    shown = form.count_preview("everything uncaptioned", 16, None, {}, None)
    seen = shown[form.preview_seen]
    assert seen["n"] == 5 and 'data-n="5"' in shown[form.preview] and "counted at" in shown[form.preview]
    captions.add_machine(db, 1, job_id=None, text="A car.", labels=examples.LABELS, provenance=PROV)
    assert form.preview_seen not in form.preview_tick("everything uncaptioned", 16, None, {}, seen, None)  # fresh: kept
    stale = {**seen, "at": seen["at"] - 60}
    assert form.preview_tick("everything uncaptioned", 16, None, {}, stale, None)[form.preview_seen]["n"] == 4
    out = form.start("from the test", "everything uncaptioned", None, 16, 320, None, {}, seen, None)
    text = out[tab.control.msg]
    job_id = out[tab.control.job_id]
    assert job_queries.get(db, job_id)["total"] == 4
    assert "over 4 clips" in text and "The preview showed 5" in text, text
    assert out[form.preview_seen]["n"] == 4  # the preview shown after the start is the count of now


def test_the_terminal_and_the_app_select_the_same_clips_ingest_failures_left_out(workbench, settings):
    """`python -m serving.caption --has-caption no` made a job over clips that failed ingest (each could only
    fail), while the app's preview left them out. Every way of selecting "without a caption" now names the same
    clips: the CLI's job, the app's two sources and their previews; `--ingest-failed yes` still asks for them."""
    from serving import caption

    tab, db = workbench.jobs, workbench.ctx.db()
    add_clips(db, 6, probe_errors={1: "not a video", 4: "truncated"})
    ok = [r["id"] for r in db.query("SELECT id FROM clips WHERE probe_error IS NULL ORDER BY id")]
    args = caption.build_parser().parse_args(["--data-dir", str(settings.data_dir), "--has-caption", "no"])
    cli_job = caption.create_job(db, settings, args, fleet=None)
    assert [
        r["clip_id"] for r in db.query("SELECT clip_id FROM job_items WHERE job_id = ? ORDER BY clip_id", [cli_job])
    ] == ok
    for source, fdict in (("everything uncaptioned", {}), ("current filter", {"has_caption": False})):
        shown = tab.form.count_preview(source, 16, None, fdict, None)
        assert shown[tab.form.preview_seen]["n"] == len(ok) == job_queries.get(db, cli_job)["total"], (source, shown)
        assert "ingest ok" in shown[tab.form.preview]
    asked = caption.build_parser().parse_args(
        ["--data-dir", str(settings.data_dir), "--has-caption", "no", "--ingest-failed", "yes"]
    )
    assert job_queries.get(db, caption.create_job(db, settings, asked, fleet=None))["total"] == 2


def test_the_job_list_hides_re_captions_with_a_count_and_filters_by_state_and_creator(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 6)
    for c in ids[:3]:
        jobs.create_recaption(db, c, user="ann", role="annotator", quota=20, prompt_id=None, params=JobParams())
    lead_job = make_job(db, ids[3:], name="lead's job", created_by="lead")
    other = make_job(db, ids[3:], name="another lead's job", created_by="lena")
    jobs.change_state(db, other, "pause", "lena")

    def listed(kind="jobs", state="", by=""):
        out = tab.progress.refresh(lead_job, kind, state, by, None, None)
        return sorted(int(i) for i in out[tab.progress.table]["id"]), out[tab.progress.list_note]

    rows, note = listed()
    assert rows == [lead_job, other]
    assert "3 one-clip re-caption job(s) hidden (3 queued or running)" in note
    assert len(listed("re-captions")[0]) == 3 and len(listed("all")[0]) == 5
    assert listed(state="paused")[0] == [other]
    assert listed(kind="all", by="ann")[0] == sorted(set(listed("re-captions")[0]))
    assert listed(by="lead")[0] == [lead_job]
    assert "lena" in str(tab.progress.list_choices(None)["choices"])
    with pytest.raises(DataError, match="Unknown job state"):
        job_queries.list_jobs(db, state="sideways")


def fleet_down_report(urls: list[str]) -> dict:
    """What the runner reports after every replica answered 503 and /health found none up."""
    health = ReplicaHealth(urls, 4, backoff_base=0.5)
    t = time.monotonic()
    for i, r in enumerate(health.replicas):
        r.start(t)
        health.finished(r, Overloaded("HTTP 503: Service Unavailable", status=503, replica=r.url), t + 0.1, i)
    look = {"at": time.time(), "router": None, "healthy": 0, "looked": 4, "total": 4, "replicas": []}
    health.observe(look, t + 0.2)
    return health.report(t + 0.2)


def test_a_job_waiting_for_the_fleet_says_why_and_a_start_warns(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 3)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 1, lease_seconds=600, max_attempts=3)  # running
    report = fleet_down_report(["http://10.0.0.1:8000", "http://10.0.0.2:8000"])
    assert report["state"] == "down"
    heartbeats.heartbeat(db, "runner", "runner", info={"fleet": report, "jobs": None})
    out = tab.progress.refresh(job_id, "jobs", "", "", None, None)
    detail = out[tab.progress.detail]
    assert 'id="fleet-wait"' in detail
    assert re.search(r"Waiting for the fleet: 0 of 4 healthy \(HTTP 503: Service Unavailable\), for \d+ s\.", detail)
    assert "no clip uses an attempt meanwhile" in detail and "10.0.0.2:8000" in detail
    assert "waiting for the fleet" in str(out[tab.progress.table].loc[0, "state"])
    assert "fleet down: 0 of 4 healthy" in out[tab.progress.runner]
    start = tab.form.start("while down", "everything uncaptioned", None, 16, 320, None, {}, None, None)
    assert "cw-msg-warn" in start[tab.control.msg] and "No replica is healthy (0 of 4 healthy" in start[tab.control.msg]
    assert job_queries.get(db, start[tab.control.job_id])["state"] == "queued"
    # a paused job is not waiting for anything: no notice
    jobs.change_state(db, job_id, "pause", "lead")
    assert "fleet-wait" not in tab.progress.refresh(job_id, "jobs", "", "", None, None)[tab.progress.detail]


def test_the_eta_during_and_after_an_outage_is_true(workbench, monkeypatch):
    """2 clips/s for 2 minutes, the fleet down for 5 minutes, then back. During the outage Jobs says the ETA is
    unknown (not a number the outage makes up); once it is back the ETA is the one the fleet's pace gives.
    Before: the rate of the last minute of wall time decayed to 3 clips / 60 s, and the ETA read 52 minutes for
    a job 78 s from its end."""
    clock = Clock(monkeypatch)
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 400)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 400, lease_seconds=3600, max_attempts=3)
    slow = {**PROV, "latency_ms": 2000.0}  # a request takes 2 s; 4 in flight: one result every 0.5 s
    done = 0

    def results(n):
        nonlocal done
        for c in ids[done : done + n]:
            clock.t += 0.5
            job_items.complete(db, job_id, c, text=f"clip {c}", labels=examples.LABELS, provenance=slow)
        done += n

    results(240)
    assert job_queries.progress(db, job_id)["rate"] == pytest.approx(2.0, rel=0.05)
    clock.t += 300  # the fleet is down
    heartbeats.heartbeat(
        db, "runner", "runner", info={"fleet": fleet_down_report(["http://10.0.0.1:8000"]), "jobs": None}
    )
    out = tab.progress.refresh(job_id, "jobs", "", "", None, None)
    assert "ETA unknown while the fleet is down" in out[tab.progress.detail]
    assert out[tab.progress.table].loc[0, "ETA"] == "unknown while the fleet is down"
    assert job_queries.progress(db, job_id)["rate"] > 1.5  # the pace it had, not decayed by the outage
    heartbeats.heartbeat(db, "runner", "runner", info={"jobs": None})  # back: the runner reports no outage
    results(3)
    p = job_queries.progress(db, job_id)
    true_eta = (400 - 243) / 2.0
    assert true_eta <= p["eta_seconds"] <= 1.25 * true_eta, p["eta_seconds"]
    out = tab.progress.refresh(job_id, "jobs", "", "", None, None)
    shown = out[tab.progress.table].loc[0, "ETA"]
    assert re.fullmatch(r"1m[0-5]\ds", shown), shown  # ~78-98 s
    assert f"ETA {shown}" in out[tab.progress.detail]


def test_a_start_with_no_runner_says_the_job_stays_queued(workbench):
    tab, db = workbench.jobs, workbench.ctx.db()
    add_clips(db, 2)
    out = tab.form.start("no runner", "everything uncaptioned", None, 16, 320, None, {}, None, None)
    assert "cw-msg-warn" in out[tab.control.msg] and "No runner is running" in out[tab.control.msg]
    assert out[tab.control.msg_for] == {"job": out[tab.control.job_id], "states": ["queued", "running"]}


def test_before_any_request_fails_the_notice_names_what_health_found():
    """A fleet found down by /health alone (the runner sent nothing yet) still says why, and for how long."""
    from webapp.jobs import fleet_notice

    health = ReplicaHealth(["http://127.0.0.1:30000"], 4)
    t = time.monotonic()
    replicas = [{"url": f"http://10.0.0.{i}:8000", "healthy": False, "error": "/health answered 503"} for i in (1, 2)]
    health.observe({"at": time.time(), "router": None, "healthy": 0, "looked": 2, "total": 2, "replicas": replicas}, t)
    report = health.report(t)
    assert report["state"] == "down" and report["failing_since"] is None
    notice = fleet_notice.waiting(report)
    assert "Waiting for the fleet: 0 of 2 healthy (/health answered 503), for 0 s." in notice, notice


def test_a_job_where_nothing_succeeded_reads_failed_not_done(workbench):
    """Issue 45: a job whose every clip failed read "done · 100% · done 0 · failed 12"."""
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 4)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 10, lease_seconds=600, max_attempts=1)
    for c in ids:
        job_items.fail(db, job_id, c, error="HTTP 500: engine failure", kind="replica", retryable=True, max_attempts=1)
    out = tab.progress.refresh(job_id, "jobs", "", "", None, None)
    detail = out[tab.progress.detail]
    assert 'data-state="failed"' in detail and "<b>failed</b>" in detail, detail
    assert "100%" not in detail and "not one of its 4 clips captioned" in detail
    assert out[tab.progress.table].loc[0, "state"] == "failed"
    assert list(out[tab.progress.failures]["kind"]) == ["replica"] * 4
    from webapp.jobs.progress import STATE_CHOICES

    assert ("failed", "failed") in STATE_CHOICES
    assert [
        int(i) for i in tab.progress.refresh(job_id, "jobs", "failed", "", None, None)[tab.progress.table]["id"]
    ] == [job_id]
    # a resume says there is nothing to resume (Retry failed is what sends them again)
    assert "is failed: nothing is left to resume" in tab.control.action("resume")(job_id, None, None)[tab.control.msg]


def test_the_eta_follows_a_recovery_at_the_fleets_new_pace(workbench, monkeypatch):
    """2 clips/s, then the fleet fails every request for a minute (clips fail as their attempts run out), then it
    is fixed and answers 5 clips/s. Ten seconds after the runner saw the first answer, the ETA is the one 5
    clips/s gives, not one made of the failing minute (a mixed rate read ~4 times too long)."""
    clock = Clock(monkeypatch)
    tab, db = workbench.jobs, workbench.ctx.db()
    ids = add_clips(db, 400)
    job_id = make_job(db, ids)
    job_items.claim(db, job_id, "r", 400, lease_seconds=3600, max_attempts=1)
    prov = {**PROV, "latency_ms": 500.0}
    k = 0
    for _ in range(120):  # 2 clips/s for a minute
        clock.t += 0.5
        job_items.complete(db, job_id, ids[k], text="t", labels=examples.LABELS, provenance=prov)
        k += 1
    for _ in range(30):  # a minute of a fleet failing every request: one clip gives up every 2 s
        clock.t += 2.0
        job_items.fail(db, job_id, ids[k], error="HTTP 500: x", kind="replica", retryable=True, max_attempts=1)
        k += 1
    recovered = clock.t + 0.2
    for _ in range(50):  # fixed: 5 clips/s for 10 s
        clock.t += 0.2
        job_items.complete(db, job_id, ids[k], text="t", labels=examples.LABELS, provenance=prov)
        k += 1
    report = {"state": "up", "recovered_at": recovered, "replicas": [], "total": 1, "look": None}
    heartbeats.heartbeat(db, "runner", "runner", info={"fleet": report, "jobs": None})
    out = tab.progress.refresh(job_id, "jobs", "", "", None, None)
    true_eta = (400 - k) / 5.0  # 40 s
    shown = out[tab.progress.table].loc[0, "ETA"]
    minutes, seconds = re.fullmatch(r"(\d+)m(\d\d)s", shown).groups()
    assert true_eta * 0.8 <= int(minutes) * 60 + int(seconds) <= true_eta * 1.25, shown
    assert f"ETA {shown}" in out[tab.progress.detail]


def test_job_form_shows_what_the_job_will_cost_on_a_gpu_fleet(settings, tmp_path, monkeypatch):
    """The start form's preview names the wall time and GPU-hours on this fleet from the recorded GPU runs
    (serving.cost); a simulated fleet gets none (its speed says nothing about GPUs). The committed table with a
    point left unmeasured and one failed (tests/support/work_table.py), whatever today's table holds."""
    from serving import cost, cost_records
    from serving.launch import record as fleet_record
    from tests.support.work_table import table_with_gaps
    from webapp.context import AppContext
    from webapp.jobs import start as jobs_start
    from webapp.jobs.tab import JobsTab

    monkeypatch.setattr(cost_records, "WORK_TABLE", table_with_gaps(tmp_path))
    jobs_start._measurements.cache_clear()  # read once per process: this test's table, then the real one again
    monkeypatch.setattr(jobs_start, "_measurements", jobs_start._measurements.__wrapped__)

    urls = [f"http://10.9.9.{i}:8000" for i in range(8)]  # a list of replicas: counted, not asked
    form = JobsTab(AppContext(settings.replace(fleet_urls=tuple(urls)), fleet_urls=urls, simulated=False)).form
    html = form._cost_html(1_000_000)
    assert "on 8 GPU(s)" in html and "GPU-hours" in html and "measured" in html and " h " in html
    assert "at 16 frames, 9,437,184 pixels" in html and "efficiency measured at 2 GPUs" in html  # the defaults
    # the lead's choice of work per clip: a measured point gets its figure, one nobody measured says so, a
    # value the job would refuse says why
    assert form._cost_html(1_000_000, {"frames": "16", "max_pixels": 9_437_184}) == html
    none = form._cost_html(100_000, {"frames": 8, "max_pixels": "4718592"})
    assert "No cost estimate for 8 frames at 4,718,592 pixels" in none and "not yet measured" in none
    # a point whose clips failed on the GPU: no figure, and the lead reads why and what to choose instead
    failed = form._cost_html(100_000, {"frames": 32, "max_pixels": "9437184"})
    assert "No cost estimate for 32 frames at 9,437,184 pixels in bf16: it failed on the GPU" in failed
    assert "ran out of GPU memory" in failed and "fewer frames or pixels per clip" in failed
    assert "GPU-hours" not in none
    assert "Frames must be 1-128" in form._cost_html(100_000, {"frames": 500, "max_pixels": None})
    assert "Pixels per clip must be" in form._cost_html(100_000, {"frames": 16, "max_pixels": "99999999"})
    sim = JobsTab(AppContext(settings.replace(fleet_mode="sim"), fleet_urls=[], simulated=True)).form
    assert sim._cost_html(100_000) == ""
    # priced as this fleet's runner runs: the default 48 in flight gets a run at 48, never the GPU test at 96
    at48 = cost.estimate(8, 16, "bf16", cost_records.default_measurements())
    at96 = cost.estimate(8, 16, "bf16", cost_records.default_measurements(), in_flight=96)
    assert at48.per_replica < at96.per_replica
    assert f"({at48.clips_per_s:.1f} clips/s" in html
    deep = settings.replace(fleet_urls=tuple(urls), per_replica_inflight=96)
    html96 = JobsTab(AppContext(deep, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert f"({at96.clips_per_s:.1f} clips/s" in html96 and html96 != html
    # a window nobody measured: the best run's figure, and the lead reads that it was taken otherwise
    odd = settings.replace(fleet_urls=tuple(urls), per_replica_inflight=64)
    html64 = JobsTab(AppContext(odd, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert "this fleet runs 64 in flight per replica sent at once: its rate may differ" in html64
    # priced in what the replicas compute in, as the launcher of this data dir recorded it; with no record that
    # describes this fleet, the lead reads that bf16 was assumed
    assert jobs_start.ASSUMED_PRECISION in html and "pixels, bf16 (" in html
    at_fp8 = cost.estimate(8, 16, "fp8", cost_records.default_measurements())
    assert at_fp8.clips_per_s and at_fp8.clips_per_s != at48.clips_per_s
    s8 = settings.replace(fleet_urls=tuple(urls))
    fleet_record.save_record(s8, {"precision": "fp8", "router_url": None, "replica_urls": urls, "procs": []})
    fp8 = JobsTab(AppContext(s8, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert "pixels, fp8 (" in fp8 and f"({at_fp8.clips_per_s:.1f} clips/s" in fp8
    assert jobs_start.ASSUMED_PRECISION not in fp8
    other = [f"http://10.9.8.{i}:8000" for i in range(8)]  # the record is of another fleet than the app watches
    theirs = JobsTab(AppContext(s8.replace(fleet_urls=tuple(other)), fleet_urls=other, simulated=False)).form
    assert jobs_start.ASSUMED_PRECISION in theirs._cost_html(1_000_000)
    # priced on the GPU model the launcher recorded for each replica, never another model's rate (issue 48)
    assert jobs_start.ASSUMED_GPU in html
    ms = cost_records.default_measurements()
    for model in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        gpus = [{"url": u, "index": i, "name": model, "memory_mib": 1} for i, u in enumerate(urls)]
        fleet_record.save_record(s8, {"precision": "bf16", "replica_urls": urls, "procs": [], "gpus": gpus})
        on = JobsTab(AppContext(s8, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
        want = cost.estimate(8, 16, "bf16", ms, gpu=model)
        assert f"on 8 x {model} at 16 frames" in on and f"({want.clips_per_s:.1f} clips/s" in on
        assert f"measured on {model}" in on and jobs_start.ASSUMED_GPU not in on
    gpus = [{"url": u, "index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 1} for i, u in enumerate(urls)]
    fleet_record.save_record(s8, {"precision": "bf16", "replica_urls": urls, "procs": [], "gpus": gpus})
    a100 = JobsTab(AppContext(s8, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert "No cost estimate for 16 frames" in a100 and "on NVIDIA A100-SXM4-80GB" in a100
    assert "measured on other GPUs only" in a100 and "GPU-hours" not in a100
