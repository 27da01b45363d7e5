"""The append-only audit trail: who did what, to which clip, caption or job, and when."""

from __future__ import annotations

import json
from typing import Any, Iterator

import sqlite_utils

from data.db import now


def record(
    db: sqlite_utils.Database,
    actor: str,
    action: str,
    *,
    clip_id: int | None = None,
    caption_id: int | None = None,
    job_id: int | None = None,
    **detail: Any,
) -> int:
    """Append one event. Call inside the transaction of the change it describes."""
    cur = db.execute(
        "INSERT INTO events (at, actor, action, clip_id, caption_id, job_id, detail) VALUES (?,?,?,?,?,?,?)",
        [
            now(),
            actor,
            action,
            clip_id,
            caption_id,
            job_id,
            json.dumps(detail, ensure_ascii=False, default=str) if detail else None,
        ],
    )
    return cur.lastrowid


def record_many(db: sqlite_utils.Database, actor: str, action: str, rows: list[tuple[int, dict]]) -> None:
    """Append one event per (clip id, detail) of `rows` in one statement: a lead's assignment of 10,000 clips
    is 10,000 events (each clip's history names it). Call inside the transaction of the change."""
    at = now()
    db.conn.executemany(
        "INSERT INTO events (at, actor, action, clip_id, detail) VALUES (?,?,?,?,?)",
        [(at, actor, action, clip_id, json.dumps(detail, ensure_ascii=False, default=str)) for clip_id, detail in rows],
    )


def team_stats(db: sqlite_utils.Database, *, since: float) -> list[dict]:
    """Per person since `since`: caption edits saved, clips approved and rejected, clips flagged broken (apart:
    a broken video says nothing of the caption), and the approval rate (approved / (approved + rejected)).
    Machine authors are left out. Reads the audit trail, so it counts what happened, not what a counter was
    told."""
    rows = db.query(
        "SELECT actor, "
        "SUM(action IN ('caption.save', 'caption.adopt')) AS edits, "
        "SUM(action = 'review.approved') AS approved, "
        "SUM(action = 'review.rejected') AS rejected, "
        "SUM(action = 'review.broken') AS broken, "
        "COUNT(DISTINCT clip_id) AS clips, MAX(at) AS last_at "
        "FROM events WHERE at >= ? AND action IN "
        "('caption.save', 'caption.adopt', 'review.approved', 'review.rejected', 'review.broken') "
        "GROUP BY actor ORDER BY edits + approved + rejected + broken DESC",
        [since],
    )
    out = []
    for r in rows:
        r = dict(r)
        reviewed = r["approved"] + r["rejected"]
        r["approval_rate"] = round(r["approved"] / reviewed, 3) if reviewed else None
        out.append(r)
    return out


def for_clip(db: sqlite_utils.Database, clip_id: int, limit: int = 200) -> list[dict]:
    return [
        dict(r) for r in db.query("SELECT * FROM events WHERE clip_id = ? ORDER BY id DESC LIMIT ?", [clip_id, limit])
    ]


def iter_all(db: sqlite_utils.Database, action: str | None = None) -> Iterator[dict]:
    sql, args = "SELECT * FROM events", []
    if action:
        sql, args = sql + " WHERE action = ?", [action]
    yield from db.query(sql + " ORDER BY id", args)
