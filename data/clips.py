"""Finding clips: filters, keyset pages, counts, one clip's detail, neighbours within a filter.

Pages use a keyset on `id` (`WHERE id > ? ORDER BY id LIMIT n`), never OFFSET, so page 10,000 of a million
clips costs what page 1 costs. Facet filters hit the denormalised columns of `clips` (see data.schema);
full-text search goes through the `clips_fts` index with the user's text quoted (raw text such as `car.`
would otherwise be an FTS syntax error).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterator

import sqlite_utils

from data import captions, limits
from data.db import DataError, NotFound

PAGE_SIZE = 60


@dataclass(frozen=True)
class Filter:
    """What a user asked to see. Empty fields do not filter."""

    review_status: str | None = None
    scenario: str | None = None
    hazard_level: str | None = None
    weather: str | None = None
    lighting: str | None = None
    road_type: str | None = None
    caption_source: str | None = None  # 'model' | 'human'
    has_caption: bool | None = None
    failed: bool | None = None  # ingest (probe) failed
    job_id: int | None = None
    job_item_state: str | None = None  # with job_id: pending | leased | done | failed
    text: str | None = None  # full-text query over path, caption and labels
    assignee: str | None = None  # assigned to this user (data.assignments)
    unassigned: bool | None = None  # True: assigned to nobody
    include_missing: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from their default, as JSON-able values; False stays (has_caption=False is
        "without a caption", not "any"). `from_dict(f.to_dict()) == f` for every Filter."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Filter":
        """A Filter from untrusted input (an export URL, a browser's state), each field checked: a wrong
        type, a huge number or a NUL is a DataError with a message, never a 500 from SQLite."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in names and v not in ("", None)})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name == "job_id":
                if isinstance(v, bool) or not isinstance(v, (int, str)):
                    raise DataError("job_id must be a whole number.")
                object.__setattr__(self, f.name, limits.sql_int(v, "job_id"))
            elif f.name in ("has_caption", "failed", "unassigned", "include_missing"):
                if not isinstance(v, bool):
                    raise DataError(f"{f.name} must be true or false.")
            else:
                if not isinstance(v, str):
                    raise DataError(f"{f.name} must be text.")
                limits.check_text(v, limits.MAX_SEARCH_CHARS, f.name.replace("_", " "))


_FACETS = ("review_status", "scenario", "hazard_level", "weather", "lighting", "road_type", "caption_source")


def fts_query(text: str) -> str:
    """User text -> a safe FTS5 query: every word quoted (so punctuation is literal), all must match,
    the last word as a prefix so that search-as-you-type finds 'pedestr'."""
    words = [w for w in text.replace('"', " ").split() if w]
    if not words:
        return ""
    quoted = [f'"{w}"' for w in words]
    quoted[-1] += "*"
    return " ".join(quoted)


def _where(f: Filter, *, with_text: bool = True, with_assignee: bool = True) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if not f.include_missing:
        where.append("c.missing = 0")
    for col in _FACETS:
        value = getattr(f, col)
        if value:
            where.append(f"c.{col} = ?")
            args.append(value)
    if f.has_caption is True:
        where.append("c.current_caption_id IS NOT NULL")
    elif f.has_caption is False:
        where.append("c.current_caption_id IS NULL")
    if f.failed is True:
        where.append("c.probe_error IS NOT NULL")
    elif f.failed is False:
        where.append("c.probe_error IS NULL")
    if f.job_id:
        if f.job_item_state:
            where.append("c.id IN (SELECT clip_id FROM job_items WHERE job_id = ? AND state = ?)")
            args += [f.job_id, f.job_item_state]
        else:
            where.append("c.id IN (SELECT clip_id FROM job_items WHERE job_id = ?)")
            args.append(f.job_id)
    if f.assignee and with_assignee:
        where.append("c.id IN (SELECT clip_id FROM assignments WHERE assignee = ?)")
        args.append(f.assignee)
    if f.unassigned:
        where.append("c.id NOT IN (SELECT clip_id FROM assignments)")
    if with_text and f.text and fts_query(f.text):
        where.append("c.id IN (SELECT rowid FROM clips_fts WHERE clips_fts MATCH ?)")
        args.append(fts_query(f.text))
    return where, args


LIST_COLUMNS = (
    "c.id, c.path, c.duration, c.width, c.height, c.codec, c.probe_error, c.thumbnail, "
    "c.review_status, c.current_caption_id, c.caption_source, c.scenario, c.hazard_level, c.weather, "
    "c.lighting, c.road_type, substr(c.caption_text, 1, 160) AS caption_preview, "
    "(SELECT assignee FROM assignments a WHERE a.clip_id = c.id) AS assignee"
)


def _page_sql(
    f: Filter, after_id: int | None, limit: int, descending: bool, columns: str = LIST_COLUMNS
) -> tuple[str, list[Any]]:
    """The SQL of one page. With a text query the FTS index drives the loop: FTS5 yields rowids in order
    and seeks `rowid > ?` itself, so a common word costs what a rare one does (an `id IN (MATCH ...)`
    subquery would first materialise every match: 700k ids for 'vehicle' on a million clips). Likewise a
    person's clips (the review queue asks for them on every "next") are walked from their assignments, in
    clip order on the (assignee, clip_id) index: an `id IN (...)` test would scan the clips of the filter
    instead, all of them when the person has none left."""
    q = fts_query(f.text) if f.text else ""
    by_assignee = bool(f.assignee) and not q
    where, args = _where(f, with_text=False, with_assignee=not by_assignee)
    key = "clips_fts.rowid" if q else "asg.clip_id" if by_assignee else "c.id"
    if after_id is not None:
        where.append(f"{key} < ?" if descending else f"{key} > ?")
        args.append(after_id)
    if q:
        sql = f"SELECT {columns} FROM clips_fts CROSS JOIN clips c ON c.id = clips_fts.rowid"
        where.insert(0, "clips_fts MATCH ?")
        args.insert(0, q)
    elif by_assignee:
        sql = f"SELECT {columns} FROM assignments asg CROSS JOIN clips c ON c.id = asg.clip_id"
        where.insert(0, "asg.assignee = ?")
        args.insert(0, f.assignee)
    else:
        sql = f"SELECT {columns} FROM clips c"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {key} {'DESC' if descending else 'ASC'} LIMIT ?"
    return sql, [*args, limit]


def page(
    db: sqlite_utils.Database,
    f: Filter = Filter(),
    *,
    after_id: int | None = None,
    limit: int = PAGE_SIZE,
    descending: bool = False,
) -> list[dict]:
    """One page of clips matching `f`, after `after_id` in id order (before it when descending)."""
    sql, args = _page_sql(f, after_id, limit, descending)
    return [dict(r) for r in db.query(sql, args)]


def page_ids(
    db: sqlite_utils.Database,
    f: Filter,
    *,
    after_id: int | None = None,
    limit: int = PAGE_SIZE,
    descending: bool = False,
) -> list[int]:
    """The ids of `page` (no columns to read: for writes over many clips, data.assignments)."""
    sql, args = _page_sql(f, after_id, limit, descending, columns="c.id")
    return [r[0] for r in db.execute(sql, args)]


def count(db: sqlite_utils.Database, f: Filter = Filter()) -> int:
    """Exact count of matching clips. On a million rows a broad filter costs tens of ms or more:
    the browse view should use `count_capped` (and `total` for the unfiltered headline)."""
    where, args = _where(f)
    sql = "SELECT COUNT(*) FROM clips c" + (" WHERE " + " AND ".join(where) if where else "")
    return db.execute(sql, args).fetchone()[0]


COUNT_CAP = 10_000


def count_capped(db: sqlite_utils.Database, f: Filter = Filter(), cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(count, exact): counts at most `cap` matches, so the cost is bounded whatever the filter; when more
    match, returns (cap, False) and the UI shows "10,000+"."""
    sql, args = _page_sql(f, None, cap + 1, False, columns="1")
    n = db.execute(f"SELECT COUNT(*) FROM ({sql})", args).fetchone()[0]
    return (cap, False) if n > cap else (n, True)


def total(db: sqlite_utils.Database) -> int:
    """Clips present (not missing), without scanning: the row count kept by triggers (`_counts`, see
    migration m003) minus the few missing rows (a partial index)."""
    row = db.execute("SELECT count FROM _counts WHERE [table] = 'clips'").fetchone()
    if row is None:  # pragma: no cover - before m003
        return db.execute("SELECT COUNT(*) FROM clips WHERE missing = 0").fetchone()[0]
    # INDEXED BY: after ANALYZE the planner may prefer a skip-scan of a wider index (30 ms at 1M rows)
    return (
        row[0] - db.execute("SELECT COUNT(*) FROM clips INDEXED BY idx_clips_missing WHERE missing = 1").fetchone()[0]
    )


def explain_samples(f: Filter, after_id: int) -> dict[str, tuple[str, list[Any]]]:
    """SQL of representative browse queries, for EXPLAIN QUERY PLAN in benchmarks and tests."""
    text = dataclasses.replace(f, text="vehicle")
    return {
        "facet page": _page_sql(f, None, PAGE_SIZE, False),
        "deep facet page": _page_sql(f, after_id, PAGE_SIZE, False),
        "text page": _page_sql(Filter(text="vehicle"), None, PAGE_SIZE, False),
        "text + facets page": _page_sql(text, after_id, PAGE_SIZE, False),
    }


def id_query(f: Filter = Filter()) -> tuple[str, list[Any]]:
    """`SELECT c.id FROM clips c WHERE ...` for the filter, in id order: for other data modules to use as a
    subquery or to stream ids (data.assignments)."""
    where, args = _where(f)
    return "SELECT c.id FROM clips c" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY c.id", args


def iter_ids(db: sqlite_utils.Database, f: Filter = Filter()) -> Iterator[int]:
    """Every matching clip id, in id order, streamed."""
    sql, args = id_query(f)
    for row in db.execute(sql, args):
        yield row[0]


def neighbours(db: sqlite_utils.Database, f: Filter, clip_id: int) -> tuple[int | None, int | None]:
    """(previous id, next id) of `clip_id` within the filter, for next/previous in the review view."""
    prev = page(db, f, after_id=clip_id, limit=1, descending=True)
    nxt = page(db, f, after_id=clip_id, limit=1)
    return (prev[0]["id"] if prev else None, nxt[0]["id"] if nxt else None)


def _id(clip_id: Any) -> int:
    try:
        return limits.sql_int(clip_id, "clip id")
    except DataError:
        raise NotFound(f"clip {str(clip_id)[:24]} does not exist") from None


def get(db: sqlite_utils.Database, clip_id: int) -> dict:
    """One clip with its sidecar decoded and its current caption (or None)."""
    clip_id = _id(clip_id)
    row = next(db.query("SELECT * FROM clips WHERE id = ?", [clip_id]), None)
    if row is None:
        raise NotFound(f"clip {clip_id} does not exist")
    row = dict(row)
    row["sidecar"] = json.loads(row["sidecar"]) if row.get("sidecar") else {}
    row["caption"] = captions.get(db, row["current_caption_id"])
    assigned = next(db.query("SELECT assignee, assigned_by FROM assignments WHERE clip_id = ?", [clip_id]), None)
    row["assignee"], row["assigned_by"] = (assigned["assignee"], assigned["assigned_by"]) if assigned else (None, None)
    return row


def path_of(db: sqlite_utils.Database, clip_id: int) -> str:
    """The clip's path relative to the clip root (the only way a path reaches the media route)."""
    clip_id = _id(clip_id)
    row = next(db.query("SELECT path FROM clips WHERE id = ?", [clip_id]), None)
    if row is None:
        raise NotFound(f"clip {clip_id} does not exist")
    return row["path"]


def facet_counts(db: sqlite_utils.Database, column: str) -> dict[str, int]:
    """How many clips have each value of one facet column."""
    if column not in _FACETS:
        raise ValueError(f"not a facet: {column}")
    return {
        r["v"] or "": r["n"]
        for r in db.query(f"SELECT {column} AS v, COUNT(*) AS n FROM clips WHERE missing = 0 GROUP BY {column}")
    }


def summary(db: sqlite_utils.Database) -> dict[str, int]:
    """Headline counts for the UI."""
    row = next(
        db.query(
            "SELECT COUNT(*) AS clips, "
            "SUM(current_caption_id IS NOT NULL) AS captioned, "
            "SUM(review_status = 'approved') AS approved, "
            "SUM(review_status = 'rejected') AS rejected, "
            "SUM(probe_error IS NOT NULL) AS failed "
            "FROM clips WHERE missing = 0"
        )
    )
    return {k: int(v or 0) for k, v in row.items()}
