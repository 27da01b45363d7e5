import json
import threading
import time

import pytest

from data import captions, clips, db as dbmod, jobs, review_states, schema
from data.db import immediate
from data.errors import Conflict
from data.job_params import JobParams
from data.jobs import items as job_items, queries as job_queries
from data.jobs.selection import Selection

LABELS = {
    "scenario_category": "hard_braking",
    "hazard_level": "medium",
    "road_users": ["car"],
    "ego_maneuver": "slowing",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "urban",
}


def add_clip(db, path="a.mp4"):
    with immediate(db):
        return db.execute("INSERT INTO clips (path) VALUES (?)", [path]).lastrowid


def test_migrations_from_empty_create_every_table(tmp_path):
    d = dbmod.connect(tmp_path / "fresh.db")
    tables = set(d.table_names())
    assert {
        "clips",
        "captions",
        "prompts",
        "jobs",
        "job_items",
        "users",
        "events",
        "heartbeats",
        "clips_fts",
        "_counts",
    } <= tables
    assert not schema.MIGRATIONS.pending(d)
    cols = d["clips"].columns_dict
    assert "filmstrip_indices" in cols and "media_decoder" in cols
    d.close()
    again = dbmod.connect(tmp_path / "fresh.db")  # a second open migrates nothing
    assert not schema.MIGRATIONS.pending(again)


def test_total_follows_inserts_deletes_and_missing(db):
    ids = [add_clip(db, f"c{i}.mp4") for i in range(5)]
    assert clips.total(db) == 5
    with immediate(db):
        db.execute("UPDATE clips SET missing = 1 WHERE id = ?", [ids[0]])
        db.execute("DELETE FROM clips WHERE id = ?", [ids[1]])
    assert clips.total(db) == 3 == clips.count(db)


def test_stale_save_is_refused_with_who_and_when(db):
    cid = add_clip(db)
    first = captions.save_human(db, cid, text="v1", labels=LABELS, author="alice", base_caption_id=None)
    captions.save_human(db, cid, text="v2 by bob", labels=LABELS, author="bob", base_caption_id=first["id"])
    with pytest.raises(Conflict) as e:
        captions.save_human(
            db, cid, text="alice's stale edit", labels=LABELS, author="alice", base_caption_id=first["id"]
        )
    assert "bob" in str(e.value) and "UTC" in str(e.value)
    assert clips.get(db, cid)["caption"]["text"] == "v2 by bob"


def test_concurrent_saves_from_threads_never_see_database_is_locked(db_path):
    setup = dbmod.connect(db_path)
    ids = [add_clip(setup, f"c{i}.mp4") for i in range(4)]
    setup.close()
    errors, acked, conflicts = [], [], []

    def annotator(n):
        d = dbmod.connect(db_path)  # one connection per thread
        try:
            for k in range(25):
                cid = ids[(n + k) % len(ids)]
                base = clips.get(d, cid)["current_caption_id"]
                try:
                    row = captions.save_human(
                        d, cid, text=f"t{n}-{k}", labels=LABELS, author=f"u{n}", base_caption_id=base
                    )
                    acked.append(row["id"])
                except Conflict:
                    conflicts.append(cid)
        except Exception as e:  # any other error fails the test below
            errors.append(repr(e))
        finally:
            d.close()

    threads = [threading.Thread(target=annotator, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = dbmod.connect(db_path)
    assert check.execute("SELECT COUNT(*) FROM captions").fetchone()[0] == len(acked)
    assert len(acked) + len(conflicts) == 8 * 25
    check.close()


def test_job_basics_claim_complete_fail(db):
    ids = [add_clip(db, f"c{i}.mp4") for i in range(3)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids + ids[:1]), prompt_id=None, params=JobParams()
    )
    assert job_queries.get(db, job)["total"] == 3
    got = job_items.claim(db, job, "runner-1", 2, lease_seconds=60, max_attempts=3)
    assert len(got) == 2 and job_queries.get(db, job)["state"] == "running"
    job_items.complete(db, job, got[0]["clip_id"], text="done", labels=LABELS, provenance={"model": "m"})
    job_items.complete(db, job, got[0]["clip_id"], text="dup", labels=LABELS, provenance={"model": "m"})
    assert (
        job_items.fail(
            db, job, got[1]["clip_id"], error="HTTP 400", kind="bad_request", retryable=False, max_attempts=3
        )
        == "failed"
    )
    j = job_queries.get(db, job)
    assert (j["done"], j["failed"]) == (1, 1)
    assert db.execute("SELECT COUNT(*) FROM captions WHERE job_id = ?", [job]).fetchone()[0] == 1


def test_runners_of_one_fleet_keep_one_bound_and_share_it(db):
    """Runners sharing a fleet keep its in-flight bound together: the live leases of every runner on jobs of that
    fleet (and jobs that name none) count against it, and while others hold some a runner takes no more than an
    even share. An expired lease and another fleet's do not count."""
    ids = [add_clip(db, f"r{i}.mp4") for i in range(12)]
    F, G = jobs.fleet_of("http://127.0.0.1:30000"), jobs.fleet_of("http://127.0.0.2:30000")

    def job(name, fleet):
        sel = Selection.of_clips(ids)
        return jobs.create(
            db, name=name, created_by="lead", selection=sel, prompt_id=None, params=JobParams(), fleet=fleet
        )

    a, b, none, other = job("a", F), job("b", F), job("none", None), job("other", G)
    kw = dict(lease_seconds=60, max_attempts=3)
    assert len(job_items.claim(db, other, "r3", 5, bound=8, fleet=G, **kw)) == 5  # another fleet's replicas
    # alone on F, r1 is bounded by its own count of its requests (the runner asks for its free slots): 6, then 2
    assert len(job_items.claim(db, a, "r1", 6, bound=8, fleet=F, **kw)) == 6
    assert len(job_items.claim(db, none, "r1", 2, bound=8, fleet=F, **kw)) == 2  # a job that names no fleet
    assert job_items.leases_on_fleet(db, "r2", F, time.time()) == (0, 8, 1)
    # r1 holds all of it: r2, holding none, gets one request in (a foot in the door), then nothing more
    assert len(job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw)) == 1
    assert job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw) == []
    assert job_items.claim(db, a, "r1", 10, bound=8, fleet=F, **kw) == []  # r1 is over its even share of 4
    db.execute("UPDATE job_items SET state = 'done' WHERE job_id = ? AND leased_by = 'r2'", [b])
    # r1's leases end (answers written) except 3; r2 gets in, up to an even share (4), not the 5 left
    done = [r["clip_id"] for r in db.query("SELECT clip_id FROM job_items WHERE job_id = ? AND leased_by = 'r1'", [a])]
    db.execute(
        f"UPDATE job_items SET state = 'done' WHERE job_id = ? AND clip_id IN ({','.join('?' * 5)})", [a, *done[:5]]
    )
    assert len(job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw)) == 4
    # and r1, holding 3 of its even share of 4 while r2 holds some, gets 1 more
    assert len(job_items.claim(db, a, "r1", 10, bound=8, fleet=F, **kw)) == 1
    assert job_items.claim(db, b, "r2", 10, bound=8, fleet=F, **kw) == []  # 8 of 8 in flight
    db.execute("UPDATE job_items SET lease_until = 0 WHERE leased_by = 'r1'")  # r1's leases ran out
    assert job_items.leases_on_fleet(db, "r2", F, time.time()) == (4, 0, 0)


def _vm_steps(db, fn) -> int:
    """SQLite virtual-machine instructions `fn` runs (in thousands): how many rows its queries read, whatever the
    machine's speed."""
    n = [0]

    def tick():
        n[0] += 1
        return 0

    db.conn.set_progress_handler(tick, 1000)
    try:
        fn()
    finally:
        db.conn.set_progress_handler(None, 1000)
    return n[0]


def test_a_claim_reads_the_items_it_needs_not_every_item_of_the_job(db):
    """A runner claims, counts the fleet's leases and asks whether a job is drained under the write lock, on every
    batch and result. Each must cost the same late in a big job as in a small one, and finished jobs must not add
    to it: the planner took the primary key and read every item of the job, the done ones first (a claim late in a
    job of 1,000,000 clips read ~900,000 rows; benchmarks/bench_leases.py)."""
    from tests.support.runner_fixtures import add_clips

    F = jobs.fleet_of("http://127.0.0.1:30000")
    kw = dict(lease_seconds=60, max_attempts=3, bound=48, fleet=F)

    def job_late_in_its_run(n: int, prefix: str) -> int:
        ids = add_clips(db, n, prefix=prefix)
        sel = Selection.of_clips(ids)
        job = jobs.create(
            db, name=prefix, created_by="lead", selection=sel, prompt_id=None, params=JobParams(), fleet=F
        )
        job_items.claim(db, job, "r1", 8, **kw)  # running, 8 in flight
        db.execute(  # 90 % done, the first ones, as a runner leaves them
            "UPDATE job_items SET state = 'done', attempts = 1 WHERE job_id = ? AND state = 'pending' AND clip_id < ?",
            [job, ids[int(n * 0.9)]],
        )
        return job

    small, big = job_late_in_its_run(400, "small"), job_late_in_its_run(8000, "big")

    def costs(job):
        return (
            _vm_steps(db, lambda: job_items.claim(db, job, "r1", 4, **kw)),
            _vm_steps(db, lambda: job_items.finish_if_drained(db, job)),
        )

    (claim_small, drained_small), (claim_big, drained_big) = costs(small), costs(big)
    assert claim_big <= 2 * claim_small + 5, (claim_small, claim_big)  # 20x the items: was ~20x the rows read
    assert drained_big <= 2 * drained_small + 5, (drained_small, drained_big)
    # the lease count reads the leased items of live jobs: a finished job of 8,000 items adds nothing to it
    count = _vm_steps(db, lambda: job_items.leases_on_fleet(db, "r2", F, time.time()))
    db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", [big])
    db.execute("UPDATE job_items SET state = 'done' WHERE job_id = ?", [big])
    assert job_items.leases_on_fleet(db, "r2", F, time.time()) == (0, 12, 1)  # the small job's, by r1
    history = job_late_in_its_run(8000, "history")
    db.execute("UPDATE job_items SET state = 'done' WHERE job_id = ?", [history])
    db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", [history])
    assert _vm_steps(db, lambda: job_items.leases_on_fleet(db, "r2", F, time.time())) <= count + 5


def test_a_claim_sends_what_is_due_first_then_fresh_items_in_clip_order(db):
    """A lease that ran out, then a retry whose backoff has passed, go out before never-tried items (a clip a hung
    replica held is sent again at once: RELIABILITY R8); a retry still in its backoff waits; fresh items go in
    clip order."""
    ids = [add_clip(db, f"o{i}.mp4") for i in range(8)]
    job = jobs.create(
        db, name="o", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    t = time.time()
    db.execute("UPDATE job_items SET state = 'leased', leased_by = 'gone', lease_until = ?, attempts = 1 "
               "WHERE job_id = ? AND clip_id = ?", [t - 1, job, ids[7]])  # fmt: skip
    db.execute(
        "UPDATE job_items SET attempts = 1, not_before = ? WHERE job_id = ? AND clip_id = ?", [t - 1, job, ids[6]]
    )
    db.execute(
        "UPDATE job_items SET attempts = 1, not_before = ? WHERE job_id = ? AND clip_id = ?", [t + 60, job, ids[5]]
    )
    got = job_items.claim(db, job, "r1", 4, lease_seconds=60, max_attempts=3)
    assert [g["clip_id"] for g in got] == [ids[7], ids[6], ids[0], ids[1]]
    assert [g["attempts"] for g in got] == [2, 2, 1, 1]


def test_write_lock_stats_count_holds_and_the_longest(db, settings):
    import time as _time

    from data.db import immediate, write_lock_stats

    before = write_lock_stats(settings.db)
    with immediate(db):
        _time.sleep(0.05)  # a long transaction
    with immediate(db):
        pass
    after = write_lock_stats(settings.db)
    assert after["holds"] - before["holds"] == 2
    assert after["max_ms"] >= 50


def test_a_refused_commit_leaves_no_write_lock_behind(settings):
    """A COMMIT SQLite refuses (here a deferred foreign key; in the field a lock or an I/O error) can leave the
    transaction open on its connection. `immediate` must end it: else that connection holds the write lock and
    every other writer (the runner, each save) waits on it until the process exits."""
    import sqlite3

    db = dbmod.connect(settings.db)
    other = dbmod.connect(settings.db)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        db.execute(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, "
            "parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
        )
        with pytest.raises(sqlite3.IntegrityError):
            with immediate(db):
                db.execute("INSERT INTO child VALUES (1, 99)")  # checked only at COMMIT
        assert not db.conn.in_transaction
        with immediate(other, wait=0.5):  # another connection can write at once
            other.execute("INSERT INTO parent VALUES (99)")
        assert db.execute("SELECT COUNT(*) FROM child").fetchone()[0] == 0  # nothing of the refused one stayed
    finally:
        db.close()
        other.close()


def test_progress_series_has_a_point_per_bucket_and_zeros_for_stalls(db):
    ids = [add_clip(db, f"s{i}.mp4") for i in range(3)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    job_items.claim(db, job, "runner-1", 3, lease_seconds=60, max_attempts=3)
    t0 = 1_000_000.0  # started at t0; results at t0+5 and t0+35, then a stall until it finished at t0+60
    db.execute("UPDATE jobs SET started_at = ?, finished_at = ? WHERE id = ?", [t0, t0 + 60, job])
    db.execute("UPDATE job_items SET finished_at = ? WHERE job_id = ? AND clip_id = ?", [t0 + 5, job, ids[0]])
    db.execute("UPDATE job_items SET finished_at = ? WHERE job_id = ? AND clip_id = ?", [t0 + 35, job, ids[1]])
    db.conn.commit()
    series = job_queries.progress(db, job)["series"]
    assert [p["t"] for p in series] == [t0 + 10 * k for k in range(7)]  # 10 s buckets from start to end
    assert [p["n"] for p in series] == [1, 0, 0, 1, 0, 0, 0]
    assert series[0]["clips_per_s"] == 0.1


def test_a_bar_is_over_the_part_of_its_bucket_the_job_ran(db, monkeypatch):
    """A job of 3 s across two 10 s buckets: each bar is its clips over the seconds the job ran in that bucket,
    so the bars agree with the job's rate (over whole buckets they read 1.2 and 1.8 under a rate of 10.2). A
    running job's latest bucket is over the seconds until now, not a drop at every refresh."""
    ids = [add_clip(db, f"p{i}.mp4") for i in range(30)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    t0 = 1_000_008.0  # started 2 s before a bucket's end, finished 1 s into the next
    db.execute(
        "UPDATE jobs SET started_at = ?, finished_at = ?, state = 'done', run_seconds = 3 WHERE id = ?",
        [t0, t0 + 3, job],
    )
    for i, cid in enumerate(ids):  # 12 in the first 2 s, 18 in the last 1 s
        at = t0 + 0.1 + i * 0.15 if i < 12 else t0 + 2.0 + (i - 12) * 0.05
        db.execute(
            "UPDATE job_items SET state = 'done', finished_at = ? WHERE job_id = ? AND clip_id = ?", [at, job, cid]
        )
    db.conn.commit()
    p = job_queries.progress(db, job)
    bars = [(b["n"], round(b["seconds"], 6), round(b["clips_per_s"], 6), b["partial"]) for b in p["series"]]
    assert bars == [(12, 2.0, 6.0, True), (18, 1.0, 18.0, True)]
    assert sum(b["n"] for b in p["series"]) / sum(b["seconds"] for b in p["series"]) == pytest.approx(p["rate"])
    # the same job still running, 4 s into its second bucket: the latest bar is over those 4 s
    db.execute("UPDATE jobs SET finished_at = NULL, state = 'running', running_since = ? WHERE id = ?", [t0, job])
    db.conn.commit()
    monkeypatch.setattr(job_queries, "now", lambda: t0 + 6.0)
    latest = job_queries.progress(db, job)["series"][-1]
    assert (latest["n"], latest["seconds"], latest["clips_per_s"], latest["partial"]) == (18, 4.0, 4.5, True)


def test_progress_series_counts_every_finished_item_once_in_its_bucket(db):
    """The series counts a range of the index per bucket: every finished item is in exactly one bucket, the one
    finished_at / bucket says, on the bucket bounds themselves, before the job's start and after its end too."""
    import random

    ids = [add_clip(db, f"b{i}.mp4") for i in range(400)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    t0, b = 1_700_000_000.0, 10.0
    db.execute("UPDATE jobs SET started_at = ?, finished_at = ? WHERE id = ?", [t0, t0 + 600, job])
    rng = random.Random(7)
    times = [t0 + 10 * k for k in range(40)]  # on bucket bounds
    times += [t0 + 10 * k - 1e-6 for k in range(1, 30)] + [t0 - 25.0, t0 + 700.0]  # just below, before, after
    times += [t0 + rng.uniform(0, 600) for _ in range(400 - len(times) - 20)]  # 20 items left unfinished
    for cid, at in zip(ids, times):
        db.execute("UPDATE job_items SET finished_at = ? WHERE job_id = ? AND clip_id = ?", [at, job, cid])
    db.conn.commit()
    series = job_queries.progress(db, job, bucket_seconds=b)["series"]
    want: dict[float, int] = {}
    for at in times:
        want[(at // b) * b] = want.get((at // b) * b, 0) + 1
    got = {p["t"]: p["n"] for p in series}
    assert sum(got.values()) == len(times) == 380
    assert {k: n for k, n in got.items() if n} == want
    assert [p["t"] for p in series] == [((t0 - 25.0) // b + k) * b for k in range(len(series))]  # every bucket
    assert series[-1]["t"] == (t0 + 700.0) // b * b
    assert job_queries.progress(db, job, series=False)["series"] == []


def test_the_per_replica_view_reads_one_index_not_the_items(db):
    """replica_load at 900,000 done items read every row through the primary key (270-340 ms a poll); it names
    the index (job_id, state, replica, latency_ms) of m026, which holds all it reads."""
    ids = [add_clip(db, f"r{i}.mp4") for i in range(6)]
    job = jobs.create(
        db, name="j", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    for k, cid in enumerate(ids):
        db.execute(
            "UPDATE job_items SET state = 'done', replica = ?, latency_ms = ? WHERE job_id = ? AND clip_id = ?",
            [f"r{k % 2}", 1000.0 * (k + 1), job, cid],
        )
    db.conn.commit()
    load = job_queries.replica_load(db, job)
    assert [(r["replica"], r["done"], r["mean_latency_ms"]) for r in load] == [("r0", 3, 3000.0), ("r1", 3, 4000.0)]
    plan = " ".join(
        str(r[-1])
        for r in db.execute(
            f"EXPLAIN QUERY PLAN SELECT replica, COUNT(*), AVG(latency_ms) FROM job_items {job_queries.BY_REPLICA} "
            "WHERE job_id = ? AND state = 'done' GROUP BY replica ORDER BY replica",
            [job],
        )
    )
    assert "COVERING INDEX idx_job_items_job_id_state_replica" in plan and "TEMP B-TREE" not in plan


def test_team_stats_count_people_not_machines_within_the_window(db):
    from data import events

    a, b = add_clip(db, "t1.mp4"), add_clip(db, "t2.mp4")
    m, _ = captions.add_machine(db, a, job_id=None, text="machine", labels=LABELS, provenance={"model": "m"})
    h = captions.save_human(db, b, text="human", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, a, status="approved", user="ann", base_caption_id=m["id"])
    review_states.set_review(db, b, status="rejected", user="ann", base_caption_id=h["id"])
    review_states.set_review(db, a, status="rejected", user="bob", base_caption_id=m["id"])
    stats = {r["actor"]: r for r in events.team_stats(db, since=0)}
    assert set(stats) == {"ann", "bob"}  # the model's caption is not a person's work
    assert (stats["ann"]["edits"], stats["ann"]["approved"], stats["ann"]["rejected"]) == (1, 1, 1)
    assert stats["ann"]["approval_rate"] == 0.5 and stats["bob"]["approval_rate"] == 0.0
    assert events.team_stats(db, since=time.time() + 60) == []


def test_a_new_version_of_a_decided_clip_is_unreviewed_and_its_event_says_what_was_undone(db):
    """An approval or a rejection judged the version the reviewer saw: a save or an adopt leaves the clip
    unreviewed (an export or a release of approved clips would otherwise take text nobody approved). Broken
    judges the video and stays."""
    cid = add_clip(db)
    v1 = captions.save_human(db, cid, text="v1", labels=LABELS, author="ann", base_caption_id=None)
    assert "review_was" not in v1
    review_states.set_review(db, cid, status="approved", user="rev", base_caption_id=v1["id"])
    v2 = captions.save_human(db, cid, text="v2", labels=LABELS, author="ann", base_caption_id=v1["id"])
    assert (v2["review_was"], v2["reviewed_by_was"]) == ("approved", "rev")
    now = clips.get(db, cid)
    assert (now["review_status"], now["reviewed_by"], now["reviewed_at"]) == ("unreviewed", None, None)
    detail = db.execute(
        "SELECT detail FROM events WHERE action = 'caption.save' AND caption_id = ?", [v2["id"]]
    ).fetchone()[0]
    assert '"review_was": "approved"' in detail and '"reviewed_by_was": "rev"' in detail
    # approving with an edit: the save undoes the old approval, the decision that follows is the approver's
    review_states.set_review(db, cid, status="approved", user="rev2", base_caption_id=v2["id"])
    adopted = captions.adopt(db, cid, caption_id=v1["id"], author="ann", base_caption_id=v2["id"])
    assert adopted["review_was"] == "approved" and clips.get(db, cid)["review_status"] == "unreviewed"
    review_states.set_review(db, cid, status="rejected", user="rev", base_caption_id=adopted["id"])
    v4 = captions.save_human(db, cid, text="v4", labels=LABELS, author="ann", base_caption_id=adopted["id"])
    assert v4["review_was"] == "rejected" and clips.get(db, cid)["review_status"] == "unreviewed"
    review_states.flag_broken(db, cid, user="ann", reason="black frames")
    v5 = captions.save_human(db, cid, text="v5", labels=LABELS, author="ann", base_caption_id=v4["id"])
    assert "review_was" not in v5 and clips.get(db, cid)["review_status"] == "broken"


def test_the_migration_undoes_approvals_older_than_the_clips_current_version(db):
    """A database written before the fix: a clip approved, then edited (the save kept 'approved'). m027 sets it
    unreviewed with an event saying whose approval it undid; a clip approved with its edit (saved, then
    approved) keeps its approval; running it again changes nothing."""
    edited, approved_with_edit = add_clip(db, "e.mp4"), add_clip(db, "w.mp4")
    v1 = captions.save_human(db, edited, text="v1", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, edited, status="approved", user="rev", base_caption_id=v1["id"])
    approved_at = clips.get(db, edited)["reviewed_at"]
    captions.save_human(db, edited, text="v2", labels=LABELS, author="bob", base_caption_id=v1["id"])
    with immediate(db):  # as the old save left it: the decision untouched
        db.execute(
            "UPDATE clips SET review_status = 'approved', reviewed_by = 'rev', reviewed_at = ? WHERE id = ?",
            [approved_at, edited],
        )
    w1 = captions.save_human(db, approved_with_edit, text="w1", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, approved_with_edit, status="approved", user="rev", base_caption_id=w1["id"])
    with immediate(db):
        schema.m027_decisions_on_later_versions(db)
    now = clips.get(db, edited)
    assert (now["review_status"], now["reviewed_by"], now["reviewed_at"]) == ("unreviewed", None, None)
    assert clips.get(db, approved_with_edit)["review_status"] == "approved"
    (event,) = db.execute(
        "SELECT actor, caption_id, detail FROM events WHERE action = 'review.reset' AND clip_id = ?", [edited]
    ).fetchall()
    detail = json.loads(event[2])
    assert event[0] == "migration" and event[1] == clips.get(db, edited)["current_caption_id"]
    assert (detail["review_was"], detail["reviewed_by_was"], detail["reviewed_at_was"]) == (
        "approved",
        "rev",
        approved_at,
    )
    assert detail["why"] == "version 2 was saved after the decision"
    with immediate(db):
        schema.m027_decisions_on_later_versions(db)
    assert db.execute("SELECT COUNT(*) FROM events WHERE action = 'review.reset'").fetchone()[0] == 1
