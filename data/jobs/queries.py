"""Reading jobs: one job, the list, what a runner should work on, items per state, progress with a throughput
series, failures and the load per replica. Nothing here writes (data.jobs.lifecycle creates and changes jobs,
data.jobs.items works their items)."""

from __future__ import annotations

import json
import math
from typing import Iterable

import sqlite_utils

from data.db import now
from data.errors import DataError, NotFound
from data.job_params import JobParams
from data.jobs.selection import Selection

JOB_STATES = ("queued", "running", "paused", "cancelled", "done", "failed")
ACTIVE = ("queued", "running")
# a job with nothing left to do: "done" when at least one clip was captioned, "failed" when none was (data.jobs)
FINISHED = ("done", "failed")
RATE_WINDOW_S = 60.0  # a running job's clips/s: over the last minute the fleet answered
# a gap between two results longer than twice what a request takes (its 90th percentile), and at least this, is
# time the fleet did not answer (an outage, a stall): it counts as that much, not as its length
OUTAGE_GAP_MIN_S = 10.0
RATE_ROWS = 5000  # the newest results read for the rate: enough for 60 s at ~80 clips/s
# a job's done items by replica (schema m026), named as data.jobs.items names m025's: the per-replica view reads
# it alone, not the rows (benchmarks/bench_progress.py)
BY_REPLICA = "INDEXED BY idx_job_items_job_id_state_replica"


def _decode(row: dict) -> dict:
    """A job row with its `params` as a JobParams and its `selection` as a Selection."""
    row = dict(row)
    row["params"] = JobParams.from_dict(json.loads(row["params"]) if row.get("params") else None)
    row["selection"] = Selection.from_dict(json.loads(row["selection"]) if row.get("selection") else None)
    return row


def get(db: sqlite_utils.Database, job_id: int) -> dict:
    row = next(db.query("SELECT * FROM jobs WHERE id = ?", [job_id]), None)
    if row is None:
        raise NotFound(f"job {job_id} does not exist")
    return _decode(row)


# what asked for a job, from its stored selection (data.jobs.selection; older rows named it "reason" or "source")
_ORIGIN = (
    "COALESCE(json_extract(selection, '$.origin'), json_extract(selection, '$.reason'), "
    "json_extract(selection, '$.source'), '')"
)
RECAPTION = "re-caption"  # the origin of a one-clip re-caption job started from Review
KINDS = ("jobs", "re-captions", "all")  # `list_jobs(kind=...)`: jobs leaves re-captions out


def _list_where(kind: str, state: str | None, created_by: str | None) -> tuple[str, list]:
    if kind not in KINDS:
        raise DataError(f"Unknown kind of job {kind!r}: one of {', '.join(KINDS)}.")
    if state and state not in JOB_STATES:
        raise DataError(f"Unknown job state {state!r}: one of {', '.join(JOB_STATES)}.")
    where, args = ["1"], []
    if kind != "all":
        where.append(f"{_ORIGIN} {'!=' if kind == 'jobs' else '='} ?")
        args.append(RECAPTION)
    if state:
        where.append("state = ?")
        args.append(state)
    if created_by:
        where.append("created_by = ?")
        args.append(created_by)
    return " AND ".join(where), args


def list_jobs(
    db: sqlite_utils.Database,
    limit: int = 50,
    *,
    kind: str = "all",
    state: str | None = None,
    created_by: str | None = None,
) -> list[dict]:
    """The newest `limit` jobs, optionally only one `kind` ("jobs": all but re-captions, "re-captions", "all"),
    one `state` and one creator."""
    where, args = _list_where(kind, state, created_by)
    return [_decode(r) for r in db.query(f"SELECT * FROM jobs WHERE {where} ORDER BY id DESC LIMIT ?", [*args, limit])]


def count_jobs(
    db: sqlite_utils.Database, *, kind: str = "all", state: str | None = None, created_by: str | None = None
) -> dict[str, int]:
    """{state: how many jobs} for the same filter as `list_jobs` (the Jobs tab says what a filter hides)."""
    where, args = _list_where(kind, state, created_by)
    return {
        r["state"]: r["n"] for r in db.query(f"SELECT state, COUNT(*) AS n FROM jobs WHERE {where} GROUP BY 1", args)
    }


def creators(db: sqlite_utils.Database) -> list[str]:
    """Everyone who started a job, by name."""
    return [
        r["created_by"]
        for r in db.query("SELECT DISTINCT created_by FROM jobs WHERE created_by IS NOT NULL ORDER BY 1")
    ]


def runnable(db: sqlite_utils.Database, fleet: str | None = None) -> list[dict]:
    """Jobs a runner should work on now, oldest first: with `fleet` (data.jobs.fleet_of's form), those for that
    fleet and those made before jobs recorded one (NULL); without, every one."""
    if fleet is None:
        return [_decode(r) for r in db.query("SELECT * FROM jobs WHERE state IN ('queued', 'running') ORDER BY id")]
    return [
        _decode(r)
        for r in db.query(
            "SELECT * FROM jobs WHERE state IN ('queued', 'running') AND (fleet IS NULL OR fleet = ?) ORDER BY id",
            [fleet],
        )
    ]


def states(db: sqlite_utils.Database, job_ids: Iterable[int]) -> dict[int, str]:
    """{job id: state} for the given jobs (the runner checks its in-flight jobs with this)."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return {}
    return {
        r["id"]: r["state"]
        for r in db.query(f"SELECT id, state FROM jobs WHERE id IN ({', '.join('?' * len(ids))})", ids)
    }


def counts(db: sqlite_utils.Database, job_id: int) -> dict[str, int]:
    """Items per state, straight from job_items (the counters on `jobs` are the fast copy)."""
    out = {s: 0 for s in ("pending", "leased", "done", "failed")}
    for r in db.query("SELECT state, COUNT(*) AS n FROM job_items WHERE job_id = ? GROUP BY state", [job_id]):
        out[r["state"]] = r["n"]
    return out


def progress(
    db: sqlite_utils.Database,
    job_id: int,
    *,
    bucket_seconds: float | None = None,
    max_points: int = 300,
    series: bool = True,
    rate_since: float | None = None,
) -> dict:
    """What the UI and CLI show: counts, throughput, ETA, and a throughput series with one point per bucket
    from the job's start to its end (or now), empty buckets as 0 so that a stall shows as a drop, not as a line
    drawn across it. Buckets are 10 s, coarser for long jobs so that the series stays under `max_points`; each
    point's clips/s is over the `seconds` of its bucket the job ran (`_bucket_point`).

    `run_seconds` is how long the job has been in state running, all stretches together. `rate` (clips
    finished per second, done or failed) is, while the job runs, that of the last minute of its current stretch
    during which the fleet answered (`answering_rate`: an outage neither decays it nor, once over, leaves an ETA
    made of the outage); otherwise (queued, paused, cancelled, done) its clips over its `run_seconds`, so that it
    neither decays while the job stands still nor counts the time it stood still. `rate_since` (Unix time): the
    running job's rate counts no result before it (the fleet came back then: what came before is not its pace).

    `series=False` leaves the series out (empty): the rows of the Jobs list, the runner's and the terminal's
    progress show none, and at 1,000,000 items it is most of what progress reads."""
    job = get(db, job_id)
    c = counts(db, job_id)
    t = now()
    run_s = (job.get("run_seconds") or 0.0) + (max(0.0, t - job["running_since"]) if job.get("running_since") else 0.0)
    if job["state"] == "running":
        since = max(job.get("running_since") or job["started_at"] or t, rate_since or 0.0)
        rows = list(
            db.query(
                "SELECT finished_at, latency_ms FROM job_items WHERE job_id = ? AND finished_at >= ? "
                "ORDER BY finished_at DESC LIMIT ?",
                [job_id, since, RATE_ROWS],
            )
        )
        rate = answering_rate(
            [r["finished_at"] for r in rows], [r["latency_ms"] for r in rows if r["latency_ms"]], t, since
        )
    else:
        rate = (c["done"] + c["failed"]) / run_s if run_s > 0 else 0.0
    remaining = c["pending"] + c["leased"]
    points: list[dict] = []
    if series and job["started_at"]:
        end = job["finished_at"] or t
        b = bucket_seconds or max(10.0, 10.0 * math.ceil((end - job["started_at"]) / max_points / 10.0))
        got = _finished_per_bucket(db, job_id, b, int(job["started_at"] // b), int(end // b))
        points = [_bucket_point(k, n, b, job["started_at"], end) for k, n in got]
    return {
        **job,
        "counts": c,
        "run_seconds": run_s,
        "rate": rate,
        "remaining": remaining,
        "eta_seconds": remaining / rate if rate > 0 and job["state"] in ACTIVE else None,
        "series": points,
    }


def _bucket_point(k: int, n: int, b: float, start: float, end: float) -> dict:
    """Bucket k's bar: its `n` finished clips over the seconds of it the job ran (`seconds`). A job starts and
    ends inside a bucket, and a running job's latest bucket is still filling: over the whole width their bars
    read low (a 10 clips/s job of 3 s drew 1.2 and 1.8, and every running job's last bar a drop at each refresh).
    At least a second, so that one early answer is no spike; a bucket outside the job's start and end (an item
    finished before a resume's start) counts its whole width."""
    ran = min((k + 1) * b, end) - max(k * b, start)
    ran = ran if ran > 0 else b
    return {"t": k * b, "n": n, "clips_per_s": n / max(ran, min(b, 1.0)), "seconds": ran, "partial": ran < b}


def _finished_per_bucket(db: sqlite_utils.Database, job_id: int, b: float, first: int, last: int) -> list[tuple]:
    """[(k, items finished in [k*b, (k+1)*b))] for every k from `first` to `last`, widened to the job's first and
    last finished item, empty buckets as 0. One count of a range of the (job_id, finished_at) index per bucket:
    a GROUP BY of every finished item read them all into a temporary B-tree (187 against 31 ms at 900,000
    finished items, benchmarks/bench_progress.py). The bounds are compared as SQLite compares them (k * b in
    doubles), so that no item falls outside the buckets counted."""
    # MIN and MAX each alone: SQLite reads one end of the index only for a query with a single such aggregate
    lo = db.execute("SELECT MIN(finished_at) FROM job_items WHERE job_id = ? AND finished_at IS NOT NULL", [job_id])
    hi = db.execute("SELECT MAX(finished_at) FROM job_items WHERE job_id = ? AND finished_at IS NOT NULL", [job_id])
    lo, hi = lo.fetchone()[0], hi.fetchone()[0]
    if lo is not None:
        first, last = min(first, int(lo // b)), max(last, int(hi // b))
        while lo < first * b:
            first -= 1
        while hi >= (last + 1) * b:
            last += 1
    return list(
        db.execute(
            "WITH RECURSIVE k(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM k WHERE x < ?) "
            "SELECT x, (SELECT COUNT(*) FROM job_items WHERE job_id = ? AND finished_at >= x * ? "
            "AND finished_at < (x + 1) * ?) FROM k",
            [first, last, job_id, b, b],
        )
    )


def answering_rate(finished: list[float], latencies_ms: list[float], t: float, since: float) -> float:
    """Results per second over the newest RATE_WINDOW_S of time the fleet answered, from the results' times
    (`finished`, newest first, none before `since`, the start of the stretch) at time `t`.

    While a fleet answers, a result follows the one before within about one request's time, so a gap longer
    than twice the 90th percentile of the requests' latencies (`latencies_ms`; at least OUTAGE_GAP_MIN_S) is
    time it did not answer: it counts as that bound, not as its length. Before, an outage of 5 minutes left 3
    results in the last minute once the fleet was back, and an ETA of "39m00s" for a 2-minute job."""
    if not finished:
        return 0.0
    slow = sorted(latencies_ms)[int(0.9 * (len(latencies_ms) - 1))] / 1000.0 if latencies_ms else 0.0
    cap = max(OUTAGE_GAP_MIN_S, 2.0 * slow)
    answered = min(max(0.0, t - finished[0]), cap)  # since the newest result
    n = 0
    for i, at in enumerate(finished):
        if answered >= RATE_WINDOW_S:
            break
        n += 1
        older = finished[i + 1] if i + 1 < len(finished) else since
        answered += min(max(0.0, at - older), cap)
    return n / max(1.0, answered)


def failures(db: sqlite_utils.Database, job_id: int, limit: int = 100) -> list[dict]:
    return [
        dict(r)
        for r in db.query(
            "SELECT i.clip_id, c.path, i.attempts, i.error_kind, i.last_error, i.raw_answer, i.finished_at "
            "FROM job_items i "
            "JOIN clips c ON c.id = i.clip_id WHERE i.job_id = ? AND i.state = 'failed' "
            "ORDER BY i.finished_at DESC LIMIT ?",
            [job_id, limit],
        )
    ]


def replica_load(db: sqlite_utils.Database, job_id: int) -> list[dict]:
    """Done items and mean latency per replica, for the per-replica view."""
    return [
        dict(r)
        for r in db.query(
            f"SELECT replica, COUNT(*) AS done, AVG(latency_ms) AS mean_latency_ms FROM job_items {BY_REPLICA} "
            "WHERE job_id = ? AND state = 'done' GROUP BY replica ORDER BY replica",
            [job_id],
        )
    ]


def work_per_clip(db: sqlite_utils.Database, job_id: int) -> list[dict]:
    """What each clip the job captioned asked of the model, for its FLOPs (serving.flops): prompt and output
    tokens, frames and pixel budget (the caption's params; rows written before the budget existed ran at the
    recipe's), the clip's size, when the caption was written and its request's latency (seconds, None where not
    recorded). Captions without token counts are left out."""
    rows = []
    for r in db.query(
        "SELECT c.prompt_tokens, c.completion_tokens, c.frames, c.params, c.created_at, c.latency_ms, "
        "k.width, k.height "
        "FROM captions c JOIN job_items i ON i.caption_id = c.id JOIN clips k ON k.id = c.clip_id "
        "WHERE i.job_id = ? AND c.prompt_tokens IS NOT NULL AND c.completion_tokens IS NOT NULL "
        "ORDER BY c.created_at",
        [job_id],
    ):
        params = JobParams.from_dict(json.loads(r["params"]) if r["params"] else None)
        rows.append(
            {
                "prompt_tokens": r["prompt_tokens"],
                "completion_tokens": r["completion_tokens"],
                "frames": r["frames"] or params.frames,
                "max_pixels": params.max_pixels,
                "width": r["width"],
                "height": r["height"],
                "created_at": r["created_at"],
                "latency_s": r["latency_ms"] / 1000 if r["latency_ms"] is not None else None,
            }
        )
    return rows
