"""Who reviews what: a lead assigns clips to a person, and that person's review queue serves them first.

- `assign(db, f, assignee, ...)`: the clips of filter `f` go to `assignee` -- all of them (at most
  MAX_ASSIGN), or with `limit` the next `limit` unreviewed clips of the filter that nobody has yet, in the
  grid's order (`order`, data.order; a lead dealing out work: 50 to one annotator, the next 50 to another; a
  filter that names an assignee takes from that person's unreviewed clips instead). A clip assigned to
  someone else is reassigned. `unassign(db, f, ...)` gives the filter's clips back to nobody. `assign_clip` /
  `unassign_clip` do the same for the one clip a lead is looking at in Review; `assign_ids` for a list of clips
  (a random review sample's share, data.quality.samples).
- Every change is one audit event per clip (`clip.assign` with the previous assignee, `clip.unassign`), in
  the same transaction. Only leads and admins assign: the role is checked here, not only in the UI.
- `next_in_queue(db, f, user, ...)`: "next unreviewed" for `user`, in the grid's order: their clips of the
  filter first, then clips nobody has; clips assigned to someone else are theirs to review, so they are
  skipped (unless the filter itself names an assignee or asks for unassigned clips: then it is the queue as
  asked). Only clips a person can review are in it: unreviewed (not approved, rejected or flagged broken),
  read by ingest (an ingest failure has nothing to play) and with a current caption (a clip no job captioned
  yet has nothing to check: `awaiting_caption` counts those, for the message of an empty queue).
  data.review_queue adds the leases on top.
"""

from __future__ import annotations

import dataclasses
from typing import Collection

import sqlite_utils

from data import clips, events, order as orders, users
from data.db import immediate, now
from data.errors import DataError, Forbidden

# clips one assignment may touch: a bound on its write transaction (10,000 held the lock ~0.4 s on the 2-core VM,
# docs/BENCHMARKS.md); more is a narrower filter or several assignments
MAX_ASSIGN = 10_000


def _check_actor(role: str | None) -> None:
    if not users.at_least(role, "lead"):
        raise Forbidden(f"Only a lead assigns clips; you are {role or 'not signed in'}.")


def _check_assignee(db: sqlite_utils.Database, name: str | None) -> str:
    return users.enabled_name(db, name, ask="Pick the person to assign the clips to.")


def _current(db: sqlite_utils.Database, ids: list[int]) -> dict[int, str]:
    """clip id -> assignee, for the clips of `ids` that have one."""
    out: dict[int, str] = {}
    for i in range(0, len(ids), 500):  # SQLite's variable limit
        chunk = ids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT clip_id, assignee FROM assignments WHERE clip_id IN ({marks})"
        out.update({r["clip_id"]: r["assignee"] for r in db.query(sql, chunk)})
    return out


def _filter_ids(db: sqlite_utils.Database, f: clips.Filter) -> list[int]:
    sql, args = clips.id_query(f)
    ids = [r[0] for r in db.execute(sql + " LIMIT ?", [*args, MAX_ASSIGN + 1])]
    if len(ids) > MAX_ASSIGN:
        raise DataError(
            f"This filter holds more than {MAX_ASSIGN:,} clips: narrow it, or give how many clips to assign."
        )
    return ids


def assign(
    db: sqlite_utils.Database,
    f: clips.Filter,
    assignee: str,
    *,
    actor: str,
    role: str,
    limit: int | None = None,
    order: orders.Order | str = orders.DEFAULT,
) -> dict:
    """Assign the clips of `f` (or, with `limit`, its next `limit` unreviewed, unassigned clips in the grid's
    order) to `assignee`. Returns counts: assigned (new or changed), reassigned (taken from someone else),
    unchanged (already theirs). Raises Forbidden for a non-lead, DataError for an unknown user or a bad limit."""
    _check_actor(role)
    if limit is not None and not (isinstance(limit, int) and 1 <= limit <= MAX_ASSIGN):
        raise DataError(f"How many clips: a whole number from 1 to {MAX_ASSIGN:,} (empty: the whole filter).")
    with immediate(db):
        assignee = _check_assignee(db, assignee)
        if limit is None:
            ids = _filter_ids(db, f)
        else:
            # open work: unreviewed, and nobody's yet (or, when the filter names a person, theirs: moving work)
            open_work = dataclasses.replace(f, review_status="unreviewed", unassigned=None if f.assignee else True)
            ids = clips.page_ids(db, open_work, order=order, limit=limit)
        return _assign_ids(db, ids, assignee, actor)


def assign_clip(db: sqlite_utils.Database, clip_id: int, assignee: str, *, actor: str, role: str) -> dict:
    """Assign one clip (the one a lead is looking at in Review) to `assignee`; counts as `assign` returns them."""
    _check_actor(role)
    with immediate(db):
        assignee = _check_assignee(db, assignee)
        return _assign_ids(db, [clips.get(db, clip_id)["id"]], assignee, actor)


def assign_ids(db: sqlite_utils.Database, clip_ids: list[int], assignee: str, *, actor: str, role: str) -> dict:
    """Assign exactly the clips `clip_ids` (a drawn sample's share of its clips: data.quality.samples) to `assignee`;
    counts as `assign` returns them. Called inside a transaction, it is part of it (a savepoint)."""
    _check_actor(role)
    if len(clip_ids) > MAX_ASSIGN:
        raise DataError(f"At most {MAX_ASSIGN:,} clips are assigned at once (got {len(clip_ids):,}).")
    with immediate(db):
        assignee = _check_assignee(db, assignee)
        return _assign_ids(db, list(clip_ids), assignee, actor)


def _assign_ids(db: sqlite_utils.Database, ids: list[int], assignee: str, actor: str) -> dict:
    """Inside the caller's transaction: `ids` go to `assignee`, one audit event per changed clip."""
    before = _current(db, ids)
    changed = [cid for cid in ids if before.get(cid) != assignee]
    t = now()
    db.conn.executemany(
        "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(clip_id) DO UPDATE SET assignee = excluded.assignee, assigned_by = excluded.assigned_by, "
        "assigned_at = excluded.assigned_at",
        [(cid, assignee, actor, t) for cid in changed],
    )
    events.record_many(
        db, actor, "clip.assign", [(cid, {"assignee": assignee, "previous": before.get(cid)}) for cid in changed]
    )
    return {
        "assignee": assignee,
        "assigned": len(changed),
        "reassigned": sum(1 for cid in changed if cid in before),
        "unchanged": len(ids) - len(changed),
    }


def unassign(db: sqlite_utils.Database, f: clips.Filter, *, actor: str, role: str) -> int:
    """Give the clips of `f` back to nobody; returns how many had an assignee."""
    _check_actor(role)
    with immediate(db):
        sql, args = clips.id_query(f)
        rows = list(
            db.query(
                f"SELECT clip_id, assignee FROM assignments WHERE clip_id IN ({sql}) ORDER BY clip_id LIMIT ?",
                [*args, MAX_ASSIGN + 1],
            )
        )
        if len(rows) > MAX_ASSIGN:
            raise DataError(f"This filter holds more than {MAX_ASSIGN:,} assigned clips: narrow it first.")
        _unassign_rows(db, rows, actor)
    return len(rows)


def unassign_clip(db: sqlite_utils.Database, clip_id: int, *, actor: str, role: str) -> str | None:
    """Give one clip back to nobody; returns who had it (None: nobody, and nothing is written)."""
    _check_actor(role)
    with immediate(db):
        cid = clips.get(db, clip_id)["id"]
        rows = list(db.query("SELECT clip_id, assignee FROM assignments WHERE clip_id = ?", [cid]))
        _unassign_rows(db, rows, actor)
    return rows[0]["assignee"] if rows else None


def _unassign_rows(db: sqlite_utils.Database, rows: list[dict], actor: str) -> None:
    db.conn.executemany("DELETE FROM assignments WHERE clip_id = ?", [(r["clip_id"],) for r in rows])
    events.record_many(db, actor, "clip.unassign", [(r["clip_id"], {"previous": r["assignee"]}) for r in rows])


def assignee_of(db: sqlite_utils.Database, clip_id: int) -> str | None:
    row = next(db.query("SELECT assignee FROM assignments WHERE clip_id = ?", [clip_id]), None)
    return row["assignee"] if row else None


def workload(db: sqlite_utils.Database) -> dict[str, dict[str, int]]:
    """Per assignee: clips assigned and how many of them are still unreviewed (for the lead's view)."""
    rows = db.query(
        "SELECT a.assignee, COUNT(*) AS assigned, SUM(c.review_status = 'unreviewed') AS open "
        "FROM assignments a JOIN clips c ON c.id = a.clip_id GROUP BY a.assignee ORDER BY a.assignee"
    )
    return {r["assignee"]: {"assigned": r["assigned"], "open": int(r["open"] or 0)} for r in rows}


def queue_tiers(f: clips.Filter, user: str) -> list[clips.Filter]:
    """The filters "next unreviewed" walks for `user`, in order (see the module docstring)."""
    if f.has_caption is False:  # a filter of clips without a caption: nothing in it to review yet
        return []
    return [dataclasses.replace(t, has_caption=True) for t in _tiers(f, user)]


def _tiers(f: clips.Filter, user: str) -> list[clips.Filter]:
    """The queue's tiers, captioned or not: unreviewed, read by ingest; `user`'s clips, then nobody's."""
    base = dataclasses.replace(f, review_status="unreviewed", failed=False)
    if f.assignee or f.unassigned:
        return [base]
    return [dataclasses.replace(base, assignee=user), dataclasses.replace(base, unassigned=True)]


AWAITING_CAP = 1000  # an empty queue says "1,000+ clips await captioning" past this: the count stays cheap


def awaiting_caption(db: sqlite_utils.Database, f: clips.Filter, user: str) -> tuple[int, bool]:
    """(count, exact): the clips `user`'s queue within `f` would serve once a job captioned them (each tier
    without a caption yet); counted up to AWAITING_CAP."""
    if f.has_caption is True:
        return 0, True
    n, exact = 0, True
    for tier in _tiers(f, user):
        k, ok = clips.count_upto(db, dataclasses.replace(tier, has_caption=False), AWAITING_CAP - n)
        n, exact = n + k, exact and ok
        if not exact:
            break
    return n, exact


def next_in_queue(
    db: sqlite_utils.Database,
    f: clips.Filter,
    user: str,
    *,
    after: int | None = None,
    order: orders.Order | str = orders.DEFAULT,
    skip: Collection[int] = (),
) -> int | None:
    """The next clip of `user`'s review queue within `f` after clip `after` in `order` (the grid's), wrapping
    around; None when the queue is empty. `after` places us only in its own tier: moving on from the last of
    your clips to the unassigned ones starts at the top of those, not where your clip happened to be. Clips in
    `skip` (others are on them, data.review_queue) are passed over: a page reads that many rows more, and there
    are at most as many as people reviewing."""
    tiers = queue_tiers(f, user)
    holder = assignee_of(db, after) if after is not None and len(tiers) > 1 else None
    here = clips.cursor_at(db, order, after) if after is not None else None
    passed = {after, *skip}
    for tier in tiers:
        own = len(tiers) == 1 or (tier.assignee or None) == holder
        for anchor in (here, None) if here is not None and own else (None,):
            page = clips.page(db, tier, order=order, after=anchor, limit=len(passed) + 1).rows
            rows = [r for r in page if r["id"] not in passed]
            if rows:
                return rows[0]["id"]
    return None


def release(db: sqlite_utils.Database, assignee: str, *, actor: str, why: str) -> int:
    """Give every clip of `assignee` back to nobody (inside the caller's transaction, or one of its own), one
    `clip.unassign` event each naming `why`. Called when a user is disabled: their clips would otherwise drop
    out of every queue (theirs is closed, and everyone else's skips clips assigned to another person)."""
    with immediate(db):
        rows = list(db.query("SELECT clip_id, assignee FROM assignments WHERE assignee = ?", [assignee]))
        db.conn.executemany("DELETE FROM assignments WHERE clip_id = ?", [(r["clip_id"],) for r in rows])
        events.record_many(
            db, actor, "clip.unassign", [(r["clip_id"], {"previous": r["assignee"], "why": why}) for r in rows]
        )
    return len(rows)
