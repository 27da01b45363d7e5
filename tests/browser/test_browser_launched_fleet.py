"""Issue 26, point 1, on the stack ./launch.sh starts (the simulated fleet behind vllm-router and the router gate,
the fleet key, the supervised runner, the app), read in a real Chromium where a lead reads it.

Before, every health read of the runner went through the gate without the key and got 401: the runner line said
"fleet down: 0 of 1 healthy" on a healthy fleet (the router counted as one replica), Start warned "No replica is
healthy", and a fleet that failed every request while /health answered 200 was taken for an outage: its clips
never used an attempt, the job never ended, and Jobs said "Waiting for the fleet".

- A healthy fleet: the runner line counts the replicas behind the router, "fleet: 2 of 2 healthy"; the Fleet tab
  says 2 of 2; Start warns of nothing; `./launch.sh status` is all 200.
- Every replica failing every request (the error_rate knob) while /health answers 200: Jobs says "The fleet fails
  every request" within 30 s of Start, each clip uses its attempts and fails, and the job ends.
- No log of the stack holds a 401.
Screenshot: docs/screenshots/jobs-fleet-fails-every-request.png."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from data import db as dbmod
from data.jobs import queries as job_queries
from data.settings import Settings
from serving import fleet_key, procs
from serving.launch import addresses as fleet_addresses
from tests.support.browser_fixtures import SCREENSHOTS, Watch

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
FAILS_WITHIN_S = 30.0  # the acceptance: the notice within 30 s of Start
MAX_ATTEMPTS = 2  # attempts per clip on this stack: each failing clip is sent twice, then fails


def launch_sh(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "launch.sh"), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """`./launch.sh --detach` on a machine without GPUs: a demo library, 2 simulated replicas behind the router
    and its gate, the supervised runner and the app (login on: the admin's password from the data dir)."""
    data = tmp_path_factory.mktemp("launched") / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    env.update(
        PYTHONPATH=str(ROOT),
        PYTHON=sys.executable,
        CW_FLEET_PORT=str(fleet_addresses.free_block("127.0.0.1", 2, procs.free_port())),
        CW_ROUTER_PORT=str(procs.free_port()),
        CW_ROUTER_PROMETHEUS_PORT=str(procs.free_port()),
        CW_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
    )
    port = procs.free_port()
    args = ["--detach", "--no-install", "--fleet-mode", "sim", "--replicas", "2", "--demo-count", "6"]
    r = launch_sh(env, *args, "--data-dir", str(data), "--port", str(port))
    try:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        yield {
            "env": env,
            "data": data,
            "url": f"http://127.0.0.1:{port}",
            "password": (data / "admin-password").read_text().strip(),
            "fleet": json.loads((data / "run" / "fleet.json").read_text()),
            "settings": Settings.load({"data_dir": str(data)}, environ={}),
        }
    finally:
        launch_sh(env, "stop", "--data-dir", str(data), timeout=120)


def login(ctx, stack):
    page = ctx.new_page()
    watch = Watch(page)
    page.goto(stack["url"] + "/")
    page.fill("#username", "admin")
    page.fill("#password", stack["password"])
    page.click("#login-submit")
    page.wait_for_selector("#whoami", timeout=120_000)
    return page, watch


def wait_job_done(page, job_id: int, timeout: float, state: str = "done") -> None:
    """Until the progress panel shows job `job_id` ended in `state` (not the first launch's job, shown before it):
    "done", or "failed" when not one of its clips was captioned."""
    page.wait_for_function(
        f"""() => {{ const p = document.querySelector('#job-progress');
            return p && p.dataset.job === '{job_id}' && p.dataset.state === '{state}'; }}""",
        timeout=timeout,
    )


def start_job(page, name: str) -> float:
    page.click("#tab-jobs-button")
    page.locator("#job-source").get_by_text("current filter", exact=True).click()
    page.wait_for_selector("#job-preview-count")
    page.fill("#job-name textarea, #job-name input", name)
    t0 = time.monotonic()
    page.click("#btn-start-job")
    page.wait_for_function("document.querySelector('#jobs-msg')?.innerText.includes('Started job')", timeout=60_000)
    return t0


def knobs(stack, **values) -> None:
    """The knobs of every simulated replica of the stack (their token is the fleet key, as the launcher starts
    them)."""
    key = fleet_key.load(stack["settings"])
    for url in stack["fleet"]["replica_urls"]:
        r = httpx.post(url + "/sim/knobs", json=values, headers={"authorization": f"Bearer {key}"}, timeout=10)
        r.raise_for_status()


def test_the_launched_stack_tells_the_truth_about_its_fleet(browser, stack):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    d = dbmod.connect(stack["settings"].db)
    try:
        page, watch = login(ctx, stack)
        page.click("#tab-jobs-button")
        # the runner's look through the gate, with the key: the router's two replicas, both healthy
        page.wait_for_function(
            "document.querySelector('#fleet-state')?.innerText.includes('fleet: 2 of 2 healthy')", timeout=60_000
        )
        line = page.inner_text("#runner-status")
        assert "of 1" not in line and "down" not in line, line
        page.click("#tab-fleet-button")
        page.wait_for_function(
            "document.querySelector('#fleet-summary')?.innerText.includes('2 of 2 replicas healthy')", timeout=60_000
        )

        start_job(page, "on a healthy fleet")
        msg = page.inner_text("#jobs-msg")
        assert "No replica is healthy" not in msg and "No runner" not in msg, msg
        healthy_job = job_queries.list_jobs(d, 1)[0]
        assert healthy_job["name"] == "on a healthy fleet", healthy_job
        wait_job_done(page, healthy_job["id"], 180_000)
        assert job_queries.counts(d, healthy_job["id"])["done"] > 0
        status = launch_sh(stack["env"], "status", "--data-dir", str(stack["data"]), timeout=120)
        assert status.returncode == 0 and "router-gate" in status.stdout, status.stdout + status.stderr
        assert " 401" not in status.stdout and "DOWN" not in status.stdout, status.stdout

        # every replica fails every request, while /health answers 200
        knobs(stack, error_rate=1.0)
        t0 = start_job(page, "on a fleet that fails every request")
        msg = page.inner_text("#jobs-msg")
        assert "No replica is healthy" not in msg, msg
        page.wait_for_function(
            """() => { const n = document.querySelector('#fleet-wait');
                return n && n.innerText.includes('The fleet fails every request: 2 of 2 healthy'); }""",
            timeout=FAILS_WITHIN_S * 1000,
        )
        shown_after = time.monotonic() - t0
        notice = page.inner_text("#fleet-wait")
        assert "HTTP 500" in notice and "each failure uses one of the clip's attempts" in notice, notice
        assert "Waiting for the fleet" not in notice
        assert "fleet failing every request: 2 of 2 healthy" in page.inner_text("#runner-status")
        page.screenshot(path=str(SCREENSHOTS / "jobs-fleet-fails-every-request.png"), full_page=True)
        job = job_queries.list_jobs(d, 1)[0]
        assert job["name"] == "on a fleet that fails every request", job
        # its clips use their attempts and fail; the job ends, failed (not one clip captioned)
        wait_job_done(page, job["id"], 300_000, state="failed")
        items = list(d.query("SELECT attempts, state, error_kind FROM job_items WHERE job_id = ?", [job["id"]]))
        sent = [i for i in items if i["error_kind"] != "ingest"]
        detail = page.inner_text("#job-progress")
        print(
            f"fleet failing every request: the notice {shown_after:.1f} s after Start; then "
            f"{len(sent)} clips sent, attempts {sorted(i['attempts'] for i in sent)}"
        )
        assert sent and all(i["state"] == "failed" and i["attempts"] == MAX_ATTEMPTS for i in sent), items
        assert re.search(rf"failed {len(items)}\b", detail), detail
        assert not watch.errors
    finally:
        try:
            knobs(stack, error_rate=0.0)
        finally:
            d.close()
            ctx.close()
    logs = {p.name: p.read_text(errors="replace") for p in (stack["data"] / "logs").glob("*.log")}
    assert {"runner.log", "router-gate.log", "app.log"} <= set(logs), sorted(logs)
    # a 401 anywhere but in a line's time stamp ("04:33:59,401 httpx INFO ..." once failed this in CI)
    refused = {
        name: [ln for ln in text.splitlines() if re.search(r"(?<![,.])\b401\b", ln)][:3] for name, text in logs.items()
    }
    assert not any(refused.values()), refused
