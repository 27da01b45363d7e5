"""Agreement between reviewers: Cohen's kappa per label between the first reviewer (the approved caption) and a
blind second reviewer (data.quality.second_review); linear weights for the hazard level.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import sqlite_utils

from data import clips, limits, taxonomy
from data.clips import Filter
from data.quality import stats
from data.quality.pairs import LABELS, REAL, stored_value

ORDERED = {"hazard_level"}  # labels whose values are ordered: kappa with linear weights


@dataclass
class LabelAgreement:
    """Two reviewers on one label: `table[(first, second)]` counts clips; `agree` the share where they gave the
    same value (the ceiling to read the model's accuracy against), `kappa` Cohen's kappa (chance-corrected;
    linear weights for an ordered label). The multi-choice label compares whole sets, with `items` holding
    each item's kappa (present or not)."""

    label: str
    table: dict[tuple[str, str], int]
    weights: str | None
    items: dict[str, float | None] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(self.table.values())

    @property
    def agree(self) -> float | None:
        return sum(c for (a, b), c in self.table.items() if a == b) / self.n if self.n else None

    @property
    def kappa(self) -> float | None:
        cats = None
        if self.label in ORDERED:  # weights follow the taxonomy's order, every value counted as a step
            seen = {v for pair in self.table for v in pair}
            cats = [*taxonomy.ENUMS[self.label], *sorted(seen - set(taxonomy.ENUMS[self.label]))]
        return stats.kappa(self.table, cats, self.weights)

    def to_dict(self) -> dict:
        out = {"label": self.label, "n": self.n, "agree": self.agree, "kappa": self.kappa, "weights": self.weights}
        if self.items:
            out["per_item_kappa"] = self.items
        return out


@dataclass
class Agreement:
    """A first and a blind second reviewer on the same clips: `pairs` clips with both reviews, `decision` (approve
    or reject) and per label (clips the first reviewer approved: their labels are the approved caption's)."""

    pairs: int
    decision: LabelAgreement
    labels: dict[str, LabelAgreement]

    def to_dict(self) -> dict:
        return {
            "pairs": self.pairs,
            "decision": self.decision.to_dict(),
            "labels": {k: v.to_dict() for k, v in self.labels.items()},
        }


def agreement(
    db: sqlite_utils.Database, f: Filter = Filter(), *, sample_id: int | None = None, real_only: bool = False
) -> Agreement:
    """Cohen's kappa per label between the first review of a clip (its approved caption, its review status) and
    its answered blind second review (data.samples), over the clips of `f` (any review status: a rejected first
    review counts for the decision only) and, if given, one sample; `real_only`: only clips whose text is not
    simulated (a release's card, when the release leaves simulated text out)."""
    f = dataclasses.replace(f, review_status=None) if f.review_status == "approved" else f
    where, args = clips._where(f)
    where = [*where, "r.state = 'done'", "c.review_status <> 'unreviewed'", *([REAL] if real_only else [])]
    if sample_id is not None:
        where.append("r.sample_id = ?")
        args = [*args, limits.sql_int(sample_id, "sample id")]
    decisions: dict[tuple[str, str], int] = {}
    tables: dict[str, dict[tuple[str, str], int]] = {label: {} for label in LABELS}
    items: dict[str, dict[tuple[str, str], int]] = {}
    n = 0
    rows = db.execute(
        "SELECT c.review_status, r.decision, k.labels, r.labels FROM second_reviews r JOIN clips c ON c.id = r.clip_id "
        f"LEFT JOIN captions k ON k.id = c.current_caption_id WHERE {' AND '.join(where)}",
        args,
    )
    for first_decision, second_decision, first, second in rows:
        n += 1
        pair = (first_decision, second_decision)
        decisions[pair] = decisions.get(pair, 0) + 1
        if first_decision != "approved" or not first or not second:
            continue
        first, second = json.loads(first), json.loads(second)
        for label in LABELS:
            a, b = stored_value(label, first), stored_value(label, second)
            if a is None or b is None:
                continue
            tables[label][(a, b)] = tables[label].get((a, b), 0) + 1
            if label in taxonomy.MULTI:
                sa, sb = set(json.loads(a)), set(json.loads(b))
                for item in taxonomy.ENUMS[label]:
                    key = (str(item in sa), str(item in sb))
                    per = items.setdefault(item, {})
                    per[key] = per.get(key, 0) + 1
    out = {}
    for label in LABELS:
        out[label] = LabelAgreement(label, tables[label], "linear" if label in ORDERED else None)
        if label in taxonomy.MULTI:
            out[label].items = {
                item: stats.kappa(t, ["False", "True"])
                for item, t in items.items()
                if any("True" in pair for pair in t)  # an item neither reviewer named tells nothing
            }
    return Agreement(n, LabelAgreement("decision", decisions, None), out)
