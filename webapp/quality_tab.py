"""Quality tab (leads): how good the machine captions are, measured against what reviewers approved.

Thin over data.quality (the figures), data.quality.calibration (accuracy by the model's confidence),
data.quality.prompt_compare (prompt versions on the same clips) and data.quality.samples (the random samples an
estimate rests on). Regions, top to bottom: the scope (group by, job, prompt, the Browse filter or not); the
accuracy of every group on every label; one group in detail (its per-label table with the reviewers' agreement
beside the model's accuracy, a bar chart of both, the confusion matrix of one label as a heatmap with per-class
precision and recall, how much reviewers changed the text, that label's calibration); prompt versions compared on
exactly the same clips; and what an unreviewed batch is worth, from a random sample, for a margin the lead picks.

Every handler checks the lead role itself (each event is an HTTP endpoint); non-leads get a note instead of the
tab's content. Plots are matplotlib figures (gr.Plot), made with the object API, never pyplot's global state.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
import pandas as pd

from data import prompts, quality, taxonomy
from data.clips import Filter
from data.errors import DataError
from data.quality import calibration, prompt_compare
from webapp import render
from webapp.context import AppContext, shows_errors

BY_CHOICES = [("model", "model"), ("prompt version", "prompt"), ("job", "job")]
OVERVIEW_COLUMNS = ["group", "clips", *quality.LABELS, "text edit ratio (median)"]
CLASS_COLUMNS = ["value", "precision", "recall", "approved as", "model said"]
ITEM_COLUMNS = ["item", "precision", "recall", "both", "model only", "reviewer only"]
ESTIMATE_COLUMNS = quality.ESTIMATE_COLUMNS
COMPARE_COLUMNS = ["label", "version A", "version B", "change", "clips"]
CALIBRATION_COLUMNS = ["confidence", "clips", "right", "accuracy", "mean confidence"]
CALIBRATION_BUCKETS = 10
GREEN, GREY, BLUE = "#2e7d32", "#9e9e9e", "#1565c0"


def _figure(width: float = 7.0, height: float = 3.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots()


def accuracy_figure(group: quality.Group, agree: quality.Agreement | None):
    """Bars: the model's accuracy per label; a tick over each: how often two reviewers agree (its ceiling)."""
    fig, ax = _figure()
    names = list(group.labels)
    acc = [group.labels[n].accuracy or 0.0 for n in names]
    ax.barh(names, acc, color=BLUE, label="model vs approved")
    if agree is not None:
        ceiling = [(i, agree.labels[n].agree) for i, n in enumerate(names) if n in agree.labels and agree.labels[n].n]
        if ceiling:
            ys, xs = zip(*ceiling)
            ax.scatter(xs, ys, marker="|", s=400, color="black", label="two reviewers agree", zorder=3)
    for i, a in enumerate(acc):
        ax.text(
            min(a, 0.98),
            i,
            f" {a:.2f}",
            va="center",
            ha="right" if a > 0.9 else "left",
            fontsize=8,
            color="white" if a > 0.9 else "black",
        )
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of approved clips the model got right")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    return fig


def matrix_figure(s: quality.LabelStats):
    """The confusion matrix as a heatmap: rows what reviewers approved, columns what the model said, each row
    shaded by its share (a rare class reads as clearly as a common one) and labelled with its count."""
    k = len(s.classes)
    fig, ax = _figure(max(4.5, 0.55 * k + 2.5), max(3.2, 0.45 * k + 1.6))
    shares = [[c / sum(row) if sum(row) else 0.0 for c in row] for row in s.matrix]
    ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    for i, row in enumerate(s.matrix):
        for j, c in enumerate(row):
            if c:
                ax.text(
                    j,
                    i,
                    f"{c:,}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if shares[i][j] > 0.6 else "black",
                )
    ax.set_xticks(range(k), s.classes, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(k), s.classes, fontsize=8)
    ax.set_xlabel("the model said")
    ax.set_ylabel("reviewers approved")
    ax.set_title(f"{s.label}: accuracy {s.accuracy:.3f} on {s.n:,} clips" if s.n else s.label, fontsize=10)
    return fig


def items_figure(s: quality.ItemStats):
    """Per item of the multi-choice label: precision and recall side by side."""
    fig, ax = _figure()
    items = s.items
    xs = range(len(items))
    ax.bar([x - 0.2 for x in xs], [s.precision(i) or 0 for i in items], 0.4, color=BLUE, label="precision")
    ax.bar([x + 0.2 for x in xs], [s.recall(i) or 0 for i in items], 0.4, color=GREEN, label="recall")
    ax.set_xticks(list(xs), items, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_title(f"{s.label}: exact set {s.accuracy or 0:.3f}, mean Jaccard {s.jaccard or 0:.3f}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def edit_ratio_figure(t: quality.TextStats):
    """How much reviewers changed the text: clips per tenth of the word-level edit ratio."""
    fig, ax = _figure(7.0, 2.6)
    bins = quality.HISTOGRAM_BINS
    ax.bar([i / bins for i in range(bins)], t.histogram, width=1 / bins, align="edge", color=GREY, edgecolor="white")
    if t.median is not None:
        ax.axvline(t.median, color="black", linestyle="--", label=f"median {t.median:.3f}")
        ax.legend(fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("word-level edit ratio (0: kept as written, 1: rewritten)")
    ax.set_ylabel("clips")
    return fig


def _counted(label: str) -> str:
    """What one point of a label's calibration is: a clip, or (the list label) a road user the model listed."""
    return "road users listed" if label in taxonomy.MULTI else "clips"


def calibration_figure(label: str, rows: list[dict]):
    """Accuracy against the model's confidence, bucket by bucket (a calibrated model sits on the diagonal), with
    how many values (clips, or road users listed) each bucket holds."""
    fig, ax = _figure(5.5, 4.0)
    ax.plot([0, 1], [0, 1], color=GREY, linestyle="--", label="calibrated")
    full = [r for r in rows if r["n"]]
    ax.plot([r["confidence"] for r in full], [r["accuracy"] for r in full], marker="o", color=BLUE, label="the model")
    for r in full:
        ax.annotate(
            f"{r['n']:,}", (r["confidence"], r["accuracy"]), textcoords="offset points", xytext=(4, -10), fontsize=7
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("the model's confidence in its value")
    ax.set_ylabel("share approved as it said")
    ax.set_title(f"{label}: accuracy by confidence ({_counted(label)} per point)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return fig


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


def compare_figure(cmp: dict):
    """Two prompt versions' accuracy per label, on the same clips."""
    fig, ax = _figure()
    names = list(cmp["labels"])
    xs = range(len(names))
    a = [cmp["labels"][n]["a_accuracy"] or 0 for n in names]
    b = [cmp["labels"][n]["b_accuracy"] or 0 for n in names]
    ax.bar([x - 0.2 for x in xs], a, 0.4, color=GREY, label=_version_name(cmp["a"]))
    ax.bar([x + 0.2 for x in xs], b, 0.4, color=BLUE, label=_version_name(cmp["b"]))
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(f"on the same {cmp['clips']:,} approved clips", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def estimate_figure(e: quality.Estimate):
    """Each label's estimated accuracy over the population with its 95 % interval."""
    fig, ax = _figure()
    names = [n for n, le in e.labels.items() if le.interval is not None]
    for i, n in enumerate(names):
        iv = e.labels[n].interval
        ax.errorbar(iv.p, i, xerr=[[iv.p - iv.low], [iv.high - iv.p]], fmt="o", color=BLUE, capsize=4)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("estimated accuracy over the whole batch (95 % interval)")
    return fig


def _version_name(v: dict) -> str:
    return f"{v['name']} v{v['version']}"


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

    # -- render ----------------------------------------------------------------------------------------------

    def render(self) -> None:
        self.note = gr.HTML("", elem_id="quality-note")
        with gr.Column(visible=False, elem_id="quality-body") as self.body:
            gr.Markdown(
                "The model measured against what reviewers approved: each approved clip pairs the machine caption "
                "its approved caption started from with what was approved. The README's *Quality* section says what "
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
                label="Per label: the model's accuracy, and two reviewers' agreement (its ceiling)",
                elem_id="quality-labels",
            )
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
            with gr.Accordion(
                "What an unreviewed batch is worth (from a random sample)", open=True, elem_id="quality-estimate-box"
            ):
                with gr.Row():
                    self.sample = gr.Dropdown([], label="Random sample", elem_id="quality-sample")
                    self.margin = gr.Number(
                        quality.DEFAULT_MARGIN * 100, label="Margin (+/- points)", elem_id="quality-margin"
                    )
                    self.estimate_btn = gr.Button("Estimate", elem_id="btn-quality-estimate", size="sm")
                self.estimate_html = gr.HTML("", elem_id="quality-estimate")
                self.estimate_table = gr.Dataframe(
                    headers=ESTIMATE_COLUMNS, interactive=False, elem_id="quality-estimate-table"
                )
                self.estimate_plot = gr.Plot(elem_id="quality-estimate-plot", format="png")

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
        text = (
            f"{r.approved:,} approved clips ({render.esc(where)}); {r.without_origin:,} of them written from scratch "
            f"(no machine caption to measure). {agree.pairs:,} reviewed twice, blind."
        )
        out: dict = {
            self.summary: f'<div class="cw-counts" id="quality-counts" data-approved="{r.approved}">{text}</div>'
        }
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
            self.cal_note: f'<div class="cw-counts" id="quality-cal-text" data-clips="{clips}" data-values="{n}">'
            f"{render.esc(label)}: {what}, every prompt version of the filter. Points under the diagonal: the "
            "model is surer than it is right.</div>",
            self.cal_plot: calibration_figure(label, rows),
            self.cal_table: pd.DataFrame(calibration_rows(rows), columns=calibration_columns(label)),
        }

    def show(self, by, job, prompt, use_filter, fdict, group, label, request: gr.Request):
        """The tab shown: its choices (prompt versions, samples) and the report."""
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
                self.sample: gr.update(choices=self.sample_choices(job)),
            }
        )
        return out

    def sample_choices(self, job) -> list[tuple[str, int]]:
        try:
            scope = quality.Scope.of(job=job)
        except DataError:
            scope = quality.Scope()
        out = []
        for s in quality.samples_for(self.ctx.db(), scope):
            how = "no strata" if s["stratify"] == "none" else f"by hazard level, {s['stratify']}"
            job_text = f" · job {s['job_id']}" if s["job_id"] else ""
            out.append(
                (
                    f"sample {s['id']}{job_text} · {s['drawn']:,} of {s['population']:,} clips · {how} · "
                    f"{s['reviewed']:,} reviewed",
                    s["id"],
                )
            )
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
                    f"No approved clip has a machine caption of both {_version_name(cmp['a'])} and "
                    f"{_version_name(cmp['b'])}: run the new version on the approved clips (Jobs, Prompt versions).",
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
        head = (
            f"{render.esc(_version_name(cmp['a']))} → {render.esc(_version_name(cmp['b']))}, each against what "
            "reviewers approved, on the same clips. A version whose caption the reviewer started from has an edge."
        )
        items = "".join(f"<li>{render.esc(line)}</li>" for line in lines)
        return {
            self.compare_html: f'<div class="cw-counts" id="quality-compare-lines">{head}<ul>{items}</ul></div>',
            self.compare_table: pd.DataFrame(rows, columns=COMPARE_COLUMNS),
            self.compare_plot: compare_figure(cmp),
        }

    def estimate(self, sample, margin, request: gr.Request):
        """Each label's accuracy over the sample's population, and the reviews needed for the margin."""
        self._lead(request)
        if sample in (None, ""):
            return {
                self.estimate_html: render.message(
                    "Choose a random sample (a lead draws one on Browse: Sample panel).", "error"
                )
            }
        try:
            e = quality.estimate(self.ctx.db(), int(sample), margin)
        except (DataError, ValueError) as err:
            return {self.estimate_html: render.message(str(err), "error")}
        s = e.sample
        how = (
            "drawn without strata: Wilson intervals"
            if e.method == "wilson"
            else f"stratified by hazard level ({s['stratify']}): the stratified estimate"
        )
        more = e.more
        need = (
            f"Every label is within +/- {e.margin:.1%}: this batch's figures are as precise as asked."
            if more == 0
            else f"{more:,} more random reviews bring every label within +/- {e.margin:.1%}"
            + (
                f" ({e.pending:,} of this sample's clips are still waiting)."
                if e.pending
                else " (draw a larger sample)."
            )
            if more is not None
            else "More reviews than the library holds would be needed for that margin."
        )
        text = (
            f"Sample {int(s['id'])}: {s['drawn']:,} of {s['population']:,} clips drawn at random, {how}. "
            f"{e.reviewed:,} reviewed; {e.rejected:,} rejected or broken (no approved labels: not counted); "
            f"{e.pending:,} not reviewed yet. "
        )
        return {
            self.estimate_html: f'<div class="cw-counts" id="quality-estimate-text">{render.esc(text + need)}</div>',
            self.estimate_table: pd.DataFrame(quality.estimate_rows(e), columns=ESTIMATE_COLUMNS),
            self.estimate_plot: estimate_figure(e),
        }

    # -- wiring -----------------------------------------------------------------------------------------------

    def inputs(self, filter_state: gr.State) -> list:
        return [self.by, self.job, self.prompt, self.use_filter, filter_state, self.group, self.label]

    @property
    def show_outputs(self) -> list:
        return [*self.outputs, self.note, self.body, self.ver_a, self.ver_b, self.sample]

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
        gr.on(
            [self.estimate_btn.click, self.sample.input],
            shows_errors(self.estimate),
            [self.sample, self.margin],
            [self.estimate_html, self.estimate_table, self.estimate_plot],
            api_name="quality_estimate",
        )
