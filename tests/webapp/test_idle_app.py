"""The app at rest sleeps (issue 26 item 8): Gradio's queue loops wait to be told about work instead of polling,
and an event queued after a rest is still taken. The CPU figure is benchmarks/bench_idle.py's (docs/BENCHMARKS.md);
these tests hold the mechanism (webapp.idle)."""

from __future__ import annotations

import asyncio
import time

import gradio.queueing
import httpx

from tests.support.webapp_fixtures import AppServer
from webapp import idle


def test_a_paused_loop_sleeps_until_told_and_a_busy_one_keeps_its_period():
    async def scenario():
        waker = idle.Waker()
        rest = idle.Pause(0.0, waker, lambda: False)
        aio = idle._AsyncioWithPauses()
        task = asyncio.create_task(aio.sleep(rest))
        await asyncio.sleep(0.3)
        asleep = not task.done()  # a 0 s "poll period" that did not return: it waits for the waker
        waker.notify()
        await asyncio.wait_for(task, 5)
        busy = idle.Pause(0.01, waker, lambda: True)  # an event runs: a real sleep of its period, no waker
        await asyncio.wait_for(aio.sleep(busy), 5)
        assert await aio.sleep(0.0, "asyncio's own") == "asyncio's own"  # any other sleep is asyncio's
        return asleep

    assert asyncio.run(scenario())


def test_the_idle_app_queue_does_not_poll_and_still_answers(web_settings, monkeypatch):
    """Over 2 s at rest the queue's two loops wait about twice in all (before: every 50 ms and 250 ms, ~48
    times); then a page load and a queued event (the login page's app config, a Gradio event) are answered."""
    waits = []
    real = idle.Pause.wait

    async def counted(self):
        waits.append(time.monotonic())
        await real(self)

    monkeypatch.setattr(idle.Pause, "wait", counted)
    with AppServer(web_settings.replace(auth="off"), fleet_urls=[]) as server:
        assert isinstance(gradio.queueing.asyncio, idle._AsyncioWithPauses)
        q = server.app.state.demo._queue
        assert isinstance(q.sleep_when_free, idle.Pause) and isinstance(q.progress_update_sleep_when_free, idle.Pause)
        time.sleep(1.0)  # settle
        n0 = len(waits)
        time.sleep(2.0)
        at_rest = len(waits) - n0
        assert at_rest <= 4, f"the queue loops woke {at_rest} times in 2 s at rest"
        # an event after the rest: the queue is woken by it (a Gradio event through /gradio_api, as the page sends)
        with httpx.Client(base_url=server.url, timeout=60) as c:
            assert c.get("/").status_code == 200
            fn = next(i for i, f in server.app.state.demo.fns.items() if f.api_name == "on_load")
            r = c.post("/gradio_api/queue/join", json={"data": [], "fn_index": fn, "session_hash": "idle1"})
            assert r.status_code == 200, r.text
            with c.stream("GET", "/gradio_api/queue/data", params={"session_hash": "idle1"}) as s:
                done = next(line for line in s.iter_lines() if "process_completed" in line)
        assert '"success": true' in done or '"success":true' in done, done[:500]
