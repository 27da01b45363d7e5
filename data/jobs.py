"""Captioning jobs and their items: creation, leases, results, failures, state changes, progress.

A job is a row in `jobs` plus one `job_items` row per clip. The runner (serving.runner) claims items with a
lease inside `BEGIN IMMEDIATE`, sends them, and reports each outcome here. Guarantees (the
project's rule "a job survives anything": killing the runner at any point and restarting it loses no finished
caption, duplicates none and re-sends at most what was in flight; tested in tests/test_r3_runner_kill.py):
- `claim` counts an attempt per send; an item leased by a runner that died is handed out again only after
  `recover` (same host, dead pid) or lease expiry, so at most the in-flight items are re-sent.
- `complete` is idempotent on (job_id, clip_id): a repeated or late result changes nothing.
- Counters (`done`, `failed`) change in the same transaction as the item they count.
- pause / resume / cancel are states and they are final and true: pausing or cancelling hands every leased
  item back to pending at once (the attempt not counted), `claim` starts nothing for an inactive job, and a
  result that arrives for a paused or cancelled job is discarded (`complete` and `fail` return None), so the
  counts a lead sees are what was really captioned. The runner also aborts such requests (serving.runner).
- A job with nothing left to do is `done`, whichever way it got there (a last result, a resume, a claim).
- `create_once` makes a repeated start (a triple click) one job: the same user, prompt, params and selection
  within DEDUPE_S of an active job return that job.

Job states: queued -> running -> done; running|queued -> paused -> queued; any but done -> cancelled -> queued.
Item states: pending -> leased -> done | failed | pending (retry after `not_before`).
"""

from __future__ import annotations

import json
import math
import os
import socket
from typing import Any, Iterable

import sqlite_utils

from data import captions, events, limits
from data.db import DataError, NotFound, immediate, now

JOB_STATES = ("queued", "running", "paused", "cancelled", "done")
ACTIVE = ("queued", "running")
DEDUPE_S = 30.0  # a second start of the same job within this window is the same job (double clicks)


def runner_identity() -> str:
    """How a runner names itself in `leased_by`: host, pid and a start stamp (pids get reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{int(now() * 1000)}"


def create(
    db: sqlite_utils.Database,
    *,
    name: str,
    created_by: str,
    clip_ids: Iterable[int],
    prompt_id: int | None,
    params: dict[str, Any] | None = None,
    selection: dict[str, Any] | None = None,
) -> int:
    """Create a queued job over `clip_ids` (duplicates ignored). Returns the job id."""
    return create_once(
        db,
        name=name,
        created_by=created_by,
        clip_ids=clip_ids,
        prompt_id=prompt_id,
        params=params,
        selection=selection,
        dedupe_s=0.0,
    )[0]


def create_once(
    db: sqlite_utils.Database,
    *,
    name: str,
    created_by: str,
    clip_ids: Iterable[int],
    prompt_id: int | None,
    params: dict[str, Any] | None = None,
    selection: dict[str, Any] | None = None,
    dedupe_s: float = DEDUPE_S,
) -> tuple[int, bool]:
    """(job id, created): like `create`, but an identical start (same user, name, prompt, params and selection)
    of a job still queued or running, made less than `dedupe_s` ago, returns that job instead of a second one.
    The check and the insert are one IMMEDIATE transaction, so concurrent clicks cannot both pass it."""
    name = limits.check_text((name or "").strip(), limits.MAX_JOB_NAME_CHARS, "The job name") or "captioning job"
    t = now()
    sel_json, params_json = json.dumps(selection or {}, sort_keys=True), json.dumps(params or {}, sort_keys=True)
    with immediate(db):
        if dedupe_s > 0:
            same = next(
                db.query(
                    "SELECT id FROM jobs WHERE created_by = ? AND name = ? AND prompt_id IS ? AND params = ? "
                    "AND selection = ? AND state IN ('queued', 'running') AND created_at >= ? ORDER BY id DESC LIMIT 1",
                    [created_by, name, prompt_id, params_json, sel_json, t - dedupe_s],
                ),
                None,
            )
            if same:
                return same["id"], False
        job_id = db.execute(
            "INSERT INTO jobs (name, created_by, selection, prompt_id, params, state, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
            [name, created_by, sel_json, prompt_id, params_json, t, t],
        ).lastrowid
        db.conn.executemany(
            "INSERT OR IGNORE INTO job_items (job_id, clip_id, updated_at) VALUES (?, ?, ?)",
            ((job_id, int(c), t) for c in clip_ids),
        )
        total = db.execute("SELECT COUNT(*) FROM job_items WHERE job_id = ?", [job_id]).fetchone()[0]
        if total == 0:
            raise DataError("No clips match this selection: nothing to caption.")
        db.execute("UPDATE jobs SET total = ? WHERE id = ?", [total, job_id])
        events.record(db, created_by, "job.create", job_id=job_id, total=total, name=name)
    return job_id, True


def create_recaption(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    user: str,
    role: str,
    quota: int,
    prompt_id: int | None,
    params: dict[str, Any] | None = None,
    window: float = 3600.0,
) -> int:
    """A one-clip re-caption job, refused with a reason when it cannot help or would flood the job table:
    the clip failed ingest or is missing; a re-caption of it is already queued or running; or an annotator
    already started `quota` jobs in the last `window` seconds (leads and admins have no quota). The checks
    and the insert are one transaction, so parallel requests cannot slip past the quota."""
    clip_id = limits.sql_int(clip_id, "clip id")
    with immediate(db):
        clip = next(db.query("SELECT probe_error, missing FROM clips WHERE id = ?", [clip_id]), None)
        if clip is None:
            raise NotFound(f"clip {clip_id} does not exist")
        if clip["probe_error"]:
            raise DataError(
                f"Clip {clip_id} failed ingest ({clip['probe_error'][:200]}): the model cannot read it "
                "either. Replace or fix the file and ingest again."
            )
        if clip["missing"]:
            raise DataError(f"Clip {clip_id}'s file is missing from the clip root: nothing to caption.")
        queued = next(
            db.query(
                "SELECT j.id FROM jobs j JOIN job_items i ON i.job_id = j.id WHERE i.clip_id = ? "
                "AND j.state IN ('queued', 'running') AND i.state IN ('pending', 'leased') LIMIT 1",
                [clip_id],
            ),
            None,
        )
        if queued:
            raise DataError(f"Clip {clip_id} is already being captioned (job {queued['id']}): wait for its result.")
        if role == "annotator":
            recent = db.execute(
                "SELECT COUNT(*) FROM jobs WHERE created_by = ? AND created_at > ?", [user, now() - window]
            ).fetchone()[0]
            if recent >= quota:
                raise DataError(
                    f"You started {recent} jobs in the last hour; annotators may start {quota}. "
                    "Ask a lead to start a larger job, or try again later."
                )
        return create(
            db,
            name=f"re-caption clip {clip_id}",
            created_by=user,
            clip_ids=[clip_id],
            prompt_id=prompt_id,
            params=params,
            selection={"clip_ids": [clip_id], "reason": "re-caption"},
        )


def _decode(row: dict) -> dict:
    row = dict(row)
    for key in ("selection", "params"):
        if row.get(key):
            row[key] = json.loads(row[key])
    return row


def get(db: sqlite_utils.Database, job_id: int) -> dict:
    row = next(db.query("SELECT * FROM jobs WHERE id = ?", [job_id]), None)
    if row is None:
        raise NotFound(f"job {job_id} does not exist")
    return _decode(row)


def list_jobs(db: sqlite_utils.Database, limit: int = 50) -> list[dict]:
    return [_decode(r) for r in db.query("SELECT * FROM jobs ORDER BY id DESC LIMIT ?", [limit])]


def runnable(db: sqlite_utils.Database) -> list[dict]:
    """Jobs a runner should work on now, oldest first."""
    return [_decode(r) for r in db.query("SELECT * FROM jobs WHERE state IN ('queued', 'running') ORDER BY id")]


_TRANSITIONS = {
    "pause": (("queued", "running"), "paused"),
    "resume": (("paused", "cancelled", "done"), "queued"),
    "cancel": (("queued", "running", "paused"), "cancelled"),
}


def change_state(db: sqlite_utils.Database, job_id: int, action: str, user: str) -> dict:
    """pause / resume / cancel a job. Resuming a done job re-queues whatever is not done."""
    if action not in _TRANSITIONS:
        raise DataError(f"unknown job action {action!r}")
    allowed, target = _TRANSITIONS[action]
    with immediate(db):
        job = get(db, job_id)
        if job["state"] not in allowed:
            raise DataError(f"Job {job_id} is {job['state']}: it cannot be {action}d.")
        db.execute(
            "UPDATE jobs SET state = ?, updated_at = ?, finished_at = CASE WHEN ? = 'cancelled' "
            "THEN ? ELSE NULL END WHERE id = ?",
            [target, now(), target, now(), job_id],
        )
        released = 0
        if target in ("paused", "cancelled"):
            # nothing new starts and nothing in flight is counted: hand the leases back now (the runner
            # aborts those requests; a late answer is discarded by `complete`)
            released = db.execute(
                "UPDATE job_items SET state = 'pending', lease_until = NULL, leased_by = NULL, "
                "attempts = MAX(attempts - 1, 0), updated_at = ? WHERE job_id = ? AND state = 'leased'",
                [now(), job_id],
            ).rowcount
        events.record(db, user, f"job.{action}", job_id=job_id, previous=job["state"], released=released)
        if target == "queued":
            _finish_if_drained(db, job_id)  # resuming a job with nothing left makes it done, not running forever
    return get(db, job_id)


def states(db: sqlite_utils.Database, job_ids: Iterable[int]) -> dict[int, str]:
    """{job id: state} for the given jobs (the runner checks its in-flight jobs with this)."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return {}
    return {
        r["id"]: r["state"]
        for r in db.query(f"SELECT id, state FROM jobs WHERE id IN ({', '.join('?' * len(ids))})", ids)
    }


def retry_failed(db: sqlite_utils.Database, job_id: int, user: str) -> int:
    """Put failed items back to pending (attempts reset) and re-queue the job. Returns how many."""
    with immediate(db):
        job = get(db, job_id)
        n = db.execute(
            "UPDATE job_items SET state = 'pending', attempts = 0, not_before = NULL, "
            "lease_until = NULL, leased_by = NULL, updated_at = ? "
            "WHERE job_id = ? AND state = 'failed'",
            [now(), job_id],
        ).rowcount
        if n:
            db.execute(
                "UPDATE jobs SET failed = failed - ?, state = CASE WHEN state IN ('done', 'cancelled') "
                "THEN 'queued' ELSE state END, finished_at = NULL, updated_at = ? WHERE id = ?",
                [n, now(), job_id],
            )
        events.record(db, user, "job.retry_failed", job_id=job_id, items=n, previous=job["state"])
    return n


def recover(db: sqlite_utils.Database, *, alive: "callable[[str], bool] | None" = None) -> int:
    """Release leases held by runners on this host whose process is gone (after a crash or SIGKILL).

    The attempt is given back: a runner's death is neither the clip's fault nor the fleet's, and counting it
    let attempts pass the limit (recovered items were claimed again with attempts + 1) or, with the limit
    enforced, failed clips after enough kills (R3). Returns how many items were released.
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
    db: sqlite_utils.Database, job_id: int, runner: str, limit: int, *, lease_seconds: float, max_attempts: int
) -> list[dict]:
    """Lease up to `limit` items of a running job for `runner`; returns them with their clip's path.

    Takes pending items whose backoff has passed and leases that expired. Items that already used
    `max_attempts` fail instead of being sent again. Marks a queued job running.
    """
    t = now()
    with immediate(db):
        job = get(db, job_id)
        if job["state"] not in ACTIVE:
            return []
        if job["state"] == "queued":
            db.execute(
                "UPDATE jobs SET state = 'running', started_at = COALESCE(started_at, ?), updated_at = ? WHERE id = ?",
                [t, t, job_id],
            )
        # leases that ran out after the last allowed attempt: fail them, never re-send
        exhausted = db.execute(
            "UPDATE job_items SET state = 'failed', error_kind = 'timeout', lease_until = NULL, leased_by = NULL, "
            "last_error = COALESCE(last_error || '; ', '') || 'no result within the lease after ' || attempts || "
            "' attempts', finished_at = ?, updated_at = ? "
            "WHERE job_id = ? AND state = 'leased' AND lease_until < ? AND attempts >= ?",
            [t, t, job_id, t, max_attempts],
        ).rowcount
        # pending items that already used every attempt (released by `recover` after a runner was killed
        # mid-request): fail them too, so that attempts never exceed the limit
        exhausted += db.execute(
            "UPDATE job_items SET state = 'failed', lease_until = NULL, leased_by = NULL, "
            "last_error = COALESCE(last_error || '; ', '') || 'gave up after ' || attempts || ' attempts', "
            "error_kind = COALESCE(error_kind, 'timeout'), finished_at = ?, updated_at = ? "
            "WHERE job_id = ? AND state = 'pending' AND attempts >= ?",
            [t, t, job_id, max_attempts],
        ).rowcount
        if exhausted:
            db.execute("UPDATE jobs SET failed = failed + ?, updated_at = ? WHERE id = ?", [exhausted, t, job_id])
            _finish_if_drained(db, job_id)
        rows = [
            dict(r)
            for r in db.query(
                "SELECT i.clip_id, i.attempts, c.path, c.probe_error, c.width, c.height, c.frames, c.duration, "
                "c.sidecar "
                "FROM job_items i JOIN clips c ON c.id = i.clip_id "
                "WHERE i.job_id = ? AND ((i.state = 'pending' AND (i.not_before IS NULL OR i.not_before <= ?)) "
                "OR (i.state = 'leased' AND i.lease_until < ?)) LIMIT ?",
                [job_id, t, t, limit],
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
            _finish_if_drained(db, job_id)
    return rows


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
            _finish_if_drained(db, job_id)
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
        _finish_if_drained(db, job_id)
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


def _finish_if_drained(db: sqlite_utils.Database, job_id: int) -> None:
    # EXISTS, not COUNT(*): counting the remaining items on every result made each result cost O(items left)
    # (3.3 of 5.6 ms per result in a 20,000-clip job; benchmarks/bench_scale.py sqlite)
    left = db.execute(
        "SELECT EXISTS (SELECT 1 FROM job_items WHERE job_id = ? AND state IN ('pending', 'leased'))", [job_id]
    ).fetchone()[0]
    if not left:
        db.execute(
            "UPDATE jobs SET state = 'done', finished_at = ?, updated_at = ? "
            "WHERE id = ? AND state IN ('queued', 'running')",
            [now(), now(), job_id],
        )


def counts(db: sqlite_utils.Database, job_id: int) -> dict[str, int]:
    """Items per state, straight from job_items (the counters on `jobs` are the fast copy)."""
    out = {s: 0 for s in ("pending", "leased", "done", "failed")}
    for r in db.query("SELECT state, COUNT(*) AS n FROM job_items WHERE job_id = ? GROUP BY state", [job_id]):
        out[r["state"]] = r["n"]
    return out


def progress(
    db: sqlite_utils.Database, job_id: int, *, bucket_seconds: float | None = None, max_points: int = 300
) -> dict:
    """What the UI and CLI show: counts, throughput (clips/s over the last minute), ETA, and a throughput
    series with one point per bucket from the job's start to its end (or now), empty buckets as 0 so that a
    stall shows as a drop, not as a line drawn across it. Buckets are 10 s, coarser for long jobs so that the
    series stays under `max_points`."""
    job = get(db, job_id)
    c = counts(db, job_id)
    t = now()
    recent = db.execute(
        "SELECT COUNT(*) FROM job_items WHERE job_id = ? AND finished_at >= ?", [job_id, t - 60]
    ).fetchone()[0]
    window = min(60.0, max(1.0, t - (job["started_at"] or t)))
    rate = recent / window
    remaining = c["pending"] + c["leased"]
    series: list[dict] = []
    if job["started_at"]:
        end = job["finished_at"] or t
        b = bucket_seconds or max(10.0, 10.0 * math.ceil((end - job["started_at"]) / max_points / 10.0))
        got = {
            r["k"]: r["n"]
            for r in db.query(
                "SELECT CAST(finished_at / ? AS INTEGER) AS k, COUNT(*) AS n FROM job_items "
                "WHERE job_id = ? AND finished_at IS NOT NULL GROUP BY 1",
                [b, job_id],
            )
        }
        first, last = int(job["started_at"] // b), int(end // b)
        if got:
            first, last = min(first, min(got)), max(last, max(got))
        series = [{"t": k * b, "n": got.get(k, 0), "clips_per_s": got.get(k, 0) / b} for k in range(first, last + 1)]
    return {
        **job,
        "counts": c,
        "rate": rate,
        "remaining": remaining,
        "eta_seconds": remaining / rate if rate > 0 and job["state"] in ACTIVE else None,
        "series": series,
    }


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
            "SELECT replica, COUNT(*) AS done, AVG(latency_ms) AS mean_latency_ms FROM job_items "
            "WHERE job_id = ? AND state = 'done' GROUP BY replica ORDER BY replica",
            [job_id],
        )
    ]


def heartbeat(db: sqlite_utils.Database, name: str, kind: str, info: dict | None = None) -> None:
    with immediate(db):
        db.execute(
            "INSERT INTO heartbeats (name, kind, pid, at, info) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET pid = excluded.pid, at = excluded.at, info = excluded.info",
            [name, kind, os.getpid(), now(), json.dumps(info or {}, default=str)],
        )


def heartbeats(db: sqlite_utils.Database, kind: str | None = None) -> list[dict]:
    sql, args = "SELECT * FROM heartbeats", []
    if kind:
        sql, args = sql + " WHERE kind = ?", [kind]
    rows = [dict(r) for r in db.query(sql + " ORDER BY at DESC", args)]
    for r in rows:
        r["info"] = json.loads(r["info"]) if r.get("info") else {}
        r["age_s"] = now() - r["at"]
    return rows
