"""The runner's event loop: claim items for free slots, send them, write the outcomes, drain on stop
(how and why: the package docstring, serving/runner/__init__.py; how it is started: serving/runner/start.py)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random
import threading
import time
import traceback
from typing import Awaitable, Callable, Iterable, Literal

from data import heartbeats, jobs, prompts
from data.jobs import items as job_items, queries as job_queries
from data.library import clip_root, deployment
from data.settings import Settings, url_list
from serving import media_urls
from serving.answer_check import AnswerChecker
from serving.client import CaptionClient, CaptionRequest, FleetClient
from serving.errors import FleetError, ReplicaError
from serving.fleet.reader import FleetReader
from serving.launch import record as fleet_record
from serving.runner import dbthread, watch
from serving.runner.collector import Collector
from serving.runner.dbthread import RunnerDB
from serving.runner.fleet_log import FleetLog
from serving.runner.replicas import Replica, ReplicaHealth
from serving.runner.store import JobConfig, JobStore, Outcome

log = logging.getLogger("serving.runner")

IDLE_POLL_S = 0.25  # how often to look for new work when there was none
# ... and after QUIET_AFTER_S with nothing to do: a job started in the app waits at most this long for its runner,
# and an idle runner costs 0.25 % of a core less (issue 45; benchmarks/bench_idle_runner.py)
QUIET_POLL_S = 1.0
QUIET_AFTER_S = 10.0
RELEASE_CHUNK = 128  # leases handed back per transaction when draining (store.py: no long write lock)
ABORT_CHECK_S = 0.5  # how often in-flight jobs are checked for pause/cancel (their requests are aborted)


def fleet_targets(settings: Settings, fleet_urls: Iterable[str] | str | None = None) -> list[str]:
    """Where the runner sends: `fleet_urls` (default: the FLEET_URLS setting), else what the launcher of this
    data dir started (its router, or its replicas), else the router's usual address."""
    urls = list(url_list(fleet_urls if fleet_urls is not None else settings.fleet_urls))
    return urls or list(url_list(fleet_record.fleet_url(settings)))


class Runner:
    """Executes captioning jobs from the database against a fleet. Build one per process (or per `run_job`).

    `fleet_urls`: where to send (default: `fleet_targets`). `replicas`: how many replicas a single URL (a router)
    stands for; None asks the router's `/workers` when the runner starts. `client` is closed by whoever made it;
    by default the runner makes and closes its own `FleetClient` (one connection pool set per replica).
    `look(urls) -> dict` looks at the replicas' `/health` (serving.runner.watch); by default the runner looks
    (`FleetReader.look`, with the data dir's fleet key) when it made its own client, and not when it was given
    one (a fake fleet has no `/health`) unless `look` is given too. None: requests alone tell whether the fleet
    is down. Every read of the fleet's health goes through `self.reader` (serving.fleet.reader).

    Long on purpose: the loop's state (the requests in flight, the outcomes not yet written, the replicas each clip
    is to avoid, the stop and wake events) is read and changed by every step of the loop (claim, dispatch, send,
    write, abort, drain), on one thread and without locks; what holds none of that state is apart already
    (replicas.py, watch.py, fleet_log.py, store.py, dbthread.py, collector.py, start.py).
    """

    def __init__(
        self,
        settings: Settings,
        fleet_urls: Iterable[str] | str | None = None,
        *,
        replicas: int | None = None,
        client: CaptionClient | None = None,
        job_ids: Iterable[int] | None = None,
        name: str = "runner",
        drain_seconds: float = 30.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        progress_cb: Callable[[dict], None] | None = None,
        stop_event: threading.Event | None = None,
        exit_when_idle: bool = False,
        look: Callable[[list[str]], dict] | None | Literal["default"] = "default",
    ):
        # clips are found under the root the library recorded at ingest, never under a default
        self.settings = settings = clip_root.settings_for_path(settings)
        urls = fleet_targets(settings, fleet_urls)
        self.fleet = jobs.fleet_of(urls)  # it takes only jobs made for this fleet (and jobs that name none)
        self._ask_router = len(urls) == 1 and replicas is None
        rng = random.Random()
        self.health = ReplicaHealth(
            urls,
            settings.per_replica_inflight,
            behind_router=replicas or 1,
            backoff_base=backoff_base,
            fill_seconds=settings.window_fill_seconds,
            rng=rng,
        )
        self.reader = FleetReader(settings, timeout=watch.LOOK_TIMEOUT_S)
        self._look = (self.reader.look if client is None else None) if look == "default" else look
        self.identity = job_items.runner_identity()
        self.store = JobStore(
            settings,
            self.identity,
            job_ids=job_ids,
            fleet=self.fleet,
            name=name,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            rng=rng,
        )
        self._client = client
        self.drain_seconds = drain_seconds
        self.progress_cb = progress_cb
        self.thread_stop = stop_event
        self.exit_when_idle = exit_when_idle
        self._db = RunnerDB(settings.db)
        # heartbeats on a thread of their own: a call waiting out a full disk or a foreign lock does not silence
        # the runner (its supervisor restarts a runner whose heartbeat goes stale: serving.supervisor)
        self._beats = RunnerDB(settings.db, retry=False, name="runner-beat")
        self._beat_error: str | None = None
        self.fleet_log = FleetLog()
        self._tasks: dict[asyncio.Task, tuple[int, int]] = {}
        self._results: list[Outcome] = []
        self._avoid: dict[tuple[int, int], set[str]] = {}
        self._done_times: collections.deque = collections.deque()
        self.stats: collections.Counter = collections.Counter()
        self.collections: dict = {}  # the garbage collections the runner's loop made (collector.Collector.stats)
        self.started_at = time.monotonic()
        self.state = "new"
        # replicas on other nodes cannot open file:// paths: send them signed URLs of the app's media route
        self._media_base = deployment.media_base(settings)
        self._media_key = media_urls.load_key(settings.data_dir) if self._media_base else b""

    @property
    def replicas(self) -> list[Replica]:
        return self.health.replicas

    @property
    def capacity(self) -> int:
        return self.health.capacity

    # ---- the request side ------------------------------------------------------------------------------
    def _request(self, cfg: JobConfig, item: dict) -> CaptionRequest:
        req = CaptionRequest(
            clip_path=item["path"],
            prompt=cfg.prompt,
            params=cfg.params,
            job_id=item["job_id"],
            camera=prompts.camera_of(item["path"], item.get("sidecar")),
        )
        if not self._media_base:
            return req
        # replicas fetch over HTTP: a fresh signed URL of the clip for each attempt
        url = media_urls.signed_url(self._media_base, self._media_key, item["clip_id"], ttl=self.settings.media_url_ttl)
        return dataclasses.replace(req, media_url=url)

    async def _send(self, cfg: JobConfig, item: dict, rep: Replica, sent: float) -> None:
        clip = (item["job_id"], item["clip_id"])
        out = Outcome(*clip, item["attempts"], replica=rep.url)
        down_when_sent = self.health.fleet_down()
        try:
            out.result = await self._client.caption(rep.url, self._request(cfg, item))
        except FleetError as e:  # a router's breaker answer is named by what opened it (replicas.py)
            out.error = self.health.explain(rep, e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug or an unexpected library error: record it (redacted), retry elsewhere
            redact = self.reader.auth.redact
            trace = redact("".join(traceback.format_exception(e)))
            log.error("caption of clip %s failed unexpectedly: %s", item["clip_id"], trace)
            out.error = ReplicaError(redact(f"{type(e).__name__}: {e}"), replica=rep.url, kind="internal")
        finally:
            self.health.finished(rep, out.error, time.monotonic(), clip, sent)
            # a request sent into an outage that fails as a look sees the fleet back is still the outage's
            out.in_outage = out.error is not None and (down_when_sent or self.health.fleet_down())
            if out.error is not None and self.health.all_failing():
                out.fleet_failing = True  # its next attempt waits (replicas.FAILING_RETRY_S)
                self._look_now.set()  # every replica fails: is the fleet down? (watch.py)
        self._results.append(out)
        self._wake.set()

    def info(self) -> dict:
        t = time.monotonic()
        while self._done_times and self._done_times[0] < t - 30:
            self._done_times.popleft()
        span = min(30.0, max(1e-3, t - self.started_at))
        return {
            "identity": self.identity,
            "inflight": self.health.inflight,
            "capacity": self.capacity,
            "rate": len(self._done_times) / span,
            "replicas": self.health.info(t),
            "fleet": self.health.report(t),
            "jobs": sorted(self.store.job_ids) if self.store.job_ids is not None else None,
            "sends_to": self.fleet,  # the fleet whose jobs it takes (data.jobs.fleet_of)
            "state": self.state,
            "waiting": self._db.waiting,  # a database call waiting out a locked database or a full disk
            **dict(self.stats),
            "collections": dict(self.collections),
        }

    async def _heartbeat(self) -> None:
        """Write the heartbeat, best-effort: one that cannot be written (a full disk, a foreign lock held past a
        period) is skipped and said once in the log, and the next comes a period later."""
        info = self.info()
        self.fleet_log.check(info)  # what changed in the fleet, and now and then a summary, said in the log
        try:
            await self._beats(self.store.heartbeat, info)
        except Exception as e:  # a heartbeat never stops the runner
            if self._beat_error is None:
                log.warning("heartbeat not written (%s); trying again every %.0f s", e, heartbeats.PERIOD_S)
            self._beat_error = str(e)
        else:
            if self._beat_error is not None:
                log.info("heartbeat written again")
            self._beat_error = None

    async def _beating(self) -> None:
        while True:
            await self._heartbeat()
            await asyncio.sleep(heartbeats.PERIOD_S)

    # ---- the loop ----------------------------------------------------------------------------------------
    async def _flush(self) -> None:
        """Write every outcome so far, in transactions bounded by time (store.JobStore.write)."""
        while self._results:
            pending, self._results = self._results, []
            while pending:
                counts, n = await self._db(self.store.write, pending, self.health.fleet_down())
                batch, pending = pending[:n], pending[n:]
                self._count(counts, batch)

    def _count(self, counts: dict[str, int], batch: list[Outcome]) -> None:
        t = time.monotonic()
        self._done_times.extend([t] * (counts.get("done", 0) + counts.get("failed", 0)))
        self.stats.update(counts)
        for o in batch:
            if o.error is not None and o.error.retryable and o.replica:
                self._avoid.setdefault((o.job_id, o.clip_id), set()).add(o.replica)
            else:
                self._avoid.pop((o.job_id, o.clip_id), None)

    def _stopping(self) -> bool:
        return self._stop.is_set() or (self.thread_stop is not None and self.thread_stop.is_set())

    async def run(self) -> dict:
        """Work until stopped (or, with `exit_when_idle`, until no runnable job of ours is left)."""
        self.state = "starting"
        dbthread.prompt_gil()  # the database thread's write lock must not wait on this loop's GIL (dbthread)
        busy = lambda: bool(self._tasks or self._results)  # noqa: E731 - idle, the collector looks less often
        async with Collector(self.settings.db, busy=busy) as collector:  # no collection pauses a transaction
            self.collections = collector.stats
            return await self._work()

    async def _work(self) -> dict:
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._look_now = asyncio.Event()
        watcher = checker = None
        own_client = self._client is None
        if own_client:  # its connection pools per replica keep httpcore's per-request work small (serving.client)
            # every answer is read in a checker process within a time budget, never on this loop (answer_check)
            checker = AnswerChecker.from_settings(self.settings)
            self._client = FleetClient(self.settings, checker=checker)
        beating = asyncio.ensure_future(self._beating())
        try:
            if self._ask_router:  # a router knows how many replicas it stands for (a network call: not in __init__)
                url = self.replicas[0].url
                n = await asyncio.to_thread(self.reader.router_workers, url, timeout=3.0)
                self.health.behind_router(n or 1)
            log.info(
                "runner %s: %d replica slot(s) over %s",
                self.identity,
                self.capacity,
                ", ".join(r.url for r in self.replicas),
            )
            if checker is not None:
                await checker.start()
            recovered = await self._db(job_items.recover)
            if recovered:
                log.info("released %d leases of runners that died", recovered)
            self.state = "running"
            if self._look is not None:  # the look at the fleet's health (watch.py)
                watcher = asyncio.ensure_future(watch.watching(self.health, self._look, self._look_now))
            await self._loop()
        finally:
            if watcher is not None:
                watcher.cancel()
            self.state = "stopping"
            try:
                await self._drain()
            finally:
                beating.cancel()
                self.state = "stopped"
                try:
                    await self._heartbeat()
                finally:
                    if own_client:
                        await self._client.aclose()
                    if checker is not None:
                        self.stats.update({f"checks_{k}": v for k, v in checker.stats.items()})
                        await checker.aclose()
                    self._db.close()
                    self._beats.close()
        return self.info()

    def stop(self) -> None:
        """Ask the loop to stop claiming and drain (safe from a signal handler in the loop's thread)."""
        self._db.stopping = True
        self._stop.set()
        self._wake.set()

    async def _abort_inactive(self) -> None:
        """Cancel the requests of jobs paused or cancelled meanwhile (data.jobs handed their items back)."""
        inflight = {job_id for job_id, _ in self._tasks.values() if job_id}
        if not inflight:
            return
        state = await self._db(job_queries.states, inflight)
        for task, (job_id, _) in list(self._tasks.items()):
            if job_id and state.get(job_id) not in job_queries.ACTIVE:
                task.cancel()
                self.stats["aborted"] += 1

    async def _loop(self) -> None:
        next_claim = 0.0
        next_beat = 0.0
        next_abort_check = 0.0
        busy_at = time.monotonic()  # the last time it had work
        while not self._stopping():
            t = time.monotonic()
            busy_at = t if self._tasks else busy_at
            poll = IDLE_POLL_S if t - busy_at < QUIET_AFTER_S else QUIET_POLL_S
            if self._results:
                await self._flush()
            if t >= next_abort_check:
                next_abort_check = t + ABORT_CHECK_S
                await self._abort_inactive()
            claimed_any = False
            free = self.health.free_slots(t)
            threshold = max(1, min(self.capacity // 16, 64))
            if t >= next_claim and free > 0 and (free >= threshold or not self._tasks):
                got = await self._db(self.store.claim, free, self.capacity, list(self._tasks.values()))
                n_claimed = sum(len(items) for _, items in got)
                claimed_any = n_claimed > 0
                busy_at = t if claimed_any else busy_at
                self._dispatch(got)
                if n_claimed < free:
                    next_claim = time.monotonic() + (IDLE_POLL_S if claimed_any else poll)
                if self.exit_when_idle and not got and not self._tasks and not self._results:
                    return
            if self.progress_cb is not None and t >= next_beat:
                next_beat = t + heartbeats.PERIOD_S
                prog = await self._db(self.store.progress)
                if prog is not None:
                    self.progress_cb(prog)
                    if self.exit_when_idle and prog["state"] not in job_queries.ACTIVE and not self._tasks:
                        return
            if claimed_any and self.health.free_slots(time.monotonic()) >= threshold:
                continue
            self._wake.clear()
            if self._results:
                continue
            waits = self.health.slot_waits(t)
            wait = min([poll, max(0.0, next_claim - time.monotonic()) or poll, *waits])
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.005, wait))
            except asyncio.TimeoutError:
                pass

    def _dispatch(self, got: list[tuple[dict, list[dict]]]) -> None:
        unsendable: list[dict] = []
        leftovers: list[tuple[int, int]] = []
        t = time.monotonic()
        for job, items in got:
            cfg = self.store.jobcfg[job["id"]]
            for it in items:
                if it.get("probe_error"):
                    self.stats["ingest_failed"] += 1
                    unsendable.append({**it, "error": f"ingest: {it['probe_error']}", "kind": "ingest"})
                    continue
                if cfg.refusal:
                    self.stats["prompt_refused"] += 1
                    unsendable.append({**it, "error": cfg.refusal, "kind": "prompt"})
                    continue
                rep = self.health.pick(self._avoid.get((it["job_id"], it["clip_id"])), t)
                if rep is None:  # no slot after all (a replica started cooling): hand it back unsent
                    leftovers.append((it["job_id"], it["clip_id"]))
                    continue
                rep.start(t)
                task = asyncio.ensure_future(self._send(cfg, it, rep, t))
                self._tasks[task] = (it["job_id"], it["clip_id"])
                task.add_done_callback(self._tasks.pop)
        if unsendable:
            self._bg(self._db(self.store.fail_unsendable, unsendable))
        for job_id, clip_id in leftovers:
            self._bg(self._db(job_items.release, job_id, [clip_id], self.identity))

    def _bg(self, aw: Awaitable) -> None:
        task = asyncio.ensure_future(aw)
        self._tasks[task] = (0, 0)
        task.add_done_callback(self._tasks.pop)

    async def _drain(self) -> None:
        """Stop claiming; let in-flight requests finish up to the deadline; release what did not."""
        deadline = time.monotonic() + self.drain_seconds
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(list(self._tasks), timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            if self._results:
                await self._flush()
        unfinished = {pair for pair in self._tasks.values() if pair != (0, 0)}
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        await self._flush()
        by_job: dict[int, list[int]] = collections.defaultdict(list)
        for job_id, clip_id in unfinished:
            by_job[job_id].append(clip_id)
        for job_id, clip_ids in by_job.items():
            for i in range(0, len(clip_ids), RELEASE_CHUNK):
                n = await self._db(job_items.release, job_id, clip_ids[i : i + RELEASE_CHUNK], self.identity)
                self.stats["released"] += n
