"""The assignable review queue at scale: what "next unreviewed" (n, approve-and-next) costs per press.

    python benchmarks/bench_queue.py --db /tmp/queue-200k.db --clips 200000 --repeat 40

Builds the database with benchmarks/bench_browse.build (reused if it already holds --clips rows), then deals
out work the way a lead would (data.assignments.assign): ann gets 500 clips spread over the library (every
--clips/500th unreviewed clip, assigned one filter at a time), ann2 the 20,000 newest unreviewed ones. Times
data.assignments.next_in_queue (what the review handlers call), each --repeat times, and prints p50/p95 in ms:
  none        a lead with nothing assigned: their tier is empty, the unassigned tier behind ann2's 20,000
  spread      ann: her next clip among 500 spread over the library
  spread+rain ann with a weather=rain filter (most of her clips are not rain: her tier is walked, not scanned)
  assign 500  one assign of the next 500 unreviewed unassigned clips (the write, audited per clip)
Then the shared queue (data.review_queue.take_next: the pick and its lease in one BEGIN IMMEDIATE), with 5 and 50
other people each on one of the next clips, and `--migrate-clips N`: how long migration m013 (the rebuild of
`clips` that lets a review status be 'broken') takes on a library of N clips.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_browse import build
from bench_webapp import pct, timed

from data import assignments, review_queue, users
from data.clips import Filter
from data.db import connect, immediate


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default="/tmp/queue-200k.db")
    ap.add_argument("--clips", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--migrate-clips", type=int, default=0, help="also time migration m013 on this many clips")
    a = ap.parse_args(argv)
    print(f"build: {build(Path(a.db), a.clips):.1f} s")
    db = connect(a.db)
    with immediate(db):
        db.execute("DELETE FROM assignments")
    for name, role in (("ann", "annotator"), ("ann2", "annotator"), ("lead", "lead")):
        if users.get(db, name) is None:
            users.create(db, name, role=role, password="bench password")
    open_ids = [r[0] for r in db.execute("SELECT id FROM clips WHERE review_status = 'unreviewed' ORDER BY id")]
    step = max(1, len(open_ids) // 500)
    with immediate(db):  # ann's 500, spread (one assign per clip would be 500 transactions: same rows)
        for cid in open_ids[::step][:500]:
            db.execute(
                "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (?, 'ann', 'lead', 0)",
                [cid],
            )
    t = time.perf_counter()
    out = assignments.assign(db, Filter(), "ann2", actor="lead", role="lead", limit=10_000)
    out2 = assignments.assign(db, Filter(), "ann2", actor="lead", role="lead", limit=10_000)
    ms = (time.perf_counter() - t) * 1000
    print(f"assign 2 x 10,000 to ann2: {ms:.0f} ms ({out['assigned'] + out2['assigned']:,} clips, audited)")
    rng = random.Random(0)
    mine = [r[0] for r in db.execute("SELECT clip_id FROM assignments WHERE assignee = 'ann'")]
    cases = {
        "none (lead, behind ann2's 20,000)": lambda: assignments.next_in_queue(db, Filter(), "lead"),
        "spread (ann, 500 over the library)": lambda: assignments.next_in_queue(
            db, Filter(), "ann", after=rng.choice(mine)
        ),
        "spread + weather=rain": lambda: assignments.next_in_queue(
            db, Filter(weather="rain"), "ann", after=rng.choice(mine)
        ),
    }
    print(f"\nnext_in_queue at {a.clips:,} clips ({a.repeat} runs each), ms")
    print(f"{'case':40s} {'p50':>8s} {'p95':>8s}")
    for name, fn in cases.items():
        xs = timed(fn, a.repeat)
        print(f"{name:40s} {statistics.median(xs):8.2f} {pct(xs, 95):8.2f}")
    xs = timed(lambda: assignments.assign(db, Filter(), "ann", actor="lead", role="lead", limit=500), 5)
    print(f"{'assign 500 (next open, audited)':40s} {statistics.median(xs):8.2f} {pct(xs, 95):8.2f}")
    print(f"\nreview_queue.take_next at {a.clips:,} clips ({a.repeat} runs each), ms")
    for others in (0, 5, 50):
        with immediate(db):
            db.execute("DELETE FROM review_leases")
        for i in range(others):  # each one on the next clip of the plain queue: the pick steps over all of them
            review_queue.take_next(db, Filter(), f"other{i}", ttl=600)
        xs = timed(lambda: review_queue.take_next(db, Filter(), "lead", ttl=600), a.repeat)
        print(f"{f'lead, {others} others on the next clips':40s} {statistics.median(xs):8.2f} {pct(xs, 95):8.2f}")
    with immediate(db):
        db.execute("DELETE FROM review_leases")
    db.close()
    if a.migrate_clips:
        print(
            f"\nmigration m013 on {a.migrate_clips:,} clips: {migrate_m013(Path(a.db).parent, a.migrate_clips):.1f} s"
        )


def migrate_m013(folder: Path, n: int) -> float:
    """Seconds migration m013 takes on a library of `n` clips with a caption each (indexed in FTS), built with the
    schema before it."""
    from data import schema

    path = folder / f"m013-{n}.db"
    for p in folder.glob(path.name + "*"):
        p.unlink()
    db = connect(path, migrate=False)
    schema.MIGRATIONS.apply(db, stop_before="m013_review_queue")
    rng = random.Random(1)
    words = "pedestrian crossing cyclist bus truck rain fog night urban highway merges brakes".split()
    with immediate(db):
        db.conn.executemany(
            "INSERT INTO clips (path, caption_text, labels_text, weather, review_status) VALUES (?, ?, ?, ?, ?)",
            (
                (f"c/{i:07d}.mp4", " ".join(rng.choices(words, k=20)), "rain urban", "rain", "unreviewed")
                for i in range(n)
            ),
        )
    t = time.perf_counter()
    schema.MIGRATIONS.apply(db)
    seconds = time.perf_counter() - t
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    for p in folder.glob(path.name + "*"):
        p.unlink()
    return seconds


if __name__ == "__main__":
    main()
