"""Captioning jobs and their items: creation, leases, results, failures, state changes, progress.

A job is a row in `jobs` plus one `job_items` row per clip. The runner (serving.runner) claims items with a
lease inside `BEGIN IMMEDIATE`, sends them, and reports each outcome here. Guarantees (the
project's rule "a job survives anything": killing the runner at any point and restarting it loses no finished
caption, duplicates none and re-sends at most what was in flight; tested in tests/load/test_runner_kill.py):
- `claim` counts an attempt per send; an item leased by a runner that died is handed out again only after
  `recover` (same host, dead pid) or lease expiry, so at most the in-flight items are re-sent.
- `complete` is idempotent on (job_id, clip_id): a repeated or late result changes nothing.
- Counters (`done`, `failed`) change in the same transaction as the item they count.
- pause / resume / cancel are states and they are final and true: pausing or cancelling hands every leased
  item back to pending at once (the attempt not counted), `claim` starts nothing for an inactive job, and a
  result that arrives for a paused or cancelled job is discarded (`complete` and `fail` return None), so the
  counts a lead sees are what was really captioned. The runner also aborts such requests (serving.runner).
- A job with nothing left to do is `done`, whichever way it got there (a last result, a resume, a claim), or
  `failed` when not one of its clips was captioned (every one failed: a fleet that fails every request).
- `create_once` makes a repeated start (a triple click) one job: the same user, prompt, params and selection
  within DEDUPE_S of an active job return that job.
- A job records the fleet it is for (`fleet`, from `fleet_of(urls)`): the app's jobs the fleet the app watches
  (the launcher's), a terminal's the `--fleet-urls` it was given. A runner claims only jobs of the fleet it sends
  to (`queries.runnable(db, fleet)`), and jobs made before fleets were recorded (NULL) from any. `move_to_fleet`
  sends a job elsewhere, said in the events.

Job states: queued -> running -> done | failed; running|queued -> paused -> queued; any but done or failed ->
cancelled -> queued; done|failed -> queued by a resume or a retry of its failures (then done or failed again when
nothing is left).
Item states: pending -> leased -> done | failed | pending (retry after `not_before`).

The jobs wing of data/:
- lifecycle.py  a job made (`create`, `create_once`, `create_recaption`) and its state changed (`change_state`,
                `move_to_fleet`, `retry_failed`), and the fleet a job is for (`fleet_of`)
- items.py      its items: claims, results, failures (the guarantees above)
- queries.py    what is read of jobs: a job, the runnable ones, progress
- selection.py  which clips a job covers
(data.heartbeats, in the core, holds the runners' signs of life.) This package's face is lifecycle's names
(`jobs.create_once(...)`); the other modules' names are imported from their own module (`from data.jobs import
items as job_items` then `job_items.claim`, `job_queries.progress`, ...). Only the quality wing imports this one in
data/ (tests/test_structure.py).
"""

from data.jobs.lifecycle import (
    DEDUPE_S,
    DONE_TO,
    FINAL_KINDS,
    Retried,
    change_state,
    create,
    create_once,
    create_recaption,
    fleet_of,
    move_to_fleet,
    retry_failed,
)

__all__ = [
    "change_state",
    "create",
    "create_once",
    "create_recaption",
    "DEDUPE_S",
    "DONE_TO",
    "FINAL_KINDS",
    "fleet_of",
    "move_to_fleet",
    "Retried",
    "retry_failed",
]
