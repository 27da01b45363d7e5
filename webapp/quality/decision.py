"""The Quality tab's first region: the decision on a random sample's batch (leads).

Thin over data.quality.decision (accept / fix / review K more per label and for the batch, against each label's
target), data.quality.estimates (the estimate at this look and the reviews a margin needs), data.quality.rounds
(the K more drawn into the same sample, from the rest of its batch) and data.quality.targets (set here). Every
sample's decision is listed first, the most urgent first (fix, review more, accept: data.quality.decision.decisions),
so a newer sample never hides an older one's "Fix"; the most urgent is picked when the tab opens (`show`), and
its labels are shown in detail. Every handler checks the lead role itself.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from data import quality
from data.errors import DataError
from data.quality import rounds, tables, targets
from data.quality.decision import decisions, sample_count
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.quality import render as render_quality
from webapp.quality.plots import estimate_figure

ESTIMATE_COLUMNS = quality.ESTIMATE_COLUMNS
DECISION_COLUMNS = quality.DECISION_COLUMNS


class DecisionPanel:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Accordion(
            "Decision: can a batch be used as the model captioned it? (from a random sample of it)",
            open=True,
            elem_id="quality-decision-box",
        ):
            self.open_html = gr.HTML("", elem_id="quality-decisions")
            with gr.Row():
                self.sample = gr.Dropdown([], label="Random sample (its batch)", elem_id="quality-sample", scale=3)
                self.margin = gr.Number(
                    quality.DEFAULT_MARGIN * 100, label="Margin (+/- points)", elem_id="quality-margin"
                )
                self.estimate_btn = gr.Button("Decide again", elem_id="btn-quality-estimate", size="sm")
            self.decision_html = gr.HTML("", elem_id="quality-decision-text")
            self.decision_table = gr.Dataframe(
                headers=DECISION_COLUMNS,
                interactive=False,
                label="Per label: the target, the estimate, the bounds the decision uses, the decision",
                elem_id="quality-decision-table",
            )
            with gr.Row():
                self.draw_btn = gr.Button(
                    "Draw more", elem_id="btn-quality-draw-more", size="sm", variant="primary", visible=False
                )
            self.draw_msg = gr.HTML("", elem_id="quality-draw-msg")
            self.estimate_html = gr.HTML("", elem_id="quality-estimate")
            self.estimate_table = gr.Dataframe(
                headers=ESTIMATE_COLUMNS,
                interactive=False,
                label="The estimate at this look (95 %), and the reviews a margin needs",
                elem_id="quality-estimate-table",
            )
            self.estimate_plot = gr.Plot(elem_id="quality-estimate-plot", format="png")
            with gr.Accordion("Targets (per label)", open=False, elem_id="quality-targets-box"):
                gr.Markdown(
                    "A label's target is the accuracy a batch must reach to be used as the model gave it, at the "
                    "confidence you need (higher confidence: wider bounds, more reviews). *none*: the label is "
                    "shown but not required."
                )
                with gr.Row():
                    self.target_label = gr.Dropdown(
                        list(quality.LABELS), value="hazard_level", label="Label", elem_id="quality-target-label"
                    )
                    self.target_value = gr.Textbox(
                        label="Target (0.95, 95, or none)", max_lines=1, elem_id="quality-target-value"
                    )
                    self.target_confidence = gr.Textbox(
                        label="Confidence in % (empty: keep)",
                        placeholder="empty: keep",
                        max_lines=1,
                        elem_id="quality-target-confidence",
                    )
                    self.target_btn = gr.Button("Set target", elem_id="btn-quality-target", size="sm")
                self.target_msg = gr.HTML("", elem_id="quality-target-msg")

    def sample_choices(self, listed: list) -> list[tuple[str, int]]:
        """The samples a decision rests on, as `decisions` lists them (the most urgent first)."""
        out = []
        for d in listed:
            s = d.sample
            how = "no strata" if s["stratify"] == "none" else f"by hazard level, {s['stratify']}"
            job_text = f" · job {s['job_id']}" if s["job_id"] else ""
            out.append(
                (
                    f"sample {s['id']}{job_text} · {s['drawn']:,} of {s['population']:,} clips · "
                    f"{how} · {d.made:,} reviewed",
                    s["id"],
                )
            )
        return out

    def show(self, job, sample, margin, request: gr.Request) -> dict:
        """The tab shown: every sample's decision, the most urgent first (the one shown stays, else the most urgent
        is picked), and the picked one in detail. `job` (the report's scope below) does not narrow them: a decision
        is never hidden."""
        self.ctx.require(request, "lead")
        listed = decisions(self.ctx.db())
        ids = [d.sample["id"] for d in listed]
        picked = _int_or_none(sample)
        picked = picked if picked in ids else (ids[0] if ids else None)
        return {
            self.sample: gr.update(choices=self.sample_choices(listed), value=picked),
            **self._decision(picked, margin, listed),
        }

    @property
    def show_outputs(self) -> list:
        return [self.sample, *self.decision_outputs]

    @property
    def decision_outputs(self) -> list:
        return [
            self.open_html,
            self.decision_html,
            self.decision_table,
            self.draw_btn,
            self.estimate_html,
            self.estimate_table,
            self.estimate_plot,
        ]

    def _no_decision(self, message: str, kind: str = "info") -> dict:
        return {
            self.open_html: "",
            self.decision_html: render.message(message, kind),
            self.decision_table: pd.DataFrame([], columns=DECISION_COLUMNS),
            self.draw_btn: gr.update(visible=False),
            self.estimate_html: "",
            self.estimate_table: pd.DataFrame([], columns=ESTIMATE_COLUMNS),
            self.estimate_plot: None,
        }

    def estimate(self, sample, margin, request: gr.Request):
        """Every sample's decision in a line, then the picked sample's batch in detail (per label and for the
        batch), the button that draws the round, and the estimate at this look with the reviews the margin needs."""
        self.ctx.require(request, "lead")
        return self._decision(sample, margin)

    def _decision(self, sample, margin, listed: list | None = None) -> dict:
        sample = _int_or_none(sample)
        if sample is None:
            return self._no_decision(
                "No random sample to decide from yet: a lead draws one on Browse (Random review sample), filtered "
                "to the batch (a job's id), and has it reviewed."
            )
        db = self.ctx.db()
        try:
            e = quality.estimate(db, sample, margin)
            d = quality.decide(db, sample)
            listed = decisions(db) if listed is None else listed
        except (DataError, ValueError) as err:
            return self._no_decision(str(err), "error")
        s = e.sample
        how = (
            "drawn without strata: Wilson intervals"
            if e.method == "wilson"
            else f"stratified by hazard level ({s['stratify']}): the stratified estimate"
        )
        text = (
            f"The estimate at this look: {e.reviewed:,} of sample {int(s['id'])}'s clips reviewed, {how}, with the "
            f"finite-population correction; {e.rejected:,} rejected or broken (not counted); {e.pending:,} not "
            f"reviewed yet. Margin +/- {e.margin:.1%}: {tables.margin_text(e)} A 95 % interval holds for one look "
            f"at a size fixed in advance: decide from the {tables.BOUNDS_KIND} above. {tables.INTERVAL_KINDS_NOTE}"
        )
        draw = (
            gr.update(visible=True, value=f"Draw {d.draw:,} more into sample {int(s['id'])} (for its people)")
            if d.draw
            else gr.update(visible=False)
        )
        return {
            self.open_html: render_quality.open_decisions(listed, int(s["id"]), sample_count(db)),
            self.decision_html: render_quality.decision(d),
            self.decision_table: pd.DataFrame(quality.decision_rows(d), columns=DECISION_COLUMNS),
            self.draw_btn: draw,
            self.estimate_html: render_quality.estimate(text),
            self.estimate_table: pd.DataFrame(quality.estimate_rows(e), columns=tables.estimate_columns(e)),
            self.estimate_plot: estimate_figure(e, d),
        }

    def draw_more(self, sample, margin, request: gr.Request):
        """Draw the K more the decision asks for into the same sample, from the rest of its batch, for the sample's
        people (data.quality.rounds); then decide again. K is the decision's at the click, not the button's."""
        lead = self.ctx.require(request, "lead")
        sample = _int_or_none(sample)
        if sample is None:
            return {self.draw_msg: render.message("Pick a sample first.", "error")}
        db = self.ctx.db()
        try:
            d = quality.decide(db, sample)
            if not d.draw:
                out = self.estimate(sample, margin, request)
                return {**out, self.draw_msg: render.message("Nothing to draw: the decision changed.", "info")}
            r = rounds.draw_more(db, sample, d.draw, actor=lead.name, role=lead.role)
        except DataError as err:
            return {self.draw_msg: render.message(str(err), "error")}
        shares = ", ".join(f"{p} {n:,}" for p, n in r["assigned"].items()) or "nobody new"
        held = tables.held_text(r)
        said = (
            f"Drew {r['round_drawn']:,} more clips into sample {int(r['id'])} at random from the rest of its batch "
            f"(round {r['round']}, seed {r['round_seed']}), assigned to {shares}"
            + (f"; {held}" if held else "")
            + ". Review them, then decide again."
        )
        return {**self.estimate(sample, margin, request), self.draw_msg: render.message(said, "ok")}

    def set_target(self, label, target, confidence, sample, margin, request: gr.Request):
        """Set one label's target (and confidence), then decide again."""
        lead = self.ctx.require(request, "lead")
        try:
            t = targets.set_target(self.ctx.db(), label, target, confidence, actor=lead.name, role=lead.role)
        except DataError as err:
            return {self.target_msg: render.message(str(err), "error")}
        what = "no target" if t.target is None else f"{t.target:.3f} at {t.confidence:.1%} confidence"
        out = self.estimate(sample, margin, request) if _int_or_none(sample) is not None else {}
        return {**out, self.target_msg: render.message(f"{t.label.replace('_', ' ')}: {what}.", "ok")}

    def wire(self) -> None:
        gr.on(
            [self.estimate_btn.click, self.sample.input, self.margin.submit],
            shows_errors(self.estimate),
            [self.sample, self.margin],
            self.decision_outputs,
            api_name="quality_estimate",
        )
        self.draw_btn.click(
            shows_errors(self.draw_more),
            [self.sample, self.margin],
            [*self.decision_outputs, self.draw_msg],
            api_name="quality_draw_more",
        )
        self.target_btn.click(
            shows_errors(self.set_target),
            [self.target_label, self.target_value, self.target_confidence, self.sample, self.margin],
            [*self.decision_outputs, self.target_msg],
            api_name="quality_target",
        )


def _int_or_none(value) -> int | None:
    """A dropdown's id (an int, or text from a script), None when there is none."""
    try:
        return None if value in (None, "") else int(value)
    except (TypeError, ValueError):
        return None
