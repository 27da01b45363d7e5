"""What the Jobs tab reads every 2 s while a lead watches a big job, before and after, side by side in one run.

Every poll of the Jobs tab (webapp/jobs/progress.py) reads the progress of each listed job and, for the job shown,
its throughput series and the per-replica view (data.jobs.queries). This builds a database with one running job of
--items items of which --done-share are done (finished one after another at 30 clips/s over 8 replicas) and
--history-jobs finished jobs of 50 items, then times, each as it was and as it is:

- the series: one GROUP BY of every finished item against a count of an index range per bucket;
- the per-replica view: the query as it was, without schema m026's index (SQLite read the primary key's rows),
  against the same query naming the index;
- the whole poll: every listed job's progress with its series and the old reads, against the rows without one;
- a result's write (8 to a transaction, as the runner writes them) without and with m026's index.
The "before" reads run first, with m026's index dropped; then it is made again and the "after" reads run.

    python benchmarks/bench_progress.py [--items 1000000] [--done-share 0.9] [--history-jobs 49] [--repeat 5]

No GPU; a temporary SQLite file (WAL) as the workbench opens it (data.db.connect).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_leases import samples_ms
from data import db as dbmod
from data.jobs import queries

OLD_REPLICA_SQL = (
    "SELECT replica, COUNT(*), AVG(latency_ms) FROM job_items WHERE job_id = ? AND state = 'done' GROUP BY replica"
)
RATE = 30.0  # clips/s of the big job: 8 H200s at ~3.8 each
REPLICAS = 8


def build(path: Path, items_n: int, done_share: float, history_jobs: int):
    db = dbmod.connect(path)
    t = time.time()
    done = int(items_n * done_share)
    start = t - done / RATE
    with db.conn:
        db.conn.executemany(
            "INSERT INTO clips (id, path) VALUES (?, ?)", ((c, f"c/{c}.mp4") for c in range(1, items_n + 1))
        )
        for j in range(1, history_jobs + 1):
            db.conn.execute(
                "INSERT INTO jobs (id, name, state, created_at, started_at, finished_at, total) "
                "VALUES (?, ?, 'done', ?, ?, ?, 50)",
                [j, f"old {j}", start - 3600, start - 3600, start - 3500],
            )
            db.conn.executemany(
                "INSERT INTO job_items (job_id, clip_id, state, attempts, finished_at, latency_ms, replica) "
                "VALUES (?, ?, 'done', 1, ?, 20000, 'r0')",
                [(j, c, start - 3600 + c) for c in range(1, 51)],
            )
        big = history_jobs + 1
        db.conn.execute(
            "INSERT INTO jobs (id, name, state, created_at, started_at, running_since, total) "
            "VALUES (?, 'big', 'running', ?, ?, ?, ?)",
            [big, start, start, start, items_n],
        )
        db.conn.executemany(
            "INSERT INTO job_items (job_id, clip_id, state, attempts, finished_at, latency_ms, replica) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                (big, c, "done", 1, start + c / RATE, 18000.0 + c % 5000, f"r{c % REPLICAS}")
                if c <= done
                else (big, c, "pending", 0, None, None, None)
                for c in range(1, items_n + 1)
            ),
        )
    return db, big


def bucket(db, job_id: int) -> tuple[float, int, int]:
    """(bucket seconds, first, last bucket) as data.jobs.queries.progress picks them."""
    job = queries.get(db, job_id)
    end = job["finished_at"] or time.time()
    b = max(10.0, 10.0 * math.ceil((end - job["started_at"]) / 300 / 10.0))
    return b, int(job["started_at"] // b), int(end // b)


def old_series(db, job_id: int) -> list:
    """The series as progress read it before: a GROUP BY of every finished item."""
    b = bucket(db, job_id)[0]
    return [
        (k * b, n)
        for k, n in db.execute(
            "SELECT CAST(finished_at / ? AS INTEGER) AS k, COUNT(*) AS n FROM job_items "
            "WHERE job_id = ? AND finished_at IS NOT NULL GROUP BY 1",
            [b, job_id],
        )
    ]


def new_series(db, job_id: int) -> list:
    return queries._finished_per_bucket(db, job_id, *bucket(db, job_id))


def old_replica_load(db, job_id: int) -> list:
    """The per-replica view's query as it was (run without m026's index: the planner's own choice)."""
    return list(db.execute(OLD_REPLICA_SQL + " ORDER BY replica", [job_id]))


def old_poll(db, big: int) -> None:
    for j in queries.list_jobs(db):  # each row's progress read its series
        queries.progress(db, j["id"], series=False)
        old_series(db, j["id"])
    queries.progress(db, big, series=False)  # the job shown, again
    old_series(db, big)
    old_replica_load(db, big)


def new_poll(db, big: int) -> None:
    for j in queries.list_jobs(db):
        queries.progress(db, j["id"], series=j["id"] == big)
    queries.replica_load(db, big)


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median, max) milliseconds of `repeat` calls."""
    out = samples_ms(fn, repeat)
    return statistics.median(out), max(out)


def writes(db, big: int, first: int, n: int = 4000) -> float:
    """Milliseconds per result of `n` results written 8 to a transaction, on pending items from clip `first`."""
    t = time.perf_counter()
    for k in range(first, first + n, 8):
        with db.conn:
            for c in range(k, k + 8):
                db.conn.execute(
                    "UPDATE job_items SET state = 'done', replica = ?, latency_ms = 19000, finished_at = ? "
                    "WHERE job_id = ? AND clip_id = ?",
                    [f"r{c % REPLICAS}", time.time(), big, c],
                )
    return (time.perf_counter() - t) * 1000 / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--done-share", type=float, default=0.9)
    ap.add_argument("--history-jobs", type=int, default=49, help="finished jobs listed beside the big one")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        db, big = build(Path(tmp) / "workbench.db", a.items, a.done_share, a.history_jobs)
        built_s = time.perf_counter() - t
        print(f"built: {a.items:,} items ({a.done_share:.0%} done) + {a.history_jobs} jobs in {built_s:.0f} s")
        done = int(a.items * a.done_share)
        db.execute("DROP INDEX idx_job_items_job_id_state_replica")
        plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + OLD_REPLICA_SQL, [big]))
        before = {
            "series of the job shown": timed(lambda: old_series(db, big), a.repeat),
            "per-replica view": timed(lambda: old_replica_load(db, big), a.repeat),
            "one poll of the Jobs tab": timed(lambda: old_poll(db, big), a.repeat),
        }
        old_load = old_replica_load(db, big)
        without = writes(db, big, done + 1)
        db.execute("CREATE INDEX idx_job_items_job_id_state_replica ON job_items(job_id, state, replica, latency_ms)")
        after = {
            "series of the job shown": timed(lambda: new_series(db, big), a.repeat),
            "per-replica view": timed(lambda: queries.replica_load(db, big), a.repeat),
            "one poll of the Jobs tab": timed(lambda: new_poll(db, big), a.repeat),
        }
        with_index = writes(db, big, done + 4001)
        new = [(r["t"], r["n"]) for r in queries.progress(db, big)["series"] if r["n"]]
        assert new == sorted(old_series(db, big)), "the two series differ"
        load = [tuple(r.values()) for r in queries.replica_load(db, big)]
        assert [r[:2] for r in load] == [tuple(r)[:2] for r in old_replica_load(db, big)], "the views differ"
        assert len(old_load) == REPLICAS
        print(f"the per-replica view without the index: {plan}")
        print(f"{'read':<28} {'before ms (median / max)':>26} {'after ms (median / max)':>26} {'ratio':>7}")
        for name, (bm, bx) in before.items():
            am, ax = after[name]
            print(f"{name:<28} {bm:>16.1f} / {bx:<7.1f} {am:>16.1f} / {ax:<7.1f} {bm / max(am, 1e-6):>6.1f}x")
        print(
            f"a result's write: {without:.3f} ms without the per-replica index, {with_index:.3f} ms with it "
            f"({with_index - without:+.3f} ms)"
        )
        poll_b, poll_a = before["one poll of the Jobs tab"][0], after["one poll of the Jobs tab"][0]
        print(
            f"What it means: the Jobs tab polls every 2 s for each lead watching it, so one watcher of a job this "
            f"size keeps {poll_b / 20:.0f} % of a core busy before and {poll_a / 20:.0f} % after; the result writes "
            f"hold the write lock {with_index - without:+.3f} ms each longer for it."
        )
        db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
