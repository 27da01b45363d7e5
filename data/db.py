"""Opening the database, and the one way to write to it safely.

- `connect(path)` opens a sqlite-utils `Database` for the calling thread (connections are thread-bound),
  with WAL and `synchronous=NORMAL` (a commit survives a process crash; FULL would also survive power loss
  at ~80x the cost on these disks, see ECOSYSTEM.md), a 10 s busy timeout and foreign keys on, and brings the
  schema up to date.
- `immediate(db)` is the transaction every read-modify-write uses: `BEGIN IMMEDIATE` takes the write lock
  up front, so a concurrent writer makes us wait (busy timeout) instead of failing at once with
  "database is locked" as a deferred `BEGIN` that upgrades from read to write would.
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import time
from pathlib import Path
from typing import Iterator

import sqlite_utils

BUSY_TIMEOUT_MS = 10_000


class DataError(Exception):
    """Base of every error the data layer raises on purpose (message fit for a user)."""


class NotFound(DataError):
    pass


class Conflict(DataError):
    """A save based on a stale version: someone else changed the record first."""

    def __init__(self, message: str, *, current: dict | None = None):
        super().__init__(message)
        self.current = current or {}


class Forbidden(DataError):
    pass


def connect(path: str | Path, *, migrate: bool = True) -> sqlite_utils.Database:
    """Open the database at `path` for this thread, creating and migrating it if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
    db = sqlite_utils.Database(conn, execute_plugins=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal":  # pragma: no cover - only on filesystems without shared memory
        raise DataError(f"could not enable WAL on {path} (got {mode}); use a local disk, not NFS")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    if migrate:
        from data import schema

        if schema.MIGRATIONS.pending(db):
            # One process migrates at a time (the app and the runner may start together).
            with open(str(path) + ".migrate.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                schema.MIGRATIONS.apply(db)
    return db


@contextlib.contextmanager
def immediate(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """A write transaction that holds the write lock from its first statement.

    Nested use (already in a transaction) becomes a savepoint via `db.atomic()`.
    Never make a network call inside one: the lock is held until it ends.
    """
    conn = db.conn
    if conn.in_transaction:
        with db.atomic():
            yield db
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def now() -> float:
    """Timestamps are Unix seconds (REAL): sortable, cheap, unambiguous."""
    return time.time()
