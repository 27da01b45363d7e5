"""Fast checks of the web app's pieces: users and passwords, the users CLI, session cookies, the login
limiter, path confinement, escaping, and the refusal to run open on a network."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from data import users
from data.db import DataError
from webapp import auth, render
from webapp.media import resolve_inside


def test_password_is_hashed_with_a_salt_and_verified(db):
    users.create(db, "alice", role="admin", password="s3cret-pass")
    users.create(db, "bob", role="annotator", password="s3cret-pass")
    hashes = [r["password_hash"] for r in db.query("SELECT password_hash FROM users")]
    assert len(set(hashes)) == 2 and all(h.startswith("scrypt$") and "s3cret" not in h for h in hashes)
    assert users.verify(db, "alice", "s3cret-pass")["role"] == "admin"
    assert users.verify(db, "alice", "wrong") is None
    assert users.verify(db, "nobody", "s3cret-pass") is None
    users.set_disabled(db, "bob", True)
    assert users.verify(db, "bob", "s3cret-pass") is None


def test_no_short_passwords_and_no_duplicate_users(db):
    with pytest.raises(DataError, match="at least"):
        users.create(db, "carol", role="lead", password="short")
    users.create(db, "carol", role="lead", password="long enough")
    with pytest.raises(DataError, match="exists"):
        users.create(db, "carol", role="lead", password="long enough")
    with pytest.raises(DataError, match="unknown role"):
        users.set_role(db, "carol", "root")


def test_roles_are_ordered():
    assert users.at_least("admin", "lead") and users.at_least("lead", "lead")
    assert not users.at_least("annotator", "lead") and not users.at_least(None, "annotator")


def test_users_cli_adds_and_lists(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("a fine password\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    base = [sys.executable, "-m", "webapp.users", "--data-dir", str(tmp_path / "var")]
    out = subprocess.run(
        base + ["add", "root", "--role", "admin", "--password-file", str(pw)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "added root (admin)" in out.stdout
    assert "root\tadmin" in subprocess.run(base + ["list"], env=env, capture_output=True, text=True).stdout
    again = subprocess.run(base + ["add", "root", "--password-file", str(pw)], env=env, capture_output=True, text=True)
    assert again.returncode == 1 and "already exists" in again.stderr
    helptext = subprocess.run(base + ["--help"], env=env, capture_output=True, text=True).stdout
    assert "python -m webapp.users add" in helptext


def test_sessions_are_server_side_and_end(db):
    from data import sessions

    token = sessions.create(db, "alice")
    assert sessions.lookup(db, token, idle=60, absolute=3600) == "alice"
    assert sessions.lookup(db, token + "x", idle=60, absolute=3600) is None
    assert sessions.lookup(db, None, idle=60, absolute=3600) is None
    assert token not in str(list(db.query("SELECT * FROM sessions")))  # only its hash is stored
    sessions.revoke(db, token)
    assert sessions.lookup(db, token, idle=60, absolute=3600) is None


def test_limiter_delays_per_account_and_per_address_and_trusted_keys_apart():
    from webapp.throttle import LoginThrottle

    lim = LoginThrottle()
    keys = lambda ip: lim.keys("bob", ip, set())  # noqa: E731 - untrusted: account + address
    for i in range(5):
        assert lim.attempt(keys(f"10.0.0.{i}"), now=i) == 0  # five addresses, one account
    assert lim.attempt(keys("10.0.0.99"), now=5) == pytest.approx(4.0)  # 5 s after the last failure
    assert lim.attempt(keys("10.0.0.99"), now=9.5) == 0  # ...then one more check
    assert lim.attempt(keys("10.0.0.99"), now=10) == pytest.approx(9.5)  # and the delay doubles
    # the browser bob signed in from before is held back by nothing of the above
    assert lim.attempt(lim.keys("bob", "10.0.0.99", {"device"}, "tok"), now=10) == 0
    for i in range(20):  # spraying one password over many accounts from one address
        assert lim.attempt(lim.keys(f"user{i}", "1.2.3.4", set()), now=100 + i * 0.01) == 0
    assert lim.attempt(lim.keys("user20", "1.2.3.4", set()), now=101) > 0
    # an account that signed in from that address before is counted apart from the spray
    assert lim.attempt(lim.keys("carol", "1.2.3.4", {"address"}), now=101) == 0
    lim2 = LoginThrottle()
    k = lim2.keys("eve", "a", set())
    assert lim2.attempt(k, now=0) == 0
    lim2.succeeded(k)  # a right password gives its place back
    assert all(lim2.attempt(k, now=t) == 0 for t in (1, 2, 3, 4, 5)) and lim2.attempt(k, now=6) > 0


def test_next_url_stays_on_site():
    assert auth._safe_next("/?clip=3") == "/?clip=3"
    for bad in ("//evil.example", "https://evil.example", "\\\\evil", "/\\evil", None, ""):
        assert auth._safe_next(bad) == "/"


def test_resolve_inside_refuses_escapes(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok.mp4").write_bytes(b"x")
    (tmp_path / "secret").write_text("s")
    (root / "a" / "out.mp4").symlink_to(tmp_path / "secret")
    assert resolve_inside(root, "a/ok.mp4") == (root / "a" / "ok.mp4").resolve()
    for bad in (
        "../secret",
        "a/../../secret",
        str(tmp_path / "secret"),
        "a/out.mp4",
        "a/ok.mp4\x00",
        "/etc/passwd",
        "",
        None,
        "a",
        ".",
        "a/missing.mp4",
    ):
        assert resolve_inside(root, bad) is None, bad


def test_render_escapes_everything():
    evil = "<script>alert(1)</script>\"'"
    row = {"id": 1, "path": evil, "review_status": "unreviewed", "caption_preview": evil, "hazard_level": None}
    for html_out in (
        render.tiles([row]),
        render.word_diff(evil, evil + " x"),
        render.message(evil),
        render.header(
            {
                "id": 1,
                "path": evil,
                "codec": evil,
                "reviewed_by": evil,
                "review_status": "approved",
                "reviewed_at": 1.0,
            },
            "u",
            "annotator",
        ),
    ):
        assert "<script>" not in html_out and "&lt;script&gt;" in html_out


def test_word_diff_marks_changes():
    out = render.word_diff("a car turns left", "a bus turns left")
    assert "<del>car</del>" in out and "<ins>bus</ins>" in out


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


def test_job_form_shows_what_the_job_will_cost_on_a_gpu_fleet(settings):
    """The start form's preview names the wall time and GPU-hours on this fleet from the recorded GPU runs
    (serving.cost); a simulated fleet gets none (its speed says nothing about GPUs)."""
    from webapp.context import AppContext
    from webapp.jobs_tab import JobsTab

    urls = [f"http://10.9.9.{i}:8000" for i in range(8)]  # a list of replicas: counted, not asked
    tab = JobsTab(AppContext(settings.replace(fleet_urls=tuple(urls)), fleet_urls=urls, simulated=False))
    html = tab._cost_html(100_000)
    assert "on 8 GPU(s)" in html and "GPU-hours" in html and "measured" in html and "h " in html
    sim = JobsTab(AppContext(settings.replace(fleet_mode="sim"), fleet_urls=[], simulated=True))
    assert sim._cost_html(100_000) == ""
