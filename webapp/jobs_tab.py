"""Jobs tab (leads): start a captioning job, watch it, pause/resume/cancel it, retry its failures.

The app never captions anything itself: starting a job writes rows (data.jobs.create) and the runner
process (serving.runner) does the work. A gr.Timer polls SQLite every 2 s for progress, only while the Jobs
tab is shown (app.py turns it on and off). Every handler that changes something checks the lead role itself:
each Gradio event is an HTTP endpoint anyone can call, so parameters are checked here too (data.job_params),
not only by the form. A click on a job row shows that job; the detail stays on it until another is chosen.
The job shown and its buttons sit above the list, so that the list growing or being redrawn never moves them.

Messages say what is true now: one about a job's state goes when that state does (`msg_for`); a resume or a
retry that would restart a cancelled job asks first, saying what it will send. The list hides annotators'
one-clip re-caption jobs by default (with a count) and filters by state and creator. While a job's runner finds
every replica failing, the job says why (webapp.fleet_notice, from the runner's heartbeat).
"""

from __future__ import annotations

import functools
import time

import gradio as gr
import pandas as pd

from data import clips, events, heartbeats, jobs, prompts
from data.errors import DataError, NotFound
from data.job_params import MAX_FRAMES, MAX_MAX_TOKENS, MIN_FRAMES, MIN_MAX_TOKENS, RECIPE_MAX_PIXELS, JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from serving import cost
from webapp import fleet_notice, render
from webapp.context import AppContext, shows_errors
from webapp.number_box import number_box, whole
from webapp.prompt_panel import PromptPanel

RUNNER_STALE_S = fleet_notice.RUNNER_STALE_S
JOB_COLUMNS = ["id", "name", "state", "by", "total", "done", "failed", "pending", "clips/s", "ETA"]
# the work-per-clip sweep's pixel budgets (docs/work-per-clip.json); any other value may be typed in
PIXEL_CHOICES = [
    (f"{RECIPE_MAX_PIXELS:,} (recipe)", RECIPE_MAX_PIXELS),  # 16 frames of 1024x576
    (f"{RECIPE_MAX_PIXELS // 2:,} (half)", RECIPE_MAX_PIXELS // 2),
    (f"{RECIPE_MAX_PIXELS // 4:,} (quarter)", RECIPE_MAX_PIXELS // 4),
]
CONFIRM_S = 60.0  # a second press of Resume / Retry failed within this long goes ahead
PREVIEW_EVERY_S = 10.0  # the start preview is counted again at least this often while the tab is shown
SHOW_CHOICES = [("jobs (re-captions hidden)", "jobs"), ("re-captions only", "re-captions"), ("all", "all")]
STATE_CHOICES = [("any state", "")] + [(s, s) for s in job_queries.JOB_STATES]
ANYONE = [("anyone", "")]
# why retry_failed left a failed clip failed (data.jobs.FINAL_KINDS), as a lead reads it
WHY_LEFT = {
    "ingest": "failed ingest (the model cannot read them either: fix or replace the files and ingest again)",
    "missing": "have no file in the clip root",
    "clip": "were refused by the fleet as sent (HTTP 400/422, undecodable video: the same request fails again)",
    "answer": (
        "got an unusable answer (the same prompt and limits give the same answer: start a job with more max "
        "tokens or another prompt version)"
    ),
}


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
        bad = _fleet_bad(report)
        return (
            f'<div class="cw-runner cw-ok" id="runner-status">Runner alive: {render.esc(b["name"])} '
            f"(pid {render.esc(b.get('pid'))}, heartbeat {b['age_s']:.0f} s ago)"
            + (
                f' · <span class="cw-fleet-state{" cw-fleet-bad" if bad else ""}" id="fleet-state">'
                f"{render.esc(fleet)}</span>"
                if fleet
                else ""
            )
            + "</div>"
        )
    urls = f" --fleet-urls {','.join(settings.fleet_urls)}" if settings.fleet_urls else ""
    cmd = f"python -m serving.runner --db {settings.db}{urls}"
    last = f" (last heartbeat {beats[0]['age_s']:.0f} s ago)" if beats else ""
    return (
        f'<div class="cw-runner cw-stale" id="runner-status">Runner not running{last}: jobs stay queued. '
        f"Start it with <code>{render.esc(cmd)}</code> (launch.sh does this).</div>"
    )


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


def _eta_text(p: dict, report: dict | None) -> str:
    """The ETA of job progress `p` (data.jobs.queries.progress) as the Jobs tab shows it."""
    if p["state"] == "running" and _fleet_bad(report):
        return ETA_UNKNOWN[report["state"]]
    return _eta(p["eta_seconds"])


TEAM_COLUMNS = ["annotator", "edits", "approved", "rejected", "broken", "clips", "approval rate", "last active"]


class JobsTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        self.runner = gr.HTML("", elem_id="runner-line")
        with gr.Accordion("Start a job", open=True):
            with gr.Row():
                self.name = gr.Textbox(label="Job name", placeholder="e.g. night clips, prompt v2", elem_id="job-name")
                self.source = gr.Radio(
                    ["current filter", "everything uncaptioned"],
                    value="everything uncaptioned",
                    label="Clips",
                    elem_id="job-source",
                )
                self.prompt = gr.Dropdown([], label="Prompt version", elem_id="job-prompt")
                # no minimum/maximum on the Numbers: Gradio would refuse out-of-range values with its own
                # terse message before our handler; data.job_params says why and what to use instead
                self.frames = gr.Number(
                    self.ctx.settings.frames,
                    label=f"Frames ({MIN_FRAMES}-{MAX_FRAMES})",
                    precision=0,
                    elem_id="job-frames",
                )
                self.max_tokens = gr.Number(
                    self.ctx.settings.max_tokens,
                    label=f"Max tokens ({MIN_MAX_TOKENS}-{MAX_MAX_TOKENS})",
                    precision=0,
                    elem_id="job-max-tokens",
                )
                # all frames of a clip share this budget: more frames are smaller frames (docs/BENCHMARKS.md)
                self.max_pixels = gr.Dropdown(
                    PIXEL_CHOICES,
                    value=JobParams.resolve(self.ctx.settings).max_pixels,
                    label="Pixels per clip (all frames)",
                    allow_custom_value=True,
                    elem_id="job-max-pixels",
                )
            self.preview = gr.HTML("", elem_id="job-preview")
            self.preview_seen = gr.State(None)  # {"n": clips the preview showed, "at": when it counted them}
            self.start_btn = gr.Button("Start job", variant="primary", elem_id="btn-start-job")
        self.prompts = PromptPanel(self.ctx)  # leads only: shown on first paint (webapp/app.py)
        self.prompts.render()
        with gr.Row():
            self.job_id = number_box("Job shown", empty="the newest", elem_id="job-id")
            self.pause_btn = gr.Button("Pause", elem_id="btn-pause", size="sm")
            self.resume_btn = gr.Button("Resume", elem_id="btn-resume", size="sm")
            self.cancel_btn = gr.Button("Cancel", elem_id="btn-cancel", size="sm", variant="stop")
            self.retry_btn = gr.Button("Retry failed", elem_id="btn-retry", size="sm")
        self.msg = gr.HTML("", elem_id="jobs-msg")  # below the buttons: a message appearing does not move them
        self.msg_for = gr.State(None)  # {"job", "states"}: the message goes when that job leaves those states
        self.confirm = gr.State(None)  # {"job", "verb", "at"}: the press a second one confirms
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
        with gr.Accordion("Team: annotators' work", open=False, elem_id="team-accordion"):
            with gr.Row():
                self.team_window = gr.Radio(
                    ["last 24 h", "last 7 days", "all time"], value="last 24 h", label="Window", elem_id="team-window"
                )
                self.team_btn = gr.Button("Refresh", elem_id="btn-team-refresh", size="sm")
            self.team = gr.Dataframe(
                headers=TEAM_COLUMNS,
                interactive=False,
                elem_id="team-table",
                label="Edits saved, clips approved, rejected and flagged broken, approval rate (approved of decided)",
            )
        self.timer = gr.Timer(2.0, active=False)  # on only while this tab is shown (app.py)
        # the preview is counted again on a slower timer of its own: a second listener on the 2 s tick would
        # double the events the page sends, and a click would queue behind them
        self.preview_timer = gr.Timer(PREVIEW_EVERY_S, active=False)
        self.timers = [self.timer, self.preview_timer]

    def team_stats(self, window: str, request: gr.Request):
        """Per annotator counts and approval rate from the audit trail (leads only)."""
        self._lead(request)
        since = {"last 24 h": time.time() - 86400, "last 7 days": time.time() - 7 * 86400}.get(window, 0.0)
        rows = events.team_stats(self.ctx.db(), since=since)
        return pd.DataFrame(
            [
                [
                    r["actor"],
                    r["edits"],
                    r["approved"],
                    r["rejected"],
                    r["broken"],  # flagged videos: apart from rejections, outside the approval rate
                    r["clips"],
                    "" if r["approval_rate"] is None else f"{r['approval_rate']:.0%}",
                    render.when(r["last_at"]),
                ]
                for r in rows
            ],
            columns=TEAM_COLUMNS,
        )

    def _lead(self, request: gr.Request):
        return self.ctx.require(request, "lead")

    @property
    def refresh_inputs(self) -> list:
        return [self.job_id, self.list_kind, self.list_state, self.list_by, self.msg_for]

    @property
    def refresh_outputs(self) -> list:
        return [
            self.runner,
            self.msg,
            self.msg_for,
            self.list_note,
            self.table,
            self.detail,
            self.plot,
            self.failures,
            self.replicas,
            self.job_id,
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
            out[self.msg] = render.message("Jobs are run by leads. Ask a lead to start one.", "info")
            return out
        if _outlived(db, msg_for):
            out[self.msg], out[self.msg_for] = "", None
        kind = kind if kind in job_queries.KINDS else "jobs"
        rows, focus = [], None
        for j in job_queries.list_jobs(db, kind=kind, state=state or None, created_by=by or None):
            p = job_queries.progress(db, j["id"])
            report = fleet_notice.report_for(beats, j["id"], j.get("fleet"))
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
                focus = job_queries.progress(db, int(job_id))
            except NotFound:
                focus = None
        if focus is None and rows and not job_id:
            # nothing chosen yet: show the newest, and keep showing it (job_id is set), so the panel does not
            # jump when a newer job appears
            focus = job_queries.progress(db, rows[0][0])
            out[self.job_id] = rows[0][0]
        if focus is not None:
            c = focus["counts"]
            pct = 100.0 * (c["done"] + c["failed"]) / max(1, focus["total"])
            notice = ""
            if focus["state"] in job_queries.ACTIVE:
                notice = fleet_notice.no_runner(beats, focus, self.ctx.settings) or fleet_notice.waiting(
                    fleet_notice.report_for(beats, focus["id"], focus.get("fleet")),
                    max_attempts=self.ctx.settings.max_attempts,
                )
            out[self.detail] = (
                f'<div class="cw-job-detail" id="job-progress" data-job="{int(focus["id"])}" data-pct="{pct:.0f}" '
                f'data-state="{render.esc(focus["state"])}">'
                f"Job {int(focus['id'])} “{render.esc(focus['name'])}”: <b>{render.esc(focus['state'])}</b>"
                f" · {pct:.0f}% · done {c['done']} · failed {c['failed']} · pending {c['pending']}"
                f" · in flight {c['leased']} · {focus['rate']:.2f} clips/s"
                + (f" · ETA {eta}" if (eta := _eta_text(focus, fleet_notice.report_for(beats, focus["id"]))) else "")
                + f" · ran {_eta(focus['run_seconds']) or '0m00s'}"
                + f'<div class="cw-bar"><div style="width:{pct:.1f}%"></div></div></div>'
                + notice
            )
            out[self.plot] = render.throughput(focus["series"] or [])
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

    def _list_note(self, db, kind: str, state, by) -> str:
        """What the list's filter leaves out, so that nothing is hidden without a word."""
        if kind != "jobs":
            return ""
        hidden = job_queries.count_jobs(db, kind="re-captions", state=state or None, created_by=by or None)
        n = sum(hidden.values())
        if not n:
            return ""
        active = sum(v for k, v in hidden.items() if k in job_queries.ACTIVE)
        return (
            f'<div class="cw-counts" id="jobs-hidden" data-n="{n}">{n:,} one-clip re-caption job(s) hidden'
            + (f" ({active:,} queued or running)" if active else "")
            + ": Show “re-captions only” or “all” to list them.</div>"
        )

    def list_choices(self, request: gr.Request):
        """The creators the "Started by" filter offers (read when the tab is shown)."""
        if not self.ctx.user(request).can("lead"):
            return gr.skip()
        return gr.update(choices=ANYONE + [(n, n) for n in job_queries.creators(self.ctx.db())])

    def _selection(self, source, fdict) -> tuple[clips.Filter, str]:
        if source == "current filter":
            f = clips.Filter.from_dict(fdict)
            shown = f.to_dict()
            desc = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in shown.items()) or "no filter: every clip"
            ok = "" if f.failed is not None else "; ingest ok"
            return f, f"the Browse filter ({desc}{ok})"
        return clips.Filter(has_caption=False, failed=False), "every clip without a caption (ingest ok)"

    def count_preview(self, source, frames, max_pixels, fdict, request: gr.Request) -> dict:
        """How many clips a start would caption, and what that costs at the frames and pixels chosen, before any
        GPU is committed, counted now (and when)."""
        self.ctx.user(request)
        f, desc = self._selection(source, fdict)
        n = Selection(filter=f).count(self.ctx.db())  # what a start would send (ingest failures left out)
        t = time.time()
        html = (
            f'<div class="cw-preview" id="job-preview-count" data-n="{n}">Start would caption <b>{n:,}</b> '
            f"clips: {render.esc(desc)} (counted at {render.when_s(t)} UTC)."
            f"{self._cost_html(n, frames, max_pixels)}</div>"
        )
        return {self.preview: html, self.preview_seen: {"n": n, "at": t}}

    def preview_tick(self, source, frames, max_pixels, fdict, seen, request: gr.Request):
        """Count the preview again on its timer (every PREVIEW_EVERY_S): clips are captioned, ingested and
        changed while the tab is open, and a count the lead reads must be a recent one."""
        # half the period: a count made by a filter change since the last tick is fresh enough to keep
        if isinstance(seen, dict) and time.time() - float(seen.get("at") or 0) < PREVIEW_EVERY_S / 2:
            return gr.skip()
        return self.count_preview(source, frames, max_pixels, fdict, request)

    def _replicas(self) -> int:
        """Replicas behind the configured fleet (a router is asked for its workers), cached for a minute."""
        hit = getattr(self, "_replica_cache", None)
        if hit and time.monotonic() - hit[1] < 60:
            return hit[0]
        urls = self.ctx.fleet_urls
        reader = self.ctx.fleet_reader
        n = (reader.router_workers(urls[0], timeout=1.0) or 1) if len(urls) == 1 else max(1, len(urls))
        self._replica_cache = (n, time.monotonic())
        return n

    def _cost_html(self, n: int, frames=None, max_pixels=None) -> str:
        """What the job will cost on this fleet at the frames and pixels chosen (the form's values; empty: the
        defaults), from the work-per-clip table and the recorded GPU runs (serving.cost). A point nobody measured
        says so; values the job would refuse say that; simulated fleets get nothing (their speed says nothing
        about GPUs)."""
        if not n or self.ctx.simulated_fleet:
            return ""
        try:
            p = JobParams.resolve(self.ctx.settings, frames=frames, max_pixels=max_pixels)
        except DataError as e:
            return f' <span class="cw-cost cw-cost-none" id="job-cost">{render.esc(str(e))}</span>'
        replicas = self._replicas()
        e = cost.estimate(replicas, p.frames, "bf16", _measurements(), max_pixels=p.max_pixels)
        if not e.clips_per_s:
            return (
                f' <span class="cw-cost cw-cost-none" id="job-cost">No cost estimate for {p.frames} frames at '
                f"{p.max_pixels:,} pixels: {render.esc(e.note[:200])}.</span>"
            )
        return (
            f' <span class="cw-cost" id="job-cost">About {render.esc(_duration(e.seconds_for(n)))} on '
            f"{replicas} GPU(s) at {p.frames} frames, {p.max_pixels:,} pixels ({e.clips_per_s:.1f} clips/s, "
            f"{e.gpu_hours(n):.1f} GPU-hours; {render.esc(e.basis)}: {render.esc(e.note[:240])}).</span>"
        )

    @property
    def show_inputs(self) -> list:
        return [*self.refresh_inputs, self.source, self.frames, self.max_pixels]

    @property
    def show_outputs(self) -> list:
        return [*self.refresh_outputs, self.preview, self.preview_seen, self.list_by]

    def on_show(self, job_id, kind, state, by, msg_for, source, frames, max_pixels, fdict, request: gr.Request):
        """The tab shown: everything refreshed, the preview counted, the creators the filter offers."""
        out = self.refresh(job_id, kind, state, by, msg_for, request)
        out.update(self.count_preview(source, frames, max_pixels, fdict, request))
        out[self.list_by] = self.list_choices(request)
        return out

    def select_row(self, evt: gr.SelectData, request: gr.Request):
        """A click anywhere on a job row shows that job."""
        self._lead(request)
        row = getattr(evt, "row_value", None)
        if not row:
            return gr.skip()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            return gr.skip()

    def start(self, name, source, prompt_id, frames, max_tokens, max_pixels, fdict, seen, request: gr.Request):
        """Start a job over the selection as it is now. The message gives the job's true clip count (and says
        so when the preview showed another), and warns when no runner or no healthy replica can run it yet:
        the job is started all the same and waits."""
        user = self._lead(request)
        db = self.ctx.db()
        f, _ = self._selection(source, fdict)
        try:
            params = JobParams.resolve(self.ctx.settings, frames=frames, max_tokens=max_tokens, max_pixels=max_pixels)
            pid = int(prompt_id) if prompt_id not in (None, "") else prompts.latest(db)["id"]
            prompts.get(db, pid)
            job_id, created = jobs.create_once(
                db,
                name=name or f"{source} by {user.name}",
                created_by=user.name,
                selection=Selection(filter=f, origin=source),
                prompt_id=pid,
                params=params,
                fleet=self.ctx.job_fleet,
            )
        except (DataError, ValueError) as e:
            return {self.msg: render.message(str(e), "error"), self.msg_for: None}
        total = job_queries.get(db, job_id)["total"]
        out = {self.job_id: job_id, **self.count_preview(source, frames, max_pixels, fdict, request)}
        if not created:
            text = f"Job {job_id} over {total:,} clips was just started with the same settings: not started twice."
            return {**out, self.msg: render.message(text, "info"), self.msg_for: None}
        text = f"Started job {job_id} over {total:,} clips."
        shown = seen.get("n") if isinstance(seen, dict) else None
        if shown is not None and shown != total:
            text += (
                f" The preview showed {shown:,} (counted at {render.when_s(seen.get('at'))} UTC): the clips of the "
                "selection changed since, and the job has those of the moment it started."
            )
        warning = fleet_notice.start_warning(heartbeats.heartbeats(db, "runner"), fleet=self.ctx.job_fleet)
        if warning:  # true while the job waits: it goes when the job is no longer queued or running
            bound = {"job": job_id, "states": list(job_queries.ACTIVE)}
            return {**out, self.msg: render.message(f"{text} {warning}", "warn"), self.msg_for: bound}
        return {**out, self.msg: render.message(text, "ok"), self.msg_for: None}

    def action(self, verb: str):
        def handler(job_id, confirm, request: gr.Request):
            user = self._lead(request)
            job_id = whole(job_id, "The job shown")
            if not job_id:
                return {self.msg: render.message("Enter a job id first.", "error"), self.msg_for: None}
            db = self.ctx.db()
            try:
                job = job_queries.get(db, job_id)
                ask = self._ask_first(db, job, verb, confirm)
                if ask:
                    bound = {"job": job_id, "states": [job["state"]]}
                    pending = {"job": job_id, "verb": verb, "at": time.time()}
                    return {self.msg: render.message(ask, "warn"), self.msg_for: bound, self.confirm: pending}
                if verb == "retry":
                    text, kind = self._retry(db, job, user.name)
                elif verb == "resume" and job["state"] == "done":
                    text, kind = self._nothing_to_resume(db, job), "info"
                elif verb == "resume":
                    was = job["state"]
                    jobs.change_state(db, job_id, verb, user.name)
                    text, kind = f"Job {job_id} resumed: {self._unsent(db, job_id)} are sent.", "ok"
                    if was == "cancelled":
                        text = f"Job {job_id} was cancelled and runs again: {self._unsent(db, job_id)} are sent."
                else:
                    job = jobs.change_state(db, job_id, verb, user.name)
                    text, kind = f"Job {job_id} is now {job['state']}.", "ok"
            except (DataError, NotFound) as e:
                state = job_queries.states(db, [job_id]).get(job_id)
                bound = {"job": job_id, "states": [state]} if state else None
                return {self.msg: render.message(str(e), "error"), self.msg_for: bound, self.confirm: None}
            state = job_queries.get(db, job_id)["state"]
            # the message is true while the job stays in this state (paused, cancelled), or, when it was set
            # going, while it runs: it goes with it
            bound = {"job": job_id, "states": list(job_queries.ACTIVE) if state in job_queries.ACTIVE else [state]}
            return {self.msg: render.message(text, kind), self.msg_for: bound, self.confirm: None}

        handler.__name__ = f"job_{verb}"
        return handler

    def _unsent(self, db, job_id: int) -> str:
        c = job_queries.counts(db, job_id)
        return f"its {c['pending'] + c['leased']:,} clip(s) not captioned yet"

    def _ask_first(self, db, job: dict, verb: str, confirm) -> str:
        """The question to ask before a resume or a retry restarts a cancelled job, or "" to go ahead (not
        cancelled, nothing else would run, or this press confirms the one before)."""
        if job["state"] != "cancelled" or verb not in ("resume", "retry"):
            return ""
        if (
            isinstance(confirm, dict)
            and confirm.get("job") == job["id"]
            and confirm.get("verb") == verb
            and time.time() - float(confirm.get("at") or 0) < CONFIRM_S
        ):
            return ""
        c = job_queries.counts(db, job["id"])
        unsent = c["pending"] + c["leased"]
        if verb == "retry" and not unsent:
            return ""  # only its failed clips would run: nothing else to warn about
        button = "Resume" if verb == "resume" else "Retry failed"
        what = (
            f"Resume queues it again: {unsent:,} clip(s) not captioned yet are sent; the {c['done']:,} captioned "
            f"stay as they are and the {c['failed']:,} failed stay failed (Retry failed sends those a retry can "
            "help)."
            if verb == "resume"
            else f"Retry failed queues it again, so its {unsent:,} clip(s) not captioned yet are sent too, with the "
            "failed ones a retry can help."
        )
        return f"Job {job['id']} was cancelled. {what} Press {button} again to go ahead."

    def _nothing_to_resume(self, db, job: dict) -> str:
        failed = job_queries.counts(db, job["id"])["failed"]
        return f"Job {job['id']} is done: nothing is left to resume" + (
            f" ({failed:,} failed: Retry failed sends those a retry can help)." if failed else "."
        )

    def _retry(self, db, job: dict, user: str) -> tuple[str, str]:
        r = jobs.retry_failed(db, job["id"], user)
        left = "; ".join(f"{n:,} {WHY_LEFT.get(why, why)}" for why, n in sorted(r.left.items()))
        if not r.requeued:
            text = f"Job {job['id']}: no failed clip a retry can help" + (f". Left failed: {left}." if left else ".")
            return text, "info"
        text = f"Job {job['id']}: {r.requeued:,} failed clip(s) queued again." + (
            f" Not retried, a retry cannot help: {left}." if left else ""
        )
        return text, "ok"

    def prompt_choices(self, request: gr.Request):
        self.ctx.user(request)
        db = self.ctx.db()
        prompts.latest(db)  # installs the presets on a fresh database
        rows = prompts.list_prompts(db)
        return gr.update(
            choices=[(f"{p['name']} v{p['version']}", p["id"]) for p in rows], value=rows[0]["id"] if rows else None
        )

    def wire(self, filter_state: gr.State) -> None:
        inputs, detail = self.refresh_inputs, self.refresh_outputs
        self.prompts.wire(self.prompt, self.job_id)
        self.timer.tick(
            shows_errors(self.refresh),
            inputs,
            detail,
            api_name="jobs_refresh",
            show_progress="hidden",
        )
        self.preview_timer.tick(
            shows_errors(self.preview_tick),
            [self.source, self.frames, self.max_pixels, filter_state, self.preview_seen],
            [self.preview, self.preview_seen],
            api_name="job_preview_tick",
            show_progress="hidden",
        )
        self.job_id.change(shows_errors(self.refresh), inputs, detail, show_progress="hidden")
        gr.on(
            [self.list_kind.change, self.list_state.change, self.list_by.change],
            shows_errors(self.refresh),
            inputs,
            detail,
            show_progress="hidden",
            api_name="jobs_list",
        )
        self.table.select(
            shows_errors(self.select_row), None, [self.job_id], show_progress="hidden", api_name="job_select"
        )
        # the cost line follows what the lead chooses: the clips, and the work per clip (frames, pixels)
        gr.on(
            [self.source.change, filter_state.change, self.frames.change, self.max_pixels.change],
            shows_errors(self.count_preview),
            [self.source, self.frames, self.max_pixels, filter_state],
            [self.preview, self.preview_seen],
            show_progress="hidden",
            api_name="job_preview",
        )

        # the button is disabled while a start is under way (the server also makes repeats one job)
        def start_busy():
            return gr.Button(interactive=False)

        def start_ready():
            return gr.Button(interactive=True)

        # every event goes through the queue: the page then never uses Gradio's direct-call route (/run), which
        # the Guard keeps closed (it accepts another user's session id; issue 21, class 6)
        self.start_btn.click(start_busy, None, [self.start_btn], api_name="start_busy").then(
            shows_errors(self.start),
            [
                self.name,
                self.source,
                self.prompt,
                self.frames,
                self.max_tokens,
                self.max_pixels,
                filter_state,
                self.preview_seen,
            ],
            [self.msg, self.msg_for, self.job_id, self.preview, self.preview_seen],
            api_name="start_job",
        ).then(start_ready, None, [self.start_btn], api_name="start_ready")
        gr.on(
            [self.team_btn.click, self.team_window.change],
            shows_errors(self.team_stats),
            [self.team_window],
            [self.team],
            api_name="team_stats",
        )
        for verb, btn in (
            ("pause", self.pause_btn),
            ("resume", self.resume_btn),
            ("cancel", self.cancel_btn),
            ("retry", self.retry_btn),
        ):
            btn.click(
                shows_errors(self.action(verb)),
                [self.job_id, self.confirm],
                [self.msg, self.msg_for, self.confirm],
                api_name=f"job_{verb}",
            ).then(
                shows_errors(self.refresh),
                inputs,
                detail,
                show_progress="hidden",
                api_name=f"job_{verb}_refresh",
            )  # show the new state at once, not at the next tick


@functools.lru_cache(maxsize=1)
def _measurements() -> tuple:
    """The work-per-clip table and the GPU runs recorded in the repository, read once per process."""
    return tuple(cost.default_measurements())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
