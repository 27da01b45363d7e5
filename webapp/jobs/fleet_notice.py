"""What the Jobs tab says about the fleet, read from the runners' heartbeats (the runner reports the fleet's
state with each one: serving.runner.replicas `report`); the app never asks the fleet for this itself.

- `waiting`: for a queued or running job while its runner finds every replica failing: "Waiting for the fleet:
  0 of 4 healthy (HTTP 503: ...)", for how long, what the runner does meanwhile, each replica's latest failure.
- `start_warning`: what a lead should know when starting a job: no runner, none for its fleet, or no healthy
  replica.
- `no_runner`: for a job made for a fleet no running runner sends to, what to run.
- `summary`: the fleet in a few words, beside the runner's line.
"""

from __future__ import annotations

import time

from webapp.jobs import render as render_jobs

RUNNER_STALE_S = 15.0  # a heartbeat older than this is a runner that is not running
LOOK_STALE_S = 60.0  # a look at /health older than this says nothing about now
SHOWN_REPLICAS = 8  # replicas listed under a notice (the rest are counted)


def _fresh(beats: list[dict]) -> list[dict]:
    return [b for b in beats if b["age_s"] < RUNNER_STALE_S]


ANY = object()  # `fleet=ANY`: a runner of whatever fleet


def _serves(info: dict, job_id: int | None, fleet) -> bool:
    """The runner whose heartbeat says `info` works on job `job_id` (any job when None) of `fleet` (a job's
    recorded fleet: it takes only jobs of the fleet it sends to, and jobs that name none)."""
    jobs = info.get("jobs")
    if job_id is not None and jobs is not None and int(job_id) not in jobs:
        return False
    return fleet is ANY or fleet is None or "sends_to" not in info or info["sends_to"] == fleet


def report_for(beats: list[dict], job_id: int | None = None, fleet=ANY) -> dict | None:
    """The fleet report of the freshest running runner that works on `job_id` (any runner when None) of the
    fleet `fleet` (a job's recorded fleet; ANY: whichever)."""
    for b in _fresh(beats):
        info = b.get("info") or {}
        if isinstance(info.get("fleet"), dict) and _serves(info, job_id, fleet):
            return info["fleet"]
    return None


def no_runner(beats: list[dict], job: dict, settings) -> str:
    """For an active job that no running runner takes because none sends to the fleet it was made for (a job
    made from a terminal with `--fleet-urls`, whose command stopped): the notice saying so, and how to run it
    there or move it here; "" otherwise (no runner at all is the runner line's to say)."""
    fresh = [b.get("info") or {} for b in _fresh(beats)]
    fleet = job.get("fleet")
    if not fresh or fleet is None or any(_serves(info, job["id"], fleet) for info in fresh):
        return ""
    here = next((info["sends_to"] for info in fresh if info.get("sends_to")), None)
    run_there = f"python -m serving.caption --data-dir {settings.data_dir} --resume {job['id']} --fleet-urls {fleet}"
    move = f"; or move it to the fleet the runner here sends to: the same with --fleet-urls {here}" if here else ""
    return render_jobs.no_runner(fleet, here, run_there, move)


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _look(report: dict, now: float) -> dict | None:
    look = report.get("look")
    if not isinstance(look, dict) or look.get("at") is None or now - look["at"] > LOOK_STALE_S:
        return None
    return look


def healthy_text(report: dict, now: float | None = None) -> str:
    """ "0 of 4 healthy" from the runner's latest look at /health (a router's replicas counted, not the router),
    or, without a recent look, "0 of 2 answering" from its requests ("the router answers (4 replicas behind it)"
    when it sends to one router)."""
    now = time.time() if now is None else now
    look = _look(report, now)
    if look is not None:
        return f"{look.get('healthy', 0)} of {look.get('total', look.get('looked', 0))} healthy"
    reps = report.get("replicas") or []
    behind = report.get("behind")
    if isinstance(behind, int) and behind > 1 and len(reps) == 1:
        answers = "answers" if reps[0].get("ok") else "does not answer"
        return f"the router {answers} ({behind} replicas behind it)"
    return f"{sum(1 for r in reps if r.get('ok'))} of {report.get('total', len(reps))} answering"


def _cause(report: dict, now: float | None = None) -> str:
    """The latest failure's status and message (the most recent over the replicas); before any request failed,
    what the look at /health found."""
    errors = [r["last_error"] for r in report.get("replicas") or [] if isinstance(r.get("last_error"), dict)]
    if not errors:
        look = _look(report, time.time() if now is None else now) or {}
        return next((str(r["error"])[:200] for r in look.get("replicas") or [] if r.get("error")), "")
    latest = max(errors, key=lambda e: e.get("at") or 0)
    msg = str(latest.get("message") or latest.get("kind") or "failed")
    status = latest.get("status")
    if status and f"HTTP {status}" not in msg:
        msg = f"HTTP {status}: {msg}"
    return msg[:200]


def failing_cause(report: dict | None) -> str:
    """While the runner finds the fleet failing or down: its latest failure in a few words, else ""."""
    if not report or report.get("state") not in ("down", "failing"):
        return ""
    return _cause(report)


def _replica_causes(report: dict, now: float) -> list[tuple[str, str]]:
    """(URL, what) for each replica's latest failure, then for each replica the last look found unhealthy."""
    items = []
    for r in (report.get("replicas") or [])[:SHOWN_REPLICAS]:
        e = r.get("last_error")
        if not isinstance(e, dict):
            continue
        since = f", failing for {_ago(now - r['failing_since'])}" if r.get("failing_since") else ""
        what = f"{str(e.get('message') or '')[:300]} ({int(r.get('fails') or 0)} failure(s) in a row{since})"
        items.append((r.get("url"), what))
    look = _look(report, now)
    for r in ((look or {}).get("replicas") or [])[:SHOWN_REPLICAS]:
        if not r.get("healthy"):
            items.append((r.get("url"), "not healthy" + (f" ({str(r['error'])[:300]})" if r.get("error") else "")))
    return items


def waiting(report: dict | None, now: float | None = None, *, max_attempts: int | None = None) -> str:
    """The notice for an active job whose runner finds every replica failing; "" while the fleet answers."""
    if not report or report.get("state") not in ("down", "failing"):
        return ""
    now = time.time() if now is None else now
    cause = _cause(report, now)
    since = report.get("failing_since") or report.get("down_since")
    how_long = f", for {_ago(now - since)}" if since else ""
    if report["state"] == "down":
        head = f"Waiting for the fleet: {healthy_text(report, now)}" + (f" ({cause})" if cause else "") + how_long
        nxt = report.get("next_try_in")
        then = (
            "The runner sends one request at a time until one is answered"
            + (
                (f" (the next in {nxt:.0f} s)" if nxt >= 1 else " (the next one now)")
                if isinstance(nxt, (int, float))
                else ""
            )
            + "; no clip uses an attempt meanwhile. Pause or cancel the job to stop waiting."
        )
    else:
        head = (
            f"The fleet fails every request: {healthy_text(report, now)}"
            + (f", but requests fail ({cause})" if cause else "")
            + how_long
        )
        then = "Not an outage by /health, so each failure uses one of the clip's attempts" + (
            f" (a clip fails after {max_attempts})." if max_attempts else "."
        )
    return render_jobs.fleet_wait(report["state"], head, then, _replica_causes(report, now))


def start_warning(beats: list[dict], now: float | None = None, fleet=ANY) -> str:
    """What a lead starting a job for `fleet` should know, or "": no runner is running, none sends to that
    fleet, or no replica is healthy."""
    now = time.time() if now is None else now
    if not _fresh(beats):
        return "No runner is running, so the job stays queued until one starts (see the line above)."
    if not any(_serves(b.get("info") or {}, None, fleet) for b in _fresh(beats)):
        return f"No runner sends to this fleet ({fleet}), so the job waits until one does (see the job below)."
    report = report_for(beats, fleet=fleet)
    if not report:
        return ""
    look = _look(report, now)
    none_healthy = look is not None and look.get("healthy") == 0 and look.get("total")
    if report.get("state") == "down" or none_healthy:
        cause = _cause(report, now)
        return (
            f"No replica is healthy ({healthy_text(report, now)}"
            + (f": {str(cause)[:200]}" if cause else "")
            + "). The job waits for the fleet; this tab says why while it does."
        )
    return ""


def summary(report: dict | None, now: float | None = None) -> str:
    """The fleet in a few words for the runner's line ("fleet: 2 of 2 healthy"), or ""."""
    if not report:
        return ""
    now = time.time() if now is None else now
    if report.get("state") == "down":
        return f"fleet down: {healthy_text(report, now)}"
    if report.get("state") == "failing":
        return f"fleet failing every request: {healthy_text(report, now)}"
    failed_at = report.get("last_failed_at")
    if report.get("state") == "idle" and isinstance(failed_at, (int, float)):
        # nothing sent since its requests failed: what was seen, and when, not a state of now
        cause = _cause(report, now)
        return f"fleet: {healthy_text(report, now)}; its last requests failed {_ago(now - failed_at)} ago" + (
            f" ({cause[:120]})" if cause else ""
        )
    if _look(report, now) is None and report.get("state") == "idle":
        return ""
    return f"fleet: {healthy_text(report, now)}"
