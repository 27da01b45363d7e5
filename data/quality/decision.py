"""From a random sample to a decision, per label and for the batch: accept, fix, or review K more.

The rule (acceptance sampling stated with bounds; the README's "Quality" section says how a lead uses it), for
each label with a target (data.quality.targets) at its confidence:
- **accept** when the lower bound of the batch's accuracy reaches the target;
- **fix** when the upper bound is below it;
- otherwise **review K more**: K is the fewest further reviews after which the bounds would decide (either way)
  if the clips still to review are right as often as those reviewed so far (data.quality.sequential.plan), never
  more than the clips left. Where only all of them decide at that rate (the estimate sits near the target), the
  decision says so, and how many of them must be right for the batch to reach its target (the exact value).
  data.quality.rounds draws them into the same sample, so they stay a random sample of the batch.

K is what decides; what is drawn now is a **round** of at most K that at most doubles the reviews made (unless
fewer could not decide at all), and the decision says both when they differ. Why rounds: an estimate from a first
small sample is noisy, and one that happens to sit on the target (45 of 50 against 0.90) plans for the whole
batch. Looking again after each doubling, which the bounds allow, costs at most twice the reviews that would have
decided. In simulated batches of 50,000 at an accuracy of 0.87 against 0.90, planning at the first estimate asked
for all 50,000 in more than one batch in ten; in rounds, nine in ten decided within 3,200 reviews
(benchmarks/bench_decision.py, docs/BENCHMARKS.md). A round is never presented as what decides.

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

Each sample's decision is about the batch it was drawn from, as it was at the draw (data.quality.population): a
later sample of the same job is about the clips still unreviewed then, and has a decision of its own; `decisions`
lists every one, the most urgent first.

The batch: **fix** when any required label is fixed (named), **accept** when every required label is accepted,
otherwise **review K more** with the largest K of the undecided labels (the same clips serve every label), and
the largest round.
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
MAX_DECISIONS = 50  # samples whose decisions are listed at once (the newest)


@dataclass
class LabelDecision:
    """One label's verdict: `estimate` (None until every stratum has a review), `bounds` (valid at every look,
    at the target's confidence), `verdict` (one of VERDICTS), `more` reviews to make (for "review": the members
    waiting, or the fewest that would decide at the rate so far), `left` clips of the label's population not
    reviewed, `reviewed` clips measured, `correct` of them right; `plan` (sequential.plan, for "review" with none
    waiting) and `round`: what to draw and review before looking again (at most `more`)."""

    label: str
    target: Target
    estimate: float | None
    bounds: sequential.Bounds | None
    verdict: str
    more: int
    left: int
    reviewed: int
    correct: int = 0
    plan: sequential.Plan | None = None
    round: int = 0

    @property
    def exact_only(self) -> bool:
        """Whether only the whole rest of the batch decides (the exact value)."""
        return self.verdict == "review" and self.more >= self.left

    def to_dict(self) -> dict:
        b, p = self.bounds, self.plan
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
            "round": self.round,
            "left": self.left,
            "reviewed": self.reviewed,
            "correct": self.correct,
            "plan": None
            if p is None
            else {
                "rate": p.rate,
                "more": p.more,
                "decides": p.verdict,
                "low_after": p.after.low,
                "high_after": p.after.high,
                "could": p.could,
                "exact_only": p.exact_only,
                "needed": p.needed,
            },
        }


@dataclass
class Decision:
    """The batch sample `sample` (samples.get) was drawn from: `verdict` (accept, fix, review or "no target"),
    `more` reviews that would decide (`binding`: the label that needs them), `round` the reviews to make before
    looking again, of which `draw` must first be drawn into the sample (`pending` are drawn and waiting), `made`
    the members a person decided on, `fix` the labels below their target, and per label a LabelDecision."""

    sample: dict
    labels: dict[str, LabelDecision]
    verdict: str
    more: int
    draw: int
    pending: int
    undrawn: int
    fix: list[str]
    round: int = 0
    made: int = 0
    binding: str | None = None

    @property
    def urgency(self) -> int:
        """The order a lead reads decisions in: fix first, then review more, then accept, then no target."""
        return ("fix", "review", "accept", "no target").index(self.verdict)

    def to_dict(self) -> dict:
        s = self.sample
        return {
            "sample_id": s["id"],
            "job_id": s.get("job_id"),
            "population": s["population"],
            "drawn": s["drawn"],
            "verdict": self.verdict,
            "more": self.more,
            "round": self.round,
            "binding": self.binding,
            "made": self.made,
            "draw": self.draw,
            "pending": self.pending,
            "undrawn": self.undrawn,
            "fix": self.fix,
            "labels": {k: v.to_dict() for k, v in self.labels.items()},
        }


def label_decision(strata: list[Stratum], waiting: list[int], target: Target, made: int | None = None) -> LabelDecision:
    """The rule for one label, from its strata (N_h, n_h, k_h: data.quality.estimates.Tally.strata), the members
    drawn and waiting in each, its target, and the reviews made (`made`: the sample's members a person decided on,
    measured or not; default the label's measured ones), which a round at most doubles (pure: the tests simulate
    it over many batches)."""
    left = sum(s.size - s.reviewed for s in strata)
    reviewed = sum(s.reviewed for s in strata)
    correct = sum(s.correct for s in strata)
    est = sequential.estimate(strata)

    def verdict(v: str, b=None, more: int = 0, plan=None, step: int = 0) -> LabelDecision:
        return LabelDecision(target.label, target, est, b, v, more, left, reviewed, correct, plan, step)

    if target.target is None:
        return verdict("no target")
    alpha = 1 - target.confidence
    b = sequential.bounds(strata, alpha)
    if b is None:  # an empty population: nothing to decide about
        return LabelDecision(target.label, target, est, None, "accept", 0, 0, 0)
    pending = sum(waiting)
    # every waiting member wrong, or every one right: the bounds once they are reviewed lie between these
    worst = sequential.bounds([Stratum(s.size, s.reviewed + w, s.correct) for s, w in zip(strata, waiting)], alpha)
    best = sequential.bounds([Stratum(s.size, s.reviewed + w, s.correct + w) for s, w in zip(strata, waiting)], alpha)
    if worst.low >= target.target:
        return verdict("accept", b)
    if best.high < target.target:
        return verdict("fix", b)
    if pending:
        return verdict("review", b, pending, None, pending)
    p = sequential.plan(strata, target.target, alpha)
    step = min(p.more, max(p.could, reviewed if made is None else made))
    return verdict("review", b, p.more, p, step)


def decide(db: sqlite_utils.Database, sample_id: int, targets: dict[str, Target] | None = None) -> Decision:
    """The decision for the batch sample `sample_id` was drawn from, against `targets` (default: the stored
    ones, data.quality.targets). NotFound for no such sample."""
    sample = samples.get(db, sample_id)
    targets = targets or get_all(db)
    t = tally(db, sample)
    waiting = [t.drawn.get(h, 0) - t.decided.get(h, 0) for h in t.sizes]
    made = sum(t.decided.values())
    labels = {label: label_decision(t.strata(label), waiting, targets[label], made) for label in LABELS}
    return combine(sample, labels, t.pending, made)


def decisions(db: sqlite_utils.Database, limit: int = MAX_DECISIONS) -> list[Decision]:
    """Every sample's decision on its own batch (the newest `limit` samples), the most urgent first: fix, then
    review more, then accept, then no target, the newest first within each. A newer sample never hides an older
    one's: each is about the batch it was drawn from."""
    targets = get_all(db)
    ids = [r[0] for r in db.execute("SELECT id FROM samples ORDER BY id DESC LIMIT ?", [limit])]
    return sorted((decide(db, sid, targets) for sid in ids), key=lambda d: (d.urgency, -d.sample["id"]))


def sample_count(db: sqlite_utils.Database) -> int:
    """How many samples were drawn (`decisions` lists the newest MAX_DECISIONS of them)."""
    return db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]


def combine(sample: dict, labels: dict[str, LabelDecision], pending: int, made: int) -> Decision:
    """The batch's decision from its labels' (pure): fix if any required label is fixed, accept if every one is
    accepted, else review the largest K, drawing the largest round less what waits."""
    required = [d for d in labels.values() if d.verdict != "no target"]
    fix = [d.label for d in required if d.verdict == "fix"]
    undrawn = sample["population"] - sample["drawn"]
    binding = None
    if not required:
        verdict, more, step = "no target", 0, 0
    elif fix:
        verdict, more, step = "fix", 0, 0
    elif all(d.verdict == "accept" for d in required):
        verdict, more, step = "accept", 0, 0
    else:
        undecided = [d for d in required if d.verdict == "review"]
        first = max(undecided, key=lambda d: d.more)  # the earliest label of the largest K
        verdict, more, step, binding = "review", first.more, max(d.round for d in undecided), first.label
    draw = 0 if verdict != "review" else max(0, min(step - pending, undrawn))
    return Decision(sample, labels, verdict, more, draw, pending, undrawn, fix, step, made, binding)
