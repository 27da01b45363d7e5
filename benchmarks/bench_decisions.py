"""What listing every sample's decision costs (issue 45: the Quality tab and `python -m data.quality` show every
sample's decision, the most urgent first, where they showed the newest sample's alone).

    python benchmarks/bench_decisions.py --db /tmp/decisions-100k.db --clips 100000 --samples 20 --size 400

Builds the library with benchmarks/bench_browse.build (reused if it already holds --clips rows), then draws
--samples random samples of --size clips (stratified by hazard level, proportional) from its unreviewed machine
captions, and marks every member approved, the weather changed on 3 % (as bench_samples does: caption rows written
directly). Targets: the defaults (hazard level 0.95, the others 0.90) and then 0.999 on every label (so that every
label of every sample plans its K more, the costliest case). Times data.quality.decision.decisions (every sample's
decision) and one decide, --repeat times, and prints p50 and max of wall and CPU time in ms, and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_browse import build

from data import taxonomy, users
from data.clips import Filter
from data.db import connect
from data.quality import decision, samples, targets


def approve_members(db, sample_id: int, rng: random.Random) -> None:
    """Every member approved; 3 % with the weather changed (the model wrong on it)."""
    with db.conn:
        for m in samples.members(db, sample_id):
            if m["review_status"] == "approved":
                continue
            c = db.execute(
                "SELECT scenario, hazard_level, weather, lighting, road_type FROM clips WHERE id = ?", [m["clip_id"]]
            ).fetchone()
            labels = dict(zip(("scenario_category", "hazard_level", "weather", "lighting", "road_type"), c))
            labels |= {"road_users": ["car"], "ego_maneuver": "going_straight"}
            db.execute(
                "INSERT OR IGNORE INTO captions (id, clip_id, version, text, labels, source, author, created_at) "
                "VALUES (?, ?, 1, 't', ?, 'model', 'model', ?)",
                [m["caption_id"], m["clip_id"], json.dumps(labels, sort_keys=True), time.time()],
            )
            current = m["caption_id"]
            if rng.random() < 0.03:
                fixed = labels | {"weather": "fog" if labels["weather"] != "fog" else "rain"}
                current = db.execute(
                    "INSERT INTO captions (clip_id, version, text, labels, source, author, created_at) "
                    "VALUES (?, 2, 't', ?, 'human', 'ann', ?)",
                    [m["clip_id"], json.dumps(fixed, sort_keys=True), time.time()],
                ).lastrowid
            db.execute(
                "UPDATE clips SET review_status = 'approved', current_caption_id = ? WHERE id = ?",
                [current, m["clip_id"]],
            )


def timed(fn, repeat: int):
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append((time.perf_counter() - w) * 1000)
        cpus.append((time.process_time() - c) * 1000)
    return statistics.median(walls), max(walls), statistics.median(cpus), out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--clips", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--size", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    build(a.db, a.clips)
    db = connect(a.db)
    for name, role in (("lead", "lead"), ("ann", "annotator")):
        if users.get(db, name) is None:
            users.create(db, name, role=role, password="bench password")
    rng = random.Random(45)
    have = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    for i in range(have, a.samples):
        s = samples.draw(db, Filter(), a.size, ["ann"], actor="lead", role="lead", stratify="proportional", seed=i)
        approve_members(db, s["id"], rng)
    n = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    print(f"{n} samples of {a.size} (proportional, every member approved, 3 % weather wrong); {a.clips:,} clips")
    print(f"{'case':34} {'p50 ms':>8} {'max ms':>8} {'CPU ms':>8}  verdicts")
    for case, value in (("default targets", None), ("every target 0.999", 0.999)):
        for label in taxonomy.ENUMS:
            default = 0.95 if label == "hazard_level" else 0.90
            targets.set_target(db, label, value or default, 95, actor="lead", role="lead")
        p50, top, cpu, listed = timed(lambda: decision.decisions(db), a.repeat)
        verdicts = {}
        for d in listed:
            verdicts[d.verdict] = verdicts.get(d.verdict, 0) + 1
        print(f"{'every decision, ' + case:34} {p50:8.0f} {top:8.0f} {cpu:8.0f}  {verdicts}")
        first = listed[0].sample["id"]
        p50, top, cpu, d = timed(lambda first=first: decision.decide(db, first), a.repeat)
        print(f"{'one decision, ' + case:34} {p50:8.0f} {top:8.0f} {cpu:8.0f}  {d.verdict} {d.more:,} more")
    db.close()


if __name__ == "__main__":
    main()
