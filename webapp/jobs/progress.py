"""The Jobs tab's progress: the runner's line, the job list, and the job shown with its notices.

The app never asks the fleet how a job goes: a gr.Timer polls SQLite every 2 s (the runner's heartbeat and the
jobs' rows), only while the Jobs tab is shown (app.py turns it on and off). Annotators get the runner's line only.
A click on a job row shows that job; the detail stays on it until another is chosen. The list hides annotators'
one-clip re-caption jobs by default (with a count) and filters by state and creator. While a job's runner finds
every replica failing, the job says why (webapp.jobs.fleet_notice, from the runner's heartbeat). A message about a job's
state (webapp.jobs.control) goes here when that state does.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from data import heartbeats
from data.errors import DataError, NotFound
from data.jobs import queries as job_queries
from webapp import render
from webapp.context import AppContext
from webapp.jobs import fleet_notice, render as render_jobs
from webapp.jobs.control import JobControl
from webapp.number_box import whole

RUNNER_STALE_S = fleet_notice.RUNNER_STALE_S
JOB_COLUMNS = ["id", "name", "state", "by", "total", "done", "failed", "pending", "clips/s", "ETA"]
SHOW_CHOICES = [("jobs (re-captions hidden)", "jobs"), ("re-captions only", "re-captions"), ("all", "all")]
STATE_CHOICES = [("any state", "")] + [(s, s) for s in job_queries.JOB_STATES]
ANYONE = [("anyone", "")]


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def runner_line(beats: list[dict], settings) -> str:
    fresh = [b for b in beats if b["age_s"] < RUNNER_STALE_S]
    if fresh:
        b = fresh[0]
        report = fleet_notice.report_for(fresh)
        fleet = fleet_notice.summary(report)
        return render_jobs.runner_alive(b["name"], b.get("pid"), b["age_s"], fleet, _fleet_bad(report))
    urls = f" --fleet-urls {','.join(settings.fleet_urls)}" if settings.fleet_urls else ""
    cmd = f"python -m serving.runner --db {settings.db}{urls}"
    return render_jobs.runner_missing(cmd, beats[0]["age_s"] if beats else None)


def _outlived(db, msg_for) -> bool:
    """The message `msg_for` describes ({"job", "states"}) is over: its job has left those states."""
    if not isinstance(msg_for, dict) or msg_for.get("job") is None:
        return False
    try:
        job_id = int(msg_for["job"])
    except (TypeError, ValueError):
        return True
    return job_queries.states(db, [job_id]).get(job_id) not in (msg_for.get("states") or [])


def _fleet_bad(report: dict | None) -> bool:
    return bool(report) and report.get("state") in ("down", "failing")


# while the runner finds the fleet down (or failing every request) no rate says when the job ends
ETA_UNKNOWN = {"down": "unknown while the fleet is down", "failing": "unknown while the fleet fails every request"}


def _rate_since(report: dict | None) -> float | None:
    """When the fleet of a job's runner came back after failing every request (or being down), if it did: the
    job's clips/s counts from then, so that its ETA is the fleet's pace now, not one made of the failures."""
    at = (report or {}).get("recovered_at")
    return float(at) if isinstance(at, (int, float)) else None


def _eta_text(p: dict, report: dict | None) -> str:
    """The ETA of job progress `p` (data.jobs.queries.progress) as the Jobs tab shows it."""
    if p["state"] == "running" and _fleet_bad(report):
        return ETA_UNKNOWN[report["state"]]
    return _eta(p["eta_seconds"])


class JobProgress:
    def __init__(self, ctx: AppContext, shown: JobControl):
        self.ctx = ctx
        self.shown = shown  # the job shown, and the message about it

    def render_runner(self) -> None:
        self.runner = gr.HTML("", elem_id="runner-line")

    def render(self) -> None:
        self.detail = gr.HTML("", elem_id="job-detail")
        self.plot = gr.HTML("", elem_id="job-plot")
        # the list goes below the job shown, never above its buttons: it grows as jobs are added and is redrawn
        # on every tick, and a button that moves while the pointer is on its way takes a click meant for it
        with gr.Row():
            self.list_kind = gr.Radio(SHOW_CHOICES, value="jobs", label="Show", elem_id="jobs-show")
            self.list_state = gr.Dropdown(STATE_CHOICES, value="", label="State", elem_id="jobs-state")
            self.list_by = gr.Dropdown(ANYONE, value="", label="Started by", elem_id="jobs-by")
        self.list_note = gr.HTML("", elem_id="jobs-list-note")
        self.table = gr.Dataframe(
            headers=JOB_COLUMNS, interactive=False, elem_id="jobs-table", label="Jobs (click a row to see it above)"
        )
        with gr.Row():
            self.failures = gr.Dataframe(
                headers=["clip", "path", "attempts", "kind", "error"],
                interactive=False,
                label="Failures",
                elem_id="job-failures",
            )
            self.replicas = gr.Dataframe(
                headers=["replica", "done", "mean latency ms"],
                interactive=False,
                label="Per-replica load (this job)",
                elem_id="job-replicas",
            )

    @property
    def refresh_inputs(self) -> list:
        return [self.shown.job_id, self.list_kind, self.list_state, self.list_by, self.shown.msg_for]

    @property
    def refresh_outputs(self) -> list:
        return [
            self.runner,
            self.shown.msg,
            self.shown.msg_for,
            self.list_note,
            self.table,
            self.detail,
            self.plot,
            self.failures,
            self.replicas,
            self.shown.job_id,
        ]

    def refresh(self, job_id, kind, state, by, msg_for, request: gr.Request):
        """The runner's line, the job list (filtered), and the job shown; a message about a state that is over
        goes."""
        user = self.ctx.user(request)
        db = self.ctx.db()
        try:  # refreshed every few seconds: a half-typed id is no error, it shows nothing yet
            job_id = whole(job_id, "The job shown")
        except DataError:
            job_id = None
        beats = heartbeats.heartbeats(db, "runner")
        out = {self.runner: runner_line(beats, self.ctx.settings)}
        if not user.can("lead"):
            out[self.shown.msg] = render.message("Jobs are run by leads. Ask a lead to start one.", "info")
            return out
        if _outlived(db, msg_for):
            out[self.shown.msg], out[self.shown.msg_for] = "", None
        kind = kind if kind in job_queries.KINDS else "jobs"
        rows, focus = [], None
        for j in job_queries.list_jobs(db, kind=kind, state=state or None, created_by=by or None):
            report = fleet_notice.report_for(beats, j["id"], j.get("fleet"))
            # a row shows no series: only the job shown reads it (at 1,000,000 items most of what progress reads)
            shown = bool(job_id) and int(job_id) == j["id"]
            p = job_queries.progress(db, j["id"], series=shown, rate_since=_rate_since(report))
            waiting = j["state"] == "running" and _fleet_bad(report)
            rows.append(
                [
                    j["id"],
                    j["name"],
                    j["state"] + (" · waiting for the fleet" if waiting else ""),
                    j["created_by"],
                    j["total"],
                    p["counts"]["done"],
                    p["counts"]["failed"],
                    p["remaining"],
                    round(p["rate"], 2),
                    _eta_text(p, report),
                ]
            )
            if job_id and int(job_id) == j["id"]:
                focus = p
        out[self.table] = pd.DataFrame(rows, columns=JOB_COLUMNS)
        out[self.list_note] = self._list_note(db, kind, state, by)
        if focus is None and job_id:
            try:  # the job shown stays shown even when the list's filter leaves it out
                focus = self._progress(db, beats, int(job_id))
            except NotFound:
                focus = None
        if focus is None and rows and not job_id:
            # nothing chosen yet: show the newest, and keep showing it (job_id is set), so the panel does not
            # jump when a newer job appears
            focus = self._progress(db, beats, rows[0][0])
            out[self.shown.job_id] = rows[0][0]
        if focus is not None:
            c = focus["counts"]
            pct = 100.0 * (c["done"] + c["failed"]) / max(1, focus["total"])
            notice = ""
            if focus["state"] in job_queries.ACTIVE:
                notice = fleet_notice.no_runner(beats, focus, self.ctx.settings) or fleet_notice.waiting(
                    fleet_notice.report_for(beats, focus["id"], focus.get("fleet")),
                    max_attempts=self.ctx.settings.max_attempts,
                )
            eta = _eta_text(focus, fleet_notice.report_for(beats, focus["id"]))
            ran = _eta(focus["run_seconds"]) or "0m00s"
            out[self.detail] = render_jobs.job_detail(focus, pct, eta, ran) + notice
            out[self.plot] = render_jobs.throughput(focus["series"] or [])
            out[self.failures] = pd.DataFrame(
                [
                    [f["clip_id"], f["path"], f["attempts"], f["error_kind"], f["last_error"]]
                    for f in job_queries.failures(db, focus["id"], limit=50)
                ],
                columns=["clip", "path", "attempts", "kind", "error"],
            )
            out[self.replicas] = pd.DataFrame(
                [
                    [r["replica"], r["done"], round(r["mean_latency_ms"] or 0)]
                    for r in job_queries.replica_load(db, focus["id"])
                ],
                columns=["replica", "done", "mean latency ms"],
            )
        return out

    @staticmethod
    def _progress(db, beats: list[dict], job_id: int) -> dict:
        job = job_queries.get(db, job_id)
        report = fleet_notice.report_for(beats, job_id, job.get("fleet"))
        return job_queries.progress(db, job_id, rate_since=_rate_since(report))

    def _list_note(self, db, kind: str, state, by) -> str:
        """What the list's filter leaves out, so that nothing is hidden without a word."""
        if kind != "jobs":
            return ""
        hidden = job_queries.count_jobs(db, kind="re-captions", state=state or None, created_by=by or None)
        n = sum(hidden.values())
        if not n:
            return ""
        active = sum(v for k, v in hidden.items() if k in job_queries.ACTIVE)
        return render_jobs.jobs_hidden(n, active)

    def list_choices(self, request: gr.Request):
        """The creators the "Started by" filter offers (read when the tab is shown)."""
        if not self.ctx.user(request).can("lead"):
            return gr.skip()
        return gr.update(choices=ANYONE + [(n, n) for n in job_queries.creators(self.ctx.db())])

    def select_row(self, evt: gr.SelectData, request: gr.Request):
        """A click anywhere on a job row shows that job."""
        self.ctx.require(request, "lead")
        row = getattr(evt, "row_value", None)
        if not row:
            return gr.skip()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            return gr.skip()
