"""From a random sample to a decision, per label and for the batch: accept, fix, or review K more.

The rule (acceptance sampling stated with bounds; the README's "Quality" section says how a lead uses it), for
each label with a target (data.quality.targets) at its confidence:
- **accept** when the lower bound of the batch's accuracy reaches the target;
- **fix** when the upper bound is below it;
- otherwise **review K more**: the fewest further reviews that would decide if the clips still to review are right
  as often as those reviewed so far, but no more than doubles the reviews made (unless fewer could not decide at
  all), and never more than the clips left (all of them: the exact value, which always decides);
  data.quality.rounds draws them into the same sample, so they stay a random sample of the batch.

Why the doubling cap: an estimate from a first small sample is noisy, and one that happens to sit on the target
(45 of 50 against 0.90) plans for the whole batch. Looking again after each doubling, which the bounds allow, costs
at most twice the reviews that would have decided. In simulated batches of 50,000 at an accuracy of 0.87 against
0.90, planning at the first estimate asked for all 50,000 in more than one batch in ten; with the cap, nine in ten
decided within 3,200 reviews (benchmarks/bench_decision.py, docs/BENCHMARKS.md).

The bounds are a confidence sequence (data.quality.sequential): they hold at every look with the stated
confidence, so looking again after each round of reviews, and stopping once they decide, keeps the error rate of
each decision under 1 - confidence. They are wider than the single-look Wilson interval the estimate table
shows: that interval is the figure to read, the bounds the one to decide from.

Two conditions, said where the decision is shown:
- Members drawn but still waiting for review may be the hard ones (the queue serves likely mistakes first), so
  the ones reviewed are not a random part of the sample. While some wait, a label is accepted only if it would be
  with every waiting one wrong, and fixed only if it would be with every one right (the look after they are all
  reviewed, which the sequence covers, could not decide otherwise); else the verdict is "review the K waiting".
- A member rejected or marked broken has no approved labels: it is not measured, and the batch's accuracy is
  over the clips whose captions reviewers approved (each label's population leaves out the members known not to
  be measurable).

The batch: **fix** when any required label is fixed (named), **accept** when every required label is accepted,
otherwise **review K more** with the largest K of the undecided labels (the same clips serve every label).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from data.quality import samples, sequential
from data.quality.estimates import tally
from data.quality.pairs import LABELS
from data.quality.stats import Stratum
from data.quality.targets import Target, get_all

VERDICTS = ("accept", "fix", "review", "no target")


@dataclass
class LabelDecision:
    """One label's verdict: `estimate` (None until every stratum has a review), `bounds` (valid at every look,
    at the target's confidence), `verdict` (one of VERDICTS), `more` reviews to make (for "review"), `left` clips
    of the label's population not reviewed, `reviewed` clips measured."""

    label: str
    target: Target
    estimate: float | None
    bounds: sequential.Bounds | None
    verdict: str
    more: int
    left: int
    reviewed: int

    @property
    def exact_only(self) -> bool:
        """Whether only the whole rest of the batch decides (the exact value)."""
        return self.verdict == "review" and self.more >= self.left

    def to_dict(self) -> dict:
        b = self.bounds
        return {
            "label": self.label,
            "target": self.target.target,
            "confidence": self.target.confidence,
            "estimate": self.estimate,
            "low": None if b is None else b.low,
            "high": None if b is None else b.high,
            "exact": bool(b and b.exact),
            "verdict": self.verdict,
            "more": self.more,
            "left": self.left,
            "reviewed": self.reviewed,
        }


@dataclass
class Decision:
    """The batch sample `sample` (samples.get) was drawn from: `verdict` (accept, fix, review or "no target"),
    `more` reviews to make, of which `draw` must first be drawn into the sample (`pending` are drawn and waiting),
    `fix` the labels below their target, and per label a LabelDecision."""

    sample: dict
    labels: dict[str, LabelDecision]
    verdict: str
    more: int
    draw: int
    pending: int
    undrawn: int
    fix: list[str]

    def to_dict(self) -> dict:
        s = self.sample
        return {
            "sample_id": s["id"],
            "job_id": s.get("job_id"),
            "population": s["population"],
            "drawn": s["drawn"],
            "verdict": self.verdict,
            "more": self.more,
            "draw": self.draw,
            "pending": self.pending,
            "undrawn": self.undrawn,
            "fix": self.fix,
            "labels": {k: v.to_dict() for k, v in self.labels.items()},
        }


def label_decision(strata: list[Stratum], waiting: list[int], target: Target, made: int | None = None) -> LabelDecision:
    """The rule for one label, from its strata (N_h, n_h, k_h: data.quality.estimates.Tally.strata), the members
    drawn and waiting in each, its target, and the reviews made (`made`: the sample's members a person decided on,
    measured or not; default the label's measured ones), which K at most doubles (pure: the tests simulate it over
    many batches)."""
    left = sum(s.size - s.reviewed for s in strata)
    reviewed = sum(s.reviewed for s in strata)
    est = sequential.estimate(strata)
    if target.target is None:
        return LabelDecision(target.label, target, est, None, "no target", 0, left, reviewed)
    alpha = 1 - target.confidence
    b = sequential.bounds(strata, alpha)
    if b is None:  # an empty population: nothing to decide about
        return LabelDecision(target.label, target, est, None, "accept", 0, 0, 0)
    pending = sum(waiting)
    # every waiting member wrong, or every one right: the bounds once they are reviewed lie between these
    worst = sequential.bounds([Stratum(s.size, s.reviewed + w, s.correct) for s, w in zip(strata, waiting)], alpha)
    best = sequential.bounds([Stratum(s.size, s.reviewed + w, s.correct + w) for s, w in zip(strata, waiting)], alpha)
    if worst.low >= target.target:
        return LabelDecision(target.label, target, est, b, "accept", 0, left, reviewed)
    if best.high < target.target:
        return LabelDecision(target.label, target, est, b, "fix", 0, left, reviewed)
    if pending:
        return LabelDecision(target.label, target, est, b, "review", pending, left, reviewed)
    planned = sequential.more_to_decide(strata, target.target, alpha)
    more = min(planned, max(sequential.could_decide(strata, target.target, alpha), reviewed if made is None else made))
    return LabelDecision(target.label, target, est, b, "review", more, left, reviewed)


def decide(db: sqlite_utils.Database, sample_id: int, targets: dict[str, Target] | None = None) -> Decision:
    """The decision for the batch sample `sample_id` was drawn from, against `targets` (default: the stored
    ones, data.quality.targets). NotFound for no such sample."""
    sample = samples.get(db, sample_id)
    targets = targets or get_all(db)
    t = tally(db, sample)
    pending = t.pending
    waiting = [t.drawn.get(h, 0) - t.decided.get(h, 0) for h in t.sizes]
    made = sum(t.decided.values())
    labels = {label: label_decision(t.strata(label), waiting, targets[label], made) for label in LABELS}
    required = [d for d in labels.values() if d.verdict != "no target"]
    fix = [d.label for d in required if d.verdict == "fix"]
    undrawn = sample["population"] - sample["drawn"]
    if not required:
        verdict, more = "no target", 0
    elif fix:
        verdict, more = "fix", 0
    elif all(d.verdict == "accept" for d in required):
        verdict, more = "accept", 0
    else:
        verdict, more = "review", max(d.more for d in required if d.verdict == "review")
    draw = 0 if verdict != "review" else max(0, min(more - pending, undrawn))
    return Decision(sample, labels, verdict, more, draw, pending, undrawn, fix)
