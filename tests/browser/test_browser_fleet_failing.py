"""A fleet that fails every request, on the stack `./launch.sh` starts, read in Chromium where a lead reads it
(issue 45, point 5): 4 simulated replicas that answer 500 to everything while their /health is fine, behind the
real vllm-router (whose circuit breaker then answers "503 No available workers") and the router gate; the
supervised runner; the app with login on.

- A 30-clip job started on Jobs ends within minutes (the figure is printed; before: one request every 5-9 s, a
  12-clip job in 6 min 54 s), every clip failed, and the job reads "failed", never "done · 100%".
- The failures table names the replicas' error ("replica", HTTP 500 ...), the router's breaker answers too, never
  "overloaded".
- The Fleet tab shows the failing requests from the replicas' and the router's metrics, its breaker open, and the
  runner's word on the fleet in the words of the Jobs tab's runner line.
- Fixed, the fleet is followed: the runner line leaves "failing every request" and the next job's ETA is a time,
  not "unknown", within 30 s of the fix (figures printed), and every clip of that job is captioned (none fails in
  the breaker's open window after the fix).
This is the one test of a failing fleet on the real router: the runner's loop alone, without the launched stack in
front of it, proved nothing more (it was tests/load/test_fleet_failing.py, the same run without the browser).
Screenshots: docs/screenshots/jobs-fleet-failing-job-failed.png, fleet-failing-requests.png."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from data.jobs import queries as job_queries
from serving import fleet_key
from serving.launch import record as fleet_record
from tests.support.browser_fixtures import SCREENSHOTS, login
from tests.support.launched_stack import LaunchedStack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser

CLIPS = 30
FOLLOWS_WITHIN_S = 30.0  # the acceptance: the runner line and the ETA follow a recovery within 30 s


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LaunchedStack(tmp_path_factory.mktemp("launched") / "var", demo_count=CLIPS, replicas=4) as s:
        s.wait_jobs_done()
        yield s


def knobs(stack, **values) -> None:
    """Every simulated replica's knobs (their token is the fleet key, as the launcher starts them)."""
    key = fleet_key.load(stack.settings)
    for url in fleet_record.load_record(stack.settings)["replica_urls"]:
        r = httpx.post(url + "/sim/knobs", json=values, headers={"authorization": f"Bearer {key}"}, timeout=10)
        r.raise_for_status()


def start_job(page, name: str) -> float:
    page.click("#tab-jobs-button")
    page.locator("#job-source").get_by_text("current filter", exact=True).click()
    page.wait_for_function(f"document.querySelector('#job-preview-count')?.dataset.n === '{CLIPS}'", timeout=60_000)
    page.fill("#job-name textarea, #job-name input", name)
    t0 = time.monotonic()
    page.click("#btn-start-job")
    page.wait_for_function("document.querySelector('#jobs-msg')?.innerText.includes('Started job')", timeout=60_000)
    return t0


def wait_state(page, job_id: int, state: str, timeout_s: float) -> None:
    page.wait_for_function(
        f"""() => {{ const p = document.querySelector('#job-progress');
            return p && p.dataset.job === '{job_id}' && p.dataset.state === '{state}'; }}""",
        timeout=timeout_s * 1000,
    )


def newest_job(stack, name: str) -> dict:
    """The job just started as `name` (the start's message may still be the one before)."""
    d = stack.db()
    try:
        return wait_until(
            lambda: next((j for j in job_queries.list_jobs(d, 5) if j["name"] == name), None),
            timeout=60,
            what=f"the job {name!r}",
        )
    finally:
        d.close()


def test_a_failing_fleet_ends_its_job_failed_every_screen_agrees_and_a_fix_is_followed(browser, stack):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    try:
        page, watch = login(ctx, stack.url, "lead")
        page.click("#tab-jobs-button")
        page.wait_for_function(
            "document.querySelector('#fleet-state')?.innerText.includes('fleet: 4 of 4 healthy')", timeout=60_000
        )

        # every replica fails every request; /health stays 200
        knobs(stack, error_rate=1.0)
        t0 = start_job(page, "on a fleet that fails every request")
        job = newest_job(stack, "on a fleet that fails every request")
        page.wait_for_function(
            "document.querySelector('#fleet-state')?.innerText.includes('fleet failing every request: 4 of 4')",
            timeout=60_000,
        )
        jobs_line = page.inner_text("#runner-status")

        # the Fleet tab while it fails: the requests from the fleet's own metrics, and the runner's word
        page.click("#tab-fleet-button")
        page.wait_for_function("document.querySelector('#fleet-requests')?.dataset.failing === '1'", timeout=60_000)
        page.click("#btn-fleet-refresh")  # a refresh between two scrapes: what the requests did in between
        page.wait_for_function(
            """() => { const r = document.querySelector('#fleet-requests');
                return r && r.dataset.failing === '1' && r.innerText.includes('in the last'); }""",
            timeout=60_000,
        )
        requests = page.inner_text("#fleet-requests")
        runner_view = page.inner_text("#fleet-runner-view")
        router = page.inner_text("#fleet-router")
        page.screenshot(path=str(SCREENSHOTS / "fleet-failing-requests.png"), full_page=True)
        assert requests.startswith("Every caption request failed in the last"), requests
        assert "4 of 4 replicas healthy" in page.inner_text("#fleet-summary")
        assert "requests refused: no available workers" in router and "open" in router, router
        words = runner_view.removeprefix("The runner: ").split(" (")[0]
        assert words.startswith("fleet failing every request: 4 of 4 healthy") and words in jobs_line, (
            runner_view,
            jobs_line,
        )

        # Jobs: the job ends, failed, and says so; its failures name the replicas' error
        page.click("#tab-jobs-button")
        wait_state(page, job["id"], "failed", 600)
        ended_after = time.monotonic() - t0
        detail = page.inner_text("#job-progress")
        failures = page.inner_text("#job-failures")
        page.screenshot(path=str(SCREENSHOTS / "jobs-fleet-failing-job-failed.png"), full_page=True)
        assert re.search(rf"failed · not one of its {CLIPS} clips captioned · done 0 · failed {CLIPS}\b", detail)
        assert "100%" not in detail and "done ·" not in detail, detail
        assert "replica" in failures and "simulated engine failure" in failures, failures[:2000]
        assert "overloaded" not in failures and "no_workers" not in failures, failures[:2000]
        d = stack.db()
        try:
            kinds = {r[0] for r in d.execute("SELECT error_kind FROM job_items WHERE job_id = ?", [job["id"]])}
            last_errors = [r[0] for r in d.execute("SELECT last_error FROM job_items WHERE job_id = ?", [job["id"]])]
            breaker = d.execute(
                "SELECT COUNT(*) FROM job_items WHERE job_id = ? AND last_error LIKE '%circuit breaker%'", [job["id"]]
            ).fetchone()[0]
        finally:
            d.close()
        assert kinds == {"replica"}, kinds
        # every clip's last failure names the replicas' error, the router's breaker answers included
        assert all("simulated engine failure" in e for e in last_errors), last_errors[:3]
        assert "HTTP 500" in runner_view, runner_view

        # fixed (and slower, so that the next job runs long enough to have an ETA): followed within 30 s
        knobs(stack, error_rate=0.0, capacity=1, slow=4.0)
        fixed = time.monotonic()
        start_job(page, "after the fix")
        after = newest_job(stack, "after the fix")
        page.wait_for_function(
            """() => { const s = document.querySelector('#fleet-state')?.innerText || '';
                return s.includes('fleet: 4 of 4 healthy') && !s.includes('failed'); }""",
            timeout=120_000,
        )
        line_after = time.monotonic() - fixed
        page.wait_for_function(  # the job shown (the one just started) with its ETA a time
            f"""() => {{ const p = document.querySelector('#job-progress');
                return p && p.dataset.job === '{after["id"]}' && / · ETA \\d+m\\d\\ds · /.test(p.innerText); }}""",
            timeout=120_000,
        )
        eta_after = time.monotonic() - fixed
        eta = page.inner_text("#job-progress")
        wait_state(page, after["id"], "done", 300)
        done_after = time.monotonic() - fixed
        print(
            f"failing fleet on the launched stack: a {CLIPS}-clip job ended failed {ended_after:.1f} s after Start "
            f"({breaker} clips' last failure an answer of the router's breaker, named by the replicas' error); "
            f"Fleet tab: {requests!r}; after the fix the runner line followed in {line_after:.1f} s, the next "
            f"job's ETA was a time after {eta_after:.1f} s ({eta.split(' · ETA ')[-1].split(' · ')[0]!r}), "
            f"and it ended {done_after:.1f} s after the fix"
        )
        # the acceptance is 30 s (FOLLOWS_WITHIN_S); the figures are printed and recorded (docs/RELIABILITY.md, R12
        # "fleet failing"), not asserted: no timed assertions in tests
        d = stack.db()
        try:
            # every clip captioned: none used its attempts in the breaker's open window after the fix
            counts = job_queries.counts(d, after["id"])
            assert counts["done"] == CLIPS and counts["failed"] == 0, counts
        finally:
            d.close()
        assert not watch.errors
    finally:
        try:
            knobs(stack, error_rate=0.0, capacity=6, slow=1.0)
        finally:
            ctx.close()
