"""Server-side login sessions (docs/RELIABILITY.md, S6).

A session is a random token in the `cw_session` cookie and a row in `sessions` keyed by the token's SHA-256.
The server decides whether it is valid, so it can end it: logout deletes the row; a password change, a role
change and disabling a user delete all of that user's rows (data.users calls `revoke_user` in the same
transaction); a session unused for `idle` seconds or older than `absolute` seconds is refused and deleted.

Why not a signed cookie alone (itsdangerous, Starlette's SessionMiddleware): those are stateless, so nothing
the server does can end one before it expires, which is the bug this module fixes. The token is still
unguessable (32 random bytes) and compared by its hash in an index lookup.
"""

from __future__ import annotations

import hashlib
import secrets

import sqlite_utils

from data.db import immediate, now

TOUCH_EVERY = 60.0  # seconds: refresh last_seen at most this often (one write per user per minute, not per request)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def create(db: sqlite_utils.Database, user: str) -> str:
    """A new session for `user`; returns the token for the cookie."""
    token = secrets.token_urlsafe(32)
    t = now()
    with immediate(db):
        db.execute(
            "INSERT INTO sessions (token_hash, user, created_at, last_seen) VALUES (?, ?, ?, ?)",
            [_hash(token), user, t, t],
        )
    return token


def lookup(db: sqlite_utils.Database, token: str | None, *, idle: float, absolute: float) -> str | None:
    """The user of a live session, or None. An expired session is deleted on sight."""
    if not token or len(token) > 200:
        return None
    key = _hash(token)
    row = next(db.query("SELECT user, created_at, last_seen FROM sessions WHERE token_hash = ?", [key]), None)
    if row is None:
        return None
    t = now()
    if t - row["last_seen"] > idle or t - row["created_at"] > absolute:
        with immediate(db):
            db.execute("DELETE FROM sessions WHERE token_hash = ?", [key])
        return None
    if t - row["last_seen"] > TOUCH_EVERY:
        with immediate(db):
            db.execute("UPDATE sessions SET last_seen = ? WHERE token_hash = ?", [t, key])
    return row["user"]


def revoke(db: sqlite_utils.Database, token: str | None) -> None:
    if token:
        with immediate(db):
            db.execute("DELETE FROM sessions WHERE token_hash = ?", [_hash(token)])


def revoke_user(db: sqlite_utils.Database, user: str) -> int:
    """End every session of `user` (joins the caller's transaction if there is one). Returns how many."""
    with immediate(db):
        return db.execute("DELETE FROM sessions WHERE user = ?", [user]).rowcount


def prune(db: sqlite_utils.Database, *, idle: float, absolute: float) -> int:
    t = now()
    with immediate(db):
        return db.execute(
            "DELETE FROM sessions WHERE last_seen < ? OR created_at < ?", [t - idle, t - absolute]
        ).rowcount
