"""The append-only audit trail: who did what, to which clip, caption or job, and when."""

from __future__ import annotations

import json
from typing import Any, Iterator

import sqlite_utils

from data.db import now


def record(db: sqlite_utils.Database, actor: str, action: str, *, clip_id: int | None = None,
           caption_id: int | None = None, job_id: int | None = None, **detail: Any) -> int:
    """Append one event. Call inside the transaction of the change it describes."""
    cur = db.execute(
        "INSERT INTO events (at, actor, action, clip_id, caption_id, job_id, detail) VALUES (?,?,?,?,?,?,?)",
        [now(), actor, action, clip_id, caption_id, job_id,
         json.dumps(detail, ensure_ascii=False, default=str) if detail else None])
    return cur.lastrowid


def for_clip(db: sqlite_utils.Database, clip_id: int, limit: int = 200) -> list[dict]:
    return [dict(r) for r in db.query(
        "SELECT * FROM events WHERE clip_id = ? ORDER BY id DESC LIMIT ?", [clip_id, limit])]


def iter_all(db: sqlite_utils.Database, action: str | None = None) -> Iterator[dict]:
    sql, args = "SELECT * FROM events", []
    if action:
        sql, args = sql + " WHERE action = ?", [action]
    yield from db.query(sql + " ORDER BY id", args)
