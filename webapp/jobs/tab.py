"""Jobs tab (leads): start a captioning job, watch it, pause/resume/cancel it, retry its failures.

This module lays the tab out and wires its events; its regions live beside it:
- the runner's line, the job list and the job shown with its notices (webapp.jobs.progress);
- the start form with its preview and cost (webapp.jobs.start);
- the job shown's buttons and the message about it (webapp.jobs.control);
- the prompt versions (webapp.jobs.prompts), and here the team's work from the audit trail.

The job shown and its buttons sit above the list, so that the list growing or being redrawn never moves them.
Two timers run only while the tab is shown (app.py turns them on and off): the 2 s refresh and the preview's own.
"""

from __future__ import annotations

import time

import gradio as gr
import pandas as pd

from data import events
from data.job_params import JobParams
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.jobs.control import JobControl
from webapp.jobs.progress import JobProgress
from webapp.jobs.prompts import PromptPanel
from webapp.jobs.start import PREVIEW_EVERY_S, StartForm

TEAM_COLUMNS = ["annotator", "edits", "approved", "rejected", "broken", "clips", "approval rate", "last active"]


class JobsTab:
    def __init__(self, ctx: AppContext, spec: type[JobParams] = JobParams):
        self.ctx = ctx
        self.control = JobControl(ctx)
        self.form = StartForm(ctx, self.control, spec)  # its job parameter inputs: one per field of `spec`
        self.progress = JobProgress(ctx, self.control)
        show = ["job_id", "kind", "state", "by", "msg_for", "source"]
        self.on_show_event = self.form.params.event(self.on_show, show, self.form.params.priced_names, ["fdict"])

    def render(self) -> None:
        self.progress.render_runner()
        self.form.render()
        self.prompts = PromptPanel(self.ctx)  # leads only: shown on first paint (webapp/app.py)
        self.prompts.render()
        self.control.render()
        self.progress.render()
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
        self.ctx.require(request, "lead")
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

    @property
    def show_inputs(self) -> list:
        return [*self.progress.refresh_inputs, self.form.source, *self.form.params.priced]

    @property
    def show_outputs(self) -> list:
        return [*self.progress.refresh_outputs, self.form.preview, self.form.preview_seen, self.progress.list_by]

    def on_show(self, job_id, kind, state, by, msg_for, source, *rest):
        """The tab shown: everything refreshed, the preview counted, the creators the filter offers."""
        request = rest[-1]  # after the priced fields' values and the Browse filter (StartForm.count_preview)
        out = self.progress.refresh(job_id, kind, state, by, msg_for, request)
        out.update(self.form.count_preview(source, *rest))
        out[self.progress.list_by] = self.progress.list_choices(request)
        return out

    def wire(self, filter_state: gr.State) -> None:
        form, control, progress = self.form, self.control, self.progress
        inputs, detail = progress.refresh_inputs, progress.refresh_outputs
        self.prompts.wire(form.prompt, control.job_id)
        self.timer.tick(
            shows_errors(progress.refresh),
            inputs,
            detail,
            api_name="jobs_refresh",
            show_progress="hidden",
        )
        self.preview_timer.tick(
            shows_errors(form.on_tick),
            [form.source, *form.params.priced, filter_state, form.preview_seen],
            [form.preview, form.preview_seen],
            api_name="job_preview_tick",
            show_progress="hidden",
        )
        control.job_id.change(shows_errors(progress.refresh), inputs, detail, show_progress="hidden")
        gr.on(
            [progress.list_kind.change, progress.list_state.change, progress.list_by.change],
            shows_errors(progress.refresh),
            inputs,
            detail,
            show_progress="hidden",
            api_name="jobs_list",
        )
        progress.table.select(
            shows_errors(progress.select_row), None, [control.job_id], show_progress="hidden", api_name="job_select"
        )
        # the cost line follows what the lead chooses: the clips, and the work per clip (frames, pixels)
        gr.on(
            [form.source.change, filter_state.change, *(c.change for c in form.params.priced)],
            shows_errors(form.on_preview),
            [form.source, *form.params.priced, filter_state],
            [form.preview, form.preview_seen],
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
        form.start_btn.click(start_busy, None, [form.start_btn], api_name="start_busy").then(
            shows_errors(form.on_start),
            [form.name, form.source, form.prompt, *form.params.components, filter_state, form.preview_seen],
            [control.msg, control.msg_for, control.job_id, form.preview, form.preview_seen],
            api_name="start_job",
        ).then(start_ready, None, [form.start_btn], api_name="start_ready")
        gr.on(
            [self.team_btn.click, self.team_window.change],
            shows_errors(self.team_stats),
            [self.team_window],
            [self.team],
            api_name="team_stats",
        )
        for verb, btn in control.buttons:
            btn.click(
                shows_errors(control.action(verb)),
                [control.job_id, control.confirm],
                [control.msg, control.msg_for, control.confirm],
                api_name=f"job_{verb}",
            ).then(
                shows_errors(progress.refresh),
                inputs,
                detail,
                show_progress="hidden",
                api_name=f"job_{verb}_refresh",
            )  # show the new state at once, not at the next tick
