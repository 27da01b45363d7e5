"""A fleet that fails every request while its `/health` is fine (issue 45, point 5): real simulated replicas that
answer 500 to everything, behind the real vllm-router (whose circuit breaker then answers "503 No available
workers"), and the runner's own loop. The browser side, on the stack `./launch.sh` starts:
tests/browser/test_browser_fleet_failing.py.

- A 30-clip job ends, every clip failed, the job "failed" (not "done"), and every failure names the replicas'
  error, the router's breaker answers included (before: "overloaded"; one request every 5-9 s, minutes per job).
- Fixed while the runner is on it, the fleet is followed: the runner's report says "up" within seconds and the
  next job's clips are all captioned (none fails in the breaker's open window after the fix).
"""

from __future__ import annotations

import asyncio
import html as html_text
import re
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
from serving.fleet.health import parse_router_metrics
from serving.launch import record as fleet_record
from tests.support.runner_fixtures import real_router_metrics
from tests.support.waiting import wait_until
from webapp.fleet import tab as fleet_tab

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


def fleet_tab_says(tab) -> tuple[str, str]:
    """(the requests line, the runner's word) of the Fleet tab's summary, as text."""
    html = tab.refresh(None)[tab.summary]
    requests = re.search(r'<div[^>]*id="fleet-requests"[^>]*>.*?</div>', html)
    runner = re.search(r'<div[^>]*id="fleet-runner-view"[^>]*>(.*?)</div>', html)
    words = html_text.unescape(runner.group(1)).removeprefix("The runner: ") if runner else ""
    return (requests.group(0) if requests else ""), words


def test_a_failing_fleet_ends_its_job_failed_with_its_error_and_a_fix_is_followed(settings, db, failing, tmp_path):
    from webapp.app import build_app
    from webapp.jobs.progress import runner_line

    ids = tiny_library(settings, db, 40)
    with real_router_metrics(failing.urls, tmp_path) as (url, metrics_url):
        fleet = jobs.fleet_of([url])
        # as the launcher records the router it started: the Fleet tab reads its metrics there
        fleet_record.save_record(settings, {"router_url": url, "router_metrics_url": metrics_url, "procs": []})
        app = build_app(settings.replace(auth="off", fleet_urls=(url,)))
        tab = app.state.workbench.fleet
        with RunnerThread(settings, url):
            t0 = time.monotonic()
            job_a = start(db, ids[:30], fleet, "on a failing fleet")
            wait_until(lambda: report(db).get("state") == "failing", timeout=60, what="the runner to find it failing")
            fleet_tab_says(tab)
            time.sleep(fleet_tab.CACHE_S + 1)  # a second scrape: what the requests did between the two
            requests, runner_words = fleet_tab_says(tab)
            jobs_line = runner_line(heartbeats.heartbeats(db, "runner"), settings)
            router_html = tab.refresh(None)[tab.router]
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
        app.state.ctx.close()
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
    # the Fleet tab, read while the job ran: the failing requests from the replicas' and the router's metrics, and
    # the runner's word on the fleet in the Jobs tab's words
    print(f"Fleet tab while failing: {re.sub(r'<[^>]+>', '', requests)} / the runner: {runner_words}")
    assert 'data-failing="1"' in requests and "Every caption request failed in the last" in requests, requests
    assert (
        int(re.search(r'data-failed="(\d+)"', requests).group(1))
        + int(re.search(r'data-refused="(\d+)"', requests).group(1))
        > 0
    )
    assert runner_words.startswith("fleet failing every request: 4 of 4 healthy") and "HTTP 500" in runner_words
    assert runner_words.split(" (")[0] in jobs_line  # the Jobs tab's runner line says the same
    assert "requests refused: no available workers" in router_html and "circuit breaker" in router_html
