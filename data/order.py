"""Sort orders of clip lists, and the opaque cursor that marks a place in one.

An `Order` is declared once, in `ORDERS`: a name (what the UI and URLs carry), a key (an SQL expression over
the columns of `clips c`, or `c.id`), a direction, and where rows whose key is NULL go. Ties are broken by the
clip id in the same direction, so every order is total and a place in it is (key value, id). Browse pages,
neighbours (j/k), the review queue and "assign the next N" all walk the same `Order` (data.clips,
data.assignments); the web app passes order names and cursors through as strings, untouched.

A cursor is that place, `[order name, key value, id]` as JSON in urlsafe base64 (datasette's `_next` token
does the same): opaque to the view, checked when it comes back (`Order.decode`), so a tampered, truncated or
foreign cursor is a `BadCursor` with a message, never a 500 from SQLite.

The id orders ("newest", "oldest") keep the plans data.clips documents: the walk key is the id itself (or the
FTS rowid, or the assignment's clip id), so a page is an index seek and page 10,000 costs what page 1 costs.
Any other key is read in stretches (`Order.segments`: the rest of the cursor's tie, the later keys, the NULL
run), each an index seek once an index on (key expression, id) exists; without one, each stretch sorts what
the filter matches (docs/BENCHMARKS.md has both at a million clips).

Adding an order is one `register(Order(...))` here (plus, for a library of millions, a migration with the index
on its key); the UI lists `choices()`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from data import limits
from data.errors import BadCursor, DataError

ID_KEY = "c.id"
KEY_COLUMN = "_order_key"  # the key's value in a page's rows, for the cursor of a non-id order
MAX_CURSOR_CHARS = 16_384  # a text key of a few thousand characters still fits; anything longer is not ours
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Cursor:
    """A place in an order: the sort value of a row and its id (the tie-breaker)."""

    value: Any
    id: int


@dataclass(frozen=True)
class Segment:
    """One stretch of an order: a WHERE term (None: everything) with its arguments, and its ORDER BY."""

    where: str | None
    args: list[Any]
    order_by: str


@dataclass(frozen=True)
class Order:
    """One sort order of clips. `key` is trusted SQL (declared here, never from a request)."""

    name: str
    key: str = ID_KEY
    descending: bool = False
    nulls_first: bool = False  # in this order's own direction; the reverse walk mirrors it
    label: str = ""  # what the UI shows (default: the name)

    @property
    def by_id(self) -> bool:
        """Whether the key is the clip id itself (the index-walked orders)."""
        return self.key == ID_KEY

    def reversed(self) -> Order:
        """The mirror image, for walking back (the previous neighbour): direction and NULL placement flipped,
        same name, so that a cursor of one is a place in the other."""
        return dataclasses.replace(self, descending=not self.descending, nulls_first=not self.nulls_first)

    # -- SQL ------------------------------------------------------------------------------------------------
    def segments(self, cursor: Cursor | None, walk: str = ID_KEY) -> list[Segment]:
        """The stretches of this order after `cursor` (None: from the start), in order: each one query, so that
        each is a seek on an index of (key, id) where one exists. `walk` is the column that stands for the clip
        id in the query (`c.id`, the FTS rowid or the assignment's clip id): the id orders sort on it, so SQLite
        walks that index. A non-id order splits into the rest of the cursor's tie (same key, later ids), the
        later keys, and the NULL run (first or last): one condition with ORs would make SQLite scan from the
        start of the index on every deep page."""
        way = "DESC" if self.descending else "ASC"
        cmp = "<" if self.descending else ">"
        by_walk = f"{walk} {way}"
        if self.by_id:
            return [Segment(f"{walk} {cmp} ?" if cursor else None, [cursor.id] if cursor else [], by_walk)]
        k = f"({self.key})"
        by_key = f"{self.key} {way}, {walk} {way}"
        nulls = Segment(f"{k} IS NULL", [], by_walk)
        valued = Segment(f"{k} IS NOT NULL", [], by_key)
        if cursor is None:
            return [nulls, valued] if self.nulls_first else [valued, nulls]
        if cursor.value is None:
            rest = Segment(f"{k} IS NULL AND {walk} {cmp} ?", [cursor.id], by_walk)
            return [rest, valued] if self.nulls_first else [rest]
        tie = Segment(f"{k} = ? AND {walk} {cmp} ?", [cursor.value, cursor.id], by_walk)
        later = Segment(f"{k} {cmp} ?", [cursor.value], by_key)
        return [tie, later] if self.nulls_first else [tie, later, nulls]

    def key_column(self) -> str:
        """The SELECT term that brings a row's sort value back with it (non-id orders; '' for the id orders)."""
        return "" if self.by_id else f", {self.key} AS {KEY_COLUMN}"

    # -- cursors ---------------------------------------------------------------------------------------------
    def cursor_of(self, row: dict) -> Cursor:
        """The place of a page's row (a row of data.clips.page: it carries KEY_COLUMN for non-id orders)."""
        rid = int(row["id"])
        return Cursor(rid if self.by_id else row[KEY_COLUMN], rid)

    def encode(self, cursor: Cursor) -> str:
        """The opaque token of `cursor` in this order."""
        raw = json.dumps([self.name, cursor.value, cursor.id], separators=(",", ":"), ensure_ascii=False)
        return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")

    def decode(self, token: str | None) -> Cursor | None:
        """The place a token names (None: the start), checked: BadCursor for anything this order did not make."""
        if token is None or token == "":
            return None
        if not isinstance(token, str) or len(token) > MAX_CURSOR_CHARS or not _TOKEN.match(token):
            raise _bad("it is not a cursor")
        try:
            text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8")
            if not limits.json_depth_ok(text, 1):
                raise ValueError("nested")
            parts = limits.strict_json_loads(text)
        except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
            raise _bad("it is damaged") from None
        if not (isinstance(parts, list) and len(parts) == 3):
            raise _bad("it is damaged")
        name, value, rid = parts
        if name != self.name:
            raise _bad(f"it belongs to the {str(name)[:40]!r} order, not {self.name!r}")
        if isinstance(rid, bool) or not isinstance(rid, int) or not -limits.MAX_SQL_INT <= rid <= limits.MAX_SQL_INT:
            raise _bad("its clip id is not a clip id")
        if self.by_id and value != rid:
            raise _bad("its sort value is not its clip id")
        if not _scalar(value):
            raise _bad("its sort value is not one SQLite can compare")
        return Cursor(value, rid)


def _scalar(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -limits.MAX_SQL_INT <= value <= limits.MAX_SQL_INT
    return isinstance(value, float) and limits.finite(value)


def _bad(why: str) -> BadCursor:
    return BadCursor(f"That page position is not valid ({why}): start again from the first page.")


ORDERS: dict[str, Order] = {}


def register(order: Order) -> Order:
    """Add an order to the registry (a name is taken once)."""
    if not _NAME.match(order.name) or order.name in ORDERS:
        raise ValueError(f"order name {order.name!r} is not a new lowercase identifier")
    ORDERS[order.name] = order
    return order


NEWEST = register(Order("newest", descending=True, label="newest"))
OLDEST = register(Order("oldest", label="oldest"))

# The review queue by risk (issue 19), riskiest first: the hazard level first (critical, high, medium, low, none,
# 10,000 apart), within it captions whose text and labels disagree (data.consistency: +2,000), then the model's
# doubt, 1,000 x (1 - the lowest label confidence; a caption without one, a person's or an old one, counts as
# half sure: 500). Clips without a caption have no hazard level and come last. Migration m014 indexes exactly
# this expression (idx_clips_risk): change one, change both.
RISK_KEY = (
    "CASE c.hazard_level WHEN 'critical' THEN 4 WHEN 'high' THEN 3 WHEN 'medium' THEN 2 WHEN 'low' THEN 1 "
    "WHEN 'none' THEN 0 END * 10000 + (COALESCE(c.label_conflicts, 0) > 0) * 2000 "
    "+ CAST(ROUND((1.0 - COALESCE(c.confidence_min, 0.5)) * 1000) AS INTEGER)"
)
RISK = register(Order("risk", key=RISK_KEY, descending=True, label="risk"))
DEFAULT = NEWEST.name  # what the UI shows first (the grid, the review queue)


def get(order: Order | str | None) -> Order:
    """The order named `order` (an Order passes through; None is the default). DataError for an unknown name,
    listing the known ones."""
    if isinstance(order, Order):
        return order
    if order is None or order == "":
        return ORDERS[DEFAULT]
    found = ORDERS.get(order) if isinstance(order, str) else None
    if found is None:
        raise DataError(f"Unknown sort order {str(order)[:40]!r}: use one of {', '.join(ORDERS)}.")
    return found


def name_or_default(name: Any) -> str:
    """`name` if it is a registered order, else the default: for links, which must never fail."""
    return name if isinstance(name, str) and name in ORDERS else DEFAULT


def choices() -> list[tuple[str, str]]:
    """(label, name) of every order, in registration order: the UI's list."""
    return [(o.label or o.name, o.name) for o in ORDERS.values()]
