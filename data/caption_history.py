"""Reading a clip's caption versions back: one page of its history, a version's lineage (the chain of human
edits back to the machine caption at its root) and what each edit changed.

Split from data.captions, which keeps every write and the rules that keep human work safe: these readers only
query, and the export, the release's diff and the review tab's history and provenance are their callers.

Lineage (what a training pipeline needs to know about where a text came from, kept through any number of edits):
- `derived_from_id`: the version this one was made from. A human save: the version it was based on. An adopt:
  the version adopted. A machine caption: none, it is an origin.
- `origin_id`: the machine caption at the root of the `derived_from_id` chain (a machine caption's own id), or
  none for text a human wrote from scratch. Its provenance (model, prompt, job, simulated) is the text's.
- `parent_id` is something else: the version that was current when this one was written (the version a save
  or an adopt replaced), which the history view diffs against.
`lineage` walks a chain back to its origin: who edited the text, when, and what each edit changed.
"""

from __future__ import annotations

from typing import Any

import sqlite_utils

from data import limits, taxonomy
from data.captions import _clip, _decode, get, is_candidate

CHANGE_KINDS = ("unchanged", "text", "labels", "both", "written")
EDITS_MAX = 50  # human versions `lineage` walks back through, newest first (a bounded lookup per clip)


def _words(text: str | None) -> list[str]:
    return (text or "").split()


def _label_value(labels: dict, name: str) -> Any:
    v = labels.get(name)
    return sorted(v) if isinstance(v, list) else v  # a multi-choice label is a set: order is no change


def labels_changed(before: dict | None, after: dict | None) -> list[str]:
    """Names of the labels whose value differs between two label sets (taxonomy order, then any others)."""
    before, after = before or {}, after or {}
    names = [*taxonomy.ENUMS, *sorted((set(before) | set(after)) - set(taxonomy.ENUMS))]
    return [n for n in names if _label_value(before, n) != _label_value(after, n)]


def change_kind(before: dict | None, after: dict) -> str:
    """What `after` changed compared with `before` (rows with decoded `text` and `labels`): one of CHANGE_KINDS.
    Text is compared word by word (whitespace is no change); `before` None is text written from scratch."""
    if before is None:
        return "written"
    text = _words(before.get("text")) != _words(after.get("text"))
    labels = bool(labels_changed(before.get("labels"), after.get("labels")))
    return "both" if text and labels else "text" if text else "labels" if labels else "unchanged"


# A version and the versions it derives from, newest first, at most limit + 1 (parameters: id, limit). Each step
# looks its link up in a scalar subquery: written as a join, SQLite 3.38+ puts a Bloom filter on `captions` in
# the recursive step and builds it by scanning the whole table at every step (0.3 s a step on 100k versions,
# against 0.1 ms a whole chain this way).
CHAIN_SQL = (
    "WITH RECURSIVE chain(n, id) AS (SELECT 0, ? UNION ALL "
    "SELECT chain.n + 1, (SELECT d.derived_from_id FROM captions d WHERE d.id = chain.id) FROM chain "
    "WHERE chain.id IS NOT NULL AND chain.n < ?) "
    "SELECT k.id, k.version, k.source, k.author, k.created_at, k.text, k.labels, k.derived_from_id "
    "FROM chain CROSS JOIN captions k ON k.id = chain.id ORDER BY chain.n"
)


def edits(db: sqlite_utils.Database, caption_id: int, limit: int = EDITS_MAX) -> tuple[list[dict], bool]:
    """The human versions on the chain from `caption_id` back to its origin, oldest first, each with `changed`
    (CHANGE_KINDS, against the version it was derived from); and whether the chain was longer than `limit`
    human versions (then only the newest `limit` are listed). One indexed query, at most limit + 1 rows."""
    cursor = db.execute(CHAIN_SQL, [caption_id, limit])  # a plain cursor: an export asks once per human caption
    names = [d[0] for d in cursor.description]
    rows = [_decode(dict(zip(names, r))) for r in cursor]
    out = []
    for i, r in enumerate(rows[:limit]):
        if r["source"] != "human":
            break  # the origin: the chain's end
        before = rows[i + 1] if i + 1 < len(rows) else None
        out.append(
            {
                "caption_id": r["id"],
                "version": r["version"],
                "author": r["author"],
                "created_at": r["created_at"],
                "changed": change_kind(before, r),
            }
        )
    truncated = len(rows) > limit and rows[limit]["source"] == "human"
    return out[::-1], truncated


def lineage(db: sqlite_utils.Database, cap: dict | None) -> dict:
    """Where the version `cap` (a row of `get`) came from: `origin` (the machine caption at its root, decoded,
    or None), `derived_from` (the version it was made from, or None), `edits` and `edits_truncated` (see
    `edits`), `changed` (CHANGE_KINDS, against the origin) with `labels_changed` (None without an origin),
    and `simulated` (the text, or the text it was derived from, was written by the simulated fleet)."""
    if cap is None:
        return {
            "origin": None,
            "derived_from": None,
            "edits": [],
            "edits_truncated": False,
            "changed": None,
            "labels_changed": None,
            "simulated": False,
        }
    origin = cap if cap.get("origin_id") == cap["id"] else get(db, cap.get("origin_id"))
    made_from = get(db, cap.get("derived_from_id"))
    human, truncated = edits(db, cap["id"]) if cap["source"] == "human" else ([], False)
    return {
        "origin": origin,
        "derived_from": made_from,
        "edits": human,
        "edits_truncated": truncated,
        "changed": change_kind(origin, cap),
        "labels_changed": labels_changed(origin["labels"], cap["labels"]) if origin else None,
        "simulated": bool(cap.get("simulated") or (origin or {}).get("simulated")),
    }


def history_page(
    db: sqlite_utils.Database, clip_id: int, *, before: int | None = None, limit: int = limits.HISTORY_PAGE
) -> dict:
    """One page of a clip's versions, newest first: those older than version `before` (None: the newest),
    at most `limit`. Returns {versions (each marked `current` and `candidate`), bases (rows the page's diffs
    need that are not on it, by id), total, older (versions after this page), newer (versions before it),
    current_id}.
    What one open ships is bounded by the page, not by the history, which can hold hundreds of versions
    (issue 21, class 4)."""
    clip = _clip(db, clip_id)
    limit = max(1, min(int(limit), 200))
    cond, args = ("AND version < ?", [limits.sql_int(before, "version")]) if before is not None else ("", [])
    rows = [
        _decode(r)
        for r in db.query(
            f"SELECT * FROM captions WHERE clip_id = ? {cond} ORDER BY version DESC LIMIT ?", [clip_id, *args, limit]
        )
    ]
    for r in rows:
        r["current"] = r["id"] == clip["current_caption_id"]
        r["candidate"] = is_candidate(r, clip["current_caption_id"])
    total = db.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ?", [clip_id]).fetchone()[0]
    oldest = rows[-1]["version"] if rows else (before or 1)
    older = db.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ? AND version < ?", [clip_id, oldest]).fetchone()[
        0
    ]
    on_page = {r["id"] for r in rows}
    wanted = {r["parent_id"] for r in rows if r.get("parent_id") and r["parent_id"] not in on_page}
    if rows and older:  # the diff base of the oldest version shown, when it has no parent: the version before
        prev = next(
            db.query(
                "SELECT * FROM captions WHERE clip_id = ? AND version < ? ORDER BY version DESC LIMIT 1",
                [clip_id, oldest],
            ),
            None,
        )
        if prev is not None:
            rows[-1]["_previous_id"] = prev["id"]
            wanted.add(prev["id"])
    bases = {}
    for cid in wanted:
        row = get(db, cid)
        if row is not None:
            bases[cid] = row
    return {
        "versions": rows,
        "bases": bases,
        "total": total,
        "older": older,
        "newer": total - older - len(rows),
        "current_id": clip["current_caption_id"],
    }
