"""Quality tab (leads): what a batch is worth and what to do with it, then how good the machine captions are,
measured against what reviewers approved.

Thin over data.quality (the figures), data.quality.calibration (accuracy by the model's confidence) and
data.quality.prompt_compare (prompt versions on the same clips). Regions, top to bottom:
- the decision on a random sample's batch (webapp.quality.decision: the newest sample picked when the tab opens,
  accept / fix / review K more per label and for the batch, the K more drawn, the estimate, the targets);
- the scope (group by, job, prompt, the Browse filter or not); the accuracy of every group on every label;
- one group in detail (its per-label table with the blind reviewers' agreement beside the model's accuracy and a
  note on which to read, a bar chart of both, the confusion matrix of one label as a heatmap with per-class
  precision and recall, how much reviewers changed the text, that label's calibration, which counts clips for a
  single-choice label and road users listed for the list label);
- prompt versions compared on exactly the same clips.

Every handler checks the lead role itself (each event is an HTTP endpoint); non-leads get a note instead of the
tab's content. The figures are webapp.quality.plots'.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
import pandas as pd

from data import prompts, quality, taxonomy
from data.clips import Filter
from data.errors import DataError
from data.quality import calibration, prompt_compare, tables
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.quality import render as render_quality
from webapp.quality.decision import DecisionPanel
from webapp.quality.plots import (
    accuracy_figure,
    calibration_figure,
    compare_figure,
    edit_ratio_figure,
    items_figure,
    matrix_figure,
    version_name,
)

BY_CHOICES = [("model", "model"), ("prompt version", "prompt"), ("job", "job")]
OVERVIEW_COLUMNS = ["group", "clips", *quality.LABELS, "text edit ratio (median)"]
CLASS_COLUMNS = ["value", "precision", "recall", "approved as", "model said"]
ITEM_COLUMNS = ["item", "precision", "recall", "both", "model only", "reviewer only"]
COMPARE_COLUMNS = ["label", "version A", "version B", "change", "clips"]
CALIBRATION_COLUMNS = ["confidence", "clips", "right", "accuracy", "mean confidence"]
CALIBRATION_BUCKETS = 10


def calibration_columns(label: str) -> list[str]:
    """The calibration table's columns: a single-choice label counts clips; the list label counts the road users
    the model listed, and says on how many clips."""
    if label in taxonomy.MULTI:
        return ["confidence", "road users listed", "on clips", "right", "accuracy", "mean confidence"]
    return CALIBRATION_COLUMNS


def calibration_rows(rows: list[dict]) -> list[list[Any]]:
    """The calibration table (calibration_columns): a row per bucket that holds values."""
    return [
        [
            f"{r['low']:.1f} - {r['high']:.1f}",
            f"{r['n']:,}",
            *([f"{r['clips']:,}"] if r["label"] in taxonomy.MULTI else []),
            f"{r['correct']:,}",
            f"{r['accuracy']:.3f}",
            f"{r['confidence']:.3f}",
        ]
        for r in rows
        if r["n"]
    ]


def overview_rows(r: quality.Report) -> list[list[Any]]:
    """One row per group: its clips, its accuracy on each label, its text's median edit ratio."""
    rows = []
    for g in r.groups:
        acc = [g.labels[n].accuracy if n in g.labels else None for n in quality.LABELS]
        median = g.text.median
        rows.append(
            [
                g.name,
                f"{g.n:,}",
                *["-" if a is None else f"{a:.3f}" for a in acc],
                "-" if median is None else f"{median:.3f}",
            ]
        )
    return rows


def class_rows(s: quality.LabelStats | quality.ItemStats) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of a label's per-class (or per-item) precision and recall."""

    def f(x):
        return "-" if x is None else f"{x:.3f}"

    if isinstance(s, quality.ItemStats):
        return ITEM_COLUMNS, [
            [i, f(s.precision(i)), f(s.recall(i)), s.tp.get(i, 0), s.fp.get(i, 0), s.fn.get(i, 0)] for i in s.items
        ]
    return CLASS_COLUMNS, [
        [c, f(s.precision(c)), f(s.recall(c)), sum(s.matrix[i]), sum(row[i] for row in s.matrix)]
        for i, c in enumerate(s.classes)
    ]


def _group_value(key: dict) -> str:
    return json.dumps(key, sort_keys=True)


class QualityTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.decision = DecisionPanel(ctx)

    # -- render ----------------------------------------------------------------------------------------------

    def render(self) -> None:
        self.note = gr.HTML("", elem_id="quality-note")
        with gr.Column(visible=False, elem_id="quality-body") as self.body:
            self.decision.render()
            gr.Markdown(
                "Below: the model measured against what reviewers approved, on every approved clip of the scope "
                "(not a random sample: reviewers chose these clips). Each approved clip pairs the machine caption its "
                "approved caption started from with what was approved. The README's *Quality* section says what "
                "each figure means and how to decide from it."
            )
            with gr.Row():
                self.by = gr.CheckboxGroup(
                    BY_CHOICES, value=list(quality.DEFAULT_BY), label="Group by", elem_id="quality-by"
                )
                self.job = gr.Textbox(label="Job (its machine captions)", placeholder="any", elem_id="quality-job")
                self.prompt = gr.Textbox(
                    label="Prompt (NAME or NAME:VERSION)", placeholder="any", elem_id="quality-prompt"
                )
                self.use_filter = gr.Checkbox(
                    value=True, label="Only the clips of the Browse filter", elem_id="quality-use-filter"
                )
                self.refresh_btn = gr.Button("Refresh", elem_id="btn-quality-refresh", size="sm")
            self.summary = gr.HTML("", elem_id="quality-summary")
            self.overview = gr.Dataframe(
                headers=OVERVIEW_COLUMNS,
                interactive=False,
                label="Accuracy per group and label (share of approved clips the model got right)",
                elem_id="quality-overview",
            )
            with gr.Row():
                self.group = gr.Dropdown([], label="Group shown below", elem_id="quality-group")
                self.label = gr.Dropdown(
                    list(quality.LABELS), value="hazard_level", label="Label in detail", elem_id="quality-label"
                )
            self.labels = gr.Dataframe(
                headers=quality.LABEL_COLUMNS,
                interactive=False,
                label="Per label: the model's accuracy, and how often two reviewers agree (the second one blind)",
                elem_id="quality-labels",
            )
            gr.HTML(render_quality.agreement_note(tables.AGREEMENT_NOTE))
            self.accuracy_plot = gr.Plot(label="Accuracy per label", elem_id="quality-accuracy-plot", format="png")
            with gr.Row():
                self.matrix_plot = gr.Plot(label="Confusion matrix", elem_id="quality-matrix", format="png")
                self.classes = gr.Dataframe(
                    headers=CLASS_COLUMNS, interactive=False, label="Per value", elem_id="quality-classes"
                )
            self.text_plot = gr.Plot(label="How much reviewers changed the text", elem_id="quality-text", format="png")
            with gr.Accordion(
                "Calibration: does the model's confidence say when it is right?", open=True, elem_id="quality-cal-box"
            ):
                self.cal_note = gr.HTML("", elem_id="quality-cal-note")
                with gr.Row():
                    self.cal_plot = gr.Plot(elem_id="quality-cal-plot", format="png")
                    self.cal_table = gr.Dataframe(
                        headers=CALIBRATION_COLUMNS, interactive=False, elem_id="quality-cal-table"
                    )
            with gr.Accordion("Prompt versions on the same clips", open=True, elem_id="quality-compare-box"):
                with gr.Row():
                    self.ver_a = gr.Dropdown([], label="Version A", elem_id="quality-ver-a")
                    self.ver_b = gr.Dropdown([], label="Version B", elem_id="quality-ver-b")
                    self.compare_btn = gr.Button("Compare", elem_id="btn-quality-compare", size="sm")
                self.compare_html = gr.HTML("", elem_id="quality-compare")
                self.compare_table = gr.Dataframe(
                    headers=COMPARE_COLUMNS, interactive=False, elem_id="quality-compare-table"
                )
                self.compare_plot = gr.Plot(elem_id="quality-compare-plot", format="png")

    # -- handlers ---------------------------------------------------------------------------------------------

    def _lead(self, request: gr.Request):
        return self.ctx.require(request, "lead")

    def _filter(self, use_filter: bool, fdict) -> Filter:
        return Filter.from_dict(fdict) if use_filter else Filter()

    @property
    def outputs(self) -> list:
        return [
            self.summary,
            self.overview,
            self.group,
            self.labels,
            self.accuracy_plot,
            self.matrix_plot,
            self.classes,
            self.text_plot,
            self.cal_note,
            self.cal_plot,
            self.cal_table,
        ]

    def refresh(self, by, job, prompt, use_filter, fdict, group, label, request: gr.Request):
        """The report for the scope, its reviewers' agreement, and the chosen group and label in detail."""
        self._lead(request)
        db = self.ctx.db()
        try:
            f = self._filter(use_filter, fdict)
            scope = quality.Scope.of(job=job, prompt=prompt)
            r = quality.report(db, f, scope, by=by or ())
            agree = quality.agreement(db, f)
        except DataError as e:
            return {self.summary: render.message(str(e), "error")}
        where = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in f.to_dict().items()) or "every clip"
        out: dict = {self.summary: render_quality.report_counts(r.approved, where, r.without_origin, agree.pairs)}
        out[self.overview] = pd.DataFrame(overview_rows(r), columns=OVERVIEW_COLUMNS)
        choices = [(f"{g.name} ({g.n:,} clips)", _group_value(g.key)) for g in r.groups]
        values = [v for _, v in choices]
        chosen = group if group in values else (values[0] if values else None)
        out[self.group] = gr.update(choices=choices, value=chosen)
        g = r.groups[values.index(chosen)] if chosen else None
        if g is None:
            out[self.summary] += render.message(
                "No approved clip here has a machine caption to measure: approve some, or widen the scope.", "info"
            )
            for c in (self.accuracy_plot, self.matrix_plot, self.text_plot, self.cal_plot):
                out[c] = None
            out[self.cal_note] = ""
            out[self.cal_table] = pd.DataFrame([], columns=CALIBRATION_COLUMNS)
            out[self.labels] = pd.DataFrame([], columns=quality.LABEL_COLUMNS)
            out[self.classes] = pd.DataFrame([], columns=CLASS_COLUMNS)
            return out
        out[self.labels] = pd.DataFrame(quality.label_rows(g, agree), columns=quality.LABEL_COLUMNS)
        out[self.accuracy_plot] = accuracy_figure(g, agree)
        s = g.labels.get(label if label in g.labels else next(iter(g.labels)))
        out[self.matrix_plot] = items_figure(s) if isinstance(s, quality.ItemStats) else matrix_figure(s)
        columns, rows = class_rows(s)
        out[self.classes] = pd.DataFrame(rows, columns=columns)
        out[self.text_plot] = edit_ratio_figure(g.text)
        out.update(self._calibration(f, s.label))
        return out

    def _calibration(self, f: Filter, label: str) -> dict:
        """Accuracy by confidence bucket for one label, over the approved clips of the filter (data.quality.calibration:
        every prompt version together; captions without recorded confidence are left out)."""
        rows = calibration.calibration(self.ctx.db(), f, label, CALIBRATION_BUCKETS)
        n = sum(r["n"] for r in rows)
        if not n:
            return {
                self.cal_note: render.message(
                    f"No approved clip here has a recorded confidence for {label}: captions of jobs run without "
                    "token logprobs (or before they were recorded) have none.",
                    "info",
                ),
                self.cal_plot: None,
                self.cal_table: pd.DataFrame([], columns=CALIBRATION_COLUMNS),
            }
        clips = rows[0]["label_clips"]
        what = (
            f"{n:,} road users the model listed, on {clips:,} clips"
            if label in taxonomy.MULTI
            else f"{clips:,} clips, one value each"
        )
        return {
            self.cal_note: render_quality.calibration_note(label, clips, n, what),
            self.cal_plot: calibration_figure(label, rows),
            self.cal_table: pd.DataFrame(calibration_rows(rows), columns=calibration_columns(label)),
        }

    def show(self, by, job, prompt, use_filter, fdict, group, label, sample, margin, request: gr.Request):
        """The tab shown: its choices (prompt versions, samples: the one shown stays, else the newest is picked),
        the decision on the picked sample's batch, and the report."""
        user = self.ctx.user(request)
        if not user.can("lead"):
            return {
                self.note: render.message("The Quality view is for leads.", "info"),
                self.body: gr.update(visible=False),
            }
        db = self.ctx.db()
        versions = [(f"{p['name']} v{p['version']}", p["id"]) for p in prompts.list_prompts(db)]
        out = self.refresh(by, job, prompt, use_filter, fdict, group, label, request)
        out.update(
            {
                self.note: "",
                self.body: gr.update(visible=True),
                self.ver_a: gr.update(choices=versions),
                self.ver_b: gr.update(choices=versions),
            }
        )
        out.update(self.decision.show(job, sample, margin, request))
        return out

    def compare(self, a, b, use_filter, fdict, request: gr.Request):
        """Two prompt versions, each against the approved caption, on exactly the clips both captioned."""
        self._lead(request)
        if a in (None, "") or b in (None, ""):
            return {self.compare_html: render.message("Choose two prompt versions.", "error")}
        try:
            cmp = prompt_compare.compare(self.ctx.db(), int(a), int(b), self._filter(use_filter, fdict))
        except DataError as e:
            return {self.compare_html: render.message(str(e), "error")}
        n = cmp["clips"]
        if not n:
            return {
                self.compare_html: render.message(
                    f"No approved clip has a machine caption of both {version_name(cmp['a'])} and "
                    f"{version_name(cmp['b'])}: run the new version on the approved clips (Jobs, Prompt versions).",
                    "info",
                ),
                self.compare_table: pd.DataFrame([], columns=COMPARE_COLUMNS),
                self.compare_plot: None,
            }
        lines, rows = [], []
        for name, x in cmp["labels"].items():
            a_acc, b_acc = x["a_accuracy"], x["b_accuracy"]
            lines.append(f"{name.replace('_', ' ')} {a_acc:.2f} → {b_acc:.2f} on {n:,} clips")
            rows.append([name, f"{a_acc:.3f}", f"{b_acc:.3f}", f"{b_acc - a_acc:+.3f}", f"{n:,}"])
        return {
            self.compare_html: render_quality.compare_lines(version_name(cmp["a"]), version_name(cmp["b"]), lines),
            self.compare_table: pd.DataFrame(rows, columns=COMPARE_COLUMNS),
            self.compare_plot: compare_figure(cmp),
        }

    # -- wiring -----------------------------------------------------------------------------------------------

    def inputs(self, filter_state: gr.State) -> list:
        return [self.by, self.job, self.prompt, self.use_filter, filter_state, self.group, self.label]

    def show_inputs(self, filter_state: gr.State) -> list:
        return [*self.inputs(filter_state), self.decision.sample, self.decision.margin]

    @property
    def show_outputs(self) -> list:
        return [*self.outputs, self.note, self.body, self.ver_a, self.ver_b, *self.decision.show_outputs]

    def wire(self, filter_state: gr.State) -> None:
        gr.on(
            [self.refresh_btn.click, self.group.input, self.label.input],
            shows_errors(self.refresh),
            self.inputs(filter_state),
            self.outputs,
            api_name="quality_refresh",
            show_progress="minimal",
        )
        self.compare_btn.click(
            shows_errors(self.compare),
            [self.ver_a, self.ver_b, self.use_filter, filter_state],
            [self.compare_html, self.compare_table, self.compare_plot],
            api_name="quality_compare",
        )
        self.decision.wire()
