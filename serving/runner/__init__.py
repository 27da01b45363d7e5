"""The job runner: claims job items from SQLite, keeps the fleet busy with bounded concurrency, writes results.

    python -m serving.runner --db var/workbench.db --fleet-urls http://127.0.0.1:8000,http://127.0.0.1:8001
    python -m serving.runner --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --replicas 8 --until-idle

How it works (a job survives a runner kill, a dying or hung replica and a silent one: docs/RELIABILITY.md R3/R6/R8):
- One asyncio loop does the HTTP; one thread with its own SQLite connection does every database call,
  in order (claims, results, heartbeats: dbthread.py, store.py). No HTTP call ever happens
  inside a transaction.
- Each replica URL gets a bound of `per_replica_inflight` requests. With a single router URL the bound is
  `per_replica_inflight x replicas behind it` (`--replicas N`, or the router's `/workers`, asked when the runner
  starts). Items are claimed only for free slots, so what is leased is what is in flight: a SIGKILL re-sends at
  most that. Without fleet URLs the runner sends to what the launcher of this data dir started
  (serving.launch.record.fleet_url).
- Dispatch and replica health (least-loaded, cool-down and probe after a retryable error) are replicas.py;
  the failed clip goes back to pending with jittered backoff (`serving.client.backoff`) and is sent elsewhere
  when another replica can take it.
- A fleet that fails every request (every replica failing, and `/health` finds none up or the failures span
  several clips) is down: the runner backs off as a whole, one request at a time with a growing pause (at most
  30 s), and no clip uses an attempt until an answer comes, however long that takes (replicas.py). The runner
  looks at the replicas' `/health` every 15 s, every 5 s while every replica fails, with the data dir's fleet key
  (watch.py, serving.fleet.reader), and its heartbeat carries the fleet's state and the latest failures, which the
  Jobs tab shows ("waiting for the fleet: 0 of 4 healthy (HTTP 503 ...)"). Every replica failing while `/health`
  finds them up is no outage: its clips use their attempts, at a pace that ends a 30-clip job in about a minute,
  and each failure is named by the replicas' error, a router's circuit-breaker answer included (replicas.py).
- Non-retryable errors (the clip's fault, a bad answer) fail the item at once with the message. Clips whose
  ingest probe failed are never sent: they fail with "ingest: <probe error>"; nor are the clips of a job whose
  prompt's schema cannot be checked in bounded time (data.taxonomy.COSTLY_CHECKS): "prompt".
- Each answer is read (JSON, the schema's checks, the labels' confidence) in a checker process within a time
  budget, never on the loop (serving.answer_check): past the budget the item fails as `check_timeout`.
- No job starves another: each runnable job first claims an even share of the runner's slots (store.py), and
  each gets its share of the answer checkers (serving.answer_check), so a job whose answers each cost a whole
  check budget holds its own share, not the others' (issue 46).
- Results are written in batches through `data.jobs.complete` (store.py): a machine caption never
  replaces a human or approved one, and a result is written once per (job, clip). A batch is bounded by time
  (store.WRITE_HOLD_S of write lock), not by count, so annotators' saves never wait long behind it.
- pause / cancel are read before each claim (`data.jobs.items.claim` refuses inactive jobs), and every
  ABORT_CHECK_S the requests in flight for a job that was paused or cancelled are aborted (its items were
  handed back by `data.jobs.change_state`; a result that still arrives is discarded by `data.jobs.complete`).
- SIGTERM/SIGINT: stop claiming, wait for in-flight requests up to a deadline, release what was not answered.
  SIGKILL: `data.jobs.recover` on the next start releases the dead leases.

The modules, from the loop outwards:
- loop.py      `Runner` (the event loop: claim, dispatch, write, drain), `fleet_targets`
- start.py     how it is started: `serve` (the process, with signal handlers), `run_job` (one job in the calling
               thread)
- replicas.py  where requests go: each replica's bound, what it has in flight, its health, a fleet that is down
- watch.py     the look at the replicas' `/health` while answers do not say the fleet is fine
- fleet_log.py what the log says about the fleet: a line when something changes, a summary every 10 minutes
- store.py     what the runner reads and writes in SQLite (claims, results, heartbeats), one transaction each
- dbthread.py  the thread that owns the runner's SQLite connection
- collector.py Python's garbage collection, run by the loop between write transactions, never inside one
- __main__.py  the command line
"""

from serving.runner.loop import Runner, fleet_targets
from serving.runner.start import run_job, serve

__all__ = ["fleet_targets", "run_job", "Runner", "serve"]
