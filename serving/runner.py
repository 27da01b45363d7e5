"""The job runner: claims job items from SQLite, keeps the fleet busy with bounded concurrency, writes results.

    python -m serving.runner --db var/workbench.db --fleet http://127.0.0.1:8000,http://127.0.0.1:8001
    python -m serving.runner --db var/workbench.db --fleet http://127.0.0.1:30000 --replicas 8 --until-idle

How it works (a job survives a runner kill, a dying or hung replica and a silent one: docs/RELIABILITY.md R3/R6/R8):
- One asyncio loop does the HTTP; one thread with its own SQLite connection does every database call,
  in order (claims, results, heartbeats). No HTTP call ever happens inside a transaction.
- Each replica URL gets a bound of `per_replica_inflight` requests. With a single router URL the bound is
  `per_replica_inflight x replicas behind it` (the router's `/workers`, or `--replicas N`). Items are claimed
  only for free slots, so what is leased is what is in flight: a SIGKILL re-sends at most that.
- Dispatch is least-loaded over the replicas that are not cooling down. A replica that answers with a
  retryable error (unreachable, 5xx, 503) cools down with a growing backoff and then gets one probe request
  before it is trusted again; the failed clip goes back to pending with jittered backoff
  (`serving.client.backoff`) and is sent elsewhere when another replica can take it.
- Non-retryable errors (the clip's fault, a bad answer) fail the item at once with the message. Clips whose
  ingest probe failed are never sent: they fail with "ingest: <probe error>".
- Results are written in batches (one `BEGIN IMMEDIATE` per batch, one savepoint per item) through
  `data.jobs.complete`, which goes through `data.captions.add_machine`: a machine caption never replaces a
  human or approved one, and a result is written once per (job, clip).
- pause / cancel are read before each claim (`data.jobs.claim` refuses inactive jobs), and every
  ABORT_CHECK_S the requests in flight for a job that was paused or cancelled are aborted (its items were
  handed back by `data.jobs.change_state`; a result that still arrives is discarded by `data.jobs.complete`).
- SIGTERM/SIGINT: stop claiming, wait for in-flight requests up to a deadline, release what was not answered.
  SIGKILL: `data.jobs.recover` on the next start releases the dead leases.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import dataclasses
import json
import logging
import random
import signal
import sqlite3
import sys
import threading
import time
from typing import Any, Awaitable, Callable, Iterable

import httpx

from data import db as dbmod, jobs, library, prompts
from data.job_params import JobParams
from data.settings import Settings, add_arguments, from_args
from serving import media_urls
from serving.client import CaptionClient, CaptionRequest, FleetClient, backoff
from serving.errors import FleetError

log = logging.getLogger("serving.runner")

IDLE_POLL_S = 0.25  # how often to look for new work when there was none
HEARTBEAT_S = 2.0  # how often the runner reports itself in `heartbeats`
WRITE_BATCH = 500  # results per write transaction at most
COOL_MIN_S = 0.2  # shortest cool-down of a replica after a retryable error
COOL_MAX_S = 15.0
POOL_SLOTS = 8  # in-flight requests per HTTP connection pool (see Runner.run)
DB_RETRY_MAX_S = 2.0  # longest pause between retries of a database call that found the database locked
DB_RETRY_STOPPING_S = 30.0  # once stopping, give up on a locked database after this long
FLEET_DOWN_BUDGET_S = 600.0  # while every replica fails, retries are free for this long (then they count)
ABORT_CHECK_S = 0.5  # how often in-flight jobs are checked for pause/cancel (their requests are aborted)


def parse_fleet(value: str | Iterable[str], settings: Settings | None = None) -> list[str]:
    """`--fleet` value -> replica base URLs. 'sim', 'gpu', 'auto' mean the local router."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    else:
        items = [str(v).strip() for v in value if str(v).strip()]
    if not items or items in (["sim"], ["gpu"], ["auto"]):
        port = settings.router_port if settings else 30000
        return [f"http://127.0.0.1:{port}"]
    out = []
    for u in items:
        if "://" not in u:
            u = "http://" + u
        out.append(u.rstrip("/"))
    return out


def router_workers(url: str, timeout: float = 3.0) -> int | None:
    """How many workers a vllm-router at `url` has (GET /workers), or None if `url` is not a router."""
    try:
        r = httpx.get(url.rstrip("/") + "/workers", timeout=timeout)
        if r.status_code != 200:
            return None
        data = r.json()
    except (httpx.HTTPError, ValueError):
        return None
    if isinstance(data, dict):
        for key in ("workers", "urls", "worker_urls"):
            if isinstance(data.get(key), list):
                return len(data[key])
        if isinstance(data.get("total"), int):
            return data["total"]
    if isinstance(data, list):
        return len(data)
    return None


@dataclasses.dataclass
class Replica:
    """One place requests go, with its own bound and health."""

    url: str
    limit: int
    inflight: int = 0
    fails: int = 0  # consecutive retryable failures
    cool_until: float = 0.0
    sent: int = 0
    ok: int = 0
    errors: int = 0
    busy_since: float | None = None
    busy_s: float = 0.0  # time with at least one request in flight

    def capacity(self, t: float) -> int:
        if t < self.cool_until:
            return 0
        # after failures, one probe request at a time until one succeeds
        return (1 if self.fails else self.limit) - self.inflight

    def start(self, t: float) -> None:
        if self.inflight == 0:
            self.busy_since = t
        self.inflight += 1
        self.sent += 1

    def finish(self, t: float) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self.busy_since is not None:
            self.busy_s += t - self.busy_since
            self.busy_since = None

    def info(self, t: float) -> dict:
        return {
            "url": self.url,
            "limit": self.limit,
            "inflight": self.inflight,
            "sent": self.sent,
            "ok": self.ok,
            "errors": self.errors,
            "cooling": t < self.cool_until,
            "fails": self.fails,
        }


@dataclasses.dataclass
class _Outcome:
    job_id: int
    clip_id: int
    attempt: int
    result: Any = None  # CaptionResult
    error: FleetError | None = None
    replica: str | None = None


def transient_db_error(e: BaseException) -> bool:
    """A database error that waiting cures: another process held the write lock past our busy timeout."""
    return isinstance(e, sqlite3.OperationalError) and any(
        w in str(e).lower() for w in ("database is locked", "database is busy", "database table is locked")
    )


class _DB:
    """A single thread owning one SQLite connection; every database call of the runner goes through it.

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


class Runner:
    """Executes captioning jobs from the database against a fleet. Build one per process (or per `run_job`).

    `client` is a `serving.client.CaptionClient` (`async caption(replica_url, CaptionRequest) -> CaptionResult`),
    closed by whoever made it; by default the runner makes and closes its own `FleetClient`s.
    """

    def __init__(
        self,
        settings: Settings,
        fleet_urls: Iterable[str] | str,
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
        fleet_down_budget: float = FLEET_DOWN_BUDGET_S,
    ):
        # clips are found under the root the library recorded at ingest, never under a default
        self.settings = settings = library.settings_for_path(settings)
        self.fleet_down_budget = fleet_down_budget
        urls = parse_fleet(fleet_urls, settings)
        per = max(1, settings.per_replica_inflight)
        if len(urls) == 1:
            n = replicas or router_workers(urls[0]) or 1
            self.replicas = [Replica(urls[0], per * n)]
        else:
            self.replicas = [Replica(u, per) for u in urls]
        self.capacity = sum(r.limit for r in self.replicas)
        self._client = client
        self.job_ids = set(job_ids) if job_ids is not None else None
        self.name = name
        self.identity = jobs.runner_identity()
        self.drain_seconds = drain_seconds
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.progress_cb = progress_cb
        self.thread_stop = stop_event
        self.exit_when_idle = exit_when_idle
        self.rng = random.Random()
        self._db = _DB(settings.db)
        self._tasks: dict[asyncio.Task, tuple[int, int]] = {}
        self._results: list[_Outcome] = []
        self._avoid: dict[tuple[int, int], set[str]] = {}
        self._jobcfg: dict[int, dict] = {}
        self._done_times: collections.deque = collections.deque()
        self.stats = collections.Counter()
        self.started_at = time.monotonic()
        self._last_ok = self.started_at  # the last answer from any replica (fleet-down budget)
        self.state = "new"
        # replicas on other nodes cannot open file:// paths: send them signed URLs of the app's media route
        self._media_base = media_urls.media_base(settings)
        self._media_key = media_urls.load_key(settings.data_dir) if self._media_base else b""

    # ---- the request side ------------------------------------------------------------------------------
    def _pick(self, avoid: set[str] | None, t: float) -> Replica | None:
        best, best_key = None, None
        for r in self.replicas:
            if r.capacity(t) <= 0:
                continue
            key = (r.url in (avoid or ()), r.inflight / r.limit, self.rng.random())
            if best_key is None or key < best_key:
                best, best_key = r, key
        return best

    def free_slots(self, t: float) -> int:
        return sum(max(0, r.capacity(t)) for r in self.replicas)

    def _request(self, cfg: dict, item: dict):
        p = cfg["params"]
        return CaptionRequest(
            clip_path=item["path"],
            prompt=cfg["prompt"],
            frames=int(p["frames"]),
            max_tokens=int(p["max_tokens"]),
            temperature=float(p["temperature"]),
            seed=p.get("seed"),
            job_id=item["job_id"],
            camera=prompts.camera_of(item["path"], item.get("sidecar")),
        )

    def _with_media_url(self, req, item: dict):
        """`req` with a fresh signed URL of the clip when replicas fetch over HTTP (each attempt a new one)."""
        if not self._media_base:
            return req
        return dataclasses.replace(
            req,
            media_url=media_urls.signed_url(
                self._media_base, self._media_key, item["clip_id"], ttl=self.settings.media_url_ttl
            ),
        )

    async def _send(self, cfg: dict, item: dict, rep: Replica) -> None:
        out = _Outcome(item["job_id"], item["clip_id"], item["attempts"], replica=rep.url)
        try:
            req = self._with_media_url(self._request(cfg, item), item)
            if self._client is not None:
                out.result = await self._client.caption(rep.url, req)
            else:
                shards = self._clients[rep.url]
                shard = min(shards, key=lambda s: s[1]) if shards else None
                if shard is None or shard[1] >= POOL_SLOTS:
                    shard = [self._make_client(), 0]
                    shards.append(shard)
                shard[1] += 1
                try:
                    out.result = await shard[0].caption(rep.url, req)
                finally:
                    shard[1] -= 1
        except FleetError as e:
            out.error = e
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug or an unexpected library error: record it, retry elsewhere
            log.exception("caption of clip %s failed unexpectedly", item["clip_id"])
            from serving.errors import ReplicaError

            out.error = ReplicaError(f"{type(e).__name__}: {e}", replica=rep.url, kind="internal")
        finally:
            t = time.monotonic()
            rep.finish(t)
        if out.error is None:
            rep.ok += 1
            rep.fails = 0
            self._last_ok = t
        else:
            self._note_error(rep, out.error, t)
        self._results.append(out)
        self._wake.set()

    def _note_error(self, rep: Replica, err: FleetError, t: float) -> None:
        rep.errors += 1
        if err.retryable:
            rep.fails += 1
            cool = min(COOL_MAX_S, max(COOL_MIN_S, self.backoff_base * 2 ** min(rep.fails - 1, 8)))
            rep.cool_until = max(rep.cool_until, t + cool * (0.5 + self.rng.random() / 2))

    # ---- the database side ------------------------------------------------------------------------------
    def _job_config(self, db, job: dict) -> dict:
        prompt = prompts.get(db, job["prompt_id"]) if job.get("prompt_id") else prompts.latest(db)
        p = JobParams.resolve(self.settings, job.get("params"), validate=False)
        return {"prompt": prompt, "params": {**p.to_dict(), "seed": p.seed}}

    def _claim(self, db, want: int) -> list[tuple[dict, list[dict]]]:
        """Runnable jobs (oldest first) and the items claimed from each, up to `want` in all."""
        out = []
        for job in jobs.runnable(db):
            if self.job_ids is not None and job["id"] not in self.job_ids:
                continue
            if want <= 0:
                break
            if job["id"] not in self._jobcfg:
                self._jobcfg[job["id"]] = self._job_config(db, job)
            items = jobs.claim(
                db,
                job["id"],
                self.identity,
                want,
                lease_seconds=self.settings.lease_seconds,
                max_attempts=self.settings.max_attempts,
            )
            want -= len(items)
            out.append((job, items))
        return out

    def _write(self, db, batch: list[_Outcome]) -> dict[str, int]:
        """Record a batch of outcomes in one transaction (one savepoint per item)."""
        counts = collections.Counter()
        with dbmod.immediate(db):
            for o in batch:
                try:
                    with db.atomic():
                        if o.error is None:
                            prov = dict(o.result.provenance)
                            prompt = self._jobcfg[o.job_id]["prompt"]
                            prov.setdefault("prompt_id", prompt["id"])
                            prov.setdefault("prompt_name", prompt["name"])
                            prov.setdefault("prompt_version", prompt["version"])
                            prov.setdefault("replica", o.replica)
                            row = jobs.complete(
                                db, o.job_id, o.clip_id, text=o.result.text, labels=o.result.labels, provenance=prov
                            )
                            counts["done" if row is not None else "discarded"] += 1
                        else:
                            e = o.error
                            delay = (
                                backoff(o.attempt, base=self.backoff_base, cap=self.backoff_cap, rng=self.rng)
                                if e.retryable
                                else 0.0
                            )
                            # the whole fleet down (every replica failing) for less than the budget: the
                            # clip is not at fault, so the attempt is not counted (a 45 s outage used to
                            # fail clips for good after max_attempts fast retries)
                            refund = e.retryable and self.fleet_down()
                            msg = str(e) or type(e).__name__
                            if e.status and str(e.status) not in msg:
                                msg = f"HTTP {e.status}: {msg}"
                            state = jobs.fail(
                                db,
                                o.job_id,
                                o.clip_id,
                                error=msg[:2000],
                                kind=e.kind,
                                retryable=e.retryable,
                                max_attempts=self.settings.max_attempts,
                                backoff_seconds=delay,
                                refund_attempt=refund,
                                raw_answer=getattr(e, "raw", None),
                            )
                            counts[state] += 1
                            if refund:
                                counts["refunded"] += 1
                except sqlite3.OperationalError as exc:
                    if transient_db_error(exc):
                        raise  # the whole batch is retried by _DB (rolled back), never failed item by item
                    raise
                except Exception as exc:  # a result that cannot be stored (e.g. labels off the taxonomy)
                    log.exception("storing the result of clip %s failed", o.clip_id)
                    with db.atomic():
                        jobs.fail(
                            db,
                            o.job_id,
                            o.clip_id,
                            error=f"could not store the result: {exc}"[:2000],
                            kind="store",
                            retryable=False,
                            max_attempts=self.settings.max_attempts,
                        )
                    counts["failed"] += 1
        return counts

    def fleet_down(self, t: float | None = None) -> bool:
        """Every replica is failing, for less than `fleet_down_budget` seconds since the last answer."""
        t = time.monotonic() if t is None else t
        return all(r.fails > 0 for r in self.replicas) and t - self._last_ok < self.fleet_down_budget

    def _fail_unsendable(self, db, items: list[dict]) -> None:
        with dbmod.immediate(db):
            for it in items:
                jobs.fail(
                    db,
                    it["job_id"],
                    it["clip_id"],
                    error=f"ingest: {it['probe_error']}",
                    kind="ingest",
                    retryable=False,
                    max_attempts=self.settings.max_attempts,
                )

    def _heartbeat(self, db, info: dict) -> dict | None:
        jobs.heartbeat(db, self.name, "runner", info=info)
        if self.progress_cb and self.job_ids and len(self.job_ids) == 1:
            return jobs.progress(db, next(iter(self.job_ids)))
        return None

    def info(self) -> dict:
        t = time.monotonic()
        while self._done_times and self._done_times[0] < t - 30:
            self._done_times.popleft()
        span = min(30.0, max(1e-3, t - self.started_at))
        return {
            "identity": self.identity,
            "inflight": sum(r.inflight for r in self.replicas),
            "capacity": self.capacity,
            "rate": len(self._done_times) / span,
            "replicas": [r.info(t) for r in self.replicas],
            "state": self.state,
            **dict(self.stats),
        }

    # ---- the loop ----------------------------------------------------------------------------------------
    async def _flush(self) -> None:
        while self._results:
            batch, self._results = self._results[:WRITE_BATCH], self._results[WRITE_BATCH:]
            counts = await self._db(self._write, batch)
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
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        own_client = self._client is None
        if own_client:
            # one client (connection pool) per replica: httpcore's pool scans every connection for every
            # request, so one pool of 8 x 48 connections costs far more CPU than 8 pools of 48
            # (and sharded again: it also checks every connection of the pool on each request)
            self._clients = {r.url: [] for r in self.replicas}  # shards [client, in flight], made on demand
            ssl_ctx = httpx.create_ssl_context()  # built once: each default transport spends ~25 ms on its own
            self._make_client = lambda: FleetClient(
                self.settings,
                transport=httpx.AsyncHTTPTransport(
                    verify=ssl_ctx, limits=httpx.Limits(max_connections=4 * POOL_SLOTS, keepalive_expiry=30.0)
                ),
            )
        try:
            recovered = await self._db(jobs.recover)
            if recovered:
                log.info("released %d leases of runners that died", recovered)
            self.state = "running"
            await self._loop()
        finally:
            self.state = "stopping"
            await self._drain()
            self.state = "stopped"
            try:
                await self._db(self._heartbeat, self.info())
            finally:
                if own_client:
                    for shards in self._clients.values():
                        for c, _ in shards:
                            await c.aclose()
                self._db.close()
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
        state = await self._db(jobs.states, inflight)
        for task, (job_id, _) in list(self._tasks.items()):
            if job_id and state.get(job_id) not in jobs.ACTIVE:
                task.cancel()
                self.stats["aborted"] += 1

    async def _loop(self) -> None:
        next_claim = 0.0
        next_beat = 0.0
        next_abort_check = 0.0
        while not self._stopping():
            t = time.monotonic()
            if self._results:
                await self._flush()
            if t >= next_abort_check:
                next_abort_check = t + ABORT_CHECK_S
                await self._abort_inactive()
            claimed_any = False
            free = self.free_slots(t)
            threshold = max(1, min(self.capacity // 16, 64))
            if t >= next_claim and free > 0 and (free >= threshold or not self._tasks):
                got = await self._db(self._claim, free)
                n_claimed = sum(len(items) for _, items in got)
                claimed_any = n_claimed > 0
                self._dispatch(got)
                if n_claimed < free:
                    next_claim = time.monotonic() + IDLE_POLL_S
                if self.exit_when_idle and not got and not self._tasks and not self._results:
                    return
            if t >= next_beat:
                next_beat = t + HEARTBEAT_S
                prog = await self._db(self._heartbeat, self.info())
                if prog is not None:
                    self.progress_cb(prog)
                    if self.exit_when_idle and prog["state"] not in jobs.ACTIVE and not self._tasks:
                        return
            if claimed_any and self.free_slots(time.monotonic()) >= threshold:
                continue
            self._wake.clear()
            if self._results:
                continue
            cooling = [r.cool_until for r in self.replicas if r.cool_until > t]
            wait = min([IDLE_POLL_S, max(0.0, next_claim - time.monotonic()) or IDLE_POLL_S, *[c - t for c in cooling]])
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.005, wait))
            except asyncio.TimeoutError:
                pass

    def _dispatch(self, got: list[tuple[dict, list[dict]]]) -> None:
        unsendable: list[dict] = []
        leftovers: list[tuple[int, int]] = []
        t = time.monotonic()
        for job, items in got:
            cfg = self._jobcfg[job["id"]]
            for it in items:
                if it.get("probe_error"):
                    unsendable.append(it)
                    continue
                rep = self._pick(self._avoid.get((it["job_id"], it["clip_id"])), t)
                if rep is None:  # no slot after all (a replica started cooling): hand it back unsent
                    leftovers.append((it["job_id"], it["clip_id"]))
                    continue
                rep.start(t)
                task = asyncio.ensure_future(self._send(cfg, it, rep))
                self._tasks[task] = (it["job_id"], it["clip_id"])
                task.add_done_callback(self._tasks.pop)
        if unsendable:
            self.stats["ingest_failed"] += len(unsendable)
            self._bg(self._db(self._fail_unsendable, unsendable))
        for job_id, clip_id in leftovers:
            self._bg(self._db(jobs.release, job_id, [clip_id], self.identity))

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
            n = await self._db(jobs.release, job_id, clip_ids, self.identity)
            self.stats["released"] += n


async def _main_async(runner: Runner) -> dict:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, runner.stop)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread
            pass
    return await runner.run()


def run_job(
    settings: Settings,
    job_id: int,
    fleet_urls: Iterable[str] | str,
    *,
    progress_cb: Callable[[dict], None] | None = None,
    stop_event: threading.Event | None = None,
    replicas: int | None = None,
    client: CaptionClient | None = None,
    drain_seconds: float = 30.0,
    backoff_base: float = 0.5,
    fleet_down_budget: float = FLEET_DOWN_BUDGET_S,
) -> dict:
    """Run one job in the calling thread until it is done, paused or cancelled, or `stop_event` is set.

    The same loop as the runner process, restricted to `job_id`. `progress_cb(progress)` is called about
    every `HEARTBEAT_S` and at the end with `data.jobs.progress`. Returns the final progress.
    """
    runner = Runner(
        settings,
        fleet_urls,
        replicas=replicas,
        client=client,
        job_ids=[job_id],
        name=f"job-{job_id}",
        drain_seconds=drain_seconds,
        backoff_base=backoff_base,
        progress_cb=progress_cb,
        stop_event=stop_event,
        exit_when_idle=True,
        fleet_down_budget=fleet_down_budget,
    )

    async def go():
        if threading.current_thread() is threading.main_thread() and stop_event is None:
            return await _main_async(runner)
        return await runner.run()

    asyncio.run(go())
    d = dbmod.connect(settings.db)
    try:
        prog = jobs.progress(d, job_id)
    finally:
        d.close()
    if progress_cb:
        progress_cb(prog)
    return prog


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m serving.runner",
        description="Run captioning jobs from the database against a vLLM fleet (or the simulated one).",
        epilog="example: python -m serving.runner --db var/workbench.db --fleet http://127.0.0.1:30000 --replicas 8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="replicas behind a single router URL (default: ask the router's /workers)",
    )
    p.add_argument("--until-idle", action="store_true", help="exit when no runnable job is left")
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM, how long to wait for requests in flight before releasing them",
    )
    p.add_argument("--backoff-base", type=float, default=0.5, help="first retry backoff in seconds (jittered)")
    p.add_argument("--name", default="runner", help="heartbeat name of this runner")
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = from_args(args)
    try:
        runner = Runner(
            settings,
            settings.fleet,
            replicas=args.replicas,
            name=args.name,
            drain_seconds=args.drain_seconds,
            backoff_base=args.backoff_base,
            exit_when_idle=args.until_idle,
        )
    except dbmod.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log.info(
        "runner %s: %d replica slot(s) over %s",
        runner.identity,
        runner.capacity,
        ", ".join(r.url for r in runner.replicas),
    )
    info = asyncio.run(_main_async(runner))
    print(json.dumps({k: v for k, v in info.items() if k != "replicas"}, default=str), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
