"""What label confidence costs: answer size and reading time per top_logprobs, and the risk order and calibration
on a big library.

    python benchmarks/bench_confidence.py answers
    python benchmarks/bench_confidence.py library --db /tmp/risk-1m.db --clips 1000000 --reviewed 100000

answers   for k in 0, 1, 5, 10, 20: a simulated answer (the simulated fleet's captions: ~950 characters, ~200 tokens)
          with k alternatives per token: its bytes, the client's cost to parse it and read every label's
          confidence (serving.logprobs), the simulated fleet's cost to make it, and the text-against-labels check
          (data.consistency) that runs when a caption is stored. p50 of CPU time (process time, so that other
          work on the machine does not count) over --repeat answers, in ms.
library   builds (or reuses) a library through data.db.connect (the real schema, m014's index included): --clips
          clips with a hazard level, a lowest label confidence and a conflict count as captions would leave them,
          1 % assigned to "ann", --reviewed of them approved with an origin machine caption carrying a stored
          confidence (30 % of those through a person's fix of one label). Then p50/p95 (wall clock) of: a risk
          page (first, deep, filtered), the review queue's next clip by risk (with assignments, without), and
          data.quality.calibration over every label, one label and one filter (with its CPU time).
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

from benchmarks.library_build import fresh_library
from data import assignments, clips, consistency, schema, taxonomy
from data.clips import Filter
from data.db import connect
from data.quality import calibration
from serving.logprobs import label_confidence
from serving.simfleet import answers as sim_answers
from serving.simfleet.logprobs import simulate

HAZARD = (("none", 40), ("low", 30), ("medium", 18), ("high", 9), ("critical", 3))
WEATHER = (("clear", 50), ("cloudy", 20), ("rain", 15), ("fog", 5), ("snow", 5), ("unknown", 5))


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p95(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.95) - 1] * 1000 if len(samples) > 1 else samples[0] * 1000


def timed(fn, repeat: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_answers(repeat: int) -> None:
    schema_ = taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)
    clips_ = [f"clip{i}.mp4" for i in range(repeat)]
    made = [sim_answers.synthetic_answer(c, None, schema_) for c in clips_]
    texts = [json.dumps(a, ensure_ascii=False) for a in made]
    tokens = statistics.median(len(simulate(t, a, schema_, 0, b"x")[0]["content"]) for t, a in zip(texts, made))
    print(
        f"answers: {repeat} simulated answers, median {statistics.median(map(len, texts)):.0f} characters, "
        f"{tokens:.0f} tokens"
    )
    print(f"{'k':>3} {'answer KB':>10} {'parse+read ms':>14} {'simulate ms':>12}")
    for k in (0, 1, 5, 10, 20):
        bodies, sim_s, read_s = [], [], []
        for c, a, t in zip(clips_, made, texts):
            s = time.process_time()
            lp = simulate(t, a, schema_, k, c.encode())[0] if k else None
            sim_s.append(time.process_time() - s)
            bodies.append(json.dumps({"choices": [{"message": {"content": t}, "logprobs": lp}]}))
        for body in bodies:
            s = time.process_time()
            choice = json.loads(body)["choices"][0]
            if k:
                label_confidence(choice["message"]["content"], choice["logprobs"], schema_)
            read_s.append(time.process_time() - s)
        size = statistics.median(len(b) for b in bodies) / 1000
        print(f"{k:>3} {size:>10.1f} {p50(read_s):>14.2f} {p50(sim_s) if k else 0:>12.2f}")
    s = time.process_time()
    for a in made:
        consistency.conflicts(a["caption"], a)
    print(f"consistency check: {(time.process_time() - s) / len(made) * 1000:.3f} ms per caption")


def _pick(rng: random.Random, table):
    values, weights = zip(*table)
    return rng.choices(values, weights, k=1)[0]


def build(db_path: Path, n: int, reviewed: int, seed: int = 0) -> float:
    """The library (reused when it already holds n clips): clips, the mirrors data.captions keeps, assignments,
    and `reviewed` approved clips with an origin caption carrying a confidence."""
    t0 = time.perf_counter()
    db = fresh_library(db_path, n, cache_kib=None)
    if db is None:
        return 0.0
    conn = db.conn
    rng = random.Random(seed)
    rows, caps, asg = [], [], []
    approved = set(rng.sample(range(1, n + 1), reviewed))
    for i in range(1, n + 1):
        captioned = i in approved or rng.random() < 0.7
        hazard, weather = (_pick(rng, HAZARD), _pick(rng, WEATHER)) if captioned else (None, None)
        sure = None if not captioned or rng.random() < 0.1 else round(1 - rng.random() ** 3, 4)
        conflicts = (1 if rng.random() < 0.2 else 0) if captioned else None
        status = "approved" if i in approved else "unreviewed"
        rows.append(
            (i, f"r{i % 997:03d}/c{i:07d}.mp4", status, i if captioned else None, hazard, weather, sure, conflicts)
        )
        if i in approved:
            labels = {
                k: (rng.sample(v, 1) if k in taxonomy.MULTI else rng.choice(v)) for k, v in taxonomy.ENUMS.items()
            }
            labels |= {"hazard_level": hazard, "weather": weather}
            conf = {
                "labels": {k: round(rng.random(), 4) for k in taxonomy.ENUMS},
                "items": {"road_users": {labels["road_users"][0]: round(rng.random(), 4)}},
                "end": {},
            }
            if rng.random() < 0.3:  # a person fixed a label before approving: the origin is another version
                fixed = labels | {"lighting": rng.choice(taxonomy.LIGHTING)}
                caps.append((n + i, i, taxonomy.dumps(labels), json.dumps(conf), n + i))
                caps.append((i, i, taxonomy.dumps(fixed), None, n + i))
            else:
                caps.append((i, i, taxonomy.dumps(labels), json.dumps(conf), i))
        if rng.random() < 0.01:
            asg.append((i, "ann"))
        if len(rows) == 50_000 or i == n:
            with conn:
                conn.executemany(
                    "INSERT INTO clips (id, path, review_status, current_caption_id, hazard_level, weather, "
                    "confidence_min, label_conflicts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                conn.executemany(
                    "INSERT INTO captions (id, clip_id, version, text, labels, source, author, created_at, "
                    "confidence, origin_id, conflicts) VALUES (?, ?, ?, 't', ?, ?, 'model', 0, ?, ?, '[]')",
                    [
                        (cid, clip, 1 if cid == origin else 2, labels, "model" if conf else "human", conf, origin)
                        for cid, clip, labels, conf, origin in caps
                    ],
                )
                conn.executemany(
                    "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (?, ?, 'lead', 0)",
                    asg,
                )
            rows, caps, asg = [], [], []
    schema._fts_clips(db)
    conn.execute("ANALYZE")
    conn.execute("PRAGMA synchronous=NORMAL")
    db.close()
    return time.perf_counter() - t0


def bench_library(db_path: Path, n: int, reviewed: int, repeat: int) -> None:
    built = build(db_path, n, reviewed)
    how = f"built in {built:.0f} s" if built else "reused"
    print(f"library: {n:,} clips, {reviewed:,} approved with a confidence ({how})")
    db = connect(db_path)
    try:
        deep_id = db.execute("SELECT id FROM clips WHERE hazard_level = 'low' LIMIT 1 OFFSET ?", [n // 200]).fetchone()[
            0
        ]
        deep = clips.cursor_at(db, "risk", deep_id)
        cases = {
            "risk page 1 (60)": lambda: clips.page(db, Filter(), order="risk"),
            "risk page deep (60)": lambda: clips.page(db, Filter(), order="risk", after=deep),
            "risk page, unreviewed, hazard high": lambda: clips.page(
                db, Filter(review_status="unreviewed", hazard_level="high"), order="risk"
            ),
            "queue next, ann (assigned first)": lambda: assignments.next_in_queue(db, Filter(), "ann", order="risk"),
            "queue next, bob (none assigned)": lambda: assignments.next_in_queue(db, Filter(), "bob", order="risk"),
            "queue next after a deep clip": lambda: assignments.next_in_queue(
                db, Filter(), "bob", after=deep_id, order="risk"
            ),
        }
        print(f"{'query':<40} {'p50 ms':>8} {'p95 ms':>8}")
        for name, fn in cases.items():
            s = timed(fn, repeat)
            print(f"{name:<40} {p50(s):>8.2f} {p95(s):>8.2f}")
        print(f"{'query':<40} {'p50 ms':>8} {'CPU ms':>8}")
        for name, fn in {
            "calibration, every label (10 buckets)": lambda: calibration.calibration(db),
            "calibration, one label": lambda: calibration.calibration(db, label="hazard_level"),
            "calibration, weather=rain": lambda: calibration.calibration(db, Filter(weather="rain")),
        }.items():
            cpu = time.process_time()
            s = timed(fn, max(3, repeat // 10))
            cpu = (time.process_time() - cpu) / (len(s) + 1)
            print(f"{name:<40} {p50(s):>8.0f} {cpu * 1000:>8.0f}")
    finally:
        db.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python benchmarks/bench_confidence.py answers\n"
        "  python benchmarks/bench_confidence.py library --clips 1000000 --reviewed 100000",
    )
    ap.add_argument("what", choices=("answers", "library"))
    ap.add_argument("--db", default="/tmp/risk-1m.db", help="library database to build or reuse")
    ap.add_argument("--clips", type=int, default=1_000_000)
    ap.add_argument("--reviewed", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    if args.what == "answers":
        bench_answers(args.repeat)
    else:
        bench_library(Path(args.db), args.clips, args.reviewed, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
