"""Finding clips: filters, keyset pages, counts, one clip's detail, neighbours within a filter.

Pages are keyset pages in an `Order` (data.order): `WHERE (key, id) after the cursor ORDER BY key, id LIMIT n`,
never OFFSET. In the id orders the key is the id itself, so page 10,000 of a million clips costs what page 1
costs. Facet filters hit the denormalised columns of `clips` (see data.schema); full-text search goes through
the `clips_fts` index with the user's query translated by data.search (words quoted, so raw text such as
`car.` is never an FTS syntax error; OR, phrases, prefixes; a hint for a query that cannot be read).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import sqlite_utils

from data import captions, limits, order as orders, review_states, search, taxonomy
from data.errors import DataError, NotFound
from data.order import Order

PAGE_SIZE = 60


def _field(help: str, *, choices: tuple[str, ...] = (), switch: bool = False, default: Any = None) -> Any:
    """A Filter field with its help (what each command line's flag says), the values it allows (None: any) and
    `switch`: a bool whose False filters nothing, so a flag turns it on (others take yes or no)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices or None, "switch": switch})


@dataclass(frozen=True)
class Filter:
    """What a user asked to see. Empty fields do not filter. Its dict form (`to_dict` / `from_dict`) is what
    URLs, browser state, export links and a job's recorded selection carry; each field's metadata (help,
    allowed values) is what the command lines' flags are made from (data.filter_args)."""

    review_status: str | None = _field("only clips in this review state", choices=review_states.REVIEW_STATES)
    scenario: str | None = _field("only clips whose scenario is this", choices=taxonomy.SCENARIO_CATEGORIES)
    hazard_level: str | None = _field("only clips whose hazard level is this", choices=taxonomy.HAZARD_LEVELS)
    weather: str | None = _field("only clips whose weather is this", choices=taxonomy.WEATHER)
    lighting: str | None = _field("only clips whose lighting is this", choices=taxonomy.LIGHTING)
    road_type: str | None = _field("only clips whose road type is this", choices=taxonomy.ROAD_TYPES)
    caption_source: str | None = _field(
        "only clips whose current caption the model or a human wrote", choices=("model", "human")
    )
    has_caption: bool | None = _field("only clips with (yes) or without (no) a current caption")
    failed: bool | None = _field("only clips whose ingest probe failed (yes) or did not (no)")
    job_id: int | None = _field("only clips of this captioning job")
    job_item_state: str | None = _field(
        "with the job: only its items in this state", choices=("pending", "leased", "done", "failed")
    )
    text: str | None = _field(
        'full-text query over path, caption and labels: words (all must match), OR, "a phrase", prefix*'
    )
    assignee: str | None = _field("only clips assigned to this user")
    unassigned: bool | None = _field("only clips assigned to nobody", switch=True)
    disagrees: bool | None = _field("only clips whose caption's text and labels disagree (yes) or agree (no)")
    include_missing: bool = _field("also clips whose file is gone", switch=True, default=False)

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from their default, as JSON-able values; False stays (has_caption=False is
        "without a caption", not "any"). `from_dict(f.to_dict()) == f` for every Filter."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Filter:
        """A Filter from untrusted input (an export URL, a browser's state), each field checked: an unknown
        field, a wrong type, a huge number or a NUL is a DataError with a message, never a 500 from SQLite
        (nor a filter silently wider than asked). Empty values ("" or None) are "not set"."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise DataError("A filter must be an object of filter fields.")
        unknown = sorted(str(k)[:40] for k in d if k not in FIELD_TYPES)
        if unknown:
            raise DataError(f"Unknown filter field(s): {', '.join(unknown)}. Known: {', '.join(FIELD_TYPES)}.")
        return cls(**{k: v for k, v in d.items() if v not in ("", None)})

    def checked(self, name: Callable[[str], str] = str) -> Filter:
        """This filter, or a DataError where typed input would silently match nothing: a value outside its
        field's allowed values (the message names them) or a job item state without a job. `name` spells a
        field in the message (a command line gives its flag). Construction does not check this: selections
        recorded before it may hold such values, and must still read (they match nothing)."""
        for field, allowed in CHOICES.items():
            value = getattr(self, field)
            if value is not None and value not in allowed:
                raise DataError(f"{name(field)} must be one of: {', '.join(allowed)} (not {value!r}).")
        if self.job_item_state and not self.job_id:
            raise DataError(f"{name('job_item_state')} needs {name('job_id')}: the job whose items to select.")
        return self

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            kind = FIELD_TYPES[f.name]
            if v is None or (v == "" and kind is str):
                object.__setattr__(self, f.name, f.default)  # one form for "not set"
            elif kind is int:
                if isinstance(v, bool) or not isinstance(v, (int, str)):
                    raise DataError(f"{f.name} must be a whole number.")
                object.__setattr__(self, f.name, limits.sql_int(v, f.name))
            elif kind is bool:
                if not isinstance(v, bool):
                    raise DataError(f"{f.name} must be true or false.")
            else:
                if not isinstance(v, str):
                    raise DataError(f"{f.name} must be text.")
                limits.check_text(v, limits.MAX_SEARCH_CHARS, f.name.replace("_", " "))
                if f.name == "text":
                    search.fts_query(v)  # a query that cannot be read is refused here, with its hint


def _value_type(hint: Any) -> type:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


# Each field's value type (bool, int or str), read from the annotations: forms and checks derive from it.
FIELD_TYPES: dict[str, type] = {name: _value_type(h) for name, h in typing.get_type_hints(Filter).items()}
# The allowed values of the fields that have a fixed set (review states, the taxonomy's labels, ...).
CHOICES: dict[str, tuple[str, ...]] = {
    f.name: f.metadata["choices"] for f in dataclasses.fields(Filter) if f.metadata.get("choices")
}


_FACETS = ("review_status", "scenario", "hazard_level", "weather", "lighting", "road_type", "caption_source")


def fts_query(text: str) -> str:
    """User text -> a safe FTS5 MATCH expression ("" for none): see data.search for the language (words that
    must all match, OR, "phrases", prefix*, groups, NOT). Raises SearchSyntaxError (data.errors) with a
    hint for text that cannot be read. No implicit prefix: `car` finds car and cars, not cargo."""
    return search.fts_query(text)


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
    if f.disagrees is True:
        where.append("c.label_conflicts > 0")
    elif f.disagrees is False:
        where.append("c.label_conflicts = 0")  # checked and agreeing (NULL: never checked, no caption)
    q = fts_query(f.text) if with_text and f.text else ""
    if q:
        where.append("c.id IN (SELECT rowid FROM clips_fts WHERE clips_fts MATCH ?)")
        args.append(q)
    return where, args


LIST_COLUMNS = (
    "c.id, c.path, c.duration, c.width, c.height, c.codec, c.probe_error, c.thumbnail, "
    "c.review_status, c.current_caption_id, c.caption_source, c.scenario, c.hazard_level, c.weather, "
    "c.lighting, c.road_type, substr(c.caption_text, 1, 160) AS caption_preview, "
    "(SELECT assignee FROM assignments a WHERE a.clip_id = c.id) AS assignee"
)


@dataclass(frozen=True)
class Page:
    """One page of clips and the cursor of the next one (None: this is the last page)."""

    rows: list[dict]
    next: str | None


def _page_sql(
    f: Filter, order: Order, after: orders.Cursor | None, limit: int, columns: str = LIST_COLUMNS
) -> list[tuple[str, list[Any]]]:
    """The SQL of one page of `f` in `order`, after `after`: one query per segment of the order (one for the id
    orders, data.order), each read only as far as the page needs. With a text query the FTS index drives the
    loop: FTS5 yields rowids in order and seeks `rowid > ?` itself, so in the id orders a common word costs
    what a rare one does (an `id IN (MATCH ...)` subquery would first materialise every match: 700k ids for
    'vehicle' on a million clips). Likewise a person's clips (the review queue asks for them on every "next")
    are walked from their assignments, in clip order on the (assignee, clip_id) index: an `id IN (...)` test
    would scan the clips of the filter instead, all of them when the person has none left. A non-id order
    keeps the same loops and sorts their rows by its key, unless an index on (key, id) lets SQLite seek."""
    q = fts_query(f.text) if f.text else ""
    by_assignee = bool(f.assignee) and not q
    base, base_args = _where(f, with_text=False, with_assignee=not by_assignee)
    walk = "clips_fts.rowid" if q else "asg.clip_id" if by_assignee else "c.id"
    if q:
        head = f"SELECT {columns} FROM clips_fts CROSS JOIN clips c ON c.id = clips_fts.rowid"
        base, base_args = ["clips_fts MATCH ?", *base], [q, *base_args]
    elif by_assignee:
        head = f"SELECT {columns} FROM assignments asg CROSS JOIN clips c ON c.id = asg.clip_id"
        base, base_args = ["asg.assignee = ?", *base], [f.assignee, *base_args]
    else:
        head = f"SELECT {columns} FROM clips c"
    out = []
    for seg in order.segments(after, walk):
        where = base + ([seg.where] if seg.where else [])
        sql = head + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY {seg.order_by} LIMIT ?"
        out.append((sql, [*base_args, *seg.args, limit]))
    return out


def _read(db: sqlite_utils.Database, queries: list[tuple[str, list[Any]]], limit: int) -> list[dict]:
    """The first `limit` rows of the segments' queries, in turn: a later segment is read only if the earlier
    ones ran out (each query's last argument is its LIMIT)."""
    rows: list[dict] = []
    for sql, args in queries:
        rows += [dict(r) for r in db.query(sql, [*args[:-1], limit - len(rows)])]
        if len(rows) >= limit:
            break
    return rows


def page(
    db: sqlite_utils.Database,
    f: Filter = Filter(),
    *,
    order: Order | str = orders.OLDEST,
    after: str | None = None,
    limit: int = PAGE_SIZE,
) -> Page:
    """One page of clips matching `f` in `order` (a name or an Order), after the cursor `after` (None: from
    the start). BadCursor for a cursor this order did not make."""
    o = orders.get(order)
    return _page(db, f, o, o.decode(after), limit)


def _page(db: sqlite_utils.Database, f: Filter, o: Order, after: orders.Cursor | None, limit: int) -> Page:
    rows = _read(db, _page_sql(f, o, after, limit + 1, LIST_COLUMNS + o.key_column()), limit + 1)
    nxt = o.encode(o.cursor_of(rows[limit - 1])) if len(rows) > limit else None
    rows = rows[:limit]
    for r in rows:
        r.pop(orders.KEY_COLUMN, None)
    return Page(rows, nxt)


def page_ids(
    db: sqlite_utils.Database,
    f: Filter,
    *,
    order: Order | str = orders.OLDEST,
    after: str | None = None,
    limit: int = PAGE_SIZE,
) -> list[int]:
    """The ids of `page` (no columns to read: for writes over many clips, data.assignments)."""
    o = orders.get(order)
    return [r["id"] for r in _read(db, _page_sql(f, o, o.decode(after), limit, columns="c.id"), limit)]


def cursor_at(db: sqlite_utils.Database, order: Order | str, clip_id: int) -> str:
    """The cursor of clip `clip_id` in `order`: where "after this clip" starts (the review view knows a clip,
    not a page). NotFound for a clip that does not exist."""
    o = orders.get(order)
    return o.encode(_place(db, o, clip_id))


def _place(db: sqlite_utils.Database, o: Order, clip_id: int) -> orders.Cursor:
    clip_id = _id(clip_id)
    row = db.execute(f"SELECT c.id, {o.key} FROM clips c WHERE c.id = ?", [clip_id]).fetchone()
    if row is None:
        raise NotFound(f"clip {clip_id} does not exist")
    return orders.Cursor(row[1], row[0])


def count(db: sqlite_utils.Database, f: Filter = Filter()) -> int:
    """Exact count of matching clips. On a million rows a broad filter costs tens of ms or more:
    the browse view should use `count_capped` (and `total` for the unfiltered headline)."""
    where, args = _where(f)
    sql = "SELECT COUNT(*) FROM clips c" + (" WHERE " + " AND ".join(where) if where else "")
    return db.execute(sql, args).fetchone()[0]


COUNT_CAP = 10_000


def count_capped(db: sqlite_utils.Database, f: Filter = Filter(), cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(count, exact): counts at most `cap` matches, so the cost is bounded whatever the filter; when more
    match, returns (cap, False) and the UI shows "10,000+". A count does not depend on the order: it walks the
    page query of the id order, the cheapest."""
    [(sql, args)] = _page_sql(f, orders.OLDEST, None, cap + 1, columns="1")
    n = db.execute(f"SELECT COUNT(*) FROM ({sql})", args).fetchone()[0]
    return (cap, False) if n > cap else (n, True)


def count_upto(db: sqlite_utils.Database, f: Filter, cap: int) -> tuple[int, bool]:
    """(count, exact) like `count_capped`, but in no order: the matches are counted as the cheapest index finds
    them and the count stops at `cap` + 1. For a filter an index narrows but the id order does not (clips without a
    caption, unreviewed: `count_capped` sorted all ~95,000 of 200,000 to count 10,001 of them, 1.7 s)."""
    where, args = _where(f)
    sql = "SELECT 1 FROM clips c" + (" WHERE " + " AND ".join(where) if where else "") + " LIMIT ?"
    n = db.execute(f"SELECT COUNT(*) FROM ({sql})", [*args, cap + 1]).fetchone()[0]
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


def explain_samples(
    f: Filter, after: orders.Cursor | int, orders_: tuple[Order, ...] = (orders.OLDEST, orders.NEWEST)
) -> dict[str, tuple[str, list[Any]]]:
    """SQL of representative browse queries (each segment of each order), for EXPLAIN QUERY PLAN in benchmarks
    and tests. `after`: where the deep pages start (a clip id stands for its place in an id order)."""
    text = dataclasses.replace(f, text="vehicle")
    deep = after if isinstance(after, orders.Cursor) else orders.Cursor(after, after)
    out = {}
    for o in orders_:
        for name, queries in (
            ("facet page", _page_sql(f, o, None, PAGE_SIZE)),
            ("deep facet page", _page_sql(f, o, deep, PAGE_SIZE)),
            ("text page", _page_sql(Filter(text="vehicle"), o, None, PAGE_SIZE)),
            ("text + facets page", _page_sql(text, o, deep, PAGE_SIZE)),
        ):
            for i, q in enumerate(queries):
                out[f"{name} ({o.name})" + (f", segment {i + 1}" if len(queries) > 1 else "")] = q
    return out


def id_query(f: Filter = Filter(), columns: str = "c.id") -> tuple[str, list[Any]]:
    """`SELECT c.id FROM clips c WHERE ...` for the filter, in id order: for other data modules to use as a
    subquery or to stream ids (data.assignments); `columns` (of `clips c`) to read more than the id in the same
    pass (data.quality.samples reads each clip's hazard level and caption)."""
    where, args = _where(f)
    head = f"SELECT {columns} FROM clips c"
    return head + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY c.id", args


def iter_ids(db: sqlite_utils.Database, f: Filter = Filter()) -> Iterator[int]:
    """Every matching clip id, in id order, streamed."""
    sql, args = id_query(f)
    for row in db.execute(sql, args):
        yield row[0]


def neighbours(
    db: sqlite_utils.Database, f: Filter, clip_id: int, *, order: Order | str = orders.OLDEST
) -> tuple[int | None, int | None]:
    """(previous id, next id) of `clip_id` within the filter, in `order`: next/previous in the review view."""
    o = orders.get(order)
    here = _place(db, o, clip_id)
    prev = _page(db, f, o.reversed(), here, 1).rows
    nxt = _page(db, f, o, here, 1).rows
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


MEDIA_KINDS = ("thumbnail", "filmstrip", "preview")  # the derived images and the H.264 copy the ingest records


def media_of(db: sqlite_utils.Database, clip_id: int, kind: str) -> str | None:
    """The stored path (under the media dir) of a clip's thumbnail, filmstrip or preview: None when the clip has
    none, does not exist, its id is out of SQLite's range (a huge id is "no such clip", not an OverflowError), or
    `kind` is not one of MEDIA_KINDS (the column name is never taken from the caller)."""
    if not 0 <= clip_id <= limits.MAX_SQL_INT or kind not in MEDIA_KINDS:
        return None
    row = next(db.query(f"SELECT {kind} FROM clips WHERE id = ?", [clip_id]), None)
    return row[kind] if row else None


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
            "SUM(review_status = 'broken') AS broken, "
            "SUM(probe_error IS NOT NULL) AS failed "
            "FROM clips WHERE missing = 0"
        )
    )
    return {k: int(v or 0) for k, v in row.items()}
