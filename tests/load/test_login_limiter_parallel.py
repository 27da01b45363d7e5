"""The login limiter against parallel attempts (S7, docs/RELIABILITY.md): a forged X-Forwarded-For buys no attempts,
10 at a time on one account are held to its limit, and spraying one password over many accounts is limited per
address. Serial: it counts which attempts land inside the limiter's waits, so the clock must be this test's alone.
The rest of login and sessions: tests/webapp/test_login_and_sessions.py."""

from __future__ import annotations

import concurrent.futures

import pytest

from tests.support.reliability_fixtures import AppProcess, post_login as _login
from tests.support.webapp_fixtures import add_users, build_library


@pytest.fixture(scope="module")
def lib_settings(tmp_path_factory):
    from data.settings import Settings

    d = tmp_path_factory.mktemp("s6")
    s = Settings.load({"data_dir": str(d / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=4)
    add_users(s)
    return s


@pytest.mark.serial  # counts which attempts land inside the limiter's waits: the clock must be this test's
def test_s7_forwarded_for_is_ignored_parallel_attempts_and_spraying_are_limited(lib_settings, tmp_path):
    app = AppProcess(lib_settings, tmp_path / "webapp.log")
    app.start()
    try:
        # 30 attempts on one account, each claiming another address, 10 at a time in parallel
        def guess(i):
            return _login(
                app.url,
                "lead",
                f"guess {i}",
                headers={"X-Forwarded-For": f"203.0.113.{i}", "X-Real-IP": f"203.0.113.{i}"},
            ).status_code

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(guess, range(30)))
        checked = codes.count(401)
        print(
            f"S7: {checked} of 30 parallel attempts with forged X-Forwarded-For checked, {codes.count(429)} "
            "refused (limit 5 per account per minute)"
        )
        assert checked == 5 and codes.count(429) == 25
        # spraying one password over many accounts from one address: limited per address
        sprayed = [_login(app.url, f"nobody{i}", "Summer2026!").status_code for i in range(25)]
        assert sprayed.count(401) == 15 and sprayed.count(429) == 10, sprayed  # 20 per address in 10 min
    finally:
        app.stop()
