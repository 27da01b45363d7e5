"""Jobs tab (leads): start a captioning job, watch it, pause/resume/cancel it, retry its failures.

The app never captions anything itself: starting a job writes rows (data.jobs.create) and the runner
process (serving.runner) does the work. A gr.Timer polls SQLite every 2 s for progress. Every handler that
changes something checks the lead role itself: each Gradio event is an HTTP endpoint anyone can call.
"""

from __future__ import annotations

import pandas as pd
import gradio as gr

import time

from data import clips, events, jobs, prompts
from data.db import DataError, NotFound
from webapp import render
from webapp.browse import filter_dict
from webapp.context import AppContext

RUNNER_STALE_S = 15.0
JOB_COLUMNS = ["id", "name", "state", "by", "total", "done", "failed", "pending", "clips/s", "ETA"]


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def runner_line(beats: list[dict], settings) -> str:
    fresh = [b for b in beats if b["age_s"] < RUNNER_STALE_S]
    if fresh:
        b = fresh[0]
        return (f'<div class="cw-runner cw-ok" id="runner-status">Runner alive: {render.esc(b["name"])} '
                f'(pid {render.esc(b.get("pid"))}, heartbeat {b["age_s"]:.0f} s ago)</div>')
    cmd = f"python -m serving.runner --db {settings.db} --fleet {settings.fleet}"
    last = f" (last heartbeat {beats[0]['age_s']:.0f} s ago)" if beats else ""
    return (f'<div class="cw-runner cw-stale" id="runner-status">Runner not running{last}: jobs stay queued. '
            f"Start it with <code>{render.esc(cmd)}</code> (launch.sh does this).</div>")


TEAM_COLUMNS = ["annotator", "edits", "approved", "rejected", "clips", "approval rate", "last active"]


class JobsTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        self.runner = gr.HTML("", elem_id="runner-line")
        with gr.Accordion("Start a job", open=True):
            with gr.Row():
                self.name = gr.Textbox(label="Job name", placeholder="e.g. night clips, prompt v2", elem_id="job-name")
                self.source = gr.Radio(["current filter", "everything uncaptioned"], value="everything uncaptioned",
                                       label="Clips", elem_id="job-source")
                self.prompt = gr.Dropdown([], label="Prompt version", elem_id="job-prompt")
                self.frames = gr.Number(self.ctx.settings.frames, label="Frames", precision=0, minimum=1,
                                        maximum=128, elem_id="job-frames")
                self.max_tokens = gr.Number(self.ctx.settings.max_tokens, label="Max tokens", precision=0,
                                            minimum=16, maximum=4096, elem_id="job-max-tokens")
            self.start_btn = gr.Button("Start job", variant="primary", elem_id="btn-start-job")
        self.msg = gr.HTML("", elem_id="jobs-msg")
        self.table = gr.Dataframe(headers=JOB_COLUMNS, interactive=False, elem_id="jobs-table", label="Jobs")
        with gr.Row():
            self.job_id = gr.Number(label="Job id", precision=0, elem_id="job-id", minimum=0)
            self.pause_btn = gr.Button("Pause", elem_id="btn-pause", size="sm")
            self.resume_btn = gr.Button("Resume", elem_id="btn-resume", size="sm")
            self.cancel_btn = gr.Button("Cancel", elem_id="btn-cancel", size="sm", variant="stop")
            self.retry_btn = gr.Button("Retry failed", elem_id="btn-retry", size="sm")
        self.detail = gr.HTML("", elem_id="job-detail")
        self.plot = gr.LinePlot(x="t", y="clips_per_s", title="Throughput (clips/s, 10 s buckets)",
                                elem_id="job-plot", height=220)
        with gr.Row():
            self.failures = gr.Dataframe(headers=["clip", "path", "attempts", "kind", "error"], interactive=False,
                                         label="Failures", elem_id="job-failures")
            self.replicas = gr.Dataframe(headers=["replica", "done", "mean latency ms"], interactive=False,
                                         label="Per-replica load (this job)", elem_id="job-replicas")
        with gr.Accordion("Team: annotators' work", open=False, elem_id="team-accordion"):
            with gr.Row():
                self.team_window = gr.Radio(["last 24 h", "last 7 days", "all time"], value="last 24 h",
                                            label="Window", elem_id="team-window")
                self.team_btn = gr.Button("Refresh", elem_id="btn-team-refresh", size="sm")
            self.team = gr.Dataframe(headers=TEAM_COLUMNS, interactive=False, elem_id="team-table",
                                     label="Edits saved, clips approved and rejected, approval rate")
        self.timer = gr.Timer(2.0)

    def team_stats(self, window: str, request: gr.Request):
        """Per annotator counts and approval rate from the audit trail (leads only)."""
        self._lead(request)
        since = {"last 24 h": time.time() - 86400, "last 7 days": time.time() - 7 * 86400}.get(window, 0.0)
        rows = events.team_stats(self.ctx.db(), since=since)
        return pd.DataFrame([[r["actor"], r["edits"], r["approved"], r["rejected"], r["clips"],
                              "" if r["approval_rate"] is None else f"{r['approval_rate']:.0%}",
                              render.when(r["last_at"])] for r in rows], columns=TEAM_COLUMNS)

    def _lead(self, request: gr.Request):
        return self.ctx.require(request, "lead")

    def refresh(self, job_id, request: gr.Request):
        user = self.ctx.user(request)
        db = self.ctx.db()
        out = {self.runner: runner_line(jobs.heartbeats(db, "runner"), self.ctx.settings)}
        if not user.can("lead"):
            out[self.msg] = render.message("Jobs are run by leads. Ask a lead to start one.", "info")
            return out
        rows, focus = [], None
        for j in jobs.list_jobs(db):
            p = jobs.progress(db, j["id"])
            rows.append([j["id"], j["name"], j["state"], j["created_by"], j["total"], p["counts"]["done"],
                         p["counts"]["failed"], p["remaining"], round(p["rate"], 2), _eta(p["eta_seconds"])])
            if job_id and int(job_id) == j["id"]:
                focus = p
        out[self.table] = pd.DataFrame(rows, columns=JOB_COLUMNS)
        if focus is None and rows and not job_id:
            focus = jobs.progress(db, rows[0][0])
        if focus is not None:
            c = focus["counts"]
            pct = 100.0 * (c["done"] + c["failed"]) / max(1, focus["total"])
            out[self.detail] = (f'<div class="cw-job-detail" id="job-progress" data-pct="{pct:.0f}">'
                                f'Job {int(focus["id"])} “{render.esc(focus["name"])}”: {render.esc(focus["state"])}'
                                f' · {pct:.0f}% · done {c["done"]} · failed {c["failed"]} · pending {c["pending"]}'
                                f' · leased {c["leased"]} · {focus["rate"]:.2f} clips/s'
                                + (f' · ETA {_eta(focus["eta_seconds"])}' if focus["eta_seconds"] else "")
                                + f'<div class="cw-bar"><div style="width:{pct:.1f}%"></div></div></div>')
            series = pd.DataFrame(focus["series"] or [], columns=["t", "n", "clips_per_s"])
            series["t"] = pd.to_datetime(series["t"], unit="s")
            out[self.plot] = series
            out[self.failures] = pd.DataFrame(
                [[f["clip_id"], f["path"], f["attempts"], f["error_kind"], f["last_error"]]
                 for f in jobs.failures(db, focus["id"], limit=50)],
                columns=["clip", "path", "attempts", "kind", "error"])
            out[self.replicas] = pd.DataFrame(
                [[r["replica"], r["done"], round(r["mean_latency_ms"] or 0, 1)] for r in jobs.replica_load(db, focus["id"])],
                columns=["replica", "done", "mean latency ms"])
        return out

    def start(self, name, source, prompt_id, frames, max_tokens, fdict, request: gr.Request):
        user = self._lead(request)
        db = self.ctx.db()
        if source == "current filter":
            f = clips.Filter.from_dict(fdict)
        else:
            f = clips.Filter(has_caption=False, failed=False)
        try:
            frames, max_tokens = int(frames or self.ctx.settings.frames), int(max_tokens or self.ctx.settings.max_tokens)
            if not (1 <= frames <= 128 and 16 <= max_tokens <= 4096):
                raise DataError("Frames must be 1-128 and max tokens 16-4096.")
            pid = int(prompt_id) if prompt_id not in (None, "") else prompts.latest(db)["id"]
            prompts.get(db, pid)
            job_id = jobs.create(db, name=name or f"{source} by {user.name}", created_by=user.name,
                                 clip_ids=clips.iter_ids(db, f), prompt_id=pid,
                                 params={"frames": frames, "max_tokens": max_tokens},
                                 selection={"source": source, "filter": filter_dict(f)})
        except (DataError, ValueError) as e:
            return {self.msg: render.message(str(e), "error")}
        total = jobs.get(db, job_id)["total"]
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
        return gr.update(choices=[(f"{p['name']} v{p['version']}", p["id"]) for p in rows],
                         value=rows[0]["id"] if rows else None)

    def wire(self, filter_state: gr.State) -> None:
        detail = [self.runner, self.msg, self.table, self.detail, self.plot, self.failures, self.replicas]
        self.timer.tick(self.refresh, [self.job_id], detail, api_name="jobs_refresh", show_progress="hidden",
                        queue=False)
        self.job_id.change(self.refresh, [self.job_id], detail, show_progress="hidden")
        self.start_btn.click(self.start, [self.name, self.source, self.prompt, self.frames, self.max_tokens,
                                          filter_state], [self.msg, self.job_id], api_name="start_job")
        gr.on([self.team_btn.click, self.team_window.change], self.team_stats, [self.team_window], [self.team],
              api_name="team_stats")
        for verb, btn in (("pause", self.pause_btn), ("resume", self.resume_btn), ("cancel", self.cancel_btn),
                          ("retry", self.retry_btn)):
            btn.click(self.action(verb), [self.job_id], [self.msg], api_name=f"job_{verb}")
