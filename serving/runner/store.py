"""What the job runner reads and writes in SQLite: claims, results, unsendable clips, heartbeats.

Every method runs on one of the runner's database threads (dbthread.RunnerDB: heartbeats on their own), with
that thread's connection as its first argument, and is one transaction: a retry after a locked database repeats
nothing. Results are written in batches (one `BEGIN IMMEDIATE` per batch, one savepoint per item) through
`data.jobs.complete`, which goes through `data.captions.add_machine`: a machine caption never replaces a human or
approved one, and a result is written once per (job, clip).

A transaction holds SQLite's write lock, and every annotator's save waits for it: so a batch is bounded by time,
not by count. `write` stores results until WRITE_HOLD_S has passed and leaves the rest to the next transaction,
and claims are made CLAIM_CHUNK items per transaction; at the runner's ceiling no transaction of the runner holds
the lock 100 ms (docs/SCALE.md, "One head"). Short holds are not enough when they follow each other: a save in
another process waits in SQLite's busy handler, which polls, sleeping up to 100 ms, and finds the lock taken again
each time. So after a transaction that held the lock PACE_FROM_S or more, the runner's next write waits as long as
that one held (`_pace`): while it has a backlog, the runner holds the lock at most half the time.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import sqlite3
import time
from typing import Iterable

from data import db as dbmod, heartbeats, prompts, taxonomy
from data.job_params import JobParams
from data.jobs import items as job_items, queries as job_queries
from data.settings import Settings
from serving.client import CaptionResult, backoff
from serving.errors import FleetError
from serving.runner.replicas import FAILING_RETRY_S

log = logging.getLogger("serving.runner")

WRITE_HOLD_S = 0.04  # a result batch stops taking results once its transaction is this old (one result takes ~1 ms)
CLAIM_CHUNK = 128  # items leased per claim transaction (~5 ms of write lock on this machine)
PACE_FROM_S = 0.01  # a hold this long makes the next write of the runner wait as long (the module docstring)


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """What every request of one job carries: its prompt version and its parameters. `refusal`: why no clip of the
    job is sent (its prompt version's schema cannot be checked in bounded time: a version stored before
    data.prompts refused such schemas)."""

    prompt: dict
    params: JobParams
    refusal: str | None = None


@dataclasses.dataclass
class Outcome:
    """How one attempt at one clip ended: a result or an error, and the replica that gave it."""

    job_id: int
    clip_id: int
    attempt: int
    result: CaptionResult | None = None
    error: FleetError | None = None
    replica: str | None = None
    # the fleet was down when the request was sent or when it failed (serving.runner.replicas): a retryable failure
    # then uses no attempt, also when the outage has ended by the time the failure is written
    in_outage: bool = False
    # every replica was failing when it failed: the clip's next attempt waits at least replicas.FAILING_RETRY_S
    fleet_failing: bool = False


class JobStore:
    """The runner's side of `data.jobs`, for the jobs `job_ids` (all runnable jobs when None) of the fleet
    `fleet` (data.jobs.fleet_of's form; jobs that name no fleet too)."""

    pace = True  # off only to measure what pacing changes (benchmarks/bench_runner.py --head --no-pace)

    def __init__(
        self,
        settings: Settings,
        identity: str,
        *,
        job_ids: Iterable[int] | None = None,
        fleet: str | None = None,
        name: str = "runner",
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
    ):
        self.settings = settings
        self.identity = identity
        self.job_ids = set(job_ids) if job_ids is not None else None
        self.fleet = fleet  # the fleet this runner sends to (data.jobs.fleet_of): it claims only jobs for it
        self.name = name
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.rng = rng or random.Random()
        self.jobcfg: dict[int, JobConfig] = {}  # read once per job
        self._next_write = 0.0  # monotonic time before which the next write transaction waits

    def _pace(self) -> None:
        wait = self._next_write - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _held(self, began: float) -> None:
        held = time.monotonic() - began
        if self.pace and held >= PACE_FROM_S:
            self._next_write = time.monotonic() + held

    def _job_config(self, db, job: dict) -> JobConfig:
        prompt = prompts.get(db, job["prompt_id"]) if job.get("prompt_id") else prompts.latest(db)
        # the job's own, as it was started: not checked again; a schema the runner cannot check in bounded time
        # is refused here, before any GPU time is spent on it
        return JobConfig(prompt, job["params"], taxonomy.costly_refusal(prompt.get("schema")))

    def claim(
        self, db, want: int, bound: int | None = None, inflight: Iterable[tuple[int, int]] = ()
    ) -> list[tuple[dict, list[dict]]]:
        """Runnable jobs of this runner's fleet (oldest first; and jobs that name none) and the items claimed
        from each, up to `want` in all; `bound`: the runner's in-flight bound, which the fleet's runners keep
        together (data.jobs.items.claim). `inflight`: the (job id, clip id) this runner has in flight. While
        several jobs are runnable each first takes up to an even share of `bound` (less what it holds), then
        what the others left: a job whose clips are slow to answer or to check (each holding its slot for a
        whole check budget) cannot take every slot from the jobs started after it."""
        runnable = [
            job for job in job_queries.runnable(db, self.fleet) if self.job_ids is None or job["id"] in self.job_ids
        ]
        holding = collections.Counter(job_id for job_id, _ in inflight)
        share = -(-bound // len(runnable)) if bound and len(runnable) > 1 else None
        got: dict[int, list[dict]] = {}
        drained: set[int] = set()  # jobs that had fewer items to give than asked
        cap = share
        while want > 0 and len(drained) < len(runnable):
            for job in runnable:
                jid = job["id"]
                if want <= 0 or jid in drained:
                    continue
                ask = want if cap is None else min(want, cap - holding[jid] - len(got.get(jid, [])))
                if ask <= 0:
                    continue
                items = self._claim_job(db, job, ask, bound)
                if len(items) < ask:
                    drained.add(jid)
                got.setdefault(jid, []).extend(items)
                want -= len(items)
            if cap is None:
                break
            cap += share  # what the shares left: another share each, until the free slots are taken
        return [(job, got[job["id"]]) for job in runnable if job["id"] in got]

    def _claim_job(self, db, job: dict, want: int, bound: int | None) -> list[dict]:
        if job["id"] not in self.jobcfg:
            self.jobcfg[job["id"]] = self._job_config(db, job)
        items: list[dict] = []
        while want > 0:  # one transaction per chunk: a claim of thousands of slots holds no long lock
            self._pace()
            began = time.monotonic()
            got = job_items.claim(
                db,
                job["id"],
                self.identity,
                min(want, CLAIM_CHUNK),
                lease_seconds=self.settings.lease_seconds,
                max_attempts=self.settings.max_attempts,
                bound=bound,
                fleet=self.fleet,
            )
            self._held(began)
            items += got
            want -= len(got)
            if len(got) < CLAIM_CHUNK:
                break
        return items

    def write(
        self, db, batch: list[Outcome], fleet_down: bool = False, *, hold_s: float = WRITE_HOLD_S
    ) -> tuple[dict[str, int], int]:
        """Record outcomes from the start of `batch` in one transaction (one savepoint per item), as many as fit in
        `hold_s` of write lock (at least one); returns (counts by new state, how many were recorded): the caller
        writes the rest in the next transaction. `fleet_down`: the whole fleet is down (serving.runner.replicas),
        so retryable failures do not use up the clips' attempts (nor does one whose Outcome says `in_outage`)."""
        counts: collections.Counter = collections.Counter()
        written = 0
        self._pace()
        with dbmod.immediate(db):
            began = time.monotonic()
            for o in batch:
                if written and time.monotonic() - began >= hold_s:
                    break  # the rest waits for the next transaction, so that others' writes get the lock between
                written += 1
                try:
                    with db.atomic():
                        down = fleet_down or o.in_outage
                        state = self._store_result(db, o) if o.error is None else self._store_error(db, o, down)
                        counts[state] += 1
                        if o.error is not None and o.error.retryable and down:
                            counts["refunded"] += 1  # see _store_error
                except sqlite3.OperationalError:
                    raise  # a locked database: the whole batch is retried by RunnerDB (rolled back), never item by item
                except Exception as exc:  # a result that cannot be stored (e.g. labels off the taxonomy)
                    log.exception("storing the result of clip %s failed", o.clip_id)
                    with db.atomic():
                        job_items.fail(
                            db,
                            o.job_id,
                            o.clip_id,
                            error=f"could not store the result: {exc}"[:2000],
                            kind="store",
                            retryable=False,
                            max_attempts=self.settings.max_attempts,
                        )
                    counts["failed"] += 1
        self._held(began)
        return counts, written

    def _store_result(self, db, o: Outcome) -> str:
        prov = dict(o.result.provenance)
        prompt = self.jobcfg[o.job_id].prompt
        prov.setdefault("prompt_id", prompt["id"])
        prov.setdefault("prompt_name", prompt["name"])
        prov.setdefault("prompt_version", prompt["version"])
        prov.setdefault("replica", o.replica)
        row = job_items.complete(db, o.job_id, o.clip_id, text=o.result.text, labels=o.result.labels, provenance=prov)
        return "done" if row is not None else "discarded"

    def _store_error(self, db, o: Outcome, fleet_down: bool) -> str:
        e = o.error
        delay = backoff(o.attempt, base=self.backoff_base, cap=self.backoff_cap, rng=self.rng) if e.retryable else 0.0
        if e.retryable and o.fleet_failing:  # its attempts outlast a router breaker's open window (replicas.py)
            delay = max(delay, FAILING_RETRY_S)
        # nothing can succeed while the whole fleet is down: the clip is not at fault, so the attempt is not
        # counted, however long the outage lasts (the runner sends one request at a time meanwhile)
        refund = e.retryable and fleet_down
        msg = str(e) or type(e).__name__
        if e.status and str(e.status) not in msg:
            msg = f"HTTP {e.status}: {msg}"
        return job_items.fail(
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

    def fail_unsendable(self, db, items: list[dict]) -> None:
        """Items that are never sent fail at once with their `error` and `kind`: clips whose ingest probe failed
        ("ingest: <probe error>"), jobs whose prompt's schema cannot be checked in bounded time ("prompt")."""
        for i in range(0, len(items), CLAIM_CHUNK):
            self._pace()
            with dbmod.immediate(db):
                began = time.monotonic()
                for it in items[i : i + CLAIM_CHUNK]:
                    job_items.fail(
                        db,
                        it["job_id"],
                        it["clip_id"],
                        error=it["error"][:2000],
                        kind=it["kind"],
                        retryable=False,
                        max_attempts=self.settings.max_attempts,
                    )
            self._held(began)

    def heartbeat(self, db, info: dict) -> None:
        """Report the runner in `heartbeats` (on the runner's heartbeat thread: waits at most one period for the
        write lock)."""
        heartbeats.heartbeat(db, self.name, "runner", info=info, wait=heartbeats.PERIOD_S)

    def progress(self, db) -> dict | None:
        """The progress of this runner's job when it runs exactly one (run_job), else None."""
        if self.job_ids and len(self.job_ids) == 1:
            return job_queries.progress(db, next(iter(self.job_ids)), series=False)
        return None
