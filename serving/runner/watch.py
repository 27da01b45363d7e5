"""The runner's look at the fleet's health, for the rule on a fleet that fails every request (replicas.py) and
for what the Jobs tab says about it (the look goes out with the runner's heartbeat: the app never asks the
fleet for this itself).

A look is each replica's `/health` through serving.health (a router's workers found through its `/workers`),
with a short timeout, in a worker thread: never on the event loop, never inside a transaction. The runner
looks every LOOK_QUIET_S while no answer has come for that long (an idle runner still knows whether a job
started now could run), every LOOK_FAILING_S while every replica fails, and not at all while answers flow.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

from serving import health

LOOK_TIMEOUT_S = 2.0  # per request of a look
LOOK_QUIET_S = 15.0
LOOK_FAILING_S = 5.0
LOOK_MIN_GAP_S = 1.0  # between two looks, however often failures ask for one
LOOK_DEADLINE_S = 10.0  # the runner stops waiting for a look after this long (and starts none while it lasts)
LOOK_MAX = 32  # replicas looked at (a router may list hundreds; the rest are counted)
ERROR_CHARS = 300


def look(urls: list[str], timeout: float = LOOK_TIMEOUT_S) -> dict:
    """{at (Unix time), router (URL or None), healthy, looked, total, replicas: [{url, healthy, error}]}:
    how many of the replicas behind `urls` answer `/health` with 200. Blocking; never raises for a fleet that
    is down (an unreachable replica is one not healthy)."""
    replicas, router = health.discover(urls, timeout=timeout)
    statuses = health.fleet_status(replicas[:LOOK_MAX], timeout=timeout)
    return {
        "at": time.time(),
        "router": router,
        "healthy": sum(1 for s in statuses if s.healthy),
        "looked": len(statuses),
        "total": len(replicas),
        "replicas": [
            {"url": s.url, "healthy": bool(s.healthy), "error": (s.error or "")[:ERROR_CHARS] or None} for s in statuses
        ],
    }


def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future:
    """`fn(*args)` in a daemon thread of its own, as a future of the running loop. Not `asyncio.to_thread`: the
    loop's executor is joined when the loop ends, and a look stuck on a replica that trickles its answer must
    not keep the runner from stopping (or its process from exiting)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def run() -> None:
        try:
            result, ok = fn(*args), True
        except Exception as e:  # handed to the awaiting side
            result, ok = e, False
        try:
            loop.call_soon_threadsafe(settle, ok, result)
        except RuntimeError:  # the loop ended meanwhile: nobody waits for this look any more
            pass

    threading.Thread(target=run, name="runner-look", daemon=True).start()
    return future
