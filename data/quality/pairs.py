"""The stored pairs a quality figure is counted from: each approved clip's caption with the machine caption it
derives from (its origin, kept by data.captions' lineage through any number of edits), and the `Scope` that
narrows which machine captions are measured.

Cost, for a library of millions: what a report needs of a pair (the machine caption's provenance, each label's
value on both sides, the word-level edit ratio of the texts) is stored once in `quality_pairs` (m019), because a
word diff per pair (~0.4 ms) and two JSON parses are too slow to redo for 100,000 approved clips on every view.
Caption versions are append-only, so a stored pair never goes stale; a clip approved or edited since the last
report has none yet, and `fill` stores it (a few ms of diff each, written in short transactions).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from data import clips, limits, taxonomy, textdiff
from data.clips import Filter
from data.db import immediate
from data.errors import DataError

LABELS: tuple[str, ...] = tuple(taxonomy.ENUMS)

MISSING = "(none)"  # the model gave no value for a label (a prompt whose schema lacks it)

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


def clip_where(f: Filter) -> tuple[str, list[str], list[Any]]:
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


# a clip whose current caption's text is not simulated (neither it nor the machine caption it derives from)
REAL = (
    "NOT EXISTS (SELECT 1 FROM captions rk LEFT JOIN captions ro ON ro.id = rk.origin_id WHERE "
    "rk.id = c.current_caption_id AND (COALESCE(rk.simulated, 0) <> 0 OR COALESCE(ro.simulated, 0) <> 0))"
)


def select_pairs(f: Filter, scope: Scope, *, real_only: bool = False) -> Pairs:
    """The approved clips of `f` with their pairs, as `scope` narrows them; `real_only`: only clips whose text is
    not simulated (what a release without simulated text holds)."""
    table, where, args = clip_where(f)
    if real_only:
        where = [*where, REAL]
    more, more_args = scope.where()
    if more:
        where = [*where, f"(q.truth_id IS NULL OR q.machine_id = 0 OR ({' AND '.join(more)}))"]
    return Pairs(table, where, args + more_args)


def as_set(value: Any, cache: dict) -> frozenset[str]:
    """A multi-choice value as stored (a JSON array) -> a set of items."""
    if value not in cache:
        try:
            items = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            items = [value]
        cache[value] = frozenset(str(i) for i in (items if isinstance(items, list) else [items] if items else []))
    return cache[value]


def stored_value(label: str, labels: dict) -> Any:
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
    values = [v for n in LABELS for v in (stored_value(n, m_labels), stored_value(n, t_labels))]
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
    table, where, args = clip_where(f)
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


def is_correct(label: str, said: dict, approved: dict) -> bool | None:
    """Whether the machine's value of `label` is the approved one (None: the approved labels lack it)."""
    truth = stored_value(label, approved)
    return None if truth is None else stored_value(label, said) == truth
