"""A fleet that fails every request while its `/health` is fine (issue 45, point 5): real simulated replicas that
answer 500 to everything, behind the real vllm-router (whose circuit breaker then answers "503 No available
workers"), and the runner's own loop. The browser side, on the stack `./launch.sh` starts:
tests/test_browser_fleet_failing.py.

- A 30-clip job ends, every clip failed, the job "failed" (not "done"), and every failure names the replicas'
  error, the router's breaker answers included (before: "overloaded"; one request every 5-9 s, minutes per job).
- Fixed while the runner is on it, the fleet is followed: the runner's report says "up" within seconds and the
  next job's clips are all captioned (none fails in the breaker's open window after the fix).
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from data import heartbeats, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from serving import runner as runmod, simfleet
from serving.health import parse_router_metrics
from tests.support.runner_fixtures import real_router_metrics
from tests.support.waiting import wait_until

pytestmark = pytest.mark.serial  # a 4-replica fleet, the router and the runner's checkers: measured one at a time


@pytest.fixture
def failing(settings):
    settings.clip_root.mkdir(parents=True, exist_ok=True)
    f = simfleet.start_fleet(4, 0, settings.clip_root, speed=0.05, error_rate=1.0)
    yield f
    f.stop()


class RunnerThread:
    """The runner process's loop in a thread (every job of its fleet), stopped at the end."""

    def __init__(self, settings, url):
        self.stop_event = threading.Event()
        self.runner = runmod.Runner(settings, url, stop_event=self.stop_event, name="runner")
        self.thread = threading.Thread(target=lambda: asyncio.run(self.runner.run()), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(60)


def report(db) -> dict:
    beats = [b for b in heartbeats.heartbeats(db, "runner") if b["name"] == "runner"]
    return (beats[0]["info"].get("fleet") or {}) if beats else {}


def start(db, ids, fleet, name) -> int:
    return jobs.create(
        db,
        name=name,
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=None,
        params=JobParams(),
        fleet=fleet,
    )


def test_a_failing_fleet_ends_its_job_failed_with_its_error_and_a_fix_is_followed(settings, db, failing, tmp_path):
    ids = tiny_library(settings, db, 40)
    with real_router_metrics(failing.urls, tmp_path) as (url, metrics_url):
        fleet = jobs.fleet_of([url])
        with RunnerThread(settings, url):
            t0 = time.monotonic()
            job_a = start(db, ids[:30], fleet, "on a failing fleet")
            wait_until(
                lambda: job_queries.get(db, job_a)["state"] not in job_queries.ACTIVE,
                timeout=600,  # a hang guard, not the figure: before, the job took ~20 minutes
                what="the job on the failing fleet to end",
            )
            ended_after = time.monotonic() - t0
            a = job_queries.progress(db, job_a, series=False)
            failures = job_queries.failures(db, job_a)
            router = parse_router_metrics(httpx.get(metrics_url + "/metrics", timeout=5).text)
            sent = sum(failing.stats(i)["chat_requests"] for i in range(4))

            # the fix comes while the runner still holds the router's URL as failing, with its breaker open
            for i in range(4):
                failing.set_knobs(i, error_rate=0.0)
            fixed = time.monotonic()
            job_b = start(db, ids[30:], fleet, "after the fix")
            wait_until(lambda: report(db).get("state") == "up", timeout=120, what="the runner's report says up")
            up_after = time.monotonic() - fixed
            wait_until(
                lambda: job_queries.get(db, job_b)["state"] not in job_queries.ACTIVE,
                timeout=120,
                what="the job after the fix to end",
            )
            b = job_queries.counts(db, job_b)
    print(
        f"failing fleet: a 30-clip job ended {a['state']} after {ended_after:.1f} s ({sent} requests reached the "
        f"replicas; the router refused {router['no_available_workers']:.0f} as 'no available workers'); after the "
        f"fix the runner reported 'up' in {up_after:.1f} s; the next job: {b}"
    )
    assert a["state"] == "failed" and a["counts"]["failed"] == 30 and a["counts"]["done"] == 0, a["counts"]
    # the router's breaker did refuse requests, and those failures too are named by the replicas' error
    assert router["no_available_workers"] > 0, router
    kinds = {f["error_kind"] for f in failures}
    assert kinds == {"replica"}, kinds
    assert all("simulated engine failure" in f["last_error"] for f in failures), failures[0]["last_error"]
    assert any("circuit breaker" in f["last_error"] for f in failures) or router["no_available_workers"] == 0
    assert b["done"] == 10 and b["failed"] == 0, b  # no clip used its attempts in the breaker's window
