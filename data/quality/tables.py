"""The quality figures as people read them: table rows for the Quality tab and the terminal, and the terminal's
text (`python -m data.quality`).
"""

from __future__ import annotations

from typing import Any

from data.quality.accuracy import HISTOGRAM_BINS, Group, ItemStats, LabelStats, Report, TextStats
from data.quality.estimates import Estimate
from data.quality.pairs import LABELS
from data.quality.reviewers import Agreement


def _pct(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def label_rows(group: Group, agree: Agreement | None = None) -> list[list[Any]]:
    """The per-label table of a group as people read it: label, clips, the model's accuracy, and beside it the
    reviewers' agreement and kappa (its ceiling), then the multi-choice label's Jaccard. Numbers as text."""
    rows = []
    for label, s in group.labels.items():
        a = agree.labels.get(label) if agree else None
        extra = f"Jaccard {_pct(s.jaccard)}" if isinstance(s, ItemStats) else ""
        rows.append(
            [
                label,
                f"{s.n:,}",
                _pct(s.accuracy),
                _pct(a.agree) if a and a.n else "-",
                _pct(a.kappa, 2) if a and a.n else "-",
                f"{a.n:,}" if a else "0",
                extra,
            ]
        )
    return rows


LABEL_COLUMNS = ["label", "clips", "accuracy", "reviewers agree", "kappa", "clips reviewed twice", "note"]


def estimate_rows(e: Estimate) -> list[list[Any]]:
    """The sample estimate's table: label, estimate, 95 % interval, reviewed, more reviews for the margin."""
    rows = []
    for label, le in e.labels.items():
        i = le.interval
        rows.append(
            [
                label,
                _pct(i.p if i else None),
                f"{i.low:.3f} - {i.high:.3f}" if i else "not yet (a stratum has no review)",
                f"{sum(s.reviewed for s in le.strata):,}",
                "-" if le.more is None else f"{le.more:,}",
            ]
        )
    return rows


ESTIMATE_COLUMNS = ["label", "estimate", "95 % interval", "reviewed", "more reviews for the margin"]


def _table(header: list[str], rows: list[list[Any]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def _text_line(t: TextStats) -> str:
    if not t.n:
        return "text: no pairs"
    hist = ", ".join(
        f"{i / HISTOGRAM_BINS:.1f}-{(i + 1) / HISTOGRAM_BINS:.1f}: {c / t.n:.1%}"
        for i, c in enumerate(t.histogram)
        if c
    )
    return (
        f"text: median edit ratio {t.median:.3f} (0: kept, 1: rewritten); unchanged {t.unchanged / t.n:.1%} "
        f"of {t.n:,}; distribution {hist}"
    )


def _detail(s: LabelStats | ItemStats) -> str:
    if isinstance(s, ItemStats):
        rows = [
            [i, _pct(s.precision(i)), _pct(s.recall(i)), s.tp.get(i, 0), s.fp.get(i, 0), s.fn.get(i, 0)]
            for i in s.items
        ]
        return _table([s.label + " item", "precision", "recall", "both", "model only", "reviewer only"], rows)
    per = _table(
        [s.label, "precision", "recall", "approved as"],
        [[c, _pct(s.precision(c)), _pct(s.recall(c)), sum(s.matrix[i])] for i, c in enumerate(s.classes)],
    )
    matrix = _table(["approved \\ model said", *s.classes], [[c, *s.matrix[i]] for i, c in enumerate(s.classes)])
    return per + "\n\n" + matrix


def format_text(r: Report, agree: Agreement | None, est: Estimate | None, *, detail: bool = False) -> str:
    """The terminal form of a report, its reviewers' agreement and a sample estimate."""
    out = [
        f"Quality on {r.approved:,} approved clips ({r.without_origin:,} written from scratch: no machine caption "
        f"to measure); grouped by {', '.join(r.by) or 'nothing'}."
    ]
    if agree is not None:
        out.append(
            f"Reviewers: {agree.pairs:,} clips reviewed twice, blind"
            + (f"; they agree on the decision {_pct(agree.decision.agree)}" if agree.pairs else "")
            + "."
        )
    if not r.groups:
        out.append("\nNo approved clip here has a machine caption to measure: approve some first, or widen the filter.")
    for g in r.groups:
        out.append(f"\n{g.name}: {g.n:,} clips")
        out.append(_table(LABEL_COLUMNS, label_rows(g, agree)))
        out.append(_text_line(g.text))
        if detail:
            out += ["\n" + _detail(s) for s in g.labels.values()]
    if est is not None:
        s = est.sample
        how = (
            "without strata (Wilson interval)"
            if est.method == "wilson"
            else f"stratified ({s['stratify']}) by hazard level"
        )
        out.append(
            f"\nSample {s['id']}{' of job %s' % s['job_id'] if s.get('job_id') else ''}: {s['drawn']:,} of "
            f"{s['population']:,} clips drawn at random, {how}; {est.reviewed:,} reviewed, {est.rejected:,} "
            f"rejected or broken (not counted), {est.pending:,} pending. Margin +/- {est.margin:.1%}: "
            + (
                "no more reviews needed."
                if est.more == 0
                else f"{est.more:,} more reviews needed."
                if est.more
                else "-"
            )
        )
        out.append(_table(ESTIMATE_COLUMNS, estimate_rows(est)))
    return "\n".join(out)


def format_calibration(rows: list[dict]) -> str:
    """data.calibration's rows as a table per label (buckets that hold clips only)."""
    out = ["\nCalibration (accuracy by the model's confidence, every prompt version of the filter):"]
    for label in LABELS:
        mine = [r for r in rows if r["label"] == label and r["n"]]
        if not mine:
            out.append(f"{label}: no recorded confidence")
            continue
        table = [
            [f"{r['low']:.1f}-{r['high']:.1f}", f"{r['n']:,}", _pct(r["accuracy"]), _pct(r["confidence"])] for r in mine
        ]
        out.append(_table([label, "clips", "accuracy", "mean confidence"], table))
    return "\n".join(out)
