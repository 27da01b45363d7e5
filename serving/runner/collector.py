"""Python's cyclic garbage collection in the runner's process, run by the event loop between write transactions.

A collection stops every thread of the process while it runs. A busy head holds a few hundred thousand tracked
objects (coroutines, futures and answers of ~1,500 requests in flight at 16 nodes' rate), and a full collection of
them took 40-240 ms on a 2-core machine. Python starts a collection in whatever thread allocates past its
threshold: when that happened while the database thread was inside a transaction, SQLite's write lock stayed held
for the whole pause, and every annotator's save waited. On 2 cores the longest holds of the head benchmark at 448
clips/s (200-316 ms) were each a full collection inside a transaction; with this module, 65-98 ms in seven runs on 2
and 16 cores (docs/SCALE.md, "One head").

So while a runner works, automatic collection is off, and the runner's event loop collects instead, every
TICK_S, by Python's own thresholds, and only while it holds this process's writer lock of the database
(`data.db.between_writes`): no transaction of the process is open when a collection starts, and none can begin
until it ends. A full collection is also spaced so that it takes at most 1 / FULL_SPACING of the time (Python's own
rule for it, long-lived objects grown by a quarter, is not visible from Python). If the lock stays taken past
OVERDUE_S, the collection runs anyway: memory is never left to grow without bound.

Automatic collection is turned back on when the last runner of the process stops, if it was on before.

An idle runner allocates next to nothing, and a look every TICK_S was most of what it did: 200 wake-ups a second,
2.7 % of a core of a runner with no job (issue 45). So while the runner says it is not `busy` (nothing in flight,
nothing to write) and no collection waits for the lock, the loop looks every IDLE_TICK_S instead.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Callable

from data import db as dbmod

TICK_S = 0.005  # how often the event loop looks whether a collection is due
IDLE_TICK_S = 0.5  # the same while the runner is idle (the module docstring)
OVERDUE_S = 1.0  # a due collection that found the writer lock taken this long runs anyway
FULL_SPACING = 10  # a full collection that took t seconds is not followed by another for FULL_SPACING x t

_users = 0
_was_enabled = False
_guard = threading.Lock()


def _hold() -> None:
    global _users, _was_enabled
    with _guard:
        if _users == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _users += 1


def _release() -> None:
    global _users
    with _guard:
        _users -= 1
        if _users == 0 and _was_enabled:
            gc.enable()


def due(counts: tuple[int, int, int], thresholds: tuple[int, ...], full_ok: bool) -> int | None:
    """The generation Python would collect now (None: none is due), as its own allocation rule does: nothing
    before generation 0's count passes its threshold, then the oldest generation whose count passed its own; a
    full one (2) only when `full_ok`."""
    if not thresholds or thresholds[0] <= 0 or counts[0] <= thresholds[0]:
        return None
    for gen in (2, 1):
        if counts[gen] > thresholds[gen] and (gen < 2 or full_ok):
            return gen
    return 0


async def _pause(seconds: float) -> None:
    """The collector's wait between two looks (a function of its own: the tests count what it is asked for)."""
    await asyncio.sleep(seconds)


class Collector:
    """Collects on the running event loop between the write transactions of the database at `db_path`; use
    `async with Collector(path):` around the runner's work. `stats`: collections per generation, the longest
    pause (ms), and how many ran overdue (with the writer lock taken)."""

    active = True  # False: Python's automatic collection, as before (for side-by-side benchmarks only)

    def __init__(
        self,
        db_path,
        *,
        tick_s: float = TICK_S,
        overdue_s: float = OVERDUE_S,
        busy: Callable[[], bool] | None = None,
        idle_tick_s: float = IDLE_TICK_S,
    ):
        self.db_path = db_path
        self.tick_s = tick_s
        self.busy = busy  # None: always busy (look every tick_s)
        self.idle_tick_s = idle_tick_s
        self.overdue_s = overdue_s
        self.stats = {"gen0": 0, "gen1": 0, "gen2": 0, "overdue": 0, "longest_ms": 0.0}
        self._task: asyncio.Task | None = None
        self._next_full = 0.0

    async def __aenter__(self) -> Collector:
        if self.active:
            _hold()
            self._task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        if self._task is None:  # not active: nothing was changed
            return
        try:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        finally:
            _release()

    def collect_if_due(self, *, force: bool = False) -> int | None:
        """One look: collect the generation that is due if the writer lock is free (or `force`); returns the
        generation collected, None if none was (not due, or the lock taken)."""
        gen = due(gc.get_count(), gc.get_threshold(), time.monotonic() >= self._next_full)
        return gen if gen is not None and self._collect(gen, force=force) else None

    def _collect(self, gen: int, *, force: bool) -> bool:
        """Collect `gen` if the writer lock is free (or `force`); whether it did."""
        with dbmod.between_writes(self.db_path) as free:
            if not free and not force:
                return False
            t = time.monotonic()
            gc.collect(gen)
            took = time.monotonic() - t
        self.stats[f"gen{gen}"] += 1
        self.stats["overdue"] += 0 if free else 1
        self.stats["longest_ms"] = max(self.stats["longest_ms"], round(took * 1000, 1))
        if gen == 2:
            self._next_full = time.monotonic() + FULL_SPACING * took
        return True

    async def _run(self) -> None:
        waiting_since = None  # since when a due collection waits for the writer lock
        while True:
            idle = self.busy is not None and waiting_since is None and not self.busy()
            await _pause(self.idle_tick_s if idle else self.tick_s)
            now = time.monotonic()
            gen = due(gc.get_count(), gc.get_threshold(), now >= self._next_full)
            overdue = waiting_since is not None and now - waiting_since >= self.overdue_s
            if gen is None or self._collect(gen, force=overdue):
                waiting_since = None
            else:
                waiting_since = waiting_since or now


class Pauses:
    """The collections of this process from now until `close()`, however started: (start, end) per collection in
    `spans` (time.monotonic) and the thread that ran it in `threads` (same order). What the collector is measured
    with (tests/serving/test_runner_collector.py, benchmarks/bench_runner.py)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.threads: list[int] = []
        self._t = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.monotonic()
        else:
            self.spans.append((self._t, time.monotonic()))
            self.threads.append(threading.get_ident())

    @property
    def took(self) -> list[float]:
        """Each collection's seconds."""
        return [end - start for start, end in self.spans]

    def close(self) -> None:
        if self._cb in gc.callbacks:
            gc.callbacks.remove(self._cb)
