"""Jobs in data.jobs against real SQLite: claim, complete and fail; the runners of one fleet sharing one bound; what
a claim reads and in which order it sends; the progress series and the per-replica view the Jobs tab draws."""

from __future__ import annotations

import time

import pytest

from data import jobs
from data.job_params import JobParams
from data.jobs import items as job_items, queries as job_queries
from data.jobs.selection import Selection
from tests.support.rows import LABELS, add_clip


def test_job_basics_claim_complete_fail(db):
    ids = [add_clip(db, f"c{i}.mp4") for i in range(3)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids + ids[:1]), prompt_id=None, params=JobParams()
    )
    assert job_queries.get(db, job)["total"] == 3
    got = job_items.claim(db, job, "runner-1", 2, lease_seconds=60, max_attempts=3)
    assert len(got) == 2 and job_queries.get(db, job)["state"] == "running"
    job_items.complete(db, job, got[0]["clip_id"], text="done", labels=LABELS, provenance={"model": "m"})
    job_items.complete(db, job, got[0]["clip_id"], text="dup", labels=LABELS, provenance={"model": "m"})
    assert (
        job_items.fail(
            db, job, got[1]["clip_id"], error="HTTP 400", kind="bad_request", retryable=False, max_attempts=3
        )
        == "failed"
    )
    j = job_queries.get(db, job)
    assert (j["done"], j["failed"]) == (1, 1)
    assert db.execute("SELECT COUNT(*) FROM captions WHERE job_id = ?", [job]).fetchone()[0] == 1


def test_runners_of_one_fleet_keep_one_bound_and_share_it(db):
    """Runners sharing a fleet keep its in-flight bound together: the live leases of every runner on jobs of that
    fleet (and jobs that name none) count against it, and while others hold some a runner takes no more than an
    even share. An expired lease and another fleet's do not count."""
    ids = [add_clip(db, f"r{i}.mp4") for i in range(12)]
    F, G = jobs.fleet_of("http://127.0.0.1:30000"), jobs.fleet_of("http://127.0.0.2:30000")

    def job(name, fleet):
        sel = Selection.of_clips(ids)
        return jobs.create(
            db, name=name, created_by="lead", selection=sel, prompt_id=None, params=JobParams(), fleet=fleet
        )

    a, b, none, other = job("a", F), job("b", F), job("none", None), job("other", G)
    kw = dict(lease_seconds=60, max_attempts=3)
    assert len(job_items.claim(db, other, "r3", 5, bound=8, fleet=G, **kw)) == 5  # another fleet's replicas
    # alone on F, r1 is bounded by its own count of its requests (the runner asks for its free slots): 6, then 2
    assert len(job_items.claim(db, a, "r1", 6, bound=8, fleet=F, **kw)) == 6
    assert len(job_items.claim(db, none, "r1", 2, bound=8, fleet=F, **kw)) == 2  # a job that names no fleet
    assert job_items.leases_on_fleet(db, "r2", F, time.time()) == (0, 8, 1)
    # r1 holds all of it: r2, holding none, gets one request in (a foot in the door), then nothing more
    assert len(job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw)) == 1
    assert job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw) == []
    assert job_items.claim(db, a, "r1", 10, bound=8, fleet=F, **kw) == []  # r1 is over its even share of 4
    db.execute("UPDATE job_items SET state = 'done' WHERE job_id = ? AND leased_by = 'r2'", [b])
    # r1's leases end (answers written) except 3; r2 gets in, up to an even share (4), not the 5 left
    done = [r["clip_id"] for r in db.query("SELECT clip_id FROM job_items WHERE job_id = ? AND leased_by = 'r1'", [a])]
    db.execute(
        f"UPDATE job_items SET state = 'done' WHERE job_id = ? AND clip_id IN ({','.join('?' * 5)})", [a, *done[:5]]
    )
    assert len(job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw)) == 4
    # and r1, holding 3 of its even share of 4 while r2 holds some, gets 1 more
    assert len(job_items.claim(db, a, "r1", 10, bound=8, fleet=F, **kw)) == 1
    assert job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw) == []  # 8 of 8 in flight
    db.execute("UPDATE job_items SET lease_until = 0 WHERE leased_by = 'r1'")  # r1's leases ran out
    assert job_items.leases_on_fleet(db, "r2", F, time.time()) == (4, 0, 0)


def _vm_steps(db, fn) -> int:
    """SQLite virtual-machine instructions `fn` runs (in thousands): how many rows its queries read, whatever the
    machine's speed."""
    n = [0]

    def tick():
        n[0] += 1
        return 0

    db.conn.set_progress_handler(tick, 1000)
    try:
        fn()
    finally:
        db.conn.set_progress_handler(None, 1000)
    return n[0]


def test_a_claim_reads_the_items_it_needs_not_every_item_of_the_job(db):
    """A runner claims, counts the fleet's leases and asks whether a job is drained under the write lock, on every
    batch and result. Each must cost the same late in a big job as in a small one, and finished jobs must not add
    to it: the planner took the primary key and read every item of the job, the done ones first (a claim late in a
    job of 1,000,000 clips read ~900,000 rows; benchmarks/bench_leases.py)."""
    from tests.support.runner_fixtures import add_clips

    F = jobs.fleet_of("http://127.0.0.1:30000")
    kw = dict(lease_seconds=60, max_attempts=3, bound=48, fleet=F)

    def job_late_in_its_run(n: int, prefix: str) -> int:
        ids = add_clips(db, n, prefix=prefix)
        sel = Selection.of_clips(ids)
        job = jobs.create(
            db, name=prefix, created_by="lead", selection=sel, prompt_id=None, params=JobParams(), fleet=F
        )
        job_items.claim(db, job, "r1", 8, **kw)  # running, 8 in flight
        db.execute(  # 90 % done, the first ones, as a runner leaves them
            "UPDATE job_items SET state = 'done', attempts = 1 WHERE job_id = ? AND state = 'pending' AND clip_id < ?",
            [job, ids[int(n * 0.9)]],
        )
        return job

    small, big = job_late_in_its_run(400, "small"), job_late_in_its_run(8000, "big")

    def costs(job):
        return (
            _vm_steps(db, lambda: job_items.claim(db, job, "r1", 4, **kw)),
            _vm_steps(db, lambda: job_items.finish_if_drained(db, job)),
        )

    (claim_small, drained_small), (claim_big, drained_big) = costs(small), costs(big)
    assert claim_big <= 2 * claim_small + 5, (claim_small, claim_big)  # 20x the items: was ~20x the rows read
    assert drained_big <= 2 * drained_small + 5, (drained_small, drained_big)
    # the lease count reads the leased items of live jobs: a finished job of 8,000 items adds nothing to it
    count = _vm_steps(db, lambda: job_items.leases_on_fleet(db, "r2", F, time.time()))
    db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", [big])
    db.execute("UPDATE job_items SET state = 'done' WHERE job_id = ?", [big])
    assert job_items.leases_on_fleet(db, "r2", F, time.time()) == (0, 12, 1)  # the small job's, by r1
    history = job_late_in_its_run(8000, "history")
    db.execute("UPDATE job_items SET state = 'done' WHERE job_id = ?", [history])
    db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", [history])
    assert _vm_steps(db, lambda: job_items.leases_on_fleet(db, "r2", F, time.time())) <= count + 5


def test_a_claim_sends_what_is_due_first_then_fresh_items_in_clip_order(db):
    """A lease that ran out, then a retry whose backoff has passed, go out before never-tried items (a clip a hung
    replica held is sent again at once: RELIABILITY R8); a retry still in its backoff waits; fresh items go in
    clip order."""
    ids = [add_clip(db, f"o{i}.mp4") for i in range(8)]
    job = jobs.create(
        db, name="o", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    t = time.time()
    db.execute("UPDATE job_items SET state = 'leased', leased_by = 'gone', lease_until = ?, attempts = 1 "
               "WHERE job_id = ? AND clip_id = ?", [t - 1, job, ids[7]])  # fmt: skip
    db.execute(
        "UPDATE job_items SET attempts = 1, not_before = ? WHERE job_id = ? AND clip_id = ?", [t - 1, job, ids[6]]
    )
    db.execute(
        "UPDATE job_items SET attempts = 1, not_before = ? WHERE job_id = ? AND clip_id = ?", [t + 60, job, ids[5]]
    )
    got = job_items.claim(db, job, "r1", 4, lease_seconds=60, max_attempts=3)
    assert [g["clip_id"] for g in got] == [ids[7], ids[6], ids[0], ids[1]]
    assert [g["attempts"] for g in got] == [2, 2, 1, 1]


def test_progress_series_has_a_point_per_bucket_and_zeros_for_stalls(db):
    ids = [add_clip(db, f"s{i}.mp4") for i in range(3)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    job_items.claim(db, job, "runner-1", 3, lease_seconds=60, max_attempts=3)
    t0 = 1_000_000.0  # started at t0; results at t0+5 and t0+35, then a stall until it finished at t0+60
    db.execute("UPDATE jobs SET started_at = ?, finished_at = ? WHERE id = ?", [t0, t0 + 60, job])
    db.execute("UPDATE job_items SET finished_at = ? WHERE job_id = ? AND clip_id = ?", [t0 + 5, job, ids[0]])
    db.execute("UPDATE job_items SET finished_at = ? WHERE job_id = ? AND clip_id = ?", [t0 + 35, job, ids[1]])
    db.conn.commit()
    series = job_queries.progress(db, job)["series"]
    assert [p["t"] for p in series] == [t0 + 10 * k for k in range(7)]  # 10 s buckets from start to end
    assert [p["n"] for p in series] == [1, 0, 0, 1, 0, 0, 0]
    assert series[0]["clips_per_s"] == 0.1


def test_a_bar_is_over_the_part_of_its_bucket_the_job_ran(db, monkeypatch):
    """A job of 3 s across two 10 s buckets: each bar is its clips over the seconds the job ran in that bucket,
    so the bars agree with the job's rate (over whole buckets they read 1.2 and 1.8 under a rate of 10.2). A
    running job's latest bucket is over the seconds until now, not a drop at every refresh."""
    ids = [add_clip(db, f"p{i}.mp4") for i in range(30)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    t0 = 1_000_008.0  # started 2 s before a bucket's end, finished 1 s into the next
    db.execute(
        "UPDATE jobs SET started_at = ?, finished_at = ?, state = 'done', run_seconds = 3 WHERE id = ?",
        [t0, t0 + 3, job],
    )
    for i, cid in enumerate(ids):  # 12 in the first 2 s, 18 in the last 1 s
        at = t0 + 0.1 + i * 0.15 if i < 12 else t0 + 2.0 + (i - 12) * 0.05
        db.execute(
            "UPDATE job_items SET state = 'done', finished_at = ? WHERE job_id = ? AND clip_id = ?", [at, job, cid]
        )
    db.conn.commit()
    p = job_queries.progress(db, job)
    bars = [(b["n"], round(b["seconds"], 6), round(b["clips_per_s"], 6), b["partial"]) for b in p["series"]]
    assert bars == [(12, 2.0, 6.0, True), (18, 1.0, 18.0, True)]
    assert sum(b["n"] for b in p["series"]) / sum(b["seconds"] for b in p["series"]) == pytest.approx(p["rate"])
    # the same job still running, 4 s into its second bucket: the latest bar is over those 4 s
    db.execute("UPDATE jobs SET finished_at = NULL, state = 'running', running_since = ? WHERE id = ?", [t0, job])
    db.conn.commit()
    monkeypatch.setattr(job_queries, "now", lambda: t0 + 6.0)
    latest = job_queries.progress(db, job)["series"][-1]
    assert (latest["n"], latest["seconds"], latest["clips_per_s"], latest["partial"]) == (18, 4.0, 4.5, True)


def test_progress_series_counts_every_finished_item_once_in_its_bucket(db):
    """The series counts a range of the index per bucket: every finished item is in exactly one bucket, the one
    finished_at / bucket says, on the bucket bounds themselves, before the job's start and after its end too."""
    import random

    ids = [add_clip(db, f"b{i}.mp4") for i in range(400)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    t0, b = 1_700_000_000.0, 10.0
    db.execute("UPDATE jobs SET started_at = ?, finished_at = ? WHERE id = ?", [t0, t0 + 600, job])
    rng = random.Random(7)
    times = [t0 + 10 * k for k in range(40)]  # on bucket bounds
    times += [t0 + 10 * k - 1e-6 for k in range(1, 30)] + [t0 - 25.0, t0 + 700.0]  # just below, before, after
    times += [t0 + rng.uniform(0, 600) for _ in range(400 - len(times) - 20)]  # 20 items left unfinished
    for cid, at in zip(ids, times):
        db.execute("UPDATE job_items SET finished_at = ? WHERE job_id = ? AND clip_id = ?", [at, job, cid])
    db.conn.commit()
    series = job_queries.progress(db, job, bucket_seconds=b)["series"]
    want: dict[float, int] = {}
    for at in times:
        want[(at // b) * b] = want.get((at // b) * b, 0) + 1
    got = {p["t"]: p["n"] for p in series}
    assert sum(got.values()) == len(times) == 380
    assert {k: n for k, n in got.items() if n} == want
    assert [p["t"] for p in series] == [((t0 - 25.0) // b + k) * b for k in range(len(series))]  # every bucket
    assert series[-1]["t"] == (t0 + 700.0) // b * b
    assert job_queries.progress(db, job, series=False)["series"] == []


def test_the_per_replica_view_reads_one_index_not_the_items(db):
    """replica_load at 900,000 done items read every row through the primary key (270-340 ms a poll); it names
    the index (job_id, state, replica, latency_ms) of m026, which holds all it reads."""
    ids = [add_clip(db, f"r{i}.mp4") for i in range(6)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    for k, cid in enumerate(ids):
        db.execute(
            "UPDATE job_items SET state = 'done', replica = ?, latency_ms = ? WHERE job_id = ? AND clip_id = ?",
            [f"r{k % 2}", 1000.0 * (k + 1), job, cid],
        )
    db.conn.commit()
    load = job_queries.replica_load(db, job)
    assert [(r["replica"], r["done"], r["mean_latency_ms"]) for r in load] == [("r0", 3, 3000.0), ("r1", 3, 4000.0)]
    plan = " ".join(
        str(r[-1])
        for r in db.execute(
            f"EXPLAIN QUERY PLAN SELECT replica, COUNT(*), AVG(latency_ms) FROM job_items {job_queries.BY_REPLICA} "
            "WHERE job_id = ? AND state = 'done' GROUP BY replica ORDER BY replica",
            [job],
        )
    )
    assert "COVERING INDEX idx_job_items_job_id_state_replica" in plan and "TEMP B-TREE" not in plan
