"""Playwright (sync API) against Debian Chromium, plus the simulated fleet and the runner as subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serving import procs
from tests.support.webapp_fixtures import PASSWORD

CHROMIUM_ARGS = [
    "--disable-dev-shm-usage",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
DEFAULT_TIMEOUT_MS = 60_000


class WatchedBrowser:
    """The Playwright browser, with every page of every context it makes watched for uncaught JavaScript
    errors (`pageerror`): the suite asserts there are none (issue 10: Gradio's dropdown threw a TypeError)."""

    def __init__(self, browser):
        self._browser = browser
        self.page_errors: list[str] = []

    def new_context(self, **kwargs):
        ctx = self._browser.new_context(**kwargs)
        # Playwright's 30 s default is a deadline for "it happened", and a CI machine whose two cores are shared
        # ran 3-4x slower than a quiet one: 60 s, which only a failing wait ever uses up
        ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
        ctx.on("page", self._watch)
        return ctx

    def _watch(self, page) -> None:
        page.on("pageerror", lambda e: self.page_errors.append(f"{page.url}: {e}"))

    def __getattr__(self, name):
        return getattr(self._browser, name)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = WatchedBrowser(p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS))
        yield b
        b.close()
        assert not b.page_errors, "uncaught JavaScript errors:\n" + "\n".join(b.page_errors)


class Watch:
    """Everything a page reports that would mean a script ran or broke: dialogs, page errors, our flag."""

    def __init__(self, page):
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))


def login(context, url: str, user: str):
    page = context.new_page()
    watch = Watch(page)
    page.goto(url + "/")
    page.fill("#username", user)
    page.fill("#password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_selector("#whoami", timeout=60_000)
    return page, watch


# the simulated fleet takes knob changes only with its token (serving/simfleet/app.py)
KNOBS_TOKEN = secrets.token_urlsafe(16)


def set_knobs(url: str, **knobs) -> httpx.Response:
    """Change the knobs of the simulated replica at `url` (the fleet of the `simfleet` fixture)."""
    return httpx.post(
        url + "/sim/knobs", json=knobs, headers={"authorization": f"Bearer {KNOBS_TOKEN}"}, timeout=5, trust_env=False
    )


def choose(page, elem_id: str, value: str) -> None:
    """Choose `value` in a Gradio dropdown (single or multiple choice): type it, click the option named exactly so."""
    page.locator(f"#{elem_id} input").click()
    page.keyboard.press("Control+a")  # a current choice is typed over
    page.keyboard.type(value)
    page.locator(f'[role=listbox] li[aria-label="{value}"]').first.click()
    page.locator("body").click(position={"x": 3, "y": 3})  # closes the list


def choose_starting(page, elem_id: str, text: str) -> None:
    """Choose the first option of a Gradio dropdown whose name starts with `text` (names that carry counts)."""
    page.locator(f"#{elem_id} input").click()
    page.locator(f'[role=listbox] li[aria-label^="{text}"]').first.click()
    page.locator("body").click(position={"x": 3, "y": 3})


def _child(cmd: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SIMFLEET_KNOBS_TOKEN": KNOBS_TOKEN}
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _stop(proc: subprocess.Popen) -> None:
    procs.stop_group(proc.pid, proc.pid, grace=10, popen=proc)


@pytest.fixture(scope="module")
def simfleet(web_settings, library):
    """Two simulated replicas on free ports; yields their URLs."""
    ready = web_settings.data_dir / "simfleet.ready.json"
    log = web_settings.data_dir / "simfleet.log"
    proc = _child(
        [
            sys.executable,
            "-m",
            "serving.simfleet",
            "--replicas",
            "2",
            "--port",
            "0",
            "--speed",
            "0.05",
            "--allowed-local-media-path",
            str(web_settings.clip_root),
            "--ready-file",
            str(ready),
        ],
        log,
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError("simulated fleet did not start:\n" + log.read_text()[-2000:])
        time.sleep(0.1)
    yield json.loads(ready.read_text())["urls"]
    _stop(proc)


@contextlib.contextmanager
def runner_process(settings, fleet_urls: list[str]):
    """`python -m serving.runner` for `settings`' data dir, sending to `fleet_urls`, stopped at the end."""
    proc = _child(
        [
            sys.executable,
            "-m",
            "serving.runner",
            "--data-dir",
            str(settings.data_dir),
            "--fleet-urls",
            ",".join(fleet_urls),
        ],
        settings.data_dir / "runner.log",
    )
    try:
        yield proc
    finally:
        _stop(proc)


@pytest.fixture
def runner(web_settings, simfleet):
    with runner_process(web_settings, simfleet) as proc:
        yield proc
