"""Garbage collection in the runner's process happens between its write transactions, never inside one
(serving.runner.collector): a collection stops the whole process, and inside a transaction it kept SQLite's write
lock held for its whole length (docs/SCALE.md, "One head")."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from data import db as dbmod
from serving.runner import collector as collector_mod
from serving.runner.collector import Collector, Pauses, due


def test_due_follows_pythons_own_rule():
    t = (700, 10, 10)
    assert due((700, 20, 20), t, True) is None  # nothing before generation 0 passes its threshold
    assert due((701, 0, 0), t, True) == 0
    assert due((701, 11, 0), t, True) == 1
    assert due((701, 11, 11), t, True) == 2
    assert due((701, 11, 11), t, False) == 1  # a full one spaced out: the next younger instead
    assert due((701, 0, 11), t, True) == 2
    assert due((5000, 0, 0), (0, 10, 10), True) is None  # thresholds of 0: collection switched off by the user


def _transactions_with_garbage(path, spans: list, stop: threading.Event) -> None:
    """Write transactions that each make enough garbage (reference cycles) for Python to want a collection."""
    db = dbmod.connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    try:
        while not stop.is_set():
            with dbmod.immediate(db):
                began = time.monotonic()
                for _ in range(3):
                    junk = []
                    for _ in range(2000):
                        a: list = []
                        a.append(a)  # a cycle: only a collection frees it
                        junk.append(a)
                    del junk
                    db.execute("INSERT INTO t VALUES (1)")
                    time.sleep(0.002)
                spans.append((began, time.monotonic()))
            time.sleep(0.003)  # the gap between two batches, where a collection may run
    finally:
        db.close()


def _inside(pauses, transactions) -> list:
    return [p for p in pauses if any(p[0] < t1 and p[1] > t0 for t0, t1 in transactions)]


async def _run(path, enough, limit_s: float = 30.0, **kw) -> tuple[Pauses, list, dict, int]:
    """The writer beside a Collector until `enough(pauses, transactions)` holds or `limit_s` has passed (a loaded
    machine runs fewer transactions per second: the test waits for enough of them, not for a time). Returns the
    Pauses, the writer's transactions, the Collector's stats and the writer thread's ident."""
    transactions, stop = [], threading.Event()
    pauses: Pauses | None = None
    writer = threading.Thread(target=_transactions_with_garbage, args=(path, transactions, stop))
    try:
        async with Collector(path, **kw) as c:
            # counted while the collector holds Python's automatic collection off, and only then: a collection Python
            # had due just before it took over, or starts just after it gave it back, is not the collector's (in a
            # worker whose earlier tests left a large heap, one such full collection once took 0.6 s on this thread)
            pauses = Pauses()
            writer.start()
            t = time.monotonic()
            while not enough(pauses.spans, transactions) and time.monotonic() - t < limit_s:
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.to_thread(writer.join)
            pauses.close()
        return pauses, transactions, c.stats, writer.ident
    finally:
        stop.set()
        if pauses is not None:
            pauses.close()


def test_no_collection_starts_inside_a_write_transaction(tmp_path):
    path = tmp_path / "w.db"
    assert gc.isenabled()
    loop_thread = threading.get_ident()
    pauses, transactions, stats, writer = asyncio.run(_run(path, lambda p, t: len(t) > 20 and len(p) >= 5))
    # Other threads of this pytest worker (servers an earlier test left, an explicit gc.collect) may collect too;
    # the subject is the loop's collections and the writer's, where Python's automatic ones would land.
    by_loop = [p for p, th in zip(pauses.spans, pauses.threads) if th == loop_thread]
    by_writer = [p for p, th in zip(pauses.spans, pauses.threads) if th == writer]
    assert len(transactions) > 20
    assert len(by_loop) >= 5, "the loop collected the cycles the transactions made"
    assert _inside(by_loop, transactions) == []
    assert stats["gen0"] + stats["gen1"] + stats["gen2"] == len(by_loop)
    assert by_writer == [], "no automatic collection in the writer's thread"
    assert stats["overdue"] == 0
    assert gc.isenabled(), "automatic collection is back on after the runner"


def test_without_it_python_collects_inside_transactions(tmp_path, monkeypatch):
    """The same writer with Python's automatic collection: collections land inside the transactions (so the test
    above can fail)."""
    monkeypatch.setattr(collector_mod.Collector, "active", False)
    pauses, transactions, stats, _ = asyncio.run(_run(tmp_path / "w.db", lambda p, t: len(_inside(p, t)) >= 5))
    assert len(_inside(pauses.spans, transactions)) >= 5
    assert stats == {"gen0": 0, "gen1": 0, "gen2": 0, "overdue": 0, "longest_ms": 0.0}


def test_a_lock_held_for_long_delays_a_collection_only_so_long(tmp_path):
    """A transaction of this process that never ends (a write waiting out a foreign lock) does not stop
    collection for good: past `overdue_s` it runs anyway, and not before."""
    path = tmp_path / "w.db"
    db = dbmod.connect(path)

    async def go():
        async with Collector(path, overdue_s=0.3) as c:
            with dbmod.between_writes(path) as got:  # what a transaction holds, until the collection runs
                assert got
                junk = []
                for _ in range(5000):
                    a: list = []
                    a.append(a)
                    junk.append(a)
                del junk
                t = time.monotonic()
                while c.stats["overdue"] == 0 and time.monotonic() - t < 20:
                    await asyncio.sleep(0.01)
                waited = time.monotonic() - t
            return c.stats, waited

    try:
        stats, waited = asyncio.run(go())
    finally:
        db.close()
    assert stats["overdue"] >= 1  # it ran, with the lock still taken ...
    assert waited >= 0.25  # ... but not before `overdue_s` had passed


def test_two_runners_in_one_process_restore_collection_once_both_stop(tmp_path):
    async def go():
        a, b = Collector(tmp_path / "a.db"), Collector(tmp_path / "b.db")
        await a.__aenter__()
        await b.__aenter__()
        assert not gc.isenabled()
        await a.__aexit__(None, None, None)
        assert not gc.isenabled(), "b still works"
        await b.__aexit__(None, None, None)
        assert gc.isenabled()

    asyncio.run(go())


@pytest.fixture(autouse=True)
def _collection_back_on():
    yield
    assert gc.isenabled()


def test_an_idle_runner_looks_for_due_collections_seldom_and_a_busy_one_at_once(tmp_path, monkeypatch):
    """Issue 45: an idle runner woke every 5 ms to look whether a collection was due (200 wake-ups a second, most of
    its 2.7 % of a core). Idle, the look comes every IDLE_TICK_S; busy, every TICK_S; a collection that waits for the
    writer lock is looked at every TICK_S either way."""
    busy = [False]
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def pause(seconds):
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(collector_mod, "_pause", pause)
    path = tmp_path / "c.db"
    dbmod.connect(path).close()

    async def scenario():
        async with Collector(path, busy=lambda: busy[0]):
            while len(slept) < 20:
                await real_sleep(0)
            busy[0] = True
            n = len(slept)
            while len(slept) < n + 20:
                await real_sleep(0)
            return slept[:20], slept[n + 1 : n + 20]

    idle, busy_ticks = asyncio.run(scenario())
    assert set(idle) == {collector_mod.IDLE_TICK_S} and collector_mod.IDLE_TICK_S >= 0.25
    assert set(busy_ticks) == {collector_mod.TICK_S}
