"""The app at rest sleeps: Gradio's queue and uvicorn wake when there is something to do, not on a clock.

Measured with strace on an idle `python -m webapp` (no browser, benchmarks/bench_idle.py): its event loop woke about
34 times a second (67 `epoll_wait` calls: one timed and one immediate per wake-up), 1.2 % of a core on the shared
2-core VM. Three loops polled:
- Gradio's queue looked for queued events every `sleep_when_free` (50 ms here, 1 ms by default): 20 a second;
- Gradio's progress loop looked for progress to send every `progress_update_sleep_when_free` (250 ms): 4 a second;
- uvicorn's main loop ticked every 100 ms to see whether it should exit: 10 a second.

Now the queue's two loops sleep until something changes what they would find (`quiet_queue`): an event is queued
(`Queue.push`) or an event starts or ends (`Queue.process_events`); the progress loop keeps its 250 ms period while
an event runs. Each loop still looks once every IDLE_RECHECK_S in case a change came some other way. An event
waits for no poll period at all now (it waited up to 50 ms). uvicorn's loop (`Server`) ticks once a second (the
Date header's resolution anyway) and is woken at once by SIGTERM or ctrl-C.

How the queue is reached: Gradio 6's Queue sleeps with `asyncio.sleep(self.sleep_when_free)` and
`asyncio.sleep(self.progress_update_sleep_when_free)`, on the name `asyncio` of gradio.queueing. That name is
given an object that is asyncio in every respect except `sleep`, which for a `Pause` (a float that knows its
queue's `Waker`) waits for the waker instead of the clock; every other sleep is asyncio's own. Private parts of
Gradio: if they change, `quiet_queue` says so at start-up rather than leave the app polling unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

import uvicorn

IDLE_RECHECK_S = 5.0  # a queue loop at rest looks anyway this often (a change that came some other way)
BUSY_POLL_S = 0.25  # the progress loop's period while an event runs (Gradio sends progress at most this often)
TICK_S = 1.0  # uvicorn's main loop: the Date header is refreshed once a second


class Waker:
    """Wakes every loop waiting on it (`notify`, on the event loop's thread); a loop that waits after a notify
    waits for the next one."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


class Pause(float):
    """A poll period of Gradio's queue that waits for its queue's `Waker` instead (see the module docstring).
    `busy()` true: the queue has an event running, so the period is a real sleep of `self` seconds."""

    waker: Waker
    busy: object

    def __new__(cls, seconds: float, waker: Waker, busy) -> Pause:
        pause = super().__new__(cls, seconds)
        pause.waker, pause.busy = waker, busy
        return pause

    async def wait(self) -> None:
        if self.busy():
            await asyncio.sleep(float(self))
        else:
            await self.waker.wait(IDLE_RECHECK_S)


class _AsyncioWithPauses:
    """asyncio, except that `sleep` of a Pause waits for its waker."""

    def __getattr__(self, name: str):
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay, result=None):
        if isinstance(delay, Pause):
            await delay.wait()
            return result
        return await asyncio.sleep(delay, result)


def quiet_queue(demo) -> None:
    """Make the queue of Blocks `demo` (after `demo.queue()`, before the app starts) sleep until it has work."""
    import gradio.queueing as queueing

    q = getattr(demo, "_queue", None)
    needed = ("sleep_when_free", "progress_update_sleep_when_free", "push", "process_events", "active_jobs")
    if q is None or not all(hasattr(q, name) for name in needed) or getattr(queueing, "asyncio", None) is None:
        raise RuntimeError(
            "webapp.idle: this Gradio's queue is not the one quiet_queue knows (6.x); the app would poll it"
        )
    if not isinstance(queueing.asyncio, _AsyncioWithPauses):
        queueing.asyncio = _AsyncioWithPauses()
    waker = Waker()
    push, process = q.push, q.process_events

    @functools.wraps(push)
    async def push_and_wake(*args, **kwargs):
        try:
            return await push(*args, **kwargs)
        finally:
            waker.notify()  # an event is queued: the queue loop takes it

    @functools.wraps(process)
    async def process_and_wake(*args, **kwargs):
        waker.notify()  # an event started: the progress loop watches it
        try:
            return await process(*args, **kwargs)
        finally:
            waker.notify()  # it ended: its worker is free for an event that waited

    def busy() -> bool:
        return any(job is not None for job in q.active_jobs)

    q.push, q.process_events = push_and_wake, process_and_wake
    q.sleep_when_free = Pause(0.0, waker, lambda: False)  # the queue loop never needs a clock: it is told
    q.progress_update_sleep_when_free = Pause(BUSY_POLL_S, waker, busy)


class Server(uvicorn.Server):
    """uvicorn's server with a main loop that ticks once a second (not ten times) and ends at once on a signal."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000  # each tick is one of on_tick's once-a-second ticks
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)  # from a signal handler: through the loop's wakeup fd
