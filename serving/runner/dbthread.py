"""The runner's database threads: one SQLite connection each; every database call of the runner in order.

No HTTP call ever happens inside a transaction: the runner's event loop does the HTTP and hands each database
call (claims, results) to its work thread. Heartbeats have a thread of their own (`retry=False`), so that a call
waiting out a locked database or a full disk does not silence the runner while it waits.

The database thread holds SQLite's write lock while it runs Python between statements, and each statement gives up
the GIL. On a busy head the event loop holds the GIL in long bursts (hundreds of answers a second), and a
thread that asks for it back waits up to the interpreter's switch interval (5 ms by default) each time: a result of a
dozen statements then holds the lock for tens of milliseconds, a batch for hundreds, and every annotator's save
waits behind it. So the runner's process switches every GIL_SWITCH_S instead (`prompt_gil`): with a thread that
holds the GIL without pause beside the runner, the longest hold fell from 93-324 ms to 45-71 ms and a save's p99
from 20-230 to 9-55 ms, four pairs side by side (docs/BENCHMARKS.md, "One head"); without that thread the runner's
CPU per clip is the same either way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import sys
import threading
import time
from typing import Any, Callable

from data import db as dbmod

log = logging.getLogger("serving.runner")

DB_RETRY_MAX_S = 2.0  # longest pause between retries of a database call that found the database locked
DB_RETRY_STOPPING_S = 30.0  # once stopping, give up on a locked database after this long


GIL_SWITCH_S = 0.0005  # the runner process's switch interval (the module docstring); Python's default is 0.005


def prompt_gil() -> None:
    """Let the database thread have the GIL back within GIL_SWITCH_S (never lengthens a shorter interval)."""
    sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_S))


TRANSIENT = ("database is locked", "database is busy", "database table is locked", "database or disk is full")


def transient_db_error(e: BaseException) -> bool:
    """A database error that waiting cures: another process held the write lock past our busy timeout, or the
    disk is full (the runner waits for the space to come back, holding its results, instead of exiting)."""
    return isinstance(e, sqlite3.OperationalError) and any(w in str(e).lower() for w in TRANSIENT)


class RunnerDB:
    """A single thread owning one SQLite connection; `await db(fn, *args)` runs `fn(connection, *args)` there.

    A call that finds the database locked past the busy timeout (a long foreign write, R12) or the disk full
    is retried with a growing pause, without limit while running: each call is one transaction, rolled back when
    it fails, so a retry repeats nothing. The runner neither exits nor loses a result; it waits, and `waiting`
    says on what meanwhile (for its heartbeat). `retry=False`: every error goes to the caller at once."""

    def __init__(self, path, *, retry: bool = True, name: str = "runner-db"):
        self._path = path
        self._retry = retry
        self.stopping = False
        self.retries = 0
        self.waiting: dict | None = None  # {"error", "since" (Unix time)} while a call waits out a database error
        self._local = threading.local()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=self._open
        )

    def _open(self) -> None:
        try:
            self._local.db = dbmod.connect(self._path)
        except sqlite3.OperationalError:  # a full disk at start-up: connect again at the first call
            self._local.db = None

    def _connection(self):
        if getattr(self._local, "db", None) is None:
            self._local.db = dbmod.connect(self._path)
        return self._local.db

    def _call(self, fn, args, kwargs):
        pause, waited, started = 0.05, 0.0, time.monotonic()
        try:
            while True:
                try:
                    return fn(self._connection(), *args, **kwargs)
                except sqlite3.OperationalError as e:
                    waited = time.monotonic() - started
                    if not self._retry or not transient_db_error(e) or (self.stopping and waited > DB_RETRY_STOPPING_S):
                        raise
                    self.retries += 1
                    if self.waiting is None:
                        self.waiting = {"error": str(e), "since": time.time()}
                    name = getattr(fn, "__name__", "db call")
                    log.warning("%s: %s (waited %.0f s so far); retrying", name, e, waited)
                    time.sleep(pause)
                    pause = min(DB_RETRY_MAX_S, pause * 2)
        finally:
            self.waiting = None

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
