"""Users and roles: annotator < lead < admin. Passwords are stored as scrypt hashes with a per-user salt.

There are no default users and no default passwords: the first admin is created from the command line
(`python -m webapp.accounts add NAME --role admin`). Every change is recorded in the audit log.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import sqlite_utils

from data import events, sessions
from data.db import immediate, now
from data.errors import DataError, NotFound

ROLES = ("annotator", "lead", "admin")
RANK = {r: i for i, r in enumerate(ROLES)}
MIN_PASSWORD = 8
_N, _R, _P = 2**14, 8, 1  # scrypt cost: ~50 ms per check, 16 MiB of memory


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$salt$hash` (hex), a fresh 16-byte salt unless one is given."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        algo, n, r, p, salt, digest = stored.split("$")
        if algo != "scrypt":
            return False
        got = hashlib.scrypt(
            password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=len(digest) // 2
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got.hex(), digest)


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > 64 or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise DataError("A user name is 1 to 64 printable characters.")
    return name


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise DataError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    return role


def _check_password(password: str) -> str:
    if not password or len(password) < MIN_PASSWORD:
        raise DataError(f"A password needs at least {MIN_PASSWORD} characters.")
    return password


def _public(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {k: v for k, v in dict(row).items() if k != "password_hash"}


def get(db: sqlite_utils.Database, name: str) -> dict | None:
    """The user (without the hash), or None."""
    return _public(next(db.query("SELECT * FROM users WHERE name = ?", [name]), None))


def enabled_name(db: sqlite_utils.Database, name: str | None, *, ask: str) -> str:
    """`name` (trimmed) if it names an enabled user, for a lead picking a person to give work to; otherwise a
    DataError saying what to do (`ask` when no name was given, e.g. "Pick the second reviewer.")."""
    name = (name or "").strip()
    user = get(db, name) if name else None
    if user is None:
        raise DataError(f"There is no user named {name[:64]!r}: pick a person from the list." if name else ask)
    if user["disabled"]:
        raise DataError(f"{name} is disabled: pick someone else, or enable them first (Users).")
    return name


def create(db: sqlite_utils.Database, name: str, *, role: str, password: str, actor: str = "cli") -> dict:
    """Add a user. Raises DataError if the name is taken or the password too short."""
    name, role, password = _check_name(name), _check_role(role), _check_password(password)
    pw_hash = hash_password(password)  # slow: outside the write lock
    with immediate(db):
        if next(db.query("SELECT 1 FROM users WHERE name = ?", [name]), None):
            raise DataError(f"user {name!r} already exists")
        db.execute(
            "INSERT INTO users (name, role, password_hash, created_at) VALUES (?, ?, ?, ?)",
            [name, role, pw_hash, now()],
        )
        events.record(db, actor, "user.create", user=name, role=role)
    return get(db, name)


_DUMMY_HASH: list[str] = []


def _dummy_hash() -> str:
    # Computed once: hashed on every unknown-user attempt, an unknown user would cost two scrypt runs and a
    # known user one, and user names could be told apart by timing (S7).
    if not _DUMMY_HASH:
        _DUMMY_HASH.append(hash_password("not a user", salt=b"\0" * 16))
    return _DUMMY_HASH[0]


def verify(db: sqlite_utils.Database, name: str, password: str) -> dict | None:
    """The user if `password` is theirs and they are not disabled, else None: one scrypt run either way, so
    unknown, disabled and known users take the same time."""
    row = next(db.query("SELECT * FROM users WHERE name = ?", [name or ""]), None)
    ok = check_password(password or "", row["password_hash"] if row is not None else _dummy_hash())
    if row is None or not ok or row["disabled"]:
        return None
    return _public(row)


def list_users(db: sqlite_utils.Database) -> list[dict]:
    return [_public(r) for r in db.query("SELECT * FROM users ORDER BY name")]


def _update(db: sqlite_utils.Database, name: str, actor: str, action: str, sets: dict[str, Any], **detail: Any) -> dict:
    """Change a user and end all their sessions in the same transaction (S6: a password, role or disabled
    change must not leave an old cookie working)."""
    with immediate(db):
        if not next(db.query("SELECT 1 FROM users WHERE name = ?", [name]), None):
            raise NotFound(f"no user named {name!r}")
        cols = ", ".join(f"{k} = ?" for k in sets)
        db.execute(f"UPDATE users SET {cols} WHERE name = ?", [*sets.values(), name])
        ended = sessions.revoke_user(db, name)
        events.record(db, actor, action, user=name, sessions_ended=ended, **detail)
    return get(db, name)


def set_role(db: sqlite_utils.Database, name: str, role: str, *, actor: str = "cli") -> dict:
    return _update(db, name, actor, "user.role", {"role": _check_role(role)}, role=role)


def set_password(db: sqlite_utils.Database, name: str, password: str, *, actor: str = "cli") -> dict:
    return _update(db, name, actor, "user.password", {"password_hash": hash_password(_check_password(password))})


def set_disabled_flag(db: sqlite_utils.Database, name: str, disabled: bool, *, actor: str) -> dict:
    """The `disabled` flag alone (ending the user's sessions, audited), inside the caller's transaction or one
    of its own. Disabling a person is data.team.set_disabled, which also gives their clips back."""
    return _update(db, name, actor, "user.disable" if disabled else "user.enable", {"disabled": int(disabled)})


def at_least(role: str | None, needed: str) -> bool:
    """Whether `role` has the rights of `needed` (admin > lead > annotator)."""
    return role in RANK and RANK[role] >= RANK[needed]
