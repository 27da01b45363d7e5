"""R8: timeouts everywhere. Two bad replicas next to two healthy simulated ones:
- "silent" accepts the connection, reads the request and never answers;
- "trickle" answers a status line and headers, then one byte every 0.3 s forever (httpx's per-read timeout
  alone would never fire).
A job over 120 clips must finish with every clip done and none held past its deadline plus backoff: for each
request a bad replica received, the clip's result is written within request_timeout (the client's
whole-request deadline) + the retry backoff + slack. Every request the bad replicas captured carries the job's
token limit (`max_completion_tokens`). Reports the worst clip delay.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from data import jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from serving import runner as runmod, simfleet

TIMEOUT = 1.5
BACKOFF_BASE = 0.1


class BadReplica:
    """An HTTP server on loopback that records each request body and then never finishes an answer."""

    def __init__(self, mode: str):
        self.mode = mode
        self.requests: list[tuple[float, dict]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                if head.startswith(b"POST"):
                    self.requests.append((time.time(), json.loads(body)))
                if self.mode == "trickle":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                    while True:
                        await writer.drain()
                        await asyncio.sleep(0.3)
                        writer.write(b" ")
                await reader.read()  # silent: wait for the client to give up
                return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_r8_hung_replicas_hold_no_clip_past_deadline_plus_backoff(settings, db):
    n = 120
    settings = settings.replace(request_timeout=TIMEOUT, per_replica_inflight=3, max_tokens=321)
    ids = tiny_library(settings, db, n)
    job_id = jobs.create(
        db,
        name="r8",
        created_by="test",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(max_tokens=321, frames=16),
    )
    paths = dict(db.execute("SELECT path, id FROM clips"))
    silent, trickle = BadReplica("silent"), BadReplica("trickle")
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=0.2, capacity=4)
    t0 = time.monotonic()
    try:
        runmod.run_job(
            settings,
            job_id,
            [silent.url, trickle.url, *fleet.urls],
            backoff_base=BACKOFF_BASE,
            stop_event=threading.Event(),
        )
    finally:
        fleet.stop()
        silent.stop()
        trickle.stop()
    wall = time.monotonic() - t0
    assert job_queries.counts(db, job_id) == {"pending": 0, "leased": 0, "done": n, "failed": 0}
    bad = silent.requests + trickle.requests
    assert len(silent.requests) >= 1 and len(trickle.requests) >= 1, "the bad replicas got no traffic"
    finished = dict(db.execute("SELECT clip_id, finished_at FROM job_items WHERE job_id = ?", [job_id]))
    attempts = dict(db.execute("SELECT clip_id, attempts FROM job_items WHERE job_id = ?", [job_id]))
    # deadline + the largest backoff the clip could have drawn + one good request + the runner's write cadence
    bound = lambda a: TIMEOUT + BACKOFF_BASE * 2 ** (a - 1) + 2.0  # noqa: E731
    delays = []
    last: dict[int, tuple[float, dict]] = {}
    for at, body in sorted(bad, key=lambda x: x[0]):
        url = body["messages"][-1]["content"]
        video = next(p["video_url"]["url"] for p in url if isinstance(p, dict) and p.get("type") == "video_url")
        clip = paths[video.split(str(settings.clip_root.resolve()) + "/", 1)[1]]
        assert body.get("max_completion_tokens") == 321 or body.get("max_tokens") == 321, body.keys()
        last[clip] = (at, body)
    for clip, (at, _body) in last.items():
        delay = finished[clip] - at  # from the last time a bad replica got it to its result
        delays.append(delay)
        assert delay <= bound(attempts[clip]), (clip, delay, attempts[clip])
    print(
        f"R8: {n} clips in {wall:.1f} s; {len(silent.requests)} requests to the silent replica, "
        f"{len(trickle.requests)} to the trickling one; worst clip delay after reaching a bad replica "
        f"{max(delays):.2f} s (deadline {TIMEOUT:.1f} s + backoff); all carried max_completion_tokens=321"
    )
