"""The shared review queue: who is on which clip, so that a team pressing "next" never gets the same clip twice.

A clip a person is served by the queue (`take_next`: n, approve/reject-and-next) or opens in Review (`visit`) is
*leased* to them: a row of `review_leases` naming the holder and when the lease runs out. While it lasts, the
others' "next" skips the clip, and the others who open it anyway are told who is on it (they may still look and
edit: saves stay optimistic, data.captions). The rules:

- The pick and the lease are one `BEGIN IMMEDIATE` transaction: two people pressing "next" at the same instant
  are served one after the other, and the second sees the first one's lease.
- A person holds one lease at a time: taking a clip gives back the one they were on (they moved on).
- A lease lasts `ttl` seconds (the `review_lease_seconds` setting) from the holder's last activity on the clip:
  opening it (`visit`), a save, a draft written as they type, the page's activity pings (`renew`). A browser that dies
  sends nothing, so its lease runs out on its own: nothing hides a clip for longer than `ttl` after its holder
  stopped.
- Signing out gives the person's lease back at once (`release`).

The queue itself (which clips, in which order, assignments first) is data.assignments.next_in_queue; this module
adds the leases around it. Leases are not audited: they are who is looking, not a change to a clip.
"""

from __future__ import annotations

import sqlite_utils

from data import assignments, clips, limits, order as orders
from data.db import immediate, now
from data.errors import NotFound


def _live_others(db: sqlite_utils.Database, user: str, t: float) -> dict[int, str]:
    """clip id -> holder of every live lease held by someone other than `user` (at most one per person)."""
    rows = db.query("SELECT clip_id, holder FROM review_leases WHERE expires_at > ? AND holder != ?", [t, user])
    return {r["clip_id"]: r["holder"] for r in rows}


def _hold(db: sqlite_utils.Database, clip_id: int, user: str, t: float, ttl: float) -> None:
    """Inside the caller's transaction: `clip_id` is `user`'s until t + ttl; any other lease of theirs ends."""
    db.execute("DELETE FROM review_leases WHERE holder = ? AND clip_id != ?", [user, clip_id])
    db.execute(
        "INSERT INTO review_leases (clip_id, holder, taken_at, expires_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(clip_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at, "
        "taken_at = CASE WHEN review_leases.holder = excluded.holder THEN review_leases.taken_at "
        "ELSE excluded.taken_at END",
        [clip_id, user, t, t + ttl],
    )


def take_next(
    db: sqlite_utils.Database,
    f: clips.Filter,
    user: str,
    *,
    ttl: float,
    after: int | None = None,
    order: orders.Order | str = orders.DEFAULT,
) -> int | None:
    """The next clip of `user`'s queue within `f` (data.assignments.next_in_queue) that nobody else is on, leased
    to `user` in the same transaction; None when no such clip is left (the lease they had is then kept)."""
    with immediate(db):
        t = now()
        target = assignments.next_in_queue(db, f, user, after=after, order=order, skip=_live_others(db, user, t))
        if target is not None:
            _hold(db, target, user, t, ttl)
    return target


def visit(db: sqlite_utils.Database, clip_id: int, user: str, *, ttl: float, wait: bool | float = True) -> str | None:
    """`user` has clip `clip_id` open: it becomes theirs (or their lease is renewed) unless someone else holds a
    live lease on it, whose name is then returned (None: the clip is `user`'s now). NotFound for no such clip.
    `wait`: how long to wait for the write lock (data.db.immediate); past it, sqlite3.OperationalError."""
    clip_id = limits.sql_int(clip_id, "clip id")
    with immediate(db, wait=wait):
        if next(db.query("SELECT 1 FROM clips WHERE id = ?", [clip_id]), None) is None:
            raise NotFound(f"clip {clip_id} does not exist")
        t = now()
        row = next(db.query("SELECT holder, expires_at FROM review_leases WHERE clip_id = ?", [clip_id]), None)
        if row is not None and row["holder"] != user and row["expires_at"] > t:
            # they stay on this clip; whatever `user` held before is given back (they moved on from it)
            db.execute("DELETE FROM review_leases WHERE holder = ?", [user])
            return row["holder"]
        _hold(db, clip_id, user, t, ttl)
    return None


def renew(db: sqlite_utils.Database, clip_id: int, user: str, *, ttl: float) -> bool:
    """Activity of `user` on `clip_id` (typing, playing the video): their lease on it lasts `ttl` from now. Only a
    lease they hold is renewed (an expired one too, if nobody took the clip since): activity never takes a clip
    or gives one back, so a late ping for the clip they just left cannot take it back from the one they are on.
    Returns whether there was a lease to renew."""
    clip_id = limits.sql_int(clip_id, "clip id")
    with immediate(db):
        return (
            db.execute(
                "UPDATE review_leases SET expires_at = ? WHERE clip_id = ? AND holder = ?", [now() + ttl, clip_id, user]
            ).rowcount
            > 0
        )


def release(db: sqlite_utils.Database, user: str) -> int:
    """`user` signed out: their lease ends now. Returns how many leases ended (0 or 1)."""
    with immediate(db):
        return db.execute("DELETE FROM review_leases WHERE holder = ?", [user]).rowcount


def holder(db: sqlite_utils.Database, clip_id: int) -> str | None:
    """Who holds a live lease on `clip_id` (None: nobody)."""
    row = next(
        db.query("SELECT holder FROM review_leases WHERE clip_id = ? AND expires_at > ?", [clip_id, now()]), None
    )
    return row["holder"] if row else None


def leases(db: sqlite_utils.Database) -> dict[int, str]:
    """clip id -> holder of every live lease (for a lead's view, and the tests)."""
    rows = db.query("SELECT clip_id, holder FROM review_leases WHERE expires_at > ? ORDER BY clip_id", [now()])
    return {r["clip_id"]: r["holder"] for r in rows}
