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
import sqlite3

import sqlite_utils

from data.db import immediate, now

TOUCH_EVERY = 60.0  # seconds: refresh last_seen at most this often (one write per user per minute, not per request)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def create(db: sqlite_utils.Database, user: str, *, keep: int | None = None) -> str:
    """A new session for `user`; returns the token for the cookie. With `keep`, the user keeps at most that many
    sessions: their oldest ones end (a script signing in in a loop must not grow the table for 12 hours; the
    web app passes its `sessions_per_person` setting). Joins the caller's transaction if there is one."""
    token = secrets.token_urlsafe(32)
    t = now()
    with immediate(db):
        db.execute(
            "INSERT INTO sessions (token_hash, user, created_at, last_seen) VALUES (?, ?, ?, ?)",
            [_hash(token), user, t, t],
        )
        if keep is not None:
            db.execute(
                "DELETE FROM sessions WHERE user = ? AND token_hash NOT IN (SELECT token_hash FROM sessions "
                "WHERE user = ? ORDER BY created_at DESC, token_hash DESC LIMIT ?)",
                [user, user, max(1, int(keep))],
            )
    return token


def lookup(db: sqlite_utils.Database, token: str | None, *, idle: float, absolute: float) -> str | None:
    """The user of a live session, or None. A read: it never waits for the write lock. Refreshing last_seen
    (at most every TOUCH_EVERY s) and deleting an expired session are best-effort writes done only if the lock
    is free at that instant: while another process holds it (a long job write, a sqlite3 shell) every request
    is still answered, and a refresh missed now is made by a later request (the idle limit is hours)."""
    if not token or len(token) > 200:
        return None
    key = _hash(token)
    row = next(db.query("SELECT user, created_at, last_seen FROM sessions WHERE token_hash = ?", [key]), None)
    if row is None:
        return None
    t = now()
    if t - row["last_seen"] > idle or t - row["created_at"] > absolute:
        _best_effort(db, "DELETE FROM sessions WHERE token_hash = ?", [key])  # prune() removes it otherwise
        return None
    if t - row["last_seen"] > TOUCH_EVERY:
        _best_effort(db, "UPDATE sessions SET last_seen = ? WHERE token_hash = ?", [t, key])
    return row["user"]


def _best_effort(db: sqlite_utils.Database, sql: str, args: list) -> bool:
    """Run one write if the write lock is free now; False (nothing written) if it is taken or the disk refuses."""
    try:
        with immediate(db, wait=False):
            db.execute(sql, args)
        return True
    except sqlite3.OperationalError:
        return False


def revoke(db: sqlite_utils.Database, token: str | None) -> None:
    if token:
        with immediate(db):
            db.execute("DELETE FROM sessions WHERE token_hash = ?", [_hash(token)])


def revoke_user(db: sqlite_utils.Database, user: str) -> int:
    """End every session of `user`, and forget the browsers and addresses it signed in from (the login
    limiter trusts those): joins the caller's transaction if there is one. Returns how many sessions."""
    with immediate(db):
        db.execute("DELETE FROM login_trust WHERE user = ?", [user])
        return db.execute("DELETE FROM sessions WHERE user = ?", [user]).rowcount


def prune(db: sqlite_utils.Database, *, idle: float, absolute: float) -> int:
    """Delete expired sessions of anyone; best-effort (0 while another process holds the write lock)."""
    t = now()
    try:
        with immediate(db, wait=False):
            return db.execute(
                "DELETE FROM sessions WHERE last_seen < ? OR created_at < ?", [t - idle, t - absolute]
            ).rowcount
    except sqlite3.OperationalError:
        return 0


# -- where an account signed in from before (the login limiter's trust, webapp.login.throttle) ---------------------
TRUST_KINDS = ("device", "address", "network")
TRUST_KEPT = 20  # browsers, addresses and networks remembered per account, the most recently used
LINK_TTL_S = 3600.0  # a one-time sign-in link an admin issues is good for an hour
LINKS_KEPT = 5  # links kept per account (the newest)


def new_device_token() -> str:
    """A random browser id for the `cw_device` cookie (only its hash is stored, per account)."""
    return secrets.token_urlsafe(32)


def trusted(
    db: sqlite_utils.Database, user: str, *, device: str | None, address: str, network: str | None = None
) -> set[str]:
    """Which of this browser (`device` token), this `address` and its `network` (the caller's form: an IPv4 /24,
    an IPv6 /64) signed `user` in before: a subset of TRUST_KINDS, plus "known" when any account signed in from
    `network`. A read."""
    keys = [("address", _hash(address))]
    if device and len(device) <= 200:
        keys.append(("device", _hash(device)))
    if network:
        keys.append(("network", _hash(network)))
    found = set()
    for kind, value in keys:
        row = db.execute(
            "SELECT 1 FROM login_trust WHERE user = ? AND kind = ? AND value_hash = ?", [user, kind, value]
        ).fetchone()
        if row:
            found.add(kind)
    if (
        network
        and db.execute(
            "SELECT 1 FROM login_trust WHERE kind = 'network' AND value_hash = ? LIMIT 1", [_hash(network)]
        ).fetchone()
    ):
        found.add("known")
    return found


def remember(db: sqlite_utils.Database, user: str, *, device: str, address: str, network: str | None = None) -> None:
    """After a right password: `user` signed in from this browser, this address and its network (joins the
    caller's transaction). Keeps the TRUST_KEPT most recent of each kind."""
    t = now()
    values = [("device", _hash(device)), ("address", _hash(address))]
    if network:
        values.append(("network", _hash(network)))
    with immediate(db):
        for kind, value in values:
            _keep(db, user, kind, value, t, TRUST_KEPT)


def _keep(db: sqlite_utils.Database, user: str, kind: str, value: str, t: float, kept: int) -> None:
    db.execute(
        "INSERT INTO login_trust (user, kind, value_hash, created_at, last_used) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT(user, kind, value_hash) DO UPDATE SET last_used = excluded.last_used",
        [user, kind, value, t, t],
    )
    db.execute(
        "DELETE FROM login_trust WHERE user = ? AND kind = ? AND value_hash NOT IN (SELECT value_hash "
        "FROM login_trust WHERE user = ? AND kind = ? ORDER BY last_used DESC LIMIT ?)",
        [user, kind, user, kind, kept],
    )


def issue_link(db: sqlite_utils.Database, user: str) -> str:
    """A one-time sign-in link's token for `user` (good for LINK_TTL_S, once): the browser that opens it is
    trusted for `user` as one it signed in from before (`use_link`), so that nobody else's failures hold it back.
    The password is still asked. Only its hash is stored."""
    token = secrets.token_urlsafe(32)
    with immediate(db):
        _keep(db, user, "link", _hash(token), now(), LINKS_KEPT)
    return token


def use_link(db: sqlite_utils.Database, token: str | None) -> tuple[str, str] | None:
    """Spend a sign-in link: (the user, a new browser id that now counts as one `user` signed in from), or None
    when the token is no link's, was used, or is older than LINK_TTL_S."""
    if not token or len(token) > 200:
        return None
    query = "SELECT user, created_at FROM login_trust WHERE kind = 'link' AND value_hash = ?"
    if db.execute(query, [_hash(token)]).fetchone() is None:
        return None  # a read: a flood of made-up links takes no write lock
    with immediate(db):
        row = db.execute(query, [_hash(token)]).fetchone()
        if row is None:
            return None
        db.execute("DELETE FROM login_trust WHERE kind = 'link' AND value_hash = ?", [_hash(token)])
        if row[1] < now() - LINK_TTL_S:
            return None
        device = new_device_token()
        _keep(db, row[0], "device", _hash(device), now(), TRUST_KEPT)
    return row[0], device
