"""Does the model's confidence predict its correctness? Accuracy by confidence bucket, from reviewed clips.

Each approved clip pairs its origin machine caption (lineage: data.captions) with the labels a person approved.
For every label the origin has a confidence for (`captions.confidence`, serving.logprobs), the origin's value is
right when it equals the approved value. `calibration` buckets those pairs by confidence and gives, per bucket,
how many there are, how many were right, the accuracy and the mean confidence: a calibrated model's accuracy
matches its confidence bucket by bucket. For the list label (road users) each item the model listed is one pair,
with that item's confidence: right when the approved list has it.

All of it is SQL over the caption rows (json_extract / json_each), one grouped query per label: it reads only the
approved clips of the filter.
"""

from __future__ import annotations

from typing import Any

import sqlite_utils

from data import clips, taxonomy
from data.clips import Filter
from data.errors import DataError

MAX_BUCKETS = 100

_JOIN = (
    "FROM clips c JOIN captions k ON k.id = c.current_caption_id JOIN captions o ON o.id = k.origin_id "
    "AND o.confidence IS NOT NULL"
)


def _pairs(label: str) -> tuple[str, list[Any]]:
    """SELECT of (p, right) pairs for `label` over `_JOIN`, with its arguments (the WHERE is added after)."""
    if label in taxonomy.MULTI:
        return (
            "SELECT j.value AS p, EXISTS (SELECT 1 FROM json_each(k.labels, ?) a WHERE a.value = j.key) AS ok "
            f"{_JOIN} JOIN json_each(o.confidence, ?) j",
            [f"$.{label}", f"$.items.{label}"],
        )
    return (
        "SELECT json_extract(o.confidence, ?) AS p, "
        f"json_extract(o.labels, ?) IS json_extract(k.labels, ?) AS ok {_JOIN}",
        [f"$.labels.{label}", f"$.{label}", f"$.{label}"],
    )


def calibration(
    db: sqlite_utils.Database, f: Filter | None = None, label: str | None = None, buckets: int = 10
) -> list[dict]:
    """Accuracy by confidence bucket over the approved clips of `f` (every label, or one), as rows
    `{label, bucket, low, high, n, correct, accuracy, confidence}`: `buckets` equal-width buckets of [0, 1] per
    label (the last one includes 1.0), each listed even when empty (n 0, accuracy and confidence None); `confidence`
    is the bucket's mean. DataError for an unknown label or a bucket count outside 1-100."""
    if label is not None and label not in taxonomy.ENUMS:
        raise DataError(f"Unknown label {str(label)[:40]!r}: use one of {', '.join(taxonomy.ENUMS)}.")
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS:
        raise DataError(f"Buckets must be a whole number from 1 to {MAX_BUCKETS}.")
    where, args = clips._where(f or Filter())
    where.append("c.review_status = 'approved'")  # with a filter asking for another status: nothing
    out: list[dict] = []
    for name in [label] if label else list(taxonomy.ENUMS):
        pairs, pair_args = _pairs(name)
        sql = (
            f"SELECT MIN(CAST(p * ? AS INTEGER), ? - 1) AS b, COUNT(*) AS n, SUM(ok) AS correct, AVG(p) AS mean "
            f"FROM ({pairs} WHERE {' AND '.join(where)}) WHERE typeof(p) IN ('real', 'integer') "
            "AND p BETWEEN 0 AND 1 GROUP BY b"
        )
        found = {r["b"]: r for r in db.query(sql, [buckets, buckets, *pair_args, *args])}
        for b in range(buckets):
            r = found.get(b)
            n = r["n"] if r else 0
            out.append(
                {
                    "label": name,
                    "bucket": b,
                    "low": b / buckets,
                    "high": (b + 1) / buckets,
                    "n": n,
                    "correct": int(r["correct"] or 0) if r else 0,
                    "accuracy": (r["correct"] or 0) / n if n else None,
                    "confidence": r["mean"] if r else None,
                }
            )
    return out
