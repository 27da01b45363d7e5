"""The quality figures as people read them: table rows for the Quality tab and the terminal, and the terminal's
text (`python -m data.quality`).
"""

from __future__ import annotations

from typing import Any

from data.quality.accuracy import HISTOGRAM_BINS, Group, ItemStats, LabelStats, Report, TextStats
from data.quality.decision import Decision, LabelDecision
from data.quality.estimates import Estimate
from data.quality.pairs import LABELS
from data.quality.reviewers import Agreement
from data.taxonomy import MULTI


def _pct(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def label_rows(group: Group, agree: Agreement | None = None) -> list[list[Any]]:
    """The per-label table of a group as people read it: label, clips, the model's accuracy, and beside it how
    often two reviewers answering blind agree and their kappa (AGREEMENT_NOTE says how to read them), then the
    multi-choice label's Jaccard. Numbers as text."""
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


LABEL_COLUMNS = ["label", "clips", "accuracy", "two reviewers agree", "kappa", "clips reviewed twice", "note"]
AGREEMENT_NOTE = (
    "Decide from the model's accuracy (for a batch: the sample's decision above), not from the reviewers' "
    "agreement. The agreement says how often two people, the second one blind, give the same value: how far one "
    "reviewer's answer can be taken as the truth. An accuracy above it does not mean the model beats people: "
    "the first reviewer starts from the model's caption and may keep a doubtful value, so the accuracy leans "
    "high; a low agreement says the label's values need a clearer definition."
)


# Every interval the quality figures show is named by its kind where it is shown (issue 45: 11 of 16 right in a
# batch of 60 read 0.367-0.900 in the decision, 0.476-0.842 in the estimate and 0.444-0.858 on the release card,
# none saying which kind it was). Three kinds, each for what it answers:
BOUNDS_KIND = "bounds valid at every look (confidence sequence)"  # what a decision is made from (the target's conf.)
APPROVED_KIND = "95 % Wilson interval, one look, no batch correction"  # the model on clips people chose to review


def estimate_kind(method: str, population: int) -> str:
    """A sample estimate's interval, named: one look at a sample of a finite batch (narrower than without the
    correction, and narrower than the bounds valid at every look)."""
    how = "Wilson" if method == "wilson" else "stratified normal"
    return f"95 % {how} interval, one look, batch of {population:,} (finite-population correction)"


INTERVAL_KINDS_NOTE = (
    "For the same counts the three kinds of interval give different numbers, by design: a decision's bounds hold "
    "at every look (a lead may look after each review and stop), so they are usually the widest; a random "
    "sample's one-look interval over its finite batch is narrowed by the share of the batch already reviewed "
    "(every clip reviewed: the exact value); the plain Wilson interval of approved clips has no such correction."
)


def _bounds(low: float, high: float, exact: bool) -> str:
    return f"exact {low:.3f}" if exact else f"{low:.3f} - {high:.3f}"


def estimate_rows(e: Estimate) -> list[list[Any]]:
    """The sample estimate's table: label, estimate, 95 % interval, reviewed, more reviews for the margin (all
    the clips left, when only the exact value is that precise)."""
    rows = []
    for label, le in e.labels.items():
        i = le.interval
        if le.more is None:
            more = "-"
        elif le.exact_only:
            more = f"all {le.more:,} left (exact)"
        else:
            more = f"{le.more:,}"
        rows.append(
            [
                label,
                _pct(i.p if i else None),
                _bounds(i.low, i.high, i.exact) if i else "not yet (a stratum has no review)",
                f"{sum(s.reviewed for s in le.strata):,}",
                more,
            ]
        )
    return rows


ESTIMATE_COLUMNS = ["label", "estimate", "95 % interval, one look", "reviewed", "more reviews for the margin"]


def estimate_columns(e: Estimate) -> list[str]:
    """The estimate table's header, its interval named (estimate_kind)."""
    return ["label", "estimate", estimate_kind(e.method, e.sample["population"]), *ESTIMATE_COLUMNS[3:]]


def verdict_text(d: LabelDecision, pending: int = 0) -> str:
    """A label's decision in a table cell: accept, fix, review K more (all left: the exact value; a first round
    smaller than K said beside it), no target."""
    if d.verdict == "review":
        if pending and d.more <= pending:
            return f"review the {d.more:,} waiting"
        if d.exact_only:
            return f"review all {d.more:,} left (exact)"
        return f"review {d.more:,} more" + (f" ({d.round:,} first, then look)" if d.round < d.more else "")
    return d.verdict


def target_text(d: LabelDecision) -> str:
    t = d.target
    return "none" if t.target is None else f">= {t.target:.3f} at {t.confidence:.1%}"


def decision_rows(d: Decision) -> list[list[Any]]:
    """The decision's table: label, target (at its confidence), estimate, bounds valid at every look, clips
    reviewed, decision."""
    return [
        [
            label,
            target_text(x),
            _pct(x.estimate),
            "-" if x.bounds is None else _bounds(x.bounds.low, x.bounds.high, x.bounds.exact),
            f"{x.reviewed:,}",
            verdict_text(x, d.pending),
        ]
        for label, x in d.labels.items()
    ]


DECISION_COLUMNS = ["label", "target", "estimate", BOUNDS_KIND, "reviewed", "decision"]


def batch_name(s: dict) -> str:
    """A sample's batch in words, as it was at the draw: "the batch of sample 2 (44 clips of job 3 at its draw)"."""
    job = f" of job {s['job_id']}" if s.get("job_id") else ""
    return f"the batch of sample {s['id']} ({s['population']:,} clips{job} at its draw)"


def decision_text(d: Decision) -> str:
    """The batch's decision in words: what to do, and why."""
    s = d.sample
    batch = batch_name(s)
    if d.verdict == "no target":
        return f"No label of {batch} has a target: set one (Targets) to get a decision."
    if d.verdict == "accept":
        return (
            f"Accept {batch}: every label with a target reaches it (each lower bound at or above its target), so "
            f"its {s['population']:,} clips can be used as the model captioned them."
        )
    if d.verdict == "fix":
        names = ", ".join(x.replace("_", " ") for x in d.fix)
        return (
            f"Fix {batch}: {names} below target (the upper bound under it, whatever further reviews say). "
            "Review the batch (risk order first) or re-caption it with a better prompt."
        )
    if d.pending and d.draw == 0:
        return (
            f"Review {d.more:,} more of {batch}: the {d.pending:,} clips of the sample still waiting for review "
            "could change the decision; look again once they are reviewed."
        )
    return f"Review {d.more:,} more of {batch}: " + plan_text(d)


def _rate(x: LabelDecision) -> str:
    """The rate a plan assumes, in words: "hazard level right on 11 of 16, 0.688, against a target of 0.600"."""
    p, name = x.plan, x.label.replace("_", " ")
    rate = "" if p is None or p.rate is None else f", {p.rate:.3f},"
    return f"{name} right on {x.correct:,} of {x.reviewed:,}{rate} against a target of {x.target.target:.3f}"


def plan_text(d: Decision) -> str:
    """Why K, and what to do now: the K that decides at the rate so far (or that only the whole rest does, and how
    many of it must be right), and the round to draw first when it is smaller than K."""
    x = d.labels[d.binding]
    p = x.plan
    round_ = (
        f" Draw {d.draw:,} now, a round that at most doubles the {d.made:,} reviews made (an early rate moves), "
        "review them and look again."
        if d.draw and d.draw + d.pending < d.more
        else " Draw them into the sample (they stay a random sample of the batch), review them, and look again."
        if d.draw
        else ""
    )
    if p.exact_only:
        return (
            f"every clip left. At the rate so far ({_rate(x)}), no sample short of the whole batch decides; its "
            f"exact value does: it reaches the target if at least {p.needed:,} of the {p.left:,} clips left are "
            f"right (a rate of {p.needed / p.left:.3f}), and misses it otherwise." + round_
        )
    if p.verdict == "accept":
        then = f"accept, its lower bound then {p.after.low:.3f}, at or over the target"
    else:
        then = f"fix, its upper bound then {p.after.high:.3f}, under the target"
    every = "right" if p.verdict == "accept" else "wrong"
    could = (
        f" {p.could:,} is the fewest that could decide (were every one of them {every})." if p.could < p.more else ""
    )
    return f"at the rate so far ({_rate(x)}), {p.more:,} more would decide: {then}.{could}" + round_


def held_text(r: dict) -> str:
    """What a draw (data.quality.samples.draw, rounds.draw_more) left with people who held its clips already, and
    which clips other samples hold too, in words: "" when none."""
    parts = []
    if r.get("kept"):
        who = ", ".join(f"{n:,} with {p}" for p, n in r["kept"].items())
        parts.append(f"{sum(r['kept'].values()):,} stay with whoever had them ({who}): a draw takes nobody's clip")
    if r.get("also_in"):
        also = ", ".join(f"{n:,} of sample {sid}" for sid, n in r["also_in"].items())
        parts.append(f"members of another sample too ({also}): one review of a clip counts for each")
    return "; ".join(parts)


def margin_text(e: Estimate) -> str:
    """How many more reviews the margin asks for, in words: never more than the clips left."""
    if e.more == 0:
        return "every label is that precise already."
    if e.more is None:
        return "-"
    if e.exact_only:
        return (
            f"only reviewing all {e.more:,} clips left is that precise (the exact value: the batch is too small for "
            "a sample to be)."
        )
    return f"{e.more:,} more random reviews (of {e.left:,} clips left) bring every label within it."


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


def format_decision(d: Decision) -> str:
    """The terminal form of a decision: the batch's, then per label."""
    confidence = ", ".join(sorted({f"{x.target.confidence:.1%}" for x in d.labels.values()}))
    return "\n".join(
        [
            "Decision: " + decision_text(d),
            f"The decision's {BOUNDS_KIND}, at {confidence} confidence: look again after each round of reviews.",
            _table(DECISION_COLUMNS, decision_rows(d)),
        ]
    )


def format_text(
    r: Report,
    agree: Agreement | None,
    est: Estimate | None,
    *,
    detail: bool = False,
    decision: Decision | None = None,
) -> str:
    """The terminal form of a report, its reviewers' agreement and a sample estimate, the decision first."""
    out = [format_decision(decision) + "\n"] if decision is not None else []
    out += [
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
    if r.groups and agree is not None and agree.pairs:
        out.append(AGREEMENT_NOTE)
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
            + margin_text(est)
        )
        out.append(_table(estimate_columns(est), estimate_rows(est)))
        out.append(INTERVAL_KINDS_NOTE)
    return "\n".join(out)


def format_calibration(rows: list[dict]) -> str:
    """data.calibration's rows as a table per label (buckets that hold clips only)."""
    out = ["\nCalibration (accuracy by the model's confidence, every prompt version of the filter):"]
    for label in LABELS:
        mine = [r for r in rows if r["label"] == label and r["n"]]
        if not mine:
            out.append(f"{label}: no recorded confidence")
            continue
        if label in MULTI:  # one value per road user listed: say the values and the clips apart
            head = [label, "road users listed", "on clips", "accuracy", "mean confidence"]
            table = [
                [f"{r['low']:.1f}-{r['high']:.1f}", f"{r['n']:,}", f"{r['clips']:,}", _pct(r["accuracy"]),
                 _pct(r["confidence"])]
                for r in mine
            ]  # fmt: skip
        else:
            head = [label, "clips", "accuracy", "mean confidence"]
            table = [
                [f"{r['low']:.1f}-{r['high']:.1f}", f"{r['n']:,}", _pct(r["accuracy"]), _pct(r["confidence"])]
                for r in mine
            ]
        out.append(_table(head, table))
    return "\n".join(out)
