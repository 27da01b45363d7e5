"""The runner's database thread: one SQLite connection, every database call of the runner in order.

No HTTP call ever happens inside a transaction: the runner's event loop does the HTTP and hands each database
call (claims, results, heartbeats) to this thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import threading
import time
from typing import Any, Callable

from data import db as dbmod

log = logging.getLogger("serving.runner")

DB_RETRY_MAX_S = 2.0  # longest pause between retries of a database call that found the database locked
DB_RETRY_STOPPING_S = 30.0  # once stopping, give up on a locked database after this long


def transient_db_error(e: BaseException) -> bool:
    """A database error that waiting cures: another process held the write lock past our busy timeout."""
    return isinstance(e, sqlite3.OperationalError) and any(
        w in str(e).lower() for w in ("database is locked", "database is busy", "database table is locked")
    )


class RunnerDB:
    """A single thread owning one SQLite connection; `await db(fn, *args)` runs `fn(connection, *args)` there.

    A call that finds the database locked past the busy timeout (a long foreign write, R12) is retried with
    a growing pause, without limit while running: each call is one transaction, rolled back when it fails,
    so a retry repeats nothing. The runner neither exits nor loses a result; it waits."""

    def __init__(self, path):
        self._path = path
        self.stopping = False
        self.retries = 0
        self._local = threading.local()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="runner-db", initializer=self._open
        )

    def _open(self) -> None:
        self._local.db = dbmod.connect(self._path)

    def _call(self, fn, args, kwargs):
        pause, waited, started = 0.05, 0.0, time.monotonic()
        while True:
            try:
                return fn(self._local.db, *args, **kwargs)
            except sqlite3.OperationalError as e:
                waited = time.monotonic() - started
                if not transient_db_error(e) or (self.stopping and waited > DB_RETRY_STOPPING_S):
                    raise
                self.retries += 1
                log.warning("%s: %s (waited %.0f s so far); retrying", getattr(fn, "__name__", "db call"), e, waited)
                time.sleep(pause)
                pause = min(DB_RETRY_MAX_S, pause * 2)

    async def __call__(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._call, fn, args, kwargs)

    def close(self) -> None:
        def _close():
            d = getattr(self._local, "db", None)
            if d is not None:
                d.close()

        try:
            self._pool.submit(_close).result(timeout=10)
        finally:
            self._pool.shutdown(wait=True)
