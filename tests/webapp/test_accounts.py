"""People's accounts (data.users, `python -m webapp.accounts`): passwords hashed with a salt and verified, no short
passwords, no duplicate users, and the accounts command adds and lists them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from data import team, users
from data.errors import DataError


def test_password_is_hashed_with_a_salt_and_verified(db):
    users.create(db, "alice", role="admin", password="s3cret-pass")
    users.create(db, "bob", role="annotator", password="s3cret-pass")
    hashes = [r["password_hash"] for r in db.query("SELECT password_hash FROM users")]
    assert len(set(hashes)) == 2 and all(h.startswith("scrypt$") and "s3cret" not in h for h in hashes)
    assert users.verify(db, "alice", "s3cret-pass")["role"] == "admin"
    assert users.verify(db, "alice", "wrong") is None
    assert users.verify(db, "nobody", "s3cret-pass") is None
    team.set_disabled(db, "bob", True)
    assert users.verify(db, "bob", "s3cret-pass") is None


def test_no_short_passwords_and_no_duplicate_users(db):
    with pytest.raises(DataError, match="at least"):
        users.create(db, "carol", role="lead", password="short")
    users.create(db, "carol", role="lead", password="long enough")
    with pytest.raises(DataError, match="exists"):
        users.create(db, "carol", role="lead", password="long enough")
    with pytest.raises(DataError, match="unknown role"):
        users.set_role(db, "carol", "root")


def test_users_cli_adds_and_lists(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("a fine password\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    base = [sys.executable, "-m", "webapp.accounts", "--data-dir", str(tmp_path / "var")]
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
    assert again.returncode == 2 and "already exists" in again.stderr  # refused, as every CLI of ours says it
    helptext = subprocess.run(base + ["--help"], env=env, capture_output=True, text=True).stdout
    assert "python -m webapp.accounts add" in helptext and "sign-in-link bob" in helptext
    # a one-time sign-in link (issue 46): printed with the app's address; refused for a name that is no user
    link = subprocess.run(base + ["sign-in-link", "root"], env=env, capture_output=True, text=True, check=True)
    assert re.fullmatch(r"http://127\.0\.0\.1:7860/login/link/[\w-]{40,}\n", link.stdout), link.stdout
    assert "works once" in link.stderr
    nobody = subprocess.run(base + ["sign-in-link", "nobody"], env=env, capture_output=True, text=True)
    assert nobody.returncode == 2 and "no active user named 'nobody'" in nobody.stderr
