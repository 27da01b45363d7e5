"""How good the machine captions are, measured against what reviewers approved.

    python -m data.quality --data-dir var
    python -m data.quality --data-dir var --prompt av-hazard:2 --json > quality.json

What is measured (each figure's meaning, and how a lead decides from it, is in the README's "Quality" section):
- **Pairs.** Every approved clip pairs the machine caption its approved caption derives from (its origin, kept by
  data.captions' lineage through any number of edits) with the approved caption. A clip whose caption a person
  wrote from scratch has no machine caption to measure and is only counted (`without_origin`).
- **Per label** (`report`): accuracy; per-class precision and recall and the confusion matrix (rows: what the
  reviewers approved, columns: what the model said); for the multi-choice label (road users) the exact-set rate,
  per-item precision and recall and the mean Jaccard index. For the text, the word-level edit ratio
  (data.textdiff) between the machine text and the approved text: its median and distribution.
  Grouped by model, prompt (name and version) and job of the machine caption, for the clips of a Browse filter
  (data.clips.Filter) and a `Scope` (a job, a prompt version, a model).
- **Estimates for the unreviewed rest** (`estimate`): only from a random sample drawn by data.samples (its
  members are marked there; a clip reviewed because someone chose it is never a sample member). Each label's
  accuracy with a 95 % Wilson interval, or the stratified estimate where the draw was stratified by hazard level
  (data.stats), and how many more reviews bring the interval under a margin the lead picks.
- **Agreement between reviewers** (`agreement`): Cohen's kappa per label between the first reviewer (the
  approved caption) and a blind second reviewer (data.samples' second reviews); linear weights for the hazard
  level. The reviewers' own agreement is the ceiling of the model's accuracy.
Prompt versions on the same clips are data.prompt_compare's; the Quality tab (webapp.quality_tab) shows both.

Cost, for a library of millions: what a report needs of a pair (the machine caption's provenance, each label's
value on both sides, the word-level edit ratio of the texts) is stored once in `quality_pairs` (m019), because a
word diff per pair (~0.4 ms) and two JSON parses are too slow to redo for 100,000 approved clips on every view.
Caption versions are append-only, so a stored pair never goes stale; a clip approved or edited since the last
report has none yet, and `fill` stores it (a few ms of diff each, written in short transactions). A report is then
one pass: the approved clips of the filter from a covering index, each joined to its pair by primary key, counted
in chunks (memory holds the distinct (group, label, value, value) keys, not the clips). docs/BENCHMARKS.md has the
figures at a million clips.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import operator
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import sqlite_utils

from data import calibration, clips, limits, samples, stats, taxonomy, textdiff
from data.clips import Filter
from data.db import immediate
from data.errors import DataError

LABELS: tuple[str, ...] = tuple(taxonomy.ENUMS)
ORDERED = {"hazard_level"}  # labels whose values are ordered: kappa with linear weights
MISSING = "(none)"  # the model gave no value for a label (a prompt whose schema lacks it)
DIMENSIONS = {"model": ("model",), "prompt": ("prompt_name", "prompt_version"), "job": ("job_id",)}
DEFAULT_BY = ("model", "prompt")
HISTOGRAM_BINS = 10  # the edit ratio's distribution: [0, 0.1), ..., [0.9, 1.0]
DEFAULT_MARGIN = 0.05
CHUNK = 5_000  # pair rows read at a time
FILL_BATCH = 2_000  # pairs stored per write transaction (their diffs are done before it, outside any lock)


@dataclass(frozen=True)
class Scope:
    """Which machine captions are measured, beside the clip filter: those of a job, of a prompt (a version of
    it, or every version), of a model. Empty fields do not narrow."""

    job_id: int | None = None
    prompt_name: str | None = None
    prompt_version: int | None = None
    model: str | None = None

    @classmethod
    def of(cls, *, job: Any = None, prompt: str | None = None, model: str | None = None) -> Scope:
        """A Scope from user input: `prompt` is "NAME" or "NAME:VERSION". DataError for anything else."""
        name, version = parse_prompt(prompt) if prompt else (None, None)
        job_id = None
        if job not in (None, ""):
            try:
                job_id = int(str(job).strip())
            except ValueError:
                raise DataError(f"A job is its number, not {str(job)[:40]!r}.") from None
            if not 0 < job_id < 2**63:
                raise DataError(f"There is no job {job_id}.")
        model = limits.check_text((model or "").strip(), limits.MAX_SEARCH_CHARS, "The model name") or None
        return cls(job_id, name, version, model)

    def where(self) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        args: list[Any] = []
        for col, value in (
            ("job_id", self.job_id),
            ("prompt_name", self.prompt_name),
            ("prompt_version", self.prompt_version),
            ("model", self.model),
        ):
            if value is not None:
                where.append(f"q.{col} = ?")
                args.append(value)
        return where, args


def parse_prompt(text: str) -> tuple[str, int | None]:
    """A prompt as people write it, NAME or NAME:VERSION -> (name, version or None); DataError with what to write
    otherwise."""
    name, sep, version = str(text).strip().rpartition(":")
    if not sep:
        name, version = version, ""
    name = name.strip()
    if not name or len(name) > 200 or "\x00" in name:
        raise DataError(f"A prompt is NAME or NAME:VERSION (for example av-hazard:2), not {str(text)[:60]!r}.")
    if not sep:
        return name, None
    try:
        v = int(version)
    except ValueError:
        raise DataError(
            f"A prompt version is a whole number (for example av-hazard:2), not {version[:20]!r}."
        ) from None
    if not 0 < v < 2**31:
        raise DataError(f"Prompt versions start at 1; {v} is not one.")
    return name, v


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


def _approved_filter(f: Filter) -> Filter:
    if f.review_status not in (None, "approved"):
        raise DataError(
            f"Quality is measured on approved clips; this filter asks for {f.review_status} ones. "
            "Set the review status to approved (or any)."
        )
    return dataclasses.replace(f, review_status="approved", has_caption=None)


# The index m019 made for this module: it holds every column a report's WHERE reads of an approved clip, unless
# the filter has a text search (its FTS index then drives). Named, because with statistics SQLite prefers a facet's
# own index and reads each clip's row from the table (a wide row: its caption text), 3-7 times slower.
QUALITY_INDEX = "idx_clips_quality"


def _clip_where(f: Filter) -> tuple[str, list[str], list[Any]]:
    """(FROM `clips c` with its index, WHERE terms over `c`, arguments) of the approved clips of `f`."""
    where, args = clips._where(_approved_filter(f))
    return ("clips c" if f.text else f"clips c INDEXED BY {QUALITY_INDEX}"), where, args


@dataclass(frozen=True)
class Pairs:
    """The approved clips of a filter with their stored pairs, as SQL: `c` the clip, `q` (LEFT JOIN: none while
    not stored yet) the quality_pairs row of its current caption (what was approved) with the machine caption it
    derives from (its origin). The scope narrows the pairs; rows without a pair yet, or without an origin, stay,
    so that one pass over them also counts those."""

    table: str
    where: list[str]
    args: list[Any]

    def sql(self, select: str, *, tail: str = "") -> str:
        """`SELECT select FROM <the clips and pairs> WHERE <their terms> tail`."""
        return (
            "SELECT {select} FROM {table} LEFT JOIN quality_pairs q ON q.truth_id = c.current_caption_id "
            "AND q.origin = 1 WHERE {where} {tail}"
        ).format(select=select, table=self.table, where=" AND ".join(self.where), tail=tail)


def _pairs(f: Filter, scope: Scope) -> Pairs:
    table, where, args = _clip_where(f)
    more, more_args = scope.where()
    if more:
        where = [*where, f"(q.truth_id IS NULL OR q.machine_id = 0 OR ({' AND '.join(more)}))"]
    return Pairs(table, where, args + more_args)


def _as_set(value: Any, cache: dict) -> frozenset[str]:
    """A multi-choice value as stored (a JSON array) -> a set of items."""
    if value not in cache:
        try:
            items = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            items = [value]
        cache[value] = frozenset(str(i) for i in (items if isinstance(items, list) else [items] if items else []))
    return cache[value]


def _stored(label: str, labels: dict) -> Any:
    """A label's value as quality_pairs stores it: text, a multi-choice value as a sorted JSON array, or None."""
    value = labels.get(label) if isinstance(labels, dict) else None
    if value is None:
        return None
    if label in taxonomy.MULTI:
        items = value if isinstance(value, list) else [value]
        return json.dumps(sorted({str(v) for v in items}))
    return value if isinstance(value, str) else json.dumps(value)


_PAIR_COLUMNS = "truth_id, machine_id, origin, model, prompt_name, prompt_version, job_id, ratio, " + ", ".join(
    f"s_{n}, a_{n}" for n in LABELS
)
_INSERT_PAIR = (
    f"INSERT OR IGNORE INTO quality_pairs ({_PAIR_COLUMNS}) VALUES ({', '.join('?' * (8 + 2 * len(LABELS)))})"
)


def _pair_row(truth: tuple, machine: tuple | None, origin: int) -> tuple:
    """A quality_pairs row from (id, text, labels JSON) of the approved version and (id, text, labels JSON,
    model, prompt name, prompt version, job) of the machine one (None: written from scratch)."""
    if machine is None:
        return (truth[0], 0, origin) + (None,) * (5 + 2 * len(LABELS))
    t_labels, m_labels = json.loads(truth[2] or "{}"), json.loads(machine[2] or "{}")
    ratio = 0.0 if truth[0] == machine[0] else textdiff.edit_ratio(machine[1], truth[1])
    values = [v for n in LABELS for v in (_stored(n, m_labels), _stored(n, t_labels))]
    return (truth[0], machine[0], origin, *machine[3:7], ratio, *values)


def _write_pairs(db: sqlite_utils.Database, rows: list[tuple]) -> None:
    # the diffs ran before, outside any transaction: the write lock is held only for the inserts. Rows already
    # there are kept (another process may have filled the same pair meanwhile, with the same content).
    with immediate(db):
        db.conn.executemany(_INSERT_PAIR, rows)


_MACHINE = "m.id, m.text, m.labels, m.model, m.prompt_name, m.prompt_version, m.job_id"


def fill(db: sqlite_utils.Database, f: Filter = Filter()) -> int:
    """Store the pair of every approved clip of `f` whose current caption has none yet (it and its origin
    machine caption, with their edit ratio); returns how many were added. Batches of FILL_BATCH, each read,
    measured, then written in one short transaction: memory stays bounded whatever the library."""
    table, where, args = _clip_where(f)
    missing = (
        f"SELECT c.current_caption_id FROM {table} WHERE {' AND '.join(where)} AND c.current_caption_id > ? "
        "AND NOT EXISTS (SELECT 1 FROM quality_pairs q WHERE q.truth_id = c.current_caption_id AND q.origin = 1) "
        "ORDER BY c.current_caption_id LIMIT ?"
    )
    added, after = 0, 0
    while True:
        ids = [r[0] for r in db.execute(missing, [*args, after, FILL_BATCH])]
        if not ids:
            return added
        marks = ",".join("?" * len(ids))
        rows = db.execute(
            f"SELECT k.id, k.text, k.labels, {_MACHINE} FROM captions k LEFT JOIN captions m ON m.id = k.origin_id "
            f"WHERE k.id IN ({marks})",
            ids,
        ).fetchall()
        _write_pairs(db, [_pair_row(r[:3], r[3:] if r[3] is not None else None, 1) for r in rows])
        added += len(rows)
        after = ids[-1]


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
            items.add(_as_set(said, cache), _as_set(approved, cache), count)
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
) -> Report:
    """The model against its reviewers over the approved clips of `f`, per group of machine captions (`by`:
    any of "model", "prompt", "job"; () for one group of everything). One pass over the clips and their stored
    pairs; when some have none yet (newly approved or edited), `fill` stores them and the pass runs again (a clip
    approved meanwhile is left for the next report)."""
    by = _by(by)
    pairs = _pairs(f, scope)
    groups, seen = _aggregate(db, pairs, by)
    if seen["missing"]:
        fill(db, f)
        groups, seen = _aggregate(db, pairs, by)
    approved = seen["rows"]
    if scope != Scope():  # the pass read the scope's clips only: count the filter's
        table, where, args = _clip_where(f)
        approved = db.execute(f"SELECT COUNT(*) FROM {table} WHERE {' AND '.join(where)}", args).fetchone()[0]
    return Report(groups, approved, seen["without"], by)


def _correct(label: str, said: dict, approved: dict) -> bool | None:
    """Whether the machine's value of `label` is the approved one (None: the approved labels lack it)."""
    truth = _stored(label, approved)
    return None if truth is None else _stored(label, said) == truth


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
            ok = _correct(label, said, approved)
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


def agreement(db: sqlite_utils.Database, f: Filter = Filter(), *, sample_id: int | None = None) -> Agreement:
    """Cohen's kappa per label between the first review of a clip (its approved caption, its review status) and
    its answered blind second review (data.samples), over the clips of `f` (any review status: a rejected first
    review counts for the decision only) and, if given, one sample."""
    f = dataclasses.replace(f, review_status=None) if f.review_status == "approved" else f
    where, args = clips._where(f)
    where = [*where, "r.state = 'done'", "c.review_status <> 'unreviewed'"]
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
            a, b = _stored(label, first), _stored(label, second)
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


def _pct(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def label_rows(group: Group, agree: Agreement | None = None) -> list[list[Any]]:
    """The per-label table of a group as people read it: label, clips, the model's accuracy, and beside it the
    reviewers' agreement and kappa (its ceiling), then the multi-choice label's Jaccard. Numbers as text."""
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


LABEL_COLUMNS = ["label", "clips", "accuracy", "reviewers agree", "kappa", "clips reviewed twice", "note"]


def estimate_rows(e: Estimate) -> list[list[Any]]:
    """The sample estimate's table: label, estimate, 95 % interval, reviewed, more reviews for the margin."""
    rows = []
    for label, le in e.labels.items():
        i = le.interval
        rows.append(
            [
                label,
                _pct(i.p if i else None),
                f"{i.low:.3f} - {i.high:.3f}" if i else "not yet (a stratum has no review)",
                f"{sum(s.reviewed for s in le.strata):,}",
                "-" if le.more is None else f"{le.more:,}",
            ]
        )
    return rows


ESTIMATE_COLUMNS = ["label", "estimate", "95 % interval", "reviewed", "more reviews for the margin"]


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


def format_text(r: Report, agree: Agreement | None, est: Estimate | None, *, detail: bool = False) -> str:
    """The terminal form of a report, its reviewers' agreement and a sample estimate."""
    out = [
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
            + (
                "no more reviews needed."
                if est.more == 0
                else f"{est.more:,} more reviews needed."
                if est.more
                else "-"
            )
        )
        out.append(_table(ESTIMATE_COLUMNS, estimate_rows(est)))
    return "\n".join(out)


def format_calibration(rows: list[dict]) -> str:
    """data.calibration's rows as a table per label (buckets that hold clips only)."""
    out = ["\nCalibration (accuracy by the model's confidence, every prompt version of the filter):"]
    for label in LABELS:
        mine = [r for r in rows if r["label"] == label and r["n"]]
        if not mine:
            out.append(f"{label}: no recorded confidence")
            continue
        table = [
            [f"{r['low']:.1f}-{r['high']:.1f}", f"{r['n']:,}", _pct(r["accuracy"]), _pct(r["confidence"])] for r in mine
        ]
        out.append(_table([label, "clips", "accuracy", "mean confidence"], table))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from data import settings as settings_mod
    from data.db import connect

    parser = argparse.ArgumentParser(
        prog="python -m data.quality",
        description="How good the machine captions are, measured against what reviewers approved: per label "
        "accuracy, reviewers' agreement (kappa), the text's edit ratio, and the estimate from a random sample. "
        "The README's Quality section says what each figure means.",
        epilog="examples:\n"
        "  python -m data.quality --data-dir var\n"
        "  python -m data.quality --data-dir var --prompt av-hazard:2 --detail\n"
        "  python -m data.quality --data-dir var --job 12 --margin 3\n"
        "  python -m data.quality --db var/workbench.db --by model,prompt,job --json > quality.json\n"
        '  python -m data.quality --data-dir var --filter \'{"hazard_level": "high"}\'',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--job", help="only machine captions written by this job (and its samples)")
    parser.add_argument("--prompt", help="only machine captions of this prompt: NAME or NAME:VERSION")
    parser.add_argument("--model", help="only machine captions of this model")
    parser.add_argument(
        "--by", default=",".join(DEFAULT_BY), help="group by any of model,prompt,job (default model,prompt; '' for all)"
    )
    parser.add_argument(
        "--filter", help='only clips of this Browse filter, as JSON (for example \'{"weather": "rain"}\')'
    )
    parser.add_argument("--sample", help="the random sample to estimate from (default: the newest, of --job if given)")
    parser.add_argument(
        "--margin", default="5", help="the interval half-width the lead wants, in points (default 5: +/- 5 %%)"
    )
    parser.add_argument("--detail", action="store_true", help="per-class precision and recall, confusion matrices")
    parser.add_argument("--json", action="store_true", help="everything as one JSON object")
    settings_mod.add_arguments(parser, ["data_dir", "db"])
    args = parser.parse_args(argv)
    s = settings_mod.from_args(args)
    if not s.db.exists():
        print(f"error: no database at {s.db}", file=sys.stderr)
        return 2
    db = connect(s.db)
    try:
        scope = Scope.of(job=args.job, prompt=args.prompt, model=args.model)
        try:
            f = Filter.from_dict(json.loads(args.filter)).checked() if args.filter else Filter()
        except ValueError:
            raise DataError('--filter takes a JSON object, for example \'{"weather": "rain"}\'.') from None
        margin = check_margin(args.margin)
        by = [b.strip() for b in args.by.split(",") if b.strip()]
        r = report(db, f, scope, by=by)
        agree = agreement(db, f)
        sample_id = args.sample
        if sample_id is None:
            newest = samples_for(db, scope)
            sample_id = newest[0]["id"] if newest else None
        est = estimate(db, sample_id, margin) if sample_id is not None else None
        if args.json:
            out = {
                "report": r.to_dict(),
                "agreement": agree.to_dict(),
                "estimate": est.to_dict() if est else None,
                "calibration": calibration.calibration(db, f),
            }
            print(json.dumps(out, indent=1, ensure_ascii=False))
        else:
            print(format_text(r, agree, est, detail=args.detail))
            if args.detail:
                print(format_calibration(calibration.calibration(db, f)))
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
