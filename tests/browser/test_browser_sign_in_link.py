"""A one-time sign-in link on the stack `./launch.sh` starts, in a real browser (issue 46, point 4).

Someone keeps failing on the lead's account, so the login form holds every new browser back; the admin runs the
README's command (`python -m webapp.accounts sign-in-link lead --data-dir ... --base-url ...`), the lead opens the
printed link in a new browser, reads that this browser may now sign in, types the password and is in at once.
The same link a second time says it cannot be used."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.support.browser_fixtures import SCREENSHOTS
from tests.support.launched_stack import REPO, LaunchedStack, _env
from tests.support.webapp_fixtures import PASSWORD

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LaunchedStack(tmp_path_factory.mktemp("launched-link") / "var", demo_count=2) as s:
        yield s


def test_a_sign_in_link_lets_a_new_browser_in_while_someone_keeps_failing_on_the_account(browser, stack):
    with httpx.Client(base_url=stack.url, timeout=60, trust_env=False) as attacker:
        codes = [
            attacker.post("/login", data={"username": "lead", "password": f"guess {i}"}).status_code for i in range(7)
        ]
    assert codes.count(401) == 5 and codes[-1] == 429, codes  # the account now holds new browsers back
    printed = subprocess.run(
        [sys.executable, "-m", "webapp.accounts", "sign-in-link", "lead", "--data-dir", str(stack.data_dir)]
        + ["--base-url", stack.url],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    link = printed.stdout.strip()
    assert link.startswith(stack.url + "/login/link/"), printed.stdout
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(link)
        assert "This browser is now one lead signed in from" in page.inner_text("body")
        page.screenshot(path=str(SCREENSHOTS / "sign-in-link.png"))
        page.fill("#username", "lead")
        page.fill("#password", PASSWORD)
        page.click("#login-submit")
        page.wait_for_selector("#whoami", timeout=60_000)  # in, at once: no wait for the account's turn
        assert "lead" in page.inner_text("#whoami")
        again = context.new_page()
        again.goto(link)
        assert "This sign-in link cannot be used" in again.inner_text("body")
    finally:
        context.close()
