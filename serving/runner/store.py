"""What the job runner reads and writes in SQLite: claims, results, unsendable clips, heartbeats.

Every method runs on one of the runner's database threads (dbthread.RunnerDB: heartbeats on their own), with
that thread's connection as its first argument, and is one transaction: a retry after a locked database repeats
nothing. Results are written in batches (one `BEGIN IMMEDIATE` per batch, one savepoint per item) through
`data.jobs.complete`, which goes through `data.captions.add_machine`: a machine caption never replaces a human or
approved one, and a result is written once per (job, clip).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import sqlite3
from typing import Iterable

from data import db as dbmod, heartbeats, prompts
from data.job_params import JobParams
from data.jobs import items as job_items, queries as job_queries
from data.settings import Settings
from serving.client import CaptionResult, backoff
from serving.errors import FleetError

log = logging.getLogger("serving.runner")


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """What every request of one job carries: its prompt version and its parameters."""

    prompt: dict
    params: JobParams


@dataclasses.dataclass
class Outcome:
    """How one attempt at one clip ended: a result or an error, and the replica that gave it."""

    job_id: int
    clip_id: int
    attempt: int
    result: CaptionResult | None = None
    error: FleetError | None = None
    replica: str | None = None


class JobStore:
    """The runner's side of `data.jobs`, for the jobs `job_ids` (all runnable jobs when None)."""

    def __init__(
        self,
        settings: Settings,
        identity: str,
        *,
        job_ids: Iterable[int] | None = None,
        name: str = "runner",
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
    ):
        self.settings = settings
        self.identity = identity
        self.job_ids = set(job_ids) if job_ids is not None else None
        self.name = name
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.rng = rng or random.Random()
        self.jobcfg: dict[int, JobConfig] = {}  # read once per job

    def _job_config(self, db, job: dict) -> JobConfig:
        prompt = prompts.get(db, job["prompt_id"]) if job.get("prompt_id") else prompts.latest(db)
        return JobConfig(prompt, job["params"])  # the job's own, as it was started: not checked again

    def claim(self, db, want: int) -> list[tuple[dict, list[dict]]]:
        """Runnable jobs (oldest first) and the items claimed from each, up to `want` in all."""
        out = []
        for job in job_queries.runnable(db):
            if self.job_ids is not None and job["id"] not in self.job_ids:
                continue
            if want <= 0:
                break
            if job["id"] not in self.jobcfg:
                self.jobcfg[job["id"]] = self._job_config(db, job)
            items = job_items.claim(
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

    def write(self, db, batch: list[Outcome], fleet_down: bool = False) -> dict[str, int]:
        """Record a batch of outcomes in one transaction (one savepoint per item). `fleet_down`: the whole fleet
        is down (serving.runner.replicas), so retryable failures do not use up the clips' attempts."""
        counts: collections.Counter = collections.Counter()
        with dbmod.immediate(db):
            for o in batch:
                try:
                    with db.atomic():
                        state = self._store_result(db, o) if o.error is None else self._store_error(db, o, fleet_down)
                        counts[state] += 1
                        if o.error is not None and o.error.retryable and fleet_down:
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
        return counts

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
        """Clips whose ingest probe failed are never sent: they fail with "ingest: <probe error>"."""
        with dbmod.immediate(db):
            for it in items:
                job_items.fail(
                    db,
                    it["job_id"],
                    it["clip_id"],
                    error=f"ingest: {it['probe_error']}",
                    kind="ingest",
                    retryable=False,
                    max_attempts=self.settings.max_attempts,
                )

    def heartbeat(self, db, info: dict) -> None:
        """Report the runner in `heartbeats` (on the runner's heartbeat thread: waits at most one period for the
        write lock)."""
        heartbeats.heartbeat(db, self.name, "runner", info=info, wait=heartbeats.PERIOD_S)

    def progress(self, db) -> dict | None:
        """The progress of this runner's job when it runs exactly one (run_job), else None."""
        if self.job_ids and len(self.job_ids) == 1:
            return job_queries.progress(db, next(iter(self.job_ids)))
        return None
