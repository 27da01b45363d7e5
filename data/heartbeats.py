"""Heartbeats: each long-running process (runner, supervisor) says it is alive, with what it is doing.

A runner writes its heartbeat every PERIOD_S. One older than STALE_S (a few periods) is a runner that is not
running: the Jobs tab says so, and serving.supervisor restarts the child that wrote it (unless another program holds
the write lock or the disk is full: a heartbeat that cannot be written then says nothing about the process that
tried; a child that holds the lock itself has no such excuse).
"""

from __future__ import annotations

import json
import os

import sqlite_utils

from data.db import immediate, now

PERIOD_S = 2.0  # how often a runner reports itself
STALE_S = 5 * PERIOD_S  # a heartbeat older than this: the process is not running (or hangs)
FIRST_S = 30.0  # a process just started writes its first heartbeat within this (imports, settings)


def heartbeat(
    db: sqlite_utils.Database, name: str, kind: str, info: dict | None = None, *, wait: bool | float = True
) -> None:
    """Record that process `name` (of `kind`) is alive now, with `info`. `wait`: as data.db.immediate."""
    with immediate(db, wait=wait):
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


def last_beat_of(db: sqlite_utils.Database, pid: int, *, not_kind: str = "supervisor") -> float | None:
    """When process `pid` last wrote a heartbeat (Unix time; None: never, or another process wrote over it),
    its supervisor's own heartbeats aside."""
    row = next(db.query("SELECT MAX(at) AS at FROM heartbeats WHERE pid = ? AND kind != ?", [pid, not_kind]), None)
    return row["at"] if row and row["at"] is not None else None
