"""Jobs tab (leads): start a captioning job, watch it, pause/resume/cancel it, retry its failures.

The app never captions anything itself: starting a job writes rows (data.jobs.create) and the runner
process (serving.runner) does the work. A gr.Timer polls SQLite every 2 s for progress, only while the Jobs
tab is shown (app.py turns it on and off). Every handler that changes something checks the lead role itself:
each Gradio event is an HTTP endpoint anyone can call, so parameters are checked here too (data.job_params),
not only by the form. A click on a job row shows that job; the detail stays on it until another is chosen.
The job shown and its buttons sit above the list, so that the list growing or being redrawn never moves them.
"""

from __future__ import annotations

import functools
import time

import gradio as gr
import pandas as pd

from data import clips, events, heartbeats, job_queries, jobs, prompts
from data.errors import DataError, NotFound
from data.job_params import MAX_FRAMES, MAX_MAX_TOKENS, MIN_FRAMES, MIN_MAX_TOKENS, RECIPE_MAX_PIXELS, JobParams
from data.job_selection import Selection
from serving import cost, fleet_key
from serving.fleet import router_workers
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.prompt_panel import PromptPanel

RUNNER_STALE_S = 15.0
JOB_COLUMNS = ["id", "name", "state", "by", "total", "done", "failed", "pending", "clips/s", "ETA"]
# the work-per-clip sweep's pixel budgets (docs/work-per-clip.json); any other value may be typed in
PIXEL_CHOICES = [
    (f"{RECIPE_MAX_PIXELS:,} (recipe)", RECIPE_MAX_PIXELS),  # 16 frames of 1024x576
    (f"{RECIPE_MAX_PIXELS // 2:,} (half)", RECIPE_MAX_PIXELS // 2),
    (f"{RECIPE_MAX_PIXELS // 4:,} (quarter)", RECIPE_MAX_PIXELS // 4),
]


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
        return (
            f'<div class="cw-runner cw-ok" id="runner-status">Runner alive: {render.esc(b["name"])} '
            f"(pid {render.esc(b.get('pid'))}, heartbeat {b['age_s']:.0f} s ago)</div>"
        )
    urls = f" --fleet-urls {','.join(settings.fleet_urls)}" if settings.fleet_urls else ""
    cmd = f"python -m serving.runner --db {settings.db}{urls}"
    last = f" (last heartbeat {beats[0]['age_s']:.0f} s ago)" if beats else ""
    return (
        f'<div class="cw-runner cw-stale" id="runner-status">Runner not running{last}: jobs stay queued. '
        f"Start it with <code>{render.esc(cmd)}</code> (launch.sh does this).</div>"
    )


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
            self.start_btn = gr.Button("Start job", variant="primary", elem_id="btn-start-job")
        self.prompts = PromptPanel(self.ctx)  # leads only: shown on first paint (webapp/app.py)
        self.prompts.render()
        with gr.Row():
            self.job_id = gr.Number(label="Job shown", precision=0, elem_id="job-id", minimum=0)
            self.pause_btn = gr.Button("Pause", elem_id="btn-pause", size="sm")
            self.resume_btn = gr.Button("Resume", elem_id="btn-resume", size="sm")
            self.cancel_btn = gr.Button("Cancel", elem_id="btn-cancel", size="sm", variant="stop")
            self.retry_btn = gr.Button("Retry failed", elem_id="btn-retry", size="sm")
        self.msg = gr.HTML("", elem_id="jobs-msg")  # below the buttons: a message appearing does not move them
        self.detail = gr.HTML("", elem_id="job-detail")
        self.plot = gr.HTML("", elem_id="job-plot")
        # the list goes below the job shown, never above its buttons: it grows as jobs are added and is redrawn
        # on every tick, and a button that moves while the pointer is on its way takes a click meant for it
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
    def refresh_outputs(self) -> list:
        return [self.runner, self.msg, self.table, self.detail, self.plot, self.failures, self.replicas, self.job_id]

    def refresh(self, job_id, request: gr.Request):
        user = self.ctx.user(request)
        db = self.ctx.db()
        out = {self.runner: runner_line(heartbeats.heartbeats(db, "runner"), self.ctx.settings)}
        if not user.can("lead"):
            out[self.msg] = render.message("Jobs are run by leads. Ask a lead to start one.", "info")
            return out
        rows, focus = [], None
        for j in job_queries.list_jobs(db):
            p = job_queries.progress(db, j["id"])
            rows.append(
                [
                    j["id"],
                    j["name"],
                    j["state"],
                    j["created_by"],
                    j["total"],
                    p["counts"]["done"],
                    p["counts"]["failed"],
                    p["remaining"],
                    round(p["rate"], 2),
                    _eta(p["eta_seconds"]),
                ]
            )
            if job_id and int(job_id) == j["id"]:
                focus = p
        out[self.table] = pd.DataFrame(rows, columns=JOB_COLUMNS)
        if focus is None and rows and not job_id:
            # nothing chosen yet: show the newest, and keep showing it (job_id is set), so the panel does not
            # jump when a newer job appears
            focus = job_queries.progress(db, rows[0][0])
            out[self.job_id] = rows[0][0]
        if focus is not None:
            c = focus["counts"]
            pct = 100.0 * (c["done"] + c["failed"]) / max(1, focus["total"])
            out[self.detail] = (
                f'<div class="cw-job-detail" id="job-progress" data-pct="{pct:.0f}" '
                f'data-state="{render.esc(focus["state"])}">'
                f"Job {int(focus['id'])} “{render.esc(focus['name'])}”: <b>{render.esc(focus['state'])}</b>"
                f" · {pct:.0f}% · done {c['done']} · failed {c['failed']} · pending {c['pending']}"
                f" · in flight {c['leased']} · {focus['rate']:.2f} clips/s"
                + (f" · ETA {_eta(focus['eta_seconds'])}" if focus["eta_seconds"] else "")
                + f'<div class="cw-bar"><div style="width:{pct:.1f}%"></div></div></div>'
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

    def _selection(self, source, fdict) -> tuple[clips.Filter, str]:
        if source == "current filter":
            f = clips.Filter.from_dict(fdict)
            shown = f.to_dict()
            desc = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in shown.items()) or "no filter: every clip"
            return f, f"the Browse filter ({desc})"
        return clips.Filter(has_caption=False, failed=False), "every clip without a caption (ingest ok)"

    def preview_html(self, source, frames, max_pixels, fdict, request: gr.Request) -> str:
        """How many clips a start would caption, and what that costs at the frames and pixels chosen, before any
        GPU is committed."""
        self.ctx.user(request)
        f, desc = self._selection(source, fdict)
        n = clips.count(self.ctx.db(), f)
        return (
            f'<div class="cw-preview" id="job-preview-count" data-n="{n}">Start would caption <b>{n:,}</b> '
            f"clips: {render.esc(desc)}.{self._cost_html(n, frames, max_pixels)}</div>"
        )

    def _replicas(self) -> int:
        """Replicas behind the configured fleet (a router is asked for its workers), cached for a minute."""
        hit = getattr(self, "_replica_cache", None)
        if hit and time.monotonic() - hit[1] < 60:
            return hit[0]
        urls = self.ctx.fleet_urls
        key = fleet_key.headers(self.ctx.settings)
        n = (router_workers(urls[0], timeout=1.0, headers=key) or 1) if len(urls) == 1 else max(1, len(urls))
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

    def on_show(self, job_id, source, frames, max_pixels, fdict, request: gr.Request):
        out = self.refresh(job_id, request)
        out[self.preview] = self.preview_html(source, frames, max_pixels, fdict, request)
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

    def start(self, name, source, prompt_id, frames, max_tokens, max_pixels, fdict, request: gr.Request):
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
            )
        except (DataError, ValueError) as e:
            return {self.msg: render.message(str(e), "error")}
        total = job_queries.get(db, job_id)["total"]
        if not created:
            return {
                self.msg: render.message(
                    f"Job {job_id} over {total:,} clips was just started with the same settings: not started twice.",
                    "info",
                ),
                self.job_id: job_id,
            }
        return {self.msg: render.message(f"Started job {job_id} over {total:,} clips.", "ok"), self.job_id: job_id}

    def action(self, verb: str):
        def handler(job_id, request: gr.Request):
            user = self._lead(request)
            if not job_id:
                return {self.msg: render.message("Enter a job id first.", "error")}
            try:
                if verb == "retry":
                    n = jobs.retry_failed(self.ctx.db(), int(job_id), user.name)
                    text = f"Job {int(job_id)}: {n} failed clips queued again."
                else:
                    job = jobs.change_state(self.ctx.db(), int(job_id), verb, user.name)
                    text = f"Job {int(job_id)} is now {job['state']}."
            except (DataError, NotFound) as e:
                return {self.msg: render.message(str(e), "error")}
            return {self.msg: render.message(text, "ok")}

        handler.__name__ = f"job_{verb}"
        return handler

    def prompt_choices(self, request: gr.Request):
        self.ctx.user(request)
        db = self.ctx.db()
        prompts.latest(db)  # installs the presets on a fresh database
        rows = prompts.list_prompts(db)
        return gr.update(
            choices=[(f"{p['name']} v{p['version']}", p["id"]) for p in rows], value=rows[0]["id"] if rows else None
        )

    def wire(self, filter_state: gr.State) -> None:
        detail = self.refresh_outputs
        self.prompts.wire(self.prompt, self.job_id)
        self.timer.tick(
            shows_errors(self.refresh),
            [self.job_id],
            detail,
            api_name="jobs_refresh",
            show_progress="hidden",
        )
        self.job_id.change(shows_errors(self.refresh), [self.job_id], detail, show_progress="hidden")
        self.table.select(
            shows_errors(self.select_row), None, [self.job_id], show_progress="hidden", api_name="job_select"
        )
        # the cost line follows what the lead chooses: the clips, and the work per clip (frames, pixels)
        gr.on(
            [self.source.change, filter_state.change, self.frames.change, self.max_pixels.change],
            shows_errors(self.preview_html),
            [self.source, self.frames, self.max_pixels, filter_state],
            [self.preview],
            show_progress="hidden",
            api_name="job_preview",
        )

        # the button is disabled while a start is under way (the server also makes repeats one job)
        def start_busy():
            return gr.Button(interactive=False)

        def start_ready():
            return gr.Button(interactive=True)

        # every event goes through the queue: the page then never uses Gradio's direct-call route (/run), which
        # the Guard keeps closed (it took another user's session id, issue 21)
        self.start_btn.click(start_busy, None, [self.start_btn], api_name="start_busy").then(
            shows_errors(self.start),
            [self.name, self.source, self.prompt, self.frames, self.max_tokens, self.max_pixels, filter_state],
            [self.msg, self.job_id],
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
            btn.click(shows_errors(self.action(verb)), [self.job_id], [self.msg], api_name=f"job_{verb}").then(
                shows_errors(self.refresh),
                [self.job_id],
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
