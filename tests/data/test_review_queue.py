"""The shared review queue (data.review_queue), broken clips and migration m013 against real SQLite files: a team
pressing "next" at once never gets one clip twice, a lease runs out on its own, clips nobody can review are not in
the queue and are counted apart from rejections. Concurrency is tested with threads (one connection each, as the
web app's handler threads) and with processes (as several app processes on one database would)."""

from __future__ import annotations

import collections
import multiprocessing
import threading
import time

import pytest

from data import assignments, captions, clips, db as dbmod, events, review_queue, review_states, schema, users
from data.db import immediate
from data.errors import Conflict, DataError, Forbidden
from tests.support.runner_fixtures import LABELS

PASSWORD = "correct horse battery"
TTL = 300.0


def make_queue(db, n: int, *, failed=(), broken=()) -> list[int]:
    """n clips with a machine caption each (ids in insert order); clips at the `failed` positions failed ingest,
    those at `broken` are flagged broken."""
    with immediate(db):
        for i in range(n):
            db.execute(
                "INSERT INTO clips (path, probe_error) VALUES (?, ?)",
                [f"q/{i:03d}.mp4", "truncated: moov box missing" if i in failed else None],
            )
    ids = [r[0] for r in db.execute("SELECT id FROM clips ORDER BY id")]
    for i, cid in enumerate(ids):
        if i not in failed:
            captions.add_machine(db, cid, job_id=None, text=f"clip {i}", labels=LABELS, provenance={"model": "m"})
    for i in broken:
        review_states.flag_broken(db, ids[i], user="ann", reason="black frames only")
    return ids


@pytest.fixture
def team(db):
    for name, role in (("ann", "annotator"), ("bob", "annotator"), ("lead", "lead")):
        users.create(db, name, role=role, password=PASSWORD)
    return db


# -- migration m013 -------------------------------------------------------------------------------------------


def test_m013_keeps_every_row_index_trigger_and_foreign_key_of_clips(tmp_path):
    """The rebuild that lets review_status be 'broken' keeps the data, the FTS index in step, the row count
    triggers, the indexes, and the CHECK itself (only the new value is added)."""
    db = dbmod.connect(tmp_path / "old.db", migrate=False)
    schema.MIGRATIONS.apply(db, stop_before="m013_review_queue")
    with immediate(db):  # rows as the schema before m013 held them (today's data functions read review_note)
        for i in range(5):
            cid = db.execute(
                "INSERT INTO clips (path, probe_error, caption_text) VALUES (?, ?, ?)",
                [f"q/{i}.mp4", "truncated" if i == 4 else None, f"clip {i} with a bus"],
            ).lastrowid
            cap = db.execute(
                "INSERT INTO captions (clip_id, version, text, labels, source, author, created_at) "
                "VALUES (?, 1, ?, '{}', 'model', 'model', 0)",
                [cid, f"clip {i} with a bus"],
            ).lastrowid
            db.execute("UPDATE clips SET current_caption_id = ? WHERE id = ?", [cap, cid])
            db.execute("INSERT INTO assignments VALUES (?, 'ann', 'lead', 0)", [cid])
    ids = [r[0] for r in db.execute("SELECT id FROM clips ORDER BY id")]
    before = {r["name"]: r["sql"] for r in db.query("SELECT name, sql FROM sqlite_master WHERE tbl_name = 'clips'")}
    rows_before = list(db.query("SELECT * FROM clips ORDER BY id"))
    names = [m.name for m in schema.MIGRATIONS._migrations]
    later = names[names.index("m013_review_queue") + 1 :]  # what later migrations add to clips is not m013's
    schema.MIGRATIONS.apply(db, stop_before=later or None)
    after = {r["name"]: r["sql"] for r in db.query("SELECT name, sql FROM sqlite_master WHERE tbl_name = 'clips'")}
    assert set(after) == set(before)  # every index and trigger is back
    assert {k: v for k, v in after.items() if k != "clips"} == {k: v for k, v in before.items() if k != "clips"}
    rows_after = list(db.query("SELECT * FROM clips ORDER BY id"))
    assert [{k: v for k, v in r.items() if k != "review_note"} for r in rows_after] == rows_before
    # the FTS triggers work on the new table: an edit is found by its new words
    captions.save_human(
        db,
        ids[0],
        text="a cyclist in the fog",
        labels=LABELS,
        author="ann",
        base_caption_id=rows_before[0]["current_caption_id"],
    )
    assert [r["id"] for r in clips.page(db, clips.Filter(text="cyclist")).rows] == [ids[0]]
    assert [r["id"] for r in clips.page(db, clips.Filter(text="bus")).rows] == ids[1:]  # the old text, indexed
    db.execute("INSERT INTO clips (path) VALUES ('q/new.mp4')")
    db.conn.commit()
    assert clips.total(db) == 6  # the row count triggers too
    review_states.flag_broken(db, ids[1], user="ann", reason="no picture")
    with pytest.raises(Exception, match="CHECK constraint failed"):
        db.execute("UPDATE clips SET review_status = 'lost' WHERE id = ?", [ids[2]])
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    db.close()


# -- the queue and its leases --------------------------------------------------------------------------------


def test_two_people_pressing_next_get_different_clips_and_the_lease_moves_on_with_them(team):
    ids = make_queue(team, 4)
    a = review_queue.take_next(team, clips.Filter(), "ann", ttl=TTL)
    b = review_queue.take_next(team, clips.Filter(), "bob", ttl=TTL)
    assert a == ids[-1] and b == ids[-2]  # the grid's order (newest first), bob skips ann's clip
    assert review_queue.leases(team) == {a: "ann", b: "bob"}
    # bob opens ann's clip: he is told she is on it, and his own lease ends (he moved on)
    assert review_queue.visit(team, a, "bob", ttl=TTL) == "ann"
    assert review_queue.leases(team) == {a: "ann"}
    # ann moves on with "next": her old clip is free again, she holds one lease
    a2 = review_queue.take_next(team, clips.Filter(), "ann", ttl=TTL, after=a)
    assert a2 == ids[-2] and review_queue.leases(team) == {a2: "ann"}
    assert review_queue.visit(team, a, "bob", ttl=TTL) is None  # free: his now
    assert review_queue.release(team, "bob") == 1 and review_queue.leases(team) == {a2: "ann"}  # signed out


def test_assignments_come_first_and_leases_skip_within_them(team):
    ids = make_queue(team, 6)
    assignments.assign_clip(team, ids[0], "bob", actor="lead", role="lead")
    assignments.assign_clip(team, ids[1], "bob", actor="lead", role="lead")
    assert review_queue.take_next(team, clips.Filter(), "bob", ttl=TTL) == ids[1]
    review_queue.visit(team, ids[0], "ann", ttl=TTL)  # ann opened bob's other clip from Browse
    # bob is on ids[1]; "next" passes over the clip ann is on, to the unassigned ones
    assert review_queue.take_next(team, clips.Filter(), "bob", ttl=TTL, after=ids[1]) == ids[-1]
    # ann's queue never serves bob's clips
    served = {review_queue.take_next(team, clips.Filter(), "ann", ttl=TTL)}
    assert served.isdisjoint({ids[0], ids[1]})


def test_a_lease_runs_out_when_its_holder_stops(team):
    ids = make_queue(team, 2)
    first = review_queue.take_next(team, clips.Filter(), "ann", ttl=0.5)
    assert review_queue.take_next(team, clips.Filter(), "bob", ttl=0.5) == ids[0]  # the other one
    review_queue.release(team, "bob")
    deadline = time.monotonic() + 10
    got = review_queue.take_next(team, clips.Filter(), "bob", ttl=0.5, after=ids[0])
    while got != first and time.monotonic() < deadline:  # ann's browser died: nothing renews her lease
        time.sleep(0.1)
        got = review_queue.take_next(team, clips.Filter(), "bob", ttl=0.5, after=ids[0])
    assert got == first
    assert review_queue.holder(team, first) == "bob"


def test_activity_renews_a_lease_and_a_late_ping_for_a_clip_left_changes_nothing(team):
    ids = make_queue(team, 3)
    assert review_queue.take_next(team, clips.Filter(), "ann", ttl=1.0) == ids[-1]
    for _ in range(4):  # 2 s of activity, each within the lease
        time.sleep(0.5)
        assert review_queue.renew(team, ids[-1], "ann", ttl=1.0) is True
    assert review_queue.take_next(team, clips.Filter(), "bob", ttl=1.0) == ids[-2]  # not hers: still live
    # ann moves on; the ping her page sent for the old clip arrives afterwards
    assert review_queue.take_next(team, clips.Filter(), "ann", ttl=TTL, after=ids[-1]) == ids[0]
    assert review_queue.renew(team, ids[-1], "ann", ttl=TTL) is False
    assert review_queue.renew(team, ids[-2], "ann", ttl=TTL) is False  # nor someone else's
    assert review_queue.leases(team) == {ids[0]: "ann", ids[-2]: "bob"}


def test_clips_nobody_can_review_are_not_in_the_queue(team):
    ids = make_queue(team, 5, failed={4}, broken={3})
    served = []
    while cid := review_queue.take_next(team, clips.Filter(), "ann", ttl=TTL, after=served[-1] if served else None):
        served.append(cid)
        review_states.set_review(
            team, cid, status="approved", user="ann", base_caption_id=clips.get(team, cid)["current_caption_id"]
        )
    assert served == [ids[2], ids[1], ids[0]]
    # not even when the filter asks for them
    assert review_queue.take_next(team, clips.Filter(failed=True), "bob", ttl=TTL) is None


def test_approve_and_reject_refuse_a_broken_or_failed_clip_and_say_what_to_do(team):
    ids = make_queue(team, 3, failed={2})
    with pytest.raises(DataError, match="failed at ingest.*Press n for the next clip"):
        review_states.set_review(team, ids[2], status="rejected", user="ann", base_caption_id=None)
    cap = clips.get(team, ids[0])["current_caption_id"]
    token = review_states.review_token(clips.get(team, ids[0]))
    with pytest.raises(DataError, match="Say why"):
        review_states.flag_broken(team, ids[0], user="ann", reason="  ")
    review_states.flag_broken(team, ids[0], user="ann", reason="green frames only", base_review=token)
    for status in ("approved", "rejected"):
        with pytest.raises(
            DataError, match="ann flagged this clip as broken \\(green frames only\\).*a lead can clear"
        ):
            review_states.set_review(team, ids[0], status=status, user="bob", base_caption_id=cap)
    with pytest.raises(DataError, match="broken already"):
        review_states.flag_broken(team, ids[0], user="bob", reason="again")
    # a flag based on a stale review state is a conflict, like a decision
    review_states.set_review(
        team,
        ids[1],
        status="approved",
        user="bob",
        base_caption_id=None or clips.get(team, ids[1])["current_caption_id"],
    )
    with pytest.raises(Conflict):
        review_states.flag_broken(team, ids[1], user="ann", reason="x", base_review="unreviewed@0")
    with pytest.raises(Forbidden):
        review_states.clear_broken(team, ids[0], user="bob", role="annotator")
    review_states.clear_broken(team, ids[0], user="lead", role="lead")
    assert clips.get(team, ids[0])["review_status"] == "unreviewed" and clips.get(team, ids[0])["review_note"] is None
    log = [(e["action"], e["actor"]) for e in events.for_clip(team, ids[0]) if e["action"].startswith("review.")]
    assert log == [("review.unbroken", "lead"), ("review.broken", "ann")]
    assert review_queue.take_next(team, clips.Filter(), "bob", ttl=TTL) == ids[0]  # back in the queue


def test_broken_is_counted_apart_from_rejections(team):
    ids = make_queue(team, 4)
    review_states.flag_broken(team, ids[0], user="ann", reason="does not play")
    review_states.set_review(
        team, ids[1], status="rejected", user="ann", base_caption_id=clips.get(team, ids[1])["current_caption_id"]
    )
    review_states.set_review(
        team, ids[2], status="approved", user="ann", base_caption_id=clips.get(team, ids[2])["current_caption_id"]
    )
    s = clips.summary(team)
    assert (s["approved"], s["rejected"], s["broken"]) == (1, 1, 1)
    [ann] = events.team_stats(team, since=0)
    assert (ann["approved"], ann["rejected"], ann["broken"], ann["approval_rate"]) == (1, 1, 1, 0.5)
    assert clips.count(team, clips.Filter(review_status="broken")) == 1


# -- concurrency ---------------------------------------------------------------------------------------------


def _review_all(db_path, user: str, out: list, barrier=None, first_taken=None) -> None:
    """One reviewer: "next", approve, "next", ... until the queue is empty. Appends (user, clip, t_take, t_done).
    `first_taken`: a barrier every reviewer waits at after its first "next", so that on a loaded machine no
    reviewer finds the queue drained by the others before its first turn."""
    db = dbmod.connect(db_path)
    try:
        if barrier is not None:
            barrier.wait()
        cur = None
        while True:
            cur = review_queue.take_next(db, clips.Filter(), user, ttl=TTL, after=cur)
            if first_taken is not None:
                first_taken.wait()
                first_taken = None
            if cur is None:
                return
            t_take = time.monotonic()
            clip = clips.get(db, cur)
            try:
                review_states.set_review(
                    db,
                    cur,
                    status="approved",
                    user=user,
                    base_caption_id=clip["current_caption_id"],
                    base_review=review_states.review_token(clip),
                )
                ok = True
            except Conflict:
                ok = False
            out.append((user, cur, t_take, time.monotonic(), ok))
    finally:
        db.close()


def _check_once(db, ids: list[int], log: list) -> None:
    served = collections.Counter(cid for _, cid, *_ in log)
    assert sorted(served) == sorted(ids), "every clip is served"
    assert max(served.values()) == 1, f"clips served twice: {[c for c, n in served.items() if n > 1]}"
    assert all(ok for *_, ok in log), "a clip was decided by two people"
    approved = db.execute("SELECT COUNT(*) FROM events WHERE action = 'review.approved'").fetchone()[0]
    assert approved == len(ids)
    assert db.execute("SELECT COUNT(*) FROM clips WHERE review_status != 'approved'").fetchone()[0] == 0


@pytest.mark.parametrize("people", [2, 5])
def test_threads_pressing_next_at_once_review_every_clip_exactly_once(db, settings, people):
    ids = make_queue(db, 50)
    log: list = []
    barrier, first_taken = threading.Barrier(people), threading.Barrier(people)
    threads = [
        threading.Thread(target=_review_all, args=(settings.db, f"ann{i}", log, barrier, first_taken))
        for i in range(people)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    _check_once(db, ids, log)
    assert len({u for u, *_ in log}) == people  # everyone got work: each one's first "next" gave a clip


def _process_reviewer(db_path, user, queue, barrier):
    out: list = []
    _review_all(db_path, user, out, barrier)
    queue.put(out)


def test_processes_pressing_next_at_once_review_every_clip_exactly_once(db, settings):
    """Four processes (SQLite's own lock between them, not the per-process one of data.db)."""
    ids = make_queue(db, 50)
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_process_reviewer, args=(str(settings.db), f"p{i}", q, barrier)) for i in range(4)]
    for p in procs:
        p.start()
    log = []
    for _ in procs:
        log += q.get(timeout=180)
    for p in procs:
        p.join(30)
    assert all(p.exitcode == 0 for p in procs)
    _check_once(db, ids, log)
