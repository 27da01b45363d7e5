"""Heartbeats: each long-running process (runner, supervisor) says it is alive, with what it is doing."""

from __future__ import annotations

import json
import os

import sqlite_utils

from data.db import immediate, now


def heartbeat(db: sqlite_utils.Database, name: str, kind: str, info: dict | None = None) -> None:
    with immediate(db):
        db.execute(
            "INSERT INTO heartbeats (name, kind, pid, at, info) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET pid = excluded.pid, at = excluded.at, info = excluded.info",
            [name, kind, os.getpid(), now(), json.dumps(info or {}, default=str)],
        )


def heartbeats(db: sqlite_utils.Database, kind: str | None = None) -> list[dict]:
    sql, args = "SELECT * FROM heartbeats", []
    if kind:
        sql, args = sql + " WHERE kind = ?", [kind]
    rows = [dict(r) for r in db.query(sql + " ORDER BY at DESC", args)]
    for r in rows:
        r["info"] = json.loads(r["info"]) if r.get("info") else {}
        r["age_s"] = now() - r["at"]
    return rows
