"""The lead's random review sample panel on Browse: draw N clips of the current filter (a job's clips: the Job id
filter) at random, optionally stratified by hazard level, and assign them to one or more people in one click; then
send a drawn sample (or its reviewed part) to a second reviewer, blind to the first review. data.quality.samples and
data.quality.second_review do the work, record the draw and audit it; this module only reads the form and says what
happened.

Shown to leads only (first paint); each handler checks the lead role itself, as data.quality does again.
"""

from __future__ import annotations

import gradio as gr

from data import clips
from data.errors import DataError
from data.quality import samples, second_review
from webapp import render
from webapp.browse import assigning
from webapp.context import AppContext, shows_errors
from webapp.number_box import number_box, whole
from webapp.quality import render as render_quality

STRATIFY_CHOICES = [
    ("no strata", "none"),
    ("by hazard level, proportional", "proportional"),
    ("by hazard level, equal per level", "equal"),
]


def second_summary(out: dict) -> str:
    """What sending a sample to a second reviewer did, in words."""
    who, sid = out["reviewer"], out["sample_id"]
    said = [f"Sent {assigning.clips_n(out['sent'])} of sample {sid} to {who} for a blind second review"]
    for key, words in (
        ("moved", "moved to them from another second reviewer"),
        ("unchanged", "already theirs"),
        ("answered", "already answered (kept)"),
        ("own", f"skipped: {who} reviews them first"),
        ("unreviewed", "skipped: not reviewed yet"),
    ):
        if out[key]:
            said.append(f"{out[key]:,} {words}")
    return "; ".join(said) + "."


class SamplePanel:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Accordion(
            "Random review sample", open=False, visible=False, elem_id="sample-panel", elem_classes="cw-assign"
        ) as self.box:
            # custom values reach the handlers, which check the role and data.quality.samples the names (as on the
            # assign row)
            with gr.Row():
                self.size = number_box(
                    "Clips to draw", empty=f"1 to {samples.MAX_SAMPLE:,}", elem_id="sample-size", min_width=120
                )
                self.stratify = gr.Dropdown(
                    STRATIFY_CHOICES, value="proportional", label="Strata", elem_id="sample-stratify", min_width=220
                )
                self.people = gr.Dropdown(
                    [],
                    multiselect=True,
                    label="Assign to (one or more)",
                    elem_id="sample-people",
                    allow_custom_value=True,
                    min_width=220,
                )
                self.seed = number_box(
                    "Seed (empty: a new one)", empty="empty: a new one", elem_id="sample-seed", min_width=120
                )
                self.draw_btn = gr.Button("Draw and assign", elem_id="btn-draw-sample", size="sm", variant="primary")
            self.msg = gr.HTML("", elem_id="sample-msg")
            with gr.Row():
                self.sample = number_box(
                    "Sample", empty="its number (a draw fills it in)", elem_id="second-sample", min_width=100
                )
                self.reviewer = gr.Dropdown(
                    [], label="Second reviewer", elem_id="second-reviewer", allow_custom_value=True, min_width=160
                )
                self.reviewed_only = gr.Checkbox(
                    label="Only its clips reviewed already", value=False, elem_id="second-reviewed-only"
                )
                self.send_btn = gr.Button("Send for a blind second review", elem_id="btn-send-second", size="sm")
            self.send_msg = gr.HTML("", elem_id="second-msg")

    def for_user(self, user) -> dict:
        """First paint: the panel and its lists of people for a lead; nothing for anyone else."""
        if not user.can("lead"):
            return {self.box: gr.update(visible=False)}
        people = assigning.people(self.ctx.db())
        return {
            self.box: gr.update(visible=True),
            self.people: gr.update(choices=people),
            self.reviewer: gr.update(choices=people),
        }

    @property
    def first_paint_outputs(self) -> list:
        return [self.box, self.people, self.reviewer]

    def wire(self, browse, filter_state: gr.State, sort_state: gr.State) -> None:
        page_outs = browse.outputs(filter_state)[:-1] + [self.msg, self.sample]

        def draw(fdict, sort, size, stratify, people, seed, anchors, request: gr.Request):
            """Draw a random sample of the filter's unreviewed machine captions and assign it
            (data.quality.samples.draw)."""
            lead = self.ctx.require(request, "lead")
            try:
                seed = whole(seed, "The seed")
                s = samples.draw(
                    self.ctx.db(),
                    clips.Filter.from_dict(fdict or {}),
                    size,
                    people or [],
                    actor=lead.name,
                    role=lead.role,
                    stratify=stratify or "none",
                    seed=seed,  # None (empty): a new one, drawn and recorded by samples.draw
                )
            except DataError as e:
                return {self.msg: render.message(str(e), "error")}
            return {
                **browse.page(fdict or {}, anchors, sort, request),
                self.msg: render_quality.sample_summary(s, new_seed=seed is None),
                self.sample: s["id"],
            }

        def send(sample_id, reviewer, reviewed_only, request: gr.Request):
            """Send sample `sample_id`'s clips to `reviewer` for a blind second review
            (data.quality.second_review.send_to_second)."""
            lead = self.ctx.require(request, "lead")
            try:
                sample_id = whole(sample_id, "The sample")
                if sample_id is None:
                    return render.message("Give the sample's number (a draw fills it in).", "error")
                out = second_review.send_to_second(
                    self.ctx.db(),
                    sample_id,
                    reviewer,
                    actor=lead.name,
                    role=lead.role,
                    reviewed_only=bool(reviewed_only),
                )
            except DataError as e:
                return render.message(str(e), "error")
            return render.message(second_summary(out), "ok" if out["sent"] or out["moved"] else "info")

        self.draw_btn.click(
            shows_errors(draw),
            [filter_state, sort_state, self.size, self.stratify, self.people, self.seed, browse.anchors],
            page_outs,
            api_name="draw_sample",
        )
        self.send_btn.click(
            shows_errors(send),
            [self.sample, self.reviewer, self.reviewed_only],
            [self.send_msg],
            api_name="send_second",
        )
