"""What a runner's claim costs late in a big job, and the runners' shared in-flight bound in it.

The head's runner claims items of a job under SQLite's write lock (data.jobs.items.claim), and every claim with a
bound counts the live leases on the fleet's jobs (leases_on_fleet, docs/RELIABILITY.md F7); every result asks
whether the job is drained (finish_if_drained). This builds a database of a large installation (a history of
finished jobs, one running job of --items items of which --done-share are done, the first ones as a runner leaves
them, and the requests in flight of 1, 8 and 80 GPUs' replicas: 48 leases per replica, held by two runners) and
times each of the three at each:

    python benchmarks/bench_leases.py [--history-jobs 2000] [--items 1000000] [--done-share 0.9] [--repeat 50]

No GPU; a temporary SQLite file (WAL) as the workbench opens it (data.db.connect).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data import db as dbmod
from data.jobs import items


def build(path: Path, history_jobs: int, items_n: int, done_share: float = 0.0) -> tuple:
    db = dbmod.connect(path)
    t = time.time()
    with db.conn:
        # the clips a claim joins its items with (path only: nothing is decoded)
        db.conn.executemany(
            "INSERT INTO clips (id, path) VALUES (?, ?)", ((c, f"c/{c}.mp4") for c in range(1, items_n + 1))
        )
        db.conn.executemany(
            "INSERT INTO jobs (id, name, state, fleet, created_at) VALUES (?, ?, 'done', 'f', ?)",
            [(j, f"old {j}", t) for j in range(1, history_jobs + 1)],
        )
        # a finished history: 50 done items per old job
        db.conn.executemany(
            "INSERT INTO job_items (job_id, clip_id, state, finished_at) VALUES (?, ?, 'done', ?)",
            [(j, c, t) for j in range(1, history_jobs + 1) for c in range(1, 51)],
        )
        running = history_jobs + 1
        db.conn.execute(
            "INSERT INTO jobs (id, name, state, fleet, created_at) VALUES (?, 'big', 'running', 'f', ?)", [running, t]
        )
        done = int(items_n * done_share)
        db.conn.executemany(
            "INSERT INTO job_items (job_id, clip_id, state, attempts) VALUES (?, ?, ?, ?)",
            ((running, c, "done" if c <= done else "pending", 1 if c <= done else 0) for c in range(1, items_n + 1)),
        )
    return db, running


def lease(db, job: int, n: int) -> None:
    """`n` live leases on `job`, half to each of two runners (the supervised runner and the terminal command)."""
    t = time.time()
    with db.conn:
        db.conn.execute(
            "UPDATE job_items SET state = 'pending', leased_by = NULL, lease_until = NULL, attempts = 0 "
            "WHERE job_id = ? AND state = 'leased'",
            [job],
        )
        first = db.conn.execute(
            "SELECT MIN(clip_id) FROM job_items WHERE job_id = ? AND state = 'pending'", [job]
        ).fetchone()[0]
        db.conn.execute(
            "UPDATE job_items SET state = 'leased', leased_by = CASE WHEN clip_id % 2 THEN 'a' ELSE 'b' END, "
            "lease_until = ?, attempts = 1 WHERE job_id = ? AND clip_id >= ? AND clip_id < ?",
            [t + 600, job, first, first + n],
        )


def samples_ms(fn, repeat: int) -> list[float]:
    """Milliseconds of each of `repeat` calls of `fn` (bench_progress.py reads them too)."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def timed(fn, repeat: int) -> float:
    """Median milliseconds of `fn` over `repeat` calls."""
    return statistics.median(samples_ms(fn, repeat))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history-jobs", type=int, default=2000)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--done-share", type=float, default=0.9, help="share of the running job's items done")
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.time()
        db, job = build(Path(tmp) / "workbench.db", a.history_jobs, a.items, a.done_share)
        print(
            f"database: {a.history_jobs:,} finished jobs (50 items each), one running job of {a.items:,} items, "
            f"{a.done_share:.0%} of them done; built in {time.time() - t:.0f} s (median of {a.repeat} calls each)"
        )
        print(
            "| GPUs (48 leases each) | live leases | the count (leases_on_fleet), ms | a claim of 8 with the bound, "
            "ms | a claim of 8 without, ms | is the job drained (per result), ms |"
        )
        print("|---|---|---|---|---|---|")
        for gpus in (1, 8, 80):
            n = 48 * gpus
            lease(db, job, n)
            count = timed(lambda: items.leases_on_fleet(db, "a", "f", time.time()), a.repeat)

            def claim(bound):
                got = items.claim(db, job, "a", 8, lease_seconds=600, max_attempts=4, bound=bound, fleet="f")
                with db.conn:  # give them back: every call claims from the same state
                    db.conn.executemany(
                        "UPDATE job_items SET state = 'pending', leased_by = NULL, lease_until = NULL, "
                        "attempts = 0 WHERE job_id = ? AND clip_id = ?",
                        [(job, g["clip_id"]) for g in got],
                    )

            with_bound = timed(lambda bound=n + 8: claim(bound), a.repeat)
            without = timed(lambda: claim(None), a.repeat)
            drained = timed(lambda: items.finish_if_drained(db, job), a.repeat)
            print(f"| {gpus} | {n:,} | {count:.2f} | {with_bound:.2f} | {without:.2f} | {drained:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
