"""The report: the model against its reviewers over approved clips, per label and per group of machine captions.

Per label: accuracy; per-class precision and recall and the confusion matrix (rows: what the reviewers approved,
columns: what the model said); for the multi-choice label (road users) the exact-set rate, per-item precision
and recall and the mean Jaccard index. For the text, the word-level edit ratio (data.textdiff) between the machine
text and the approved text: its median and distribution. Grouped by model, prompt (name and version) and job of
the machine caption, for the clips of a Browse filter (data.clips.Filter) and a `Scope`.

A report is one pass: the approved clips of the filter from a covering index, each joined to its stored pair
(data.quality.pairs) by primary key, counted in chunks (memory holds the distinct (group, label, value, value)
keys, not the clips). docs/BENCHMARKS.md has the figures at a million clips.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import sqlite_utils

from data import taxonomy
from data.clips import Filter
from data.errors import DataError
from data.quality.pairs import (
    CHUNK,
    LABELS,
    MISSING,
    REAL,
    Pairs,
    Scope,
    as_set,
    clip_where,
    fill,
    select_pairs,
)

DIMENSIONS = {"model": ("model",), "prompt": ("prompt_name", "prompt_version"), "job": ("job_id",)}
DEFAULT_BY = ("model", "prompt")
HISTOGRAM_BINS = 10  # the edit ratio's distribution: [0, 0.1), ..., [0.9, 1.0]


@dataclass
class LabelStats:
    """One single-choice label over a set of pairs: `matrix[i][j]` counts the pairs whose approved value is
    `classes[i]` and whose machine value is `classes[j]` (sklearn's confusion_matrix layout). Classes are the
    values seen, in taxonomy order, then values outside the taxonomy, then MISSING."""

    label: str
    classes: list[str]
    matrix: list[list[int]]

    @property
    def n(self) -> int:
        return sum(map(sum, self.matrix))

    @property
    def correct(self) -> int:
        return sum(self.matrix[i][i] for i in range(len(self.classes)))

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.n if self.n else None

    def precision(self, cls: str) -> float | None:
        """Of the pairs where the model said `cls`, the share the reviewers approved as `cls` (None: never said)."""
        j = self.classes.index(cls)
        said = sum(row[j] for row in self.matrix)
        return self.matrix[j][j] / said if said else None

    def recall(self, cls: str) -> float | None:
        """Of the pairs approved as `cls`, the share where the model said `cls` (None: never approved as it)."""
        i = self.classes.index(cls)
        support = sum(self.matrix[i])
        return self.matrix[i][i] / support if support else None

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "n": self.n,
            "correct": self.correct,
            "accuracy": self.accuracy,
            "classes": self.classes,
            "matrix": self.matrix,
            "per_class": {
                c: {"precision": self.precision(c), "recall": self.recall(c), "support": sum(self.matrix[i])}
                for i, c in enumerate(self.classes)
            },
        }


@dataclass
class ItemStats:
    """The multi-choice label (a set of items per clip) over a set of pairs: `n` pairs, `exact` of them with
    the same set, `jaccard_sum` the sum of |machine & approved| / |machine | approved| (1 for two empty sets),
    and per item the pairs where both sets hold it (`tp`), only the machine's (`fp`), only the approved (`fn`)."""

    label: str
    n: int = 0
    exact: int = 0
    jaccard_sum: float = 0.0
    tp: dict[str, int] = field(default_factory=dict)
    fp: dict[str, int] = field(default_factory=dict)
    fn: dict[str, int] = field(default_factory=dict)

    @property
    def correct(self) -> int:
        return self.exact

    @property
    def accuracy(self) -> float | None:
        """The share of pairs where the model named exactly the approved set."""
        return self.exact / self.n if self.n else None

    @property
    def jaccard(self) -> float | None:
        """The mean Jaccard index of the machine set and the approved set."""
        return self.jaccard_sum / self.n if self.n else None

    @property
    def items(self) -> list[str]:
        seen = set(self.tp) | set(self.fp) | set(self.fn)
        return _ordered(self.label, seen)

    def precision(self, item: str) -> float | None:
        said = self.tp.get(item, 0) + self.fp.get(item, 0)
        return self.tp.get(item, 0) / said if said else None

    def recall(self, item: str) -> float | None:
        there = self.tp.get(item, 0) + self.fn.get(item, 0)
        return self.tp.get(item, 0) / there if there else None

    def add(self, machine: set[str], approved: set[str], count: int) -> None:
        self.n += count
        if machine == approved:
            self.exact += count
        union = machine | approved
        self.jaccard_sum += count * (len(machine & approved) / len(union) if union else 1.0)
        for item in machine & approved:
            self.tp[item] = self.tp.get(item, 0) + count
        for item in machine - approved:
            self.fp[item] = self.fp.get(item, 0) + count
        for item in approved - machine:
            self.fn[item] = self.fn.get(item, 0) + count

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "n": self.n,
            "correct": self.exact,
            "accuracy": self.accuracy,
            "jaccard": self.jaccard,
            "per_item": {
                i: {
                    "precision": self.precision(i),
                    "recall": self.recall(i),
                    "tp": self.tp.get(i, 0),
                    "fp": self.fp.get(i, 0),
                    "fn": self.fn.get(i, 0),
                }
                for i in self.items
            },
        }


@dataclass
class TextStats:
    """How much reviewers changed the text: `counts[ratio]` pairs per word-level edit ratio (0: kept as it
    was, 1: no word kept). The distinct ratios are few (fractions of caption lengths), so this is small."""

    counts: dict[float, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    @property
    def unchanged(self) -> int:
        return self.counts.get(0.0, 0)

    @property
    def median(self) -> float | None:
        """The median edit ratio (the mean of the two middle ones for an even count)."""
        n = self.n
        if not n:
            return None
        lo_rank, hi_rank = (n - 1) // 2, n // 2
        lo = hi = None
        seen = 0
        for ratio in sorted(self.counts):
            seen += self.counts[ratio]
            if lo is None and seen > lo_rank:
                lo = ratio
            if seen > hi_rank:
                hi = ratio
                break
        return (lo + hi) / 2

    @property
    def histogram(self) -> list[int]:
        """Pairs per tenth of the ratio: [0, 0.1), [0.1, 0.2), ..., [0.9, 1.0]."""
        out = [0] * HISTOGRAM_BINS
        for ratio, count in self.counts.items():
            out[min(HISTOGRAM_BINS - 1, int(ratio * HISTOGRAM_BINS))] += count
        return out

    def to_dict(self) -> dict:
        return {"n": self.n, "unchanged": self.unchanged, "median": self.median, "histogram": self.histogram}


@dataclass
class Group:
    """The figures of one group of machine captions (`key`: its model, prompt name and version, job, as asked)."""

    key: dict[str, Any]
    labels: dict[str, LabelStats | ItemStats]
    text: TextStats

    @property
    def n(self) -> int:
        return max((s.n for s in self.labels.values()), default=0)

    @property
    def name(self) -> str:
        return group_name(self.key)

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "n": self.n,
            "labels": {k: v.to_dict() for k, v in self.labels.items()},
            "text": self.text.to_dict(),
        }


@dataclass
class Report:
    """`groups` (largest first), and over the whole filter: `approved` clips, `without_origin` of them written
    from scratch (no machine caption to measure)."""

    groups: list[Group]
    approved: int
    without_origin: int
    by: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "approved": self.approved,
            "without_origin": self.without_origin,
            "by": list(self.by),
            "groups": [g.to_dict() for g in self.groups],
        }


def group_name(key: dict[str, Any]) -> str:
    """A group's key as people read it: "av-hazard v2 · Qwen3-VL-8B · job 3" ("all" for no key)."""
    parts = []
    if "prompt_name" in key:
        name = key["prompt_name"] or "no prompt"
        parts.append(f"{name} v{key['prompt_version']}" if key.get("prompt_version") is not None else name)
    if "model" in key:
        parts.append(key["model"] or "unknown model")
    if "job_id" in key:
        parts.append(f"job {key['job_id']}" if key["job_id"] is not None else "no job")
    return " · ".join(parts) or "all"


def _ordered(label: str, values: Iterable[Any]) -> list[str]:
    """Values of a label in taxonomy order, then others (sorted), then MISSING."""
    values = set(values)
    known = [v for v in taxonomy.ENUMS.get(label, ()) if v in values]
    other = sorted(str(v) for v in values - set(known) - {MISSING})
    return known + other + ([MISSING] if MISSING in values else [])


def _by(by: Iterable[str]) -> tuple[str, ...]:
    by = tuple(by)
    unknown = [b for b in by if b not in DIMENSIONS]
    if unknown:
        raise DataError(f"Group by {', '.join(map(str, unknown))}? Choose from {', '.join(DIMENSIONS)}.")
    return tuple(d for d in DIMENSIONS if d in by)  # one order whatever the caller's


def _key_columns(by: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(SQL expressions over the pairs table `q`, key names) of a grouping."""
    cols = [c for d in by for c in DIMENSIONS[d]]
    return [f"q.{c}" for c in cols], cols


def _tally(counts: Counter, names: list[str], group_of: Any, label: str, cache: dict) -> None:
    """Add the counts of one label, keyed (group key..., machine value, approved value), to their groups."""
    k = len(names)
    tables: dict[tuple, dict[tuple[str, str], int]] = {}
    for row, count in counts.items():
        key, said, approved = row[:k], row[k], row[k + 1]
        if approved is None:
            continue  # the approved caption has no value for it: nothing to measure against
        g = group_of(key)
        if label in taxonomy.MULTI:
            items = g.labels.setdefault(label, ItemStats(label))
            items.add(as_set(said, cache), as_set(approved, cache), count)
        else:
            table = tables.setdefault(key, {})
            pair = (str(approved), MISSING if said is None else str(said))
            table[pair] = table.get(pair, 0) + count
    for key, table in tables.items():
        classes = _ordered(label, [v for pair in table for v in pair])
        at = {c: i for i, c in enumerate(classes)}
        matrix = [[0] * len(classes) for _ in classes]
        for (approved, said), count in table.items():
            matrix[at[approved]][at[said]] += count
        group_of(key).labels[label] = LabelStats(label, classes, matrix)


def _aggregate(db: sqlite_utils.Database, pairs: Pairs, by: tuple[str, ...]) -> tuple[list[Group], Counter]:
    """The groups of `by` over `pairs`, in one pass: rows are read in chunks and counted per label by `Counter`
    (C loops), so memory holds the distinct (key, value, value) triples only. Also returns how many rows were
    read (`rows`), had no pair stored yet (`missing`) and had no origin (`without`)."""
    cols, names = _key_columns(by)
    k = len(cols)
    values = [f"q.s_{n}, q.a_{n}" for n in LABELS]
    flags = "q.truth_id IS NULL, q.machine_id = 0"
    cursor = db.execute(pairs.sql(", ".join([flags, *cols, *values, "q.ratio"])), pairs.args)
    pick = {
        label: operator.itemgetter(*range(2, k + 2), k + 2 + 2 * i, k + 3 + 2 * i) for i, label in enumerate(LABELS)
    }
    pick_ratio = operator.itemgetter(*range(2, k + 2), k + 2 + 2 * len(LABELS))
    pick_flags = operator.itemgetter(0, 1)
    counts = {label: Counter() for label in LABELS}
    ratios: Counter = Counter()
    seen: Counter = Counter()
    while chunk := cursor.fetchmany(CHUNK):
        for label, get in pick.items():
            counts[label].update(map(get, chunk))
        ratios.update(map(pick_ratio, chunk))
        seen.update(map(pick_flags, chunk))
    groups: dict[tuple, Group] = {}

    def group_of(key: tuple) -> Group:
        if key not in groups:
            groups[key] = Group(dict(zip(names, key)), {}, TextStats())
        return groups[key]

    cache: dict = {}
    for label in LABELS:
        _tally(counts[label], names, group_of, label, cache)
    for row, count in ratios.items():
        key, ratio = (row[:k], row[k]) if k else ((), row)
        if ratio is not None:
            text = group_of(key).text.counts
            text[float(ratio)] = text.get(float(ratio), 0) + count
    for g in groups.values():
        g.labels = {name: g.labels[name] for name in LABELS if name in g.labels}
    totals = Counter(
        rows=sum(seen.values()),
        missing=sum(c for (missing, _), c in seen.items() if missing),
        without=sum(c for (_, without), c in seen.items() if without),
    )
    return sorted(groups.values(), key=lambda g: (-g.n, g.name)), totals


def report(
    db: sqlite_utils.Database,
    f: Filter = Filter(),
    scope: Scope = Scope(),
    *,
    by: Iterable[str] = DEFAULT_BY,
    real_only: bool = False,
) -> Report:
    """The model against its reviewers over the approved clips of `f`, per group of machine captions (`by`:
    any of "model", "prompt", "job"; () for one group of everything). One pass over the clips and their stored
    pairs; when some have none yet (newly approved or edited), `fill` stores them and the pass runs again (a clip
    approved meanwhile is left for the next report). `real_only`: over the clips whose text is not simulated (a
    release's card, when the release leaves simulated text out)."""
    by = _by(by)
    pairs = select_pairs(f, scope, real_only=real_only)
    groups, seen = _aggregate(db, pairs, by)
    if seen["missing"]:
        fill(db, f)
        groups, seen = _aggregate(db, pairs, by)
    approved = seen["rows"]
    if scope != Scope():  # the pass read the scope's clips only: count the filter's
        table, where, args = clip_where(f)
        where = [*where, REAL] if real_only else where
        approved = db.execute(f"SELECT COUNT(*) FROM {table} WHERE {' AND '.join(where)}", args).fetchone()[0]
    return Report(groups, approved, seen["without"], by)
