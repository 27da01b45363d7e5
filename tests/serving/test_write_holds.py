"""The runner's write transactions are bounded by time, not by count (issue 32): a result batch stops taking
results once its transaction has held the write lock WRITE_HOLD_S, and claims lease CLAIM_CHUNK items per
transaction, so annotators' saves never wait behind one long write. The figures (longest hold, a save's p99 at
28, 112 clips/s and the ceiling) are benchmarks: `python benchmarks/bench_runner.py --head`."""

from __future__ import annotations

from pathlib import Path

from data import db as dbmod, examples, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from serving.client import CaptionResult
from serving.runner import store as store_mod
from serving.runner.store import JobStore, Outcome
from tests.support.runner_fixtures import add_clips, default_prompt


def setup(db, settings, n):
    ids = add_clips(db, n)
    job_id = jobs.create(
        db,
        name="t",
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=default_prompt(db)["id"],
        params=JobParams(),
    )
    s = JobStore(settings, "test-runner")
    return s, job_id


def holds(settings) -> int:
    return dbmod.write_lock_stats(Path(settings.db))["holds"]


def outcomes(s, db, job_id, n):
    got = s.claim(db, n)
    result = CaptionResult("A caption.", dict(examples.LABELS), {"model": "m", "replica": "r"})
    return [
        Outcome(job_id, it["clip_id"], it["attempts"], result=result, replica="r") for _, items in got for it in items
    ]


def test_a_result_batch_ends_when_its_time_is_up_and_the_rest_go_in_the_next(settings, db):
    s, job_id = setup(db, settings, 40)
    batch = outcomes(s, db, job_id, 40)
    counts, written = s.write(db, batch, hold_s=0.0)  # no time at all: one result, then commit
    assert (written, counts["done"]) == (1, 1)
    counts, written = s.write(db, batch[1:], hold_s=60.0)  # time enough: the whole rest in one transaction
    assert (written, counts["done"]) == (39, 39)
    assert job_queries.counts(db, job_id)["done"] == 40


def test_claims_lease_a_chunk_per_transaction(settings, db):
    s, job_id = setup(db, settings, store_mod.CLAIM_CHUNK * 2 + 5)
    before = holds(settings)
    got = s.claim(db, store_mod.CLAIM_CHUNK * 3)
    assert sum(len(items) for _, items in got) == store_mod.CLAIM_CHUNK * 2 + 5
    assert holds(settings) - before == 3  # three transactions, none of them of every slot at once
