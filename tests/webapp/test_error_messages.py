"""Issue 21, class 7: a message with a status code where a 500 was. A read never needs the write lock (the
auth check's last_seen refresh is best-effort), a login whose session cannot be written says why, a non-ASCII
signature on the signed media route is a 403, and a malformed body on a Gradio route is a 4xx or a message."""

from __future__ import annotations

import sqlite3
import sys
import time

import httpx
import pytest

from data import db as dbmod
from serving import media_urls
from tests.support.reliability_fixtures import AppProcess, GradioSession, dependencies
from tests.support.webapp_fixtures import PASSWORD, AppServer, add_users, build_library
from webapp import failures


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    from data.settings import Settings

    d = tmp_path_factory.mktemp("messages")
    s = Settings.load({"data_dir": str(d / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=4)
    add_users(s)
    return s


@pytest.fixture(scope="module")
def srv(lib):
    with AppServer(lib, fleet_urls=[]) as server:
        yield server


def test_reads_are_answered_while_another_process_holds_the_write_lock(lib, srv):
    cookie = srv.client("ann").cookies["cw_session"]
    deps = dependencies(srv.url, cookie)
    foreign = sqlite3.connect(str(lib.db), timeout=0)
    try:
        # the session was last seen over a minute ago: the auth check wants to refresh it
        foreign.execute("UPDATE sessions SET last_seen = last_seen - 600")
        foreign.commit()
        foreign.execute("BEGIN IMMEDIATE")  # another process's write lock, held past the busy timeout
        jar = {"cw_session": cookie}
        took = []
        for path in ("/config", "/thumb/1", "/media/1", "/filmstrip/1"):
            t = time.monotonic()
            r = httpx.get(srv.url + path, cookies=jar, timeout=60, trust_env=False)
            took.append(time.monotonic() - t)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])  # before: 500 after 10 s
        tab = GradioSession(srv.url, cookie, deps)
        try:
            t = time.monotonic()
            out = tab.call("open_clip", event_data={"clip": 2})  # a read through Gradio's queue
            took.append(time.monotonic() - t)
        finally:
            tab.close()
        assert any("version" in v for v in out if isinstance(v, str))
    finally:
        foreign.rollback()
        foreign.close()
    print(f"4 reads and a clip opened under a foreign write lock: {sum(took):.2f} s, longest {max(took):.2f} s")
    assert max(took) < dbmod.BUSY_TIMEOUT_MS / 1000  # none of them waited for the lock (10 s, then a 500)


def test_a_refresh_missed_under_the_lock_is_made_later(lib):
    from data import sessions

    db = dbmod.connect(lib.db)
    try:
        token = sessions.create(db, "ann")
        db.execute("UPDATE sessions SET last_seen = last_seen - 600")
        db.conn.commit()
        foreign = sqlite3.connect(str(lib.db), timeout=0)
        foreign.execute("BEGIN IMMEDIATE")
        t = time.monotonic()
        assert sessions.lookup(db, token, idle=7200, absolute=43200) == "ann"
        assert time.monotonic() - t < 1.0
        foreign.rollback()
        foreign.close()
        assert sessions.lookup(db, token, idle=7200, absolute=43200) == "ann"
        seen = db.execute("SELECT last_seen FROM sessions WHERE user = 'ann' ORDER BY last_seen DESC").fetchone()[0]
        assert time.time() - seen < 60  # refreshed once the lock was free
    finally:
        db.close()


def test_a_login_whose_session_cannot_be_written_is_a_message(lib, tmp_path):
    """The app's files may not grow past 40 kB (RLIMIT_FSIZE): the write-ahead log fills up after a few logins
    and SQLite's writes fail, as on a full disk."""
    app = AppProcess(lib, tmp_path / "webapp.log")
    limit = 40_000
    app.cmd = [
        sys.executable,
        "-c",
        "import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
        "sys.argv = ['webapp', *sys.argv[1:]]; runpy.run_module('webapp', run_name='__main__', alter_sys=True)",
        *app.cmd[3:],
    ]
    app.start()
    try:
        codes = []
        for _ in range(40):
            r = httpx.post(app.url + "/login", data={"username": "ann", "password": PASSWORD}, timeout=60)
            codes.append(r.status_code)
            if r.status_code != 303:
                break
        print(f"logins until the session could not be written: {codes}")
        assert codes[-1] in (503, 507), (codes, r.text[-400:])  # before: 500, "Internal Server Error"
        assert "cannot sign in now" in r.text and "Traceback" not in r.text
        assert httpx.get(app.url + "/login", timeout=60).status_code == 200  # and the app still serves
    finally:
        app.stop()


def test_full_disk_and_lock_errors_have_their_own_messages():
    assert failures.describe(sqlite3.OperationalError("database or disk is full"))[0] == 507
    assert failures.describe(sqlite3.OperationalError("database is locked"))[0] == 503
    assert failures.describe(OSError(28, "No space left on device"))[0] == 507
    assert failures.describe(ValueError("x")) is None


@pytest.mark.parametrize("sig", ["é" * 64, "ｆ" * 64, "0" * 63 + "\u0660", "%ZZ" * 21 + "z"])
def test_a_non_ascii_signature_is_refused_with_a_reason(srv, sig):
    r = httpx.get(srv.url + "/media/signed/1", params={"exp": "99999999999", "sig": sig}, trust_env=False)
    assert r.status_code == 403 and "malformed signature" in r.text  # before: an anonymous 500
    key = b"k" * 32
    assert media_urls.check(key, 1, "\u0661\u0662", "0" * 64) == "malformed expiry"  # digits of another script


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"data": 5}',
        b'{"data": [1, 2, 3]}',
        b'{"data": null}',
        b'{"data": [], "fn_index": "x"}',
        b'{"data": [], "session_hash": 5}',
        b'{"data": [[[[[[]]]]]]}',
        b"\xff\xfe",
        b'{"data": [], "event_data": 7}',
        b"[" * 5000,
    ],
)
def test_a_malformed_body_on_a_gradio_route_is_not_a_500(srv, body):
    c = srv.client("lead")
    try:
        for route in ("call/save_caption", "call/start_job", "queue/join", "cancel", "run/save_caption"):
            r = c.post(f"/gradio_api/{route}", content=body, headers={"content-type": "application/json"})
            assert r.status_code < 500, (route, r.status_code, r.text[:300])
            assert "Traceback" not in r.text
            if r.status_code == 200 and route.startswith("call/"):
                events = c.get(f"/gradio_api/{route}/{r.json()['event_id']}", timeout=60).text
                assert "event: error" in events and "Traceback" not in events  # a message, no traceback
    finally:
        c.close()
