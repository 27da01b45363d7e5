"""The items of a job as runners work them: leases (`claim`), outcomes (`complete`, `fail`), hand-backs
(`release`, `recover`), and the job's end once nothing is left to do. The guarantees these keep are listed in
data.jobs (the package's docstring)."""

from __future__ import annotations

import os
import socket
from typing import Iterable

import sqlite_utils

from data import captions, events
from data.db import immediate, now
from data.errors import NotFound
from data.jobs.queries import ACTIVE, get

# the SET clause that ends a job's stretch in state running (one parameter: the time it ends); jobs.run_seconds
# then holds how long the job has run in all, which its clips/s is computed over (data.jobs.queries.progress)
STOP_RUNNING = (
    "run_seconds = run_seconds + CASE WHEN running_since IS NULL THEN 0 ELSE MAX(0, ? - running_since) END, "
    "running_since = NULL"
)
# a job's items by state (schema m025), named in every hot read of them: with no statistics the planner takes the
# primary key (job_id, clip_id) instead and reads every item of the job, the done ones first
# (benchmarks/bench_leases.py)
BY_STATE = "INDEXED BY idx_job_items_job_id_state_attempts"


def runner_identity() -> str:
    """How a runner names itself in `leased_by`: host, pid and a start stamp (pids get reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{int(now() * 1000)}"


def recover(db: sqlite_utils.Database, *, alive: "callable[[str], bool] | None" = None) -> int:
    """Release leases held by runners on this host whose process is gone (after a crash or SIGKILL).

    The attempt is given back: a runner's death is neither the clip's fault nor the fleet's. Counting it would
    let attempts pass the limit (a recovered item is claimed again with attempts + 1) or, with the limit
    enforced, fail clips after enough kills (R3). Returns how many items were released.
    """
    host = socket.gethostname()

    def default_alive(holder: str) -> bool:
        parts = holder.split(":")
        if len(parts) < 2 or parts[0] != host:
            return True  # another host's runner: leave it to lease expiry
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, ValueError):
            return True
        return True

    check = alive or default_alive
    with immediate(db):
        holders = [
            r["leased_by"]
            for r in db.query(
                "SELECT DISTINCT leased_by FROM job_items WHERE state = 'leased' AND leased_by IS NOT NULL"
            )
        ]
        dead = [h for h in holders if not check(h)]
        n = 0
        for h in dead:
            n += db.execute(
                "UPDATE job_items SET state = 'pending', lease_until = NULL, leased_by = NULL, "
                "attempts = MAX(attempts - 1, 0), updated_at = ? WHERE state = 'leased' AND leased_by = ?",
                [now(), h],
            ).rowcount
        if n:
            events.record(db, "runner", "job.recover", items=n, holders=dead)
    return n


def claim(
    db: sqlite_utils.Database,
    job_id: int,
    runner: str,
    limit: int,
    *,
    lease_seconds: float,
    max_attempts: int,
    bound: int | None = None,
    fleet: str | None = None,
) -> list[dict]:
    """Lease up to `limit` items of a running job for `runner`; returns them with their clip's path.

    Takes pending items whose backoff has passed and leases that expired. Items that already used
    `max_attempts` fail instead of being sent again. Marks a queued job running.

    `bound`: the requests this runner's replicas may hold at once (its in-flight bound), kept by every runner of
    `fleet` together: the live leases of jobs of that fleet (and of jobs that name none) are requests in flight
    on the same replicas, so a claim takes only what all runners' leases leave of the bound, and no more than an
    even share of it while others hold some. A runner that holds none may take one even on a full bound, so
    that a second runner gets in and stays in (the first cannot keep the whole bound): the replicas then hold at
    most the bound plus one per extra runner. Counted here, where claims are serialized. (96 requests in flight
    killed a replica on an H200 that 48 did not: docs/gpu-runs/2026-12-03-h200.)
    """
    t = now()
    with immediate(db):
        job = get(db, job_id)
        if job["state"] not in ACTIVE:
            return []
        if job["state"] == "queued":
            db.execute(
                "UPDATE jobs SET state = 'running', started_at = COALESCE(started_at, ?), running_since = ?, "
                "updated_at = ? WHERE id = ?",
                [t, t, t, job_id],
            )
        # leases that ran out after the last allowed attempt: fail them, never re-send
        exhausted = db.execute(
            f"UPDATE job_items {BY_STATE} SET state = 'failed', error_kind = 'timeout', lease_until = NULL, "
            "leased_by = NULL, "
            "last_error = COALESCE(last_error || '; ', '') || 'no result within the lease after ' || attempts || "
            "' attempts', finished_at = ?, updated_at = ? "
            "WHERE job_id = ? AND state = 'leased' AND lease_until < ? AND attempts >= ?",
            [t, t, job_id, t, max_attempts],
        ).rowcount
        # pending items that already used every attempt (released by `recover` after a runner was killed
        # mid-request): fail them too, so that attempts never exceed the limit
        exhausted += db.execute(
            f"UPDATE job_items {BY_STATE} SET state = 'failed', lease_until = NULL, leased_by = NULL, "
            "last_error = COALESCE(last_error || '; ', '') || 'gave up after ' || attempts || ' attempts', "
            "error_kind = COALESCE(error_kind, 'timeout'), finished_at = ?, updated_at = ? "
            "WHERE job_id = ? AND state = 'pending' AND attempts >= ?",
            [t, t, job_id, max_attempts],
        ).rowcount
        if exhausted:
            db.execute("UPDATE jobs SET failed = failed + ?, updated_at = ? WHERE id = ?", [exhausted, t, job_id])
            finish_if_drained(db, job_id)
        if bound is not None:
            mine, others, holders = leases_on_fleet(db, runner, fleet, t)
            if others:  # alone, a runner's own count of its requests (not yet written leases too) is the bound
                share = -(-bound // (1 + holders))  # an even share, rounded up
                # one request when it holds none, even on a full bound: its lease makes it a holder, so the others
                # leave it a share as their requests end (the bound is passed by at most one per extra runner)
                limit = min(limit, max(bound - mine - others, 0 if mine else 1), share - mine)
                if limit <= 0:
                    return []
        # what is due, each by an index seek: leases that ran out, then retries whose backoff has passed (a clip a
        # hung replica held goes out again at once, RELIABILITY R8), then never-tried items in clip order
        rows: list[dict] = []
        for which, args in (
            ("i.state = 'leased' AND i.lease_until < ?", [t]),
            ("i.state = 'pending' AND i.attempts > 0 AND (i.not_before IS NULL OR i.not_before <= ?)", [t]),
            ("i.state = 'pending' AND i.attempts = 0 AND (i.not_before IS NULL OR i.not_before <= ?)", [t]),
        ):
            if len(rows) >= limit:
                break
            rows += [
                dict(r)
                for r in db.query(
                    "SELECT i.clip_id, i.attempts, c.path, c.probe_error, c.width, c.height, c.frames, c.duration, "
                    f"c.sidecar FROM job_items i {BY_STATE} JOIN clips c ON c.id = i.clip_id "
                    f"WHERE i.job_id = ? AND {which} LIMIT ?",
                    [job_id, *args, limit - len(rows)],
                )
            ]
        if rows:
            db.conn.executemany(
                "UPDATE job_items SET state = 'leased', leased_by = ?, lease_until = ?, attempts = attempts + 1, "
                "updated_at = ? WHERE job_id = ? AND clip_id = ?",
                [(runner, t + lease_seconds, t, job_id, r["clip_id"]) for r in rows],
            )
        for r in rows:
            r["job_id"] = job_id
            r["attempts"] += 1
        if not rows:
            finish_if_drained(db, job_id)
    return rows


def leases_on_fleet(db: sqlite_utils.Database, runner: str, fleet: str | None, t: float) -> tuple[int, int, int]:
    """(items `runner` holds, items other runners hold, how many other runners hold any) under a lease still
    running at `t`, on jobs of `fleet` and jobs that name none (every job when `fleet` is None): the requests in
    flight on the fleet's replicas. A paused job's count too: what was sent still runs there."""
    # only a queued or running job holds leases (pausing or cancelling hands them back): its items by state, a
    # seek per such job, never a scan of every item of every job (46-60 ms a claim at 1,100,000 items before)
    row = db.execute(
        "SELECT COALESCE(SUM(i.leased_by = ?), 0), COALESCE(SUM(i.leased_by != ?), 0), "
        "COUNT(DISTINCT CASE WHEN i.leased_by != ? THEN i.leased_by END) "
        f"FROM job_items i {BY_STATE} "
        "WHERE i.job_id IN (SELECT id FROM jobs WHERE state IN ('queued', 'running', 'paused') "
        "AND (? IS NULL OR fleet IS NULL OR fleet = ?)) AND i.state = 'leased' AND i.lease_until >= ?",
        [runner, runner, runner, fleet, fleet, t],
    ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def complete(
    db: sqlite_utils.Database,
    job_id: int,
    clip_id: int,
    *,
    text: str,
    labels: dict,
    provenance: dict,
    author: str = "model",
) -> dict | None:
    """Record a caption result for an item, once. Returns the caption version row, or None when the job was
    paused or cancelled meanwhile (the result is discarded: no caption appears after a cancel)."""
    t = now()
    with immediate(db):
        item = next(
            db.query(
                "SELECT i.state, j.state AS job_state FROM job_items i JOIN jobs j ON j.id = i.job_id "
                "WHERE i.job_id = ? AND i.clip_id = ?",
                [job_id, clip_id],
            ),
            None,
        )
        if item is None:
            raise NotFound(f"clip {clip_id} is not part of job {job_id}")
        if item["job_state"] not in ACTIVE and item["state"] != "done":
            return None
        row, _ = captions.add_machine(
            db, clip_id, job_id=job_id, text=text, labels=labels, provenance=provenance, author=author
        )
        if item["state"] != "done":
            db.execute(
                "UPDATE job_items SET state = 'done', caption_id = ?, replica = ?, latency_ms = ?, "
                "lease_until = NULL, last_error = NULL, error_kind = NULL, finished_at = ?, updated_at = ? "
                "WHERE job_id = ? AND clip_id = ?",
                [row["id"], provenance.get("replica"), provenance.get("latency_ms"), t, t, job_id, clip_id],
            )
            was_failed = 1 if item["state"] == "failed" else 0
            db.execute(
                "UPDATE jobs SET done = done + 1, failed = failed - ?, updated_at = ? WHERE id = ?",
                [was_failed, t, job_id],
            )
            finish_if_drained(db, job_id)
    return row


def fail(
    db: sqlite_utils.Database,
    job_id: int,
    clip_id: int,
    *,
    error: str,
    kind: str,
    retryable: bool,
    max_attempts: int,
    backoff_seconds: float = 0.0,
    refund_attempt: bool = False,
    raw_answer: str | None = None,
) -> str:
    """Record a failed attempt. Retryable errors go back to pending after `backoff_seconds` until
    `max_attempts` sends were made; others fail the item at once. Returns the item's new state
    (a report for a paused or cancelled job changes nothing: its item was handed back already).
    `refund_attempt` (retryable only): the attempt does not count, e.g. while the whole fleet is down.
    `raw_answer`: the start of an unusable model answer, kept on the item for the lead (bounded by the caller)."""
    t = now()
    with immediate(db):
        item = next(
            db.query(
                "SELECT i.state, i.attempts, j.state AS job_state FROM job_items i "
                "JOIN jobs j ON j.id = i.job_id WHERE i.job_id = ? AND i.clip_id = ?",
                [job_id, clip_id],
            ),
            None,
        )
        if item is None:
            raise NotFound(f"clip {clip_id} is not part of job {job_id}")
        if item["state"] in ("done", "failed"):
            return item["state"]  # a late duplicate report: the first outcome stands
        if item["job_state"] not in ACTIVE and item["state"] != "leased":
            return item["state"]
        refund = 1 if retryable and refund_attempt and item["attempts"] > 0 else 0
        if retryable and item["attempts"] - refund < max_attempts:
            db.execute(
                "UPDATE job_items SET state = 'pending', lease_until = NULL, leased_by = NULL, "
                "not_before = ?, last_error = ?, error_kind = ?, attempts = attempts - ?, updated_at = ? "
                "WHERE job_id = ? AND clip_id = ?",
                [t + backoff_seconds, error, kind, refund, t, job_id, clip_id],
            )
            return "pending"
        if retryable:
            error = f"{error} (gave up after {item['attempts']} attempts)"
        db.execute(
            "UPDATE job_items SET state = 'failed', lease_until = NULL, leased_by = NULL, last_error = ?, "
            "error_kind = ?, raw_answer = ?, finished_at = ?, updated_at = ? WHERE job_id = ? AND clip_id = ?",
            [error, kind, raw_answer, t, t, job_id, clip_id],
        )
        db.execute("UPDATE jobs SET failed = failed + 1, updated_at = ? WHERE id = ?", [t, job_id])
        finish_if_drained(db, job_id)
    return "failed"


def release(db: sqlite_utils.Database, job_id: int, clip_ids: Iterable[int], runner: str) -> int:
    """Hand leased items back unsent (clean shutdown): pending again, the attempt not counted."""
    ids = list(clip_ids)
    if not ids:
        return 0
    with immediate(db):
        return sum(
            db.execute(
                "UPDATE job_items SET state = 'pending', lease_until = NULL, leased_by = NULL, "
                "attempts = MAX(attempts - 1, 0), updated_at = ? "
                "WHERE job_id = ? AND clip_id = ? AND state = 'leased' AND leased_by = ?",
                [now(), job_id, c, runner],
            ).rowcount
            for c in ids
        )


def finish_if_drained(db: sqlite_utils.Database, job_id: int) -> None:
    """End a queued or running job with nothing left to do: "done", or "failed" when not one of its clips was
    captioned (a fleet that failed every request must not read "done · 100%")."""
    # EXISTS, not COUNT(*): counting the remaining items on every result makes each result cost O(items left)
    # (3.3 of 5.6 ms per result in a 20,000-clip job; benchmarks/bench_scale.py sqlite)
    left = db.execute(
        f"SELECT EXISTS (SELECT 1 FROM job_items {BY_STATE} WHERE job_id = ? AND state IN ('pending', 'leased'))",
        [job_id],
    ).fetchone()[0]
    if not left:
        t = now()
        db.execute(
            "UPDATE jobs SET state = CASE WHEN done = 0 AND failed > 0 THEN 'failed' ELSE 'done' END, "
            f"finished_at = ?, updated_at = ?, {STOP_RUNNING} WHERE id = ? AND state IN ('queued', 'running')",
            [t, t, t, job_id],
        )
