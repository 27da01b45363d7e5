"""Each label's target: the accuracy a batch must reach to be used as the model captioned it, and how sure the
lead wants to be of it (data.quality.decision decides from them).

Stored per label in `quality_targets` (m022) when a lead sets one (the Quality tab, or
`python -m data.quality --set-target LABEL=TARGET [--confidence PCT]`); a label without a row has its default
below. A target of None means the label is not required: it is shown, and left out of the batch's decision.

The defaults: the hazard level, what the training needs to be right about dangerous scenes, at 0.95; every other
label at 0.90; each at 95 % confidence. They are a starting point for a lead to change, not a recommendation for
every use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlite_utils

from data import events, users
from data.db import immediate, now
from data.errors import DataError, Forbidden
from data.quality.pairs import LABELS

DEFAULT_TARGET = 0.90
DEFAULT_CONFIDENCE = 0.95
DEFAULTS: dict[str, float] = {"hazard_level": 0.95}
MIN_CONFIDENCE, MAX_CONFIDENCE = 0.5, 0.999
NONE_WORDS = ("", "none", "-", "no target")


@dataclass(frozen=True)
class Target:
    """One label's target (a share, or None: not required) and `confidence` (a share); `set_by` and `set_at`
    when a lead set it (None: the default)."""

    label: str
    target: float | None
    confidence: float
    set_by: str | None = None
    set_at: float | None = None

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "target": self.target,
            "confidence": self.confidence,
            "set_by": self.set_by,
            "set_at": self.set_at,
        }


def default(label: str) -> Target:
    return Target(label, DEFAULTS.get(label, DEFAULT_TARGET), DEFAULT_CONFIDENCE)


def get_all(db: sqlite_utils.Database) -> dict[str, Target]:
    """Every label's target, in the taxonomy's order: what a lead set, else the default."""
    rows = {r["label"]: r for r in db.query("SELECT * FROM quality_targets")}
    out = {}
    for label in LABELS:
        r = rows.get(label)
        out[label] = (
            default(label) if r is None else Target(label, r["target"], r["confidence"], r["set_by"], r["set_at"])
        )
    return out


def share(value: Any, what: str, *, allow_none: bool = False) -> float | None:
    """A share from user input: 0.95, 95 or "95 %" all mean 0.95. With `allow_none`, empty or "none" is None
    (no target). DataError otherwise, saying what to type."""
    example = f"{what}: a share such as 0.95, or points such as 95" + (" (none: no target)" if allow_none else "")
    if value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS):
        if allow_none:
            return None
        raise DataError(f"{example}.")
    text = str(value).strip().rstrip("%").strip() if isinstance(value, str) else value
    try:
        x = float(text)
    except (TypeError, ValueError):
        raise DataError(f"{example}, not {str(value)[:20]!r}.") from None
    if x > 1:
        x /= 100
    if not 0 < x <= 1:
        raise DataError(f"{example}: more than 0 and at most 1 (100 points).")
    return x


def set_target(
    db: sqlite_utils.Database, label: str, target: Any, confidence: Any = None, *, actor: str, role: str | None
) -> Target:
    """Set `label`'s target (None or "none": not required) and, when given, its confidence (else the current
    one). Only a lead; audited. Returns the label's Target now. DataError names what to change."""
    if not users.at_least(role, "lead"):
        raise Forbidden(f"Only a lead sets quality targets; you are {role or 'not signed in'}.")
    if label not in LABELS:
        raise DataError(f"Unknown label {str(label)[:40]!r}: use one of {', '.join(LABELS)}.")
    t = share(target, f"The target for {label.replace('_', ' ')}", allow_none=True)
    if confidence in (None, "") or (isinstance(confidence, str) and not confidence.strip()):
        c = get_all(db)[label].confidence
    else:
        c = share(confidence, "The confidence")
        if not MIN_CONFIDENCE <= c <= MAX_CONFIDENCE:
            raise DataError(
                f"The confidence: from {MIN_CONFIDENCE:.0%} to {MAX_CONFIDENCE:.1%} (for example 95); "
                f"{c:.1%} is outside."
            )
    with immediate(db):
        t_now = now()
        db.execute(
            "INSERT INTO quality_targets (label, target, confidence, set_by, set_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (label) DO UPDATE SET target = excluded.target, confidence = excluded.confidence, "
            "set_by = excluded.set_by, set_at = excluded.set_at",
            [label, t, c, actor, t_now],
        )
        events.record(db, actor, "quality.target", label=label, target=t, confidence=c)
    return get_all(db)[label]
