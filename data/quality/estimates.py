"""Estimates for the unreviewed rest of a batch, from a random sample drawn by data.quality.samples (its members
are marked there; a clip reviewed because someone chose it is never a sample member): each label's accuracy with a
95 % Wilson interval, or the stratified estimate where the draw was stratified by hazard level
(data.quality.stats), and how many more reviews bring the interval under a margin the lead picks.
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
    `more` reviews to bring its half-width under the margin (None: more than stats.MAX_REVIEWS), and per
    stratum (stratum, N_h, reviewed n_h, correct k_h)."""

    label: str
    interval: stats.Interval | None
    more: int | None
    strata: list[stats.Stratum]

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
            "SELECT s.id, s.created_by, s.created_at, s.job_id, s.population, s.drawn, s.stratify, "
            "(SELECT COUNT(*) FROM sample_members m JOIN clips c ON c.id = m.clip_id "
            " WHERE m.sample_id = s.id AND c.review_status != 'unreviewed') AS reviewed "
            f"FROM samples s {where} ORDER BY s.id DESC LIMIT 100",
            args,
        )
    ]


def estimate(db: sqlite_utils.Database, sample_id: int, margin: float = DEFAULT_MARGIN) -> Estimate:
    """Each label's accuracy over the population sample `sample_id` was drawn from (data.samples), from its
    members reviewed so far: the caption each member had at the draw (what the unreviewed rest still has)
    against what was approved. A sample drawn without strata gives the Wilson interval; one stratified by
    hazard level the stratified estimate with N_h of the draw. Only a drawn sample's members count: clips
    reviewed because someone chose them never do. NotFound for no such sample."""

    margin = check_margin(margin)
    sample = samples.get(db, sample_id)
    sizes = {s["stratum"]: s["population"] for s in sample["strata"]}
    reviewed: dict[str, dict[str, list[int]]] = {}  # stratum -> label -> [n, k]
    counts = {"approved": 0, "rejected": 0, "unreviewed": 0}
    rows = db.execute(
        "SELECT m.stratum, c.review_status, s.labels, t.labels FROM sample_members m JOIN clips c ON c.id = m.clip_id "
        "LEFT JOIN captions s ON s.id = m.caption_id LEFT JOIN captions t ON t.id = c.current_caption_id "
        "WHERE m.sample_id = ? ORDER BY m.draw_order",
        [sample["id"]],
    )
    for stratum, status, said, approved in rows:
        counts[status] = counts.get(status, 0) + 1
        if status != "approved" or said is None or approved is None:
            continue
        said, approved = json.loads(said), json.loads(approved)
        per = reviewed.setdefault(stratum, {})
        for label in LABELS:
            ok = is_correct(label, said, approved)
            if ok is not None:
                nk = per.setdefault(label, [0, 0])
                nk[0] += 1
                nk[1] += ok
    method = "wilson" if sample["stratify"] == "none" else "stratified"
    labels = {}
    for label in LABELS:
        strata = [stats.Stratum(size, *reviewed.get(h, {}).get(label, [0, 0])) for h, size in sizes.items()]
        if method == "wilson":
            n, k = sum(s.reviewed for s in strata), sum(s.correct for s in strata)
            interval, more = stats.wilson(k, n), stats.more_reviews(k, n, margin)
        else:
            interval, more = stats.stratified(strata), stats.more_reviews_stratified(strata, margin)
        labels[label] = LabelEstimate(label, interval, more, strata)
    return Estimate(
        sample,
        method,
        list(sizes),
        counts["approved"],
        counts["rejected"] + counts.get("broken", 0),
        counts["unreviewed"],
        margin,
        labels,
    )
