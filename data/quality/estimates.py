"""Estimates for the unreviewed rest of a batch, from a random sample drawn by data.quality.samples (its members
are marked there; a clip reviewed because someone chose it is never a sample member): each label's accuracy with a
95 % Wilson interval, or the stratified estimate where the draw was stratified by hazard level
(data.quality.stats), and how many more reviews bring the interval under a margin the lead picks. Both use the
finite-population correction: a batch of N clips reviewed to the last one is known exactly, and no plan asks for
more than the clips left. data.quality.decision turns the same counts (`tally`) into accept / fix / review more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from data.errors import DataError
from data.quality import samples, stats
from data.quality.pairs import LABELS, Scope, is_correct

DEFAULT_MARGIN = 0.05


@dataclass
class LabelEstimate:
    """One label's accuracy over a sample's population: `interval` (None when it cannot be estimated yet),
    `more` reviews to bring its half-width under the margin (never more than the clips left: all of them means
    only the exact value is that precise), and per stratum (N_h, reviewed n_h, correct k_h).`left`: the clips
    of the population not reviewed yet."""

    label: str
    interval: stats.Interval | None
    more: int | None
    strata: list[stats.Stratum]

    @property
    def left(self) -> int:
        return sum(s.size - s.reviewed for s in self.strata)

    @property
    def exact_only(self) -> bool:
        """Whether only reviewing every clip left gives the precision asked (the exact value)."""
        return self.more is not None and self.more > 0 and self.more >= self.left

    def to_dict(self) -> dict:
        i = self.interval
        return {
            "label": self.label,
            "estimate": None if i is None else i.p,
            "low": None if i is None else i.low,
            "high": None if i is None else i.high,
            "reviewed": sum(s.reviewed for s in self.strata),
            "correct": sum(s.correct for s in self.strata),
            "more_reviews": self.more,
            "left": self.left,
            "exact": bool(i and i.exact),
        }


@dataclass
class Estimate:
    """What sample `sample` (data.samples.get) says about its population: `method` "wilson" (drawn without
    strata) or "stratified"; `reviewed` members approved (measured), `rejected` (rejected, or marked broken: no
    approved labels to measure against, so not counted, and shown), `pending` (not reviewed yet); per label a
    LabelEstimate for `margin`."""

    sample: dict
    method: str
    strata: list[str]
    reviewed: int
    rejected: int
    pending: int
    margin: float
    labels: dict[str, LabelEstimate]

    @property
    def more(self) -> int | None:
        """Reviews needed so that every label's interval is within the margin."""
        needs = [e.more for e in self.labels.values()]
        return None if not needs or any(m is None for m in needs) else max(needs)

    @property
    def left(self) -> int:
        """The population's clips not reviewed yet (its members waiting included): what `more` never exceeds."""
        return self.sample["population"] - self.reviewed - self.rejected

    @property
    def exact_only(self) -> bool:
        """Whether only reviewing every clip left gives the precision asked (the exact value)."""
        return self.more is not None and self.more > 0 and self.more >= self.left

    def to_dict(self) -> dict:
        s = self.sample
        return {
            "sample_id": s["id"],
            "job_id": s.get("job_id"),
            "population": s["population"],
            "drawn": s["drawn"],
            "stratify": s["stratify"],
            "method": self.method,
            "reviewed": self.reviewed,
            "rejected": self.rejected,
            "pending": self.pending,
            "margin": self.margin,
            "more_reviews": self.more,
            "left": self.left,
            "labels": {k: v.to_dict() for k, v in self.labels.items()},
        }


def check_margin(margin: Any) -> float:
    """A margin from user input (0.05, or 5 for 5 points) as a proportion; DataError outside (0, 0.5)."""
    try:
        m = float(margin)
    except (TypeError, ValueError):
        raise DataError(f"The margin is a number of points, as 5 for +/- 5 %, not {str(margin)[:20]!r}.") from None
    if m >= 1:
        m /= 100
    if not 0 < m < 0.5:
        raise DataError("The margin: more than 0 and less than 50 points (for example 5 for +/- 5 %).")
    return m


def samples_for(db: sqlite_utils.Database, scope: Scope = Scope()) -> list[dict]:
    """Samples drawn (newest first), those of the scope's job when it names one: what an estimate can rest on.
    Each with `reviewed` (members a person decided on: approved, rejected or broken)."""
    where, args = ("WHERE s.job_id = ?", [scope.job_id]) if scope.job_id is not None else ("", [])
    return [
        dict(r)
        for r in db.query(
            "SELECT s.id, s.created_by, s.created_at, s.job_id, s.population, s.stratify, s.seed, "
            "(SELECT COUNT(*) FROM sample_members m WHERE m.sample_id = s.id) AS drawn, "
            "(SELECT COUNT(*) FROM sample_members m JOIN clips c ON c.id = m.clip_id "
            " WHERE m.sample_id = s.id AND c.review_status != 'unreviewed') AS reviewed "
            f"FROM samples s {where} ORDER BY s.id DESC LIMIT 100",
            args,
        )
    ]


@dataclass
class Tally:
    """What a sample's members say so far, per stratum: `sizes` N_h (at the draw), `drawn` its members (every
    round), `decided` those a person approved, rejected or marked broken, and per label `measured[h][label]` =
    [n, k]: approved members whose approved labels have the label, and those the model got right."""

    sizes: dict[str, int]
    drawn: dict[str, int]
    decided: dict[str, int]
    measured: dict[str, dict[str, list[int]]]
    statuses: dict[str, int]

    @property
    def pending(self) -> int:
        return sum(self.drawn.values()) - sum(self.decided.values())

    def strata(self, label: str) -> list[stats.Stratum]:
        """The label's strata: N_h less the members decided but not measurable for it (rejected, broken, or
        approved without the label: they are known to be outside what the label's accuracy is over), n_h and
        k_h measured. Reviewing every member then gives n_h = N_h: the exact value."""
        out = []
        for h, size in self.sizes.items():
            n, k = self.measured.get(h, {}).get(label, [0, 0])
            out.append(stats.Stratum(size - (self.decided.get(h, 0) - n), n, k))
        return out


def tally(db: sqlite_utils.Database, sample: dict) -> Tally:
    """Count sample `sample`'s (samples.get) members: each member's caption at the draw (what the unreviewed rest
    still has) against what was approved."""
    t = Tally({s["stratum"]: s["population"] for s in sample["strata"]}, {}, {}, {}, {})
    rows = db.execute(
        "SELECT m.stratum, c.review_status, s.labels, t.labels FROM sample_members m JOIN clips c ON c.id = m.clip_id "
        "LEFT JOIN captions s ON s.id = m.caption_id LEFT JOIN captions t ON t.id = c.current_caption_id "
        "WHERE m.sample_id = ? ORDER BY m.draw_order",
        [sample["id"]],
    )
    for stratum, status, said, approved in rows:
        t.statuses[status] = t.statuses.get(status, 0) + 1
        t.drawn[stratum] = t.drawn.get(stratum, 0) + 1
        if status != "unreviewed":
            t.decided[stratum] = t.decided.get(stratum, 0) + 1
        if status != "approved" or said is None or approved is None:
            continue
        said, approved = json.loads(said), json.loads(approved)
        per = t.measured.setdefault(stratum, {})
        for label in LABELS:
            ok = is_correct(label, said, approved)
            if ok is not None:
                nk = per.setdefault(label, [0, 0])
                nk[0] += 1
                nk[1] += ok
    return t


def estimate(db: sqlite_utils.Database, sample_id: int, margin: float = DEFAULT_MARGIN) -> Estimate:
    """Each label's accuracy over the population sample `sample_id` was drawn from (data.samples), from its
    members reviewed so far (`tally`). A sample drawn without strata gives the Wilson interval; one stratified by
    hazard level the stratified estimate with N_h of the draw; both with the finite-population correction (every
    clip reviewed: the exact value). Only a drawn sample's members count: clips reviewed because someone chose
    them never do. NotFound for no such sample."""

    margin = check_margin(margin)
    sample = samples.get(db, sample_id)
    t = tally(db, sample)
    method = "wilson" if sample["stratify"] == "none" else "stratified"
    labels = {}
    for label in LABELS:
        strata = t.strata(label)
        if method == "wilson":
            n, k, size = (sum(getattr(s, f) for s in strata) for f in ("reviewed", "correct", "size"))
            interval = stats.wilson(k, n, population=size)
            more = stats.more_reviews(k, n, margin, population=size)
        else:
            interval, more = stats.stratified(strata), stats.more_reviews_stratified(strata, margin)
        labels[label] = LabelEstimate(label, interval, more, strata)
    return Estimate(
        sample,
        method,
        list(t.sizes),
        t.statuses.get("approved", 0),
        t.statuses.get("rejected", 0) + t.statuses.get("broken", 0),
        t.statuses.get("unreviewed", 0),
        margin,
        labels,
    )
