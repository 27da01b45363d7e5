"""How a runner is started: as the runner process, until a signal says stop (`serve`), or for one job in the
calling thread (`run_job`, behind `python -m serving.caption` and the benchmarks). Both run the loop of
serving/runner/loop.py; they are the package's face with it (serving/runner/__init__.py)."""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any, Callable, Iterable

from data import db as dbmod, jobs
from data.errors import DataError
from data.jobs import queries as job_queries
from data.settings import Settings
from serving.runner.loop import Runner, fleet_targets


async def serve(runner: Runner) -> dict:
    """Run `runner` until SIGTERM or SIGINT (in the main thread), then drain; returns its final `info()`."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, runner.stop)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread
            pass
    return await runner.run()


def run_job(
    settings: Settings,
    job_id: int,
    fleet_urls: Iterable[str] | str | None = None,
    *,
    progress_cb: Callable[[dict], None] | None = None,
    stop_event: threading.Event | None = None,
    **options: Any,
) -> dict:
    """Run one job in the calling thread until it is done, paused or cancelled, or `stop_event` is set.

    The same loop as the runner process, restricted to `job_id`; `options` are `Runner`'s (replicas, client,
    drain_seconds, backoff_base, look ...). A job made for another fleet than `fleet_urls` is refused
    (DataError): a runner sends a job only to the fleet it was made for. `progress_cb(progress)` is called about every
    `data.heartbeats.PERIOD_S` and at the end with `data.jobs.queries.progress`. Returns the final progress.
    """
    sends_to = jobs.fleet_of(fleet_targets(settings, fleet_urls))
    d = dbmod.connect(settings.db)
    try:
        made_for = job_queries.get(d, job_id).get("fleet")
    finally:
        d.close()
    if made_for is not None and made_for != sends_to:
        raise DataError(
            f"Job {job_id} was made for the fleet {made_for}; this runner sends to {sends_to}. Run it there, or "
            "name the fleet it should move to (python -m serving.caption --resume JOB --fleet-urls URL)."
        )

    runner = Runner(
        settings,
        fleet_urls,
        job_ids=[job_id],
        name=f"job-{job_id}",
        progress_cb=progress_cb,
        stop_event=stop_event,
        exit_when_idle=True,
        **options,
    )

    async def go():
        if threading.current_thread() is threading.main_thread() and stop_event is None:
            return await serve(runner)
        return await runner.run()

    asyncio.run(go())
    d = dbmod.connect(settings.db)
    try:
        prog = job_queries.progress(d, job_id, series=False)
    finally:
        d.close()
    if progress_cb:
        progress_cb(prog)
    return prog
