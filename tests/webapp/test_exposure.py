"""S5: the app is not open by accident. A real `python -m webapp` process:
- refuses `--host 0.0.0.0 --auth off` (exit 2, nothing listens);
- listens on 127.0.0.1 only by default (checked in /proc/net/tcp, not just by connecting);
- rate-limits logins: the 6th bad attempt within a minute gets 429, and so does the right password then;
- has no default password: a fresh install has no users, and common guesses do not log in.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import pytest

from data import db as dbmod, users
from tests.support.reliability_fixtures import PASSWORD, REPO, AppProcess, add_annotators


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a LISTEN socket on `port`, from /proc/net/tcp and tcp6."""
    found = set()
    for name, fam in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            parts = ln.split()
            local, state = parts[1], parts[3]
            addr_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:
                continue
            raw = bytes.fromhex(addr_hex)
            if fam == socket.AF_INET:
                found.add(socket.inet_ntop(fam, raw[::-1]))
            else:
                found.add(socket.inet_ntop(fam, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))))
    return found


def test_no_login_off_loopback(settings, tmp_path):
    port = str(AppProcess(settings, tmp_path / "x.log").port)
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "webapp",
                "--data-dir",
                str(settings.data_dir),
                "--host",
                host,
                "--port",
                port,
                "--auth",
                "off",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 2 and "loopback" in out.stderr, (host, out.returncode, out.stderr[-300:])
    assert listening_addresses(int(port)) == set()


def test_default_bind_is_loopback_login_is_rate_limited_and_no_default_password(settings, tmp_path):
    db = dbmod.connect(settings.db)
    assert users.list_users(db) == []  # a fresh install has nobody to guess
    db.close()
    app = AppProcess(settings, tmp_path / "webapp.log")
    app.start()
    try:
        assert listening_addresses(app.port) == {"127.0.0.1"}
        with httpx.Client(base_url=app.url, trust_env=False, timeout=30) as c:
            for user, pw in (("admin", "admin"), ("admin", "password"), ("root", "root"), ("local", "")):
                assert c.post("/login", data={"username": user, "password": pw}).status_code == 401
        add_annotators(settings.db, 1, prefix="s5-")
        with httpx.Client(base_url=app.url, trust_env=False, timeout=30) as c:
            codes = [
                c.post("/login", data={"username": "s5-00", "password": f"guess {i}"}).status_code for i in range(6)
            ]
            assert codes == [401] * 5 + [429], codes
            r = c.post("/login", data={"username": "s5-00", "password": PASSWORD})
            assert r.status_code == 429 and "cw_session" not in r.cookies
            # nothing behind the login either
            assert c.get("/config").status_code == 401
    finally:
        app.stop()


def test_build_app_refuses_auth_off_on_a_network(settings):
    from webapp.app import build_app

    with pytest.raises(ValueError, match="loopback"):
        build_app(settings.replace(auth="off", host="0.0.0.0"))
    assert settings.replace(auth="off", host="0.0.0.0").auth_required  # and Settings forces login anyway


def test_main_refuses_auth_off_on_a_network(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run(
        [sys.executable, "-m", "webapp", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--auth", "off"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "loopback" in r.stderr
    assert (
        "python -m webapp"
        in subprocess.run([sys.executable, "-m", "webapp", "--help"], env=env, capture_output=True, text=True).stdout
    )
