"""The runner's look at the fleet's health, for the rule on a fleet that fails every request (replicas.py) and
for what the Jobs tab says about it (the look goes out with the runner's heartbeat: the app never asks the
fleet for this itself).

A look is each replica's `/health` (a router's workers found through its `/workers`), read with the data dir's
fleet key through serving.fleet.reader (`FleetReader.look`: without the key the router gate answers 401 and a
healthy fleet looks down), with a short timeout, in a worker thread: never on the event loop, never inside a
transaction. The runner looks every LOOK_EVERY_S, so that the Jobs tab's "fleet: 4 of 4 healthy" is never older
than that (an idle runner still knows whether a job started now could run), and every LOOK_FAILING_S while every
replica fails. A look is one `/workers` and three small reads of a router and one `/health` per replica (at most
MAX_SCRAPED): nothing beside the requests it watches.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable

from serving.runner.replicas import ReplicaHealth

log = logging.getLogger("serving.runner")

LOOK_TIMEOUT_S = 2.0  # per request of a look
LOOK_EVERY_S = 15.0
LOOK_FAILING_S = 5.0
LOOK_MIN_GAP_S = 1.0  # between two looks, however often failures ask for one
LOOK_DEADLINE_S = 10.0  # the runner stops waiting for a look after this long (and starts none while it lasts)


async def watching(health: ReplicaHealth, look: Callable[[list[str]], dict], now: asyncio.Event) -> None:
    """Look at the fleet's health (`look(urls)`, in a daemon thread) every LOOK_EVERY_S, and every LOOK_FAILING_S
    while every replica fails (`health.failing_now`), or soon after `now` is set; feed each look to the rule and
    the heartbeat (`health.observe`). Runs until cancelled."""
    urls = [r.url for r in health.replicas]
    looking: asyncio.Future | None = None  # a look still under way is never started twice
    while True:
        t = time.monotonic()
        due = health.look_t is None or t - health.look_t >= LOOK_EVERY_S - LOOK_MIN_GAP_S
        if (health.failing_now() or due) and (looking is None or looking.done()):
            looking = in_daemon_thread(look, urls)
            try:
                seen = await asyncio.wait_for(asyncio.shield(looking), timeout=LOOK_DEADLINE_S)
            except asyncio.TimeoutError:
                log.warning("no look at the fleet's health within %.0f s", LOOK_DEADLINE_S)
            except Exception:  # a look that breaks must not stop the runner: requests still tell
                log.exception("looking at the fleet's health failed")
            else:
                health.observe(seen, time.monotonic())
        now.clear()
        await asyncio.sleep(LOOK_MIN_GAP_S)
        try:
            await asyncio.wait_for(now.wait(), timeout=LOOK_FAILING_S if health.failing_now() else LOOK_EVERY_S)
        except asyncio.TimeoutError:
            pass


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
