"""The start every 1M-clip benchmark's build shares: reuse a library that already holds its clips, else a fresh,
empty one set up for a bulk load.

`fresh_library(path, n)` returns None when the file at `path` already holds `n` clips (the benchmark reuses it),
else an empty, migrated database with the build's pragmas (no fsync: a crash only means building again; a large
page cache when asked) and without the clips' FTS triggers, so the build fills the search index once at its end
instead of row by row.
"""

from __future__ import annotations

from pathlib import Path

import sqlite_utils

from data.db import connect

FTS_TRIGGERS = ("clips_ai", "clips_ad", "clips_au")


def fresh_library(db_path: Path, n: int, *, cache_kib: int | None = 400_000) -> sqlite_utils.Database | None:
    """None when `db_path` holds `n` clips already; else an empty library ready for a bulk load (see above)."""
    db = connect(db_path)
    if db.execute("SELECT COUNT(*) FROM clips").fetchone()[0] == n:
        db.close()
        return None
    db.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
    db = connect(db_path)
    db.conn.execute("PRAGMA synchronous=OFF")
    if cache_kib:
        db.conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
    for trig in FTS_TRIGGERS:
        db.conn.execute(f"DROP TRIGGER IF EXISTS {trig}")
    return db
