"""A job made and its state changed: `create` (and `create_once`, which makes a repeated start one job;
`create_recaption`, one clip again), `change_state` (pause, resume, cancel), `move_to_fleet`, `retry_failed`, and
`fleet_of`, the fleet a job is for. The guarantees these keep are the jobs wing's (data/jobs/__init__.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable
from urllib.parse import urlsplit

import sqlite_utils

from data import events, limits
from data.db import immediate, now
from data.errors import DataError, NotFound
from data.job_params import JobParams
from data.jobs.items import STOP_RUNNING, finish_if_drained
from data.jobs.queries import get
from data.jobs.selection import Selection

DEDUPE_S = 30.0  # a second start of the same job within this window is the same job (double clicks)


def _fleet_url(url: str) -> str:
    u = urlsplit(url if "://" in url else "http://" + url)
    scheme, host = u.scheme.lower(), (u.hostname or "").lower()
    try:
        port = u.port or (443 if scheme == "https" else 80)
    except ValueError:
        return url.strip().rstrip("/")
    host = "127.0.0.1" if host == "localhost" else host
    path = u.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}{path}"


def fleet_of(urls: Iterable[str] | str | None) -> str | None:
    """The fleet a job is for, as it is recorded and compared: its URLs (a list or one comma-separated string)
    with scheme and host in lower case, `localhost` as 127.0.0.1, the port spelled out, no trailing `/` or `/v1`,
    sorted and comma-separated; None for no URLs. Two spellings of one router compare equal."""
    items = urls.split(",") if isinstance(urls, str) else list(urls or ())
    found = sorted({_fleet_url(u) for u in (str(i).strip() for i in items) if u})
    return ",".join(found) or None


def create(
    db: sqlite_utils.Database,
    *,
    name: str,
    created_by: str,
    selection: Selection,
    prompt_id: int | None,
    params: JobParams,
    fleet: str | None = None,
) -> int:
    """Create a queued job over the clips `selection` names (duplicates ignored), never deduplicated (see
    `create_once`). Returns the job id."""
    return create_once(
        db,
        name=name,
        created_by=created_by,
        selection=selection,
        prompt_id=prompt_id,
        params=params,
        fleet=fleet,
        dedupe_s=0.0,
    )[0]


def create_once(
    db: sqlite_utils.Database,
    *,
    name: str,
    created_by: str,
    selection: Selection,
    prompt_id: int | None,
    params: JobParams,
    fleet: str | None = None,
    dedupe_s: float = DEDUPE_S,
) -> tuple[int, bool]:
    """(job id, created): like `create`, but an identical start (same user, name, prompt, params, selection and
    fleet) of a job still queued or running, made less than `dedupe_s` ago, returns that job instead of a second
    one. The check, the selection's clips and the insert are one IMMEDIATE transaction, so concurrent clicks
    cannot both pass it. The job row records `params.to_dict()`, `selection.to_dict()` and `fleet` (`fleet_of`'s
    form: the runners of that fleet take it; None: any runner)."""
    fleet = fleet_of(fleet)
    name = (
        limits.check_text((limits.plain_text(name) or "").strip(), limits.MAX_JOB_NAME_CHARS, "The job name")
        or "captioning job"
    )
    t = now()
    sel_json = json.dumps(selection.to_dict(), sort_keys=True)
    params_json = json.dumps(params.to_dict(), sort_keys=True)
    with immediate(db):
        if dedupe_s > 0:
            same = next(
                db.query(
                    "SELECT id FROM jobs WHERE created_by = ? AND name = ? AND prompt_id IS ? AND params = ? "
                    "AND selection = ? AND fleet IS ? AND state IN ('queued', 'running') AND created_at >= ? "
                    "ORDER BY id DESC LIMIT 1",
                    [created_by, name, prompt_id, params_json, sel_json, fleet, t - dedupe_s],
                ),
                None,
            )
            if same:
                return same["id"], False
        job_id = db.execute(
            "INSERT INTO jobs (name, created_by, selection, prompt_id, params, fleet, state, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
            [name, created_by, sel_json, prompt_id, params_json, fleet, t, t],
        ).lastrowid
        db.conn.executemany(
            "INSERT OR IGNORE INTO job_items (job_id, clip_id, updated_at) VALUES (?, ?, ?)",
            ((job_id, c, t) for c in selection.clip_ids_in(db)),
        )
        total = db.execute("SELECT COUNT(*) FROM job_items WHERE job_id = ?", [job_id]).fetchone()[0]
        if total == 0:
            raise DataError("No clips match this selection: nothing to caption.")
        db.execute("UPDATE jobs SET total = ? WHERE id = ?", [total, job_id])
        events.record(db, created_by, "job.create", job_id=job_id, total=total, name=name, fleet=fleet)
    return job_id, True


def create_recaption(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    user: str,
    role: str,
    quota: int,
    prompt_id: int | None,
    params: JobParams,
    fleet: str | None = None,
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
            selection=Selection.of_clips([clip_id], origin="re-caption"),
            prompt_id=prompt_id,
            params=params,
            fleet=fleet,
        )


_TRANSITIONS = {
    "pause": (("queued", "running"), "paused"),
    "resume": (("paused", "cancelled", "done", "failed"), "queued"),
    "cancel": (("queued", "running", "paused"), "cancelled"),
}
DONE_TO = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}  # "it cannot be cancelled"


def change_state(db: sqlite_utils.Database, job_id: int, action: str, user: str) -> dict:
    """pause / resume / cancel a job. Resuming a done job re-queues whatever is not done."""
    if action not in _TRANSITIONS:
        raise DataError(f"unknown job action {action!r}")
    allowed, target = _TRANSITIONS[action]
    with immediate(db):
        job = get(db, job_id)
        if job["state"] not in allowed:
            raise DataError(f"Job {job_id} is {job['state']}: it cannot be {DONE_TO[action]}.")
        t = now()
        db.execute(
            "UPDATE jobs SET state = ?, updated_at = ?, finished_at = CASE WHEN ? = 'cancelled' "
            f"THEN ? ELSE NULL END, {STOP_RUNNING} WHERE id = ?",
            [target, t, target, t, t, job_id],
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
            finish_if_drained(db, job_id)  # resuming a job with nothing left makes it done, not running forever
    return get(db, job_id)


def move_to_fleet(db: sqlite_utils.Database, job_id: int, fleet: str | None, user: str) -> dict:
    """Make job `job_id` one of `fleet` (`fleet_of`'s form; None: any runner's), as a lead who names another
    fleet for it asks (`serving.caption --resume N --fleet-urls ...`). The runners of its old fleet take nothing
    more of it; what they have in flight is still written. Said in the events."""
    fleet = fleet_of(fleet)
    with immediate(db):
        job = get(db, job_id)
        if job.get("fleet") != fleet:
            db.execute("UPDATE jobs SET fleet = ?, updated_at = ? WHERE id = ?", [fleet, now(), job_id])
            events.record(db, user, "job.fleet", job_id=job_id, previous=job.get("fleet"), fleet=fleet)
    return get(db, job_id)


# Failures that the same job sending the clip again cannot cure, by why (retry_failed leaves them failed):
# - clip: the fleet refused the clip as sent (HTTP 400/422, undecodable video, a path outside the clip root);
# - answer: the model's answer to this prompt with these limits was unusable, or could not be checked in time
#   (same prompt, same limits, same answer: a new job with more max tokens or another prompt version is what helps).
# Two more reasons are read from the clip as it is now: it failed ingest (until it is ingested again and
# probes fine) or its file is missing from the clip root.
FINAL_KINDS = {
    "clip": ("rejected", "bad_request", "decode", "path"),
    "answer": (
        "bad_answer",
        "truncated",
        "unfinished",
        "invalid_json",
        "schema",
        "store",
        "check_timeout",  # its check ran past the budget (serving.answer_check): the same answer would again
        "unreadable",
        "prompt",  # the prompt version's schema cannot be checked in bounded time (data.taxonomy.COSTLY_CHECKS)
    ),
}
_WHY_FINAL = (
    "CASE WHEN c.probe_error IS NOT NULL THEN 'ingest' WHEN c.missing = 1 THEN 'missing' "
    + "".join(
        f"WHEN i.error_kind IN ({', '.join(repr(k) for k in kinds)}) THEN '{why}' "
        for why, kinds in FINAL_KINDS.items()
    )
    + "END"
)


@dataclasses.dataclass(frozen=True)
class Retried:
    """What `retry_failed` did: `requeued` failed items went back to pending; `left` counts those that stay
    failed because a retry cannot help, by why: "ingest", "missing", "clip", "answer" (FINAL_KINDS)."""

    requeued: int
    left: dict[str, int]


def retry_failed(db: sqlite_utils.Database, job_id: int, user: str) -> Retried:
    """Put the failed items that can succeed on a retry back to pending (attempts reset) and re-queue the job:
    those the fleet failed (unreachable, overloaded, 5xx, timeouts, its configuration), and ingest failures
    whose clip has since been ingested again and probes fine. The others stay failed, counted by why."""
    with immediate(db):
        job = get(db, job_id)
        t = now()
        n = db.execute(
            "UPDATE job_items SET state = 'pending', attempts = 0, not_before = NULL, "
            "lease_until = NULL, leased_by = NULL, updated_at = ? WHERE job_id = ? AND state = 'failed' "
            "AND clip_id IN (SELECT i.clip_id FROM job_items i JOIN clips c ON c.id = i.clip_id "
            f"WHERE i.job_id = ? AND i.state = 'failed' AND ({_WHY_FINAL}) IS NULL)",
            [t, job_id, job_id],
        ).rowcount
        if n:
            db.execute(
                "UPDATE jobs SET failed = failed - ?, state = CASE WHEN state IN ('done', 'failed', 'cancelled') "
                "THEN 'queued' ELSE state END, finished_at = NULL, updated_at = ? WHERE id = ?",
                [n, t, job_id],
            )
        left = {
            r["why"]: r["n"]
            for r in db.query(
                f"SELECT {_WHY_FINAL} AS why, COUNT(*) AS n FROM job_items i JOIN clips c ON c.id = i.clip_id "
                "WHERE i.job_id = ? AND i.state = 'failed' GROUP BY 1",
                [job_id],
            )
        }
        events.record(db, user, "job.retry_failed", job_id=job_id, items=n, left=left, previous=job["state"])
    return Retried(n, left)
