"""The Jobs tab's prompt versions panel (leads): write a new version of a prompt, starting from an existing one, and
run a version on the clips that already have an approved caption (the ground truth) as one job.

Old versions are never edited: "Save as a new version" adds one (data.prompts.create_version), after its schema is
checked against what the fleet's structured-output backend accepts and against the label taxonomy; a refusal
lists every change it needs and saves nothing. The ground-truth job's captions arrive as candidates beside the
approved ones (data.quality.prompt_compare); the Quality tab compares the versions on the same clips.
"""

from __future__ import annotations

import json

import gradio as gr

from data import prompts
from data.errors import DataError
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.quality import prompt_compare
from webapp import render
from webapp.context import AppContext, shows_errors


def choices(db) -> list[tuple[str, int]]:
    """Every prompt version, newest first within a name, as (label, id)."""
    prompts.latest(db)  # installs the presets on a fresh database
    return [(f"{p['name']} v{p['version']}", p["id"]) for p in prompts.list_prompts(db)]


class PromptPanel:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Accordion("Prompt versions", open=False, visible=False, elem_id="prompt-panel") as self.box:
            with gr.Row():
                self.base = gr.Dropdown(
                    [], label="Prompt version", elem_id="prompt-base", allow_custom_value=True, min_width=200
                )
                self.load_btn = gr.Button("Load it to write the next version", elem_id="btn-prompt-load", size="sm")
                self.run_btn = gr.Button(
                    "Run it on the approved clips (ground truth)", elem_id="btn-prompt-ground-truth", size="sm"
                )
            with gr.Row():
                self.name = gr.Textbox(label="Name", elem_id="prompt-name", max_lines=1)
                self.description = gr.Textbox(label="What changed", elem_id="prompt-description", max_lines=1)
            self.system = gr.Textbox(label="System text", lines=3, elem_id="prompt-system")
            self.user = gr.Textbox(label="User text ({camera} names the clip's camera)", lines=5, elem_id="prompt-user")
            self.schema = gr.Textbox(label="Answer schema (JSON)", lines=12, elem_id="prompt-schema")
            self.save_btn = gr.Button("Save as a new version", elem_id="btn-prompt-save", variant="primary", size="sm")
            self.msg = gr.HTML("", elem_id="prompt-msg")

    def for_user(self, user) -> dict:
        """First paint: the panel for a lead (with the versions to start from); nothing for anyone else."""
        if not user.can("lead"):
            return {self.box: gr.update(visible=False)}
        return {self.box: gr.update(visible=True), self.base: gr.update(choices=choices(self.ctx.db()))}

    @property
    def first_paint_outputs(self) -> list:
        return [self.box, self.base]

    def load(self, prompt_id, request: gr.Request):
        """The chosen version's texts and schema in the form, to be changed into the next version."""
        self.ctx.require(request, "lead")
        if prompt_id in (None, ""):
            return {self.msg: render.message("Choose a prompt version first.", "error")}
        p = prompts.get(self.ctx.db(), prompt_id)
        return {
            self.name: p["name"],
            self.description: "",
            self.system: p["system"],
            self.user: p["user"],
            self.schema: json.dumps(p["schema"], indent=2),
            self.msg: render.message(
                f"Loaded {p['name']} v{p['version']}: change it, then save a new version.", "info"
            ),
        }

    def save(self, name, description, system, user, schema_text, request: gr.Request):
        """A new version from the form (checked by data.prompts; nothing is saved when it is refused)."""
        lead = self.ctx.require(request, "lead")
        db = self.ctx.db()
        try:
            p = prompts.create_version(
                db,
                name=name or "",
                system=system or "",
                user=user or "",
                schema=prompts.parse_schema(schema_text or ""),
                description=description or "",
                actor=lead.name,
            )
        except DataError as e:
            return {self.msg: render.message(str(e), "error")}
        update = gr.update(choices=choices(db), value=p["id"])
        return {
            self.base: update,
            self.jobs_prompt: update,
            self.msg: render.message(
                f"Saved {p['name']} v{p['version']}. Run it on the approved clips to compare it with earlier versions.",
                "ok",
            ),
        }

    def run_on_ground_truth(self, prompt_id, request: gr.Request):
        """One job of the chosen version over the approved clips; its captions arrive as candidates."""
        lead = self.ctx.require(request, "lead")
        if prompt_id in (None, ""):
            return {self.msg: render.message("Choose a prompt version first.", "error")}
        db = self.ctx.db()
        try:
            p = prompts.get(db, prompt_id)
            job_id, created = prompt_compare.start_on_ground_truth(
                db, p["id"], created_by=lead.name, params=JobParams.resolve(self.ctx.settings), fleet=self.ctx.job_fleet
            )
        except DataError as e:
            return {self.msg: render.message(str(e), "error")}
        total = job_queries.get(db, job_id)["total"]
        said = (
            f"Started job {job_id}: {p['name']} v{p['version']} over {total:,} approved clips. Its captions arrive as "
            "candidates beside the approved ones (none is replaced); the Quality tab compares the versions."
            if created
            else f"Job {job_id} over the same clips was just started with this version: not started twice."
        )
        return {self.msg: render.message(said, "ok" if created else "info"), self.jobs_job_id: job_id}

    def wire(self, jobs_prompt, jobs_job_id) -> None:
        """`jobs_prompt`: the Jobs tab's prompt choice (a saved version joins it); `jobs_job_id`: the job shown."""
        self.jobs_prompt, self.jobs_job_id = jobs_prompt, jobs_job_id
        form = [self.name, self.description, self.system, self.user, self.schema]
        self.load_btn.click(shows_errors(self.load), [self.base], form + [self.msg], api_name="prompt_load")
        self.save_btn.click(shows_errors(self.save), form, [self.base, jobs_prompt, self.msg], api_name="prompt_save")
        self.run_btn.click(
            shows_errors(self.run_on_ground_truth), [self.base], [self.msg, jobs_job_id], api_name="prompt_ground_truth"
        )
