"""Does the model's confidence predict its correctness? Accuracy by confidence bucket, from reviewed clips.

Each approved clip pairs its origin machine caption (lineage: data.captions) with the labels a person approved.
For every label the origin has a confidence for (`captions.confidence`, serving.logprobs), the origin's value is
right when it equals the approved value. `calibration` buckets those pairs by confidence and gives, per bucket,
how many there are, how many were right, the accuracy and the mean confidence: a calibrated model's accuracy
matches its confidence bucket by bucket. For the list label (road users) each item the model listed is one pair,
with that item's confidence: right when the approved list has it. So a row counts **values** (`n`): one per clip
for a single-choice label, one per road user listed for the list label; `clips` says on how many clips they are
(per bucket, and `label_clips` for the label over every bucket), so that no view calls values clips.

One query streams the approved clips of the filter with the origin's confidence and both label sets, and one pass
in Python buckets them: a label set equal to its origin's (stored in one form, data.taxonomy.dumps) is every label
right without parsing it. At 100,000 reviewed clips of a million this is 1.6 s of CPU for every label
(benchmarks/bench_confidence.py); grouping in SQL with json_each takes 2.7 s.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from data import clips, taxonomy
from data.clips import Filter
from data.errors import DataError

MAX_BUCKETS = 100

# approved clips first (CROSS JOIN keeps that order: the filter's index drives the walk)
_ROWS = (
    "SELECT o.confidence, o.labels = k.labels AS same, o.labels, k.labels FROM clips c "
    "CROSS JOIN captions k ON k.id = c.current_caption_id "
    "CROSS JOIN captions o ON o.id = k.origin_id AND o.confidence IS NOT NULL WHERE "
)


def _probability(p: Any) -> bool:
    return (p.__class__ is float or p.__class__ is int) and 0.0 <= p <= 1.0


def calibration(
    db: sqlite_utils.Database, f: Filter | None = None, label: str | None = None, buckets: int = 10
) -> list[dict]:
    """Accuracy by confidence bucket over the approved clips of `f` (every label, or one), as rows
    `{label, bucket, low, high, n, clips, label_clips, correct, accuracy, confidence}`: `buckets` equal-width
    buckets of [0, 1] per label (the last one includes 1.0), each listed even when empty (n 0, accuracy and
    confidence None); `n` values (one per clip, or per road user listed), on `clips` clips; `label_clips` the clips
    with any value of the label; `confidence` is the bucket's mean. DataError for an unknown label or a bucket count
    outside 1-100."""
    if label is not None and label not in taxonomy.ENUMS:
        raise DataError(f"Unknown label {str(label)[:40]!r}: use one of {', '.join(taxonomy.ENUMS)}.")
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS:
        raise DataError(f"Buckets must be a whole number from 1 to {MAX_BUCKETS}.")
    where, args = clips._where(f or Filter())
    where.append("c.review_status = 'approved'")  # with a filter asking for another status: nothing
    names = [label] if label else list(taxonomy.ENUMS)
    single = [n for n in names if n not in taxonomy.MULTI]
    multi = [n for n in names if n in taxonomy.MULTI]
    n: dict[tuple[str, int], int] = {}
    right: dict[tuple[str, int], int] = {}
    total: dict[tuple[str, int], float] = {}
    on: dict[tuple[str, int], int] = {}  # clips with a value in the bucket (a clip counts once per bucket)
    last: dict[tuple[str, int], int] = {}  # the clip that last counted there
    label_clips: dict[str, int] = {}
    clip = 0

    def count(key: tuple[str, int], p: float, ok: bool) -> None:
        n[key] = n.get(key, 0) + 1
        total[key] = total.get(key, 0.0) + p
        if ok:
            right[key] = right.get(key, 0) + 1
        if last.get(key) != clip:
            last[key] = clip
            on[key] = on.get(key, 0) + 1
            if last.get((key[0], -1)) != clip:
                last[(key[0], -1)] = clip
                label_clips[key[0]] = label_clips.get(key[0], 0) + 1

    for conf, same, origin, approved in db.execute(_ROWS + " AND ".join(where), args):
        clip += 1
        conf = json.loads(conf)
        if not isinstance(conf, dict):
            continue
        if not same:
            origin, approved = json.loads(origin), json.loads(approved)
        said = conf.get("labels") if isinstance(conf.get("labels"), dict) else {}
        for name in single:
            p = said.get(name)
            if _probability(p):
                count((name, min(int(p * buckets), buckets - 1)), p, same or origin.get(name) == approved.get(name))
        for name in multi:
            items = (conf.get("items") or {}).get(name) if isinstance(conf.get("items"), dict) else None
            have = None if same or not isinstance(items, dict) else set(approved.get(name) or ())
            for item, p in items.items() if isinstance(items, dict) else ():
                if _probability(p):
                    count((name, min(int(p * buckets), buckets - 1)), p, same or item in have)
    out: list[dict] = []
    for name in names:
        for b in range(buckets):
            k, c = n.get((name, b), 0), right.get((name, b), 0)
            out.append(
                {
                    "label": name,
                    "bucket": b,
                    "low": b / buckets,
                    "high": (b + 1) / buckets,
                    "n": k,
                    "clips": on.get((name, b), 0),
                    "label_clips": label_clips.get(name, 0),
                    "correct": c,
                    "accuracy": c / k if k else None,
                    "confidence": total[(name, b)] / k if k else None,
                }
            )
    return out
