"""Random review samples and the prompt-version comparison at scale (issue 19): what a draw and a comparison cost.

    python benchmarks/bench_samples.py --db /tmp/samples-1m.db --clips 1000000 --repeat 3

Builds the library with benchmarks/bench_browse.build (reused if it already holds --clips rows: 70 % captioned by
the model, of those 60 % unreviewed, 35 % approved), adds users, and for the approved clips among the first
--compare-clips ids three caption versions each: the approved truth (the clip's current caption) and a machine
caption of preset versions 1 and 2 (each label wrong with probability 0.20 and 0.15). Then times, --repeat times:
  draw none 400          data.quality.samples.draw of 400 clips from the whole library's unreviewed machine captions
  draw proportional 400  the same, stratified by hazard level (proportional allocation)
  draw equal 400         the same, equal per stratum
  draw critical 100      100 from the critical stratum alone (a narrow filter)
  compare                data.quality.prompt_compare.compare of v1 and v2 on every approved clip with both versions
                         (one streaming pass; counting with SQLite's JSON functions instead measured 2x slower)
  compare high           the same, restricted to hazard level high (a Browse filter)
  keep the batch          data.quality.population.encode of the whole population (what a draw now stores with the
                         sample, so that further rounds draw from the same batch), and the bytes stored
  draw more 400          data.quality.rounds.draw_more: 400 more into the first unstratified sample, from its batch
  decide 2,000           data.quality.decision.decide on a proportional sample of 2,000, all approved (3 % with
                         the weather changed) and every target at 0.999, so that each label plans its K more
and prints p50 and max in ms, the population N, and the longest write-lock hold of the draws (data.db's figure:
a draw reads its population inside its transaction, so that is how long it delays other writers).
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

from data import prompts, taxonomy, users
from data.clips import Filter
from data.db import connect, write_lock_stats
from data.quality import (
    decision,
    population,
    prompt_compare,
    rounds,
    samples,
    targets,
)


def add_users(db) -> None:
    for name, role in (("lead", "lead"), ("ann", "annotator"), ("ann2", "annotator")):
        if users.get(db, name) is None:
            users.create(db, name, role=role, password="bench password")


def add_versions(db, upto: int, seed: int = 0) -> int:
    """Truth, v1 and v2 captions of the approved clips with id <= upto (skipped if there already); how many clips."""
    have = db.execute("SELECT COUNT(*) FROM captions WHERE prompt_version = 2").fetchone()[0]
    if have:
        return have
    rng = random.Random(seed)
    rows = db.execute(
        "SELECT id, scenario, hazard_level, weather, lighting, road_type FROM clips "
        "WHERE review_status = 'approved' AND id <= ? ORDER BY id",
        [upto],
    ).fetchall()
    next_id = db.execute("SELECT MAX(id) FROM clips").fetchone()[0] + 1
    out = []
    now = time.time()

    def wrong(labels: dict, p: float) -> dict:
        got = dict(labels)
        for name, values in taxonomy.ENUMS.items():
            if rng.random() < p:
                got[name] = [rng.choice(values)] if name in taxonomy.MULTI else rng.choice(values)
        return got

    for cid, scen, hz, w, lt, road in rows:
        truth = {
            "scenario_category": scen,
            "hazard_level": hz,
            "road_users": ["car"],
            "ego_maneuver": "going_straight",
            "weather": w,
            "lighting": lt if lt in taxonomy.LIGHTING else "unknown",
            "road_type": road,
        }
        out.append((cid, cid, 1, "truth", json.dumps(truth), "human", "ann", None, None, now))
        for version, p in ((1, 0.20), (2, 0.15)):
            labels = json.dumps(wrong(truth, p))
            out.append((next_id, cid, 1 + version, "machine", labels, "model", "model", "av-hazard", version, now))
            next_id += 1
    with db.conn:
        db.conn.executemany(
            "INSERT INTO captions (id, clip_id, version, text, labels, source, author, prompt_name, prompt_version, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            out,
        )
    return len(rows)


def timed(fn, repeat: int) -> tuple[float, float, object]:
    ms, last = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        last = fn()
        ms.append((time.perf_counter() - t) * 1000)
    return statistics.median(ms), max(ms), last


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default="/tmp/samples-1m.db")
    ap.add_argument("--clips", type=int, default=1_000_000)
    ap.add_argument("--compare-clips", type=int, default=410_000, help="approved clips with id <= this get versions")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    built = build(Path(a.db), a.clips)
    db = connect(a.db)
    add_users(db)
    prompts.ensure_presets(db)
    v1, v2 = (next(p["id"] for p in prompts.list_prompts(db) if p["version"] == v) for v in (1, 2))
    t = time.perf_counter()
    n_versions = add_versions(db, a.compare_clips)
    print(
        f"library: {a.clips:,} clips (built in {built:.0f} s); versions for {n_versions:,} approved clips "
        f"({time.perf_counter() - t:.0f} s)"
    )

    def draw(f, size, stratify):
        return lambda: samples.draw(db, f, size, ["ann", "ann2"], actor="lead", role="lead", stratify=stratify)

    print(f"{'case':24} {'p50 ms':>9} {'max ms':>9}  figures")
    for name, fn in (
        ("draw none 400", draw(Filter(), 400, "none")),
        ("draw proportional 400", draw(Filter(), 400, "proportional")),
        ("draw equal 400", draw(Filter(), 400, "equal")),
        ("draw critical 100", draw(Filter(hazard_level="critical"), 100, "none")),
    ):
        p50, top, s = timed(fn, a.repeat)
        print(f"{name:24} {p50:9.0f} {top:9.0f}  N = {s['population']:,}, n = {s['drawn']}")
    first = min(x["id"] for x in samples.list_samples(db, limit=1000) if x["stratify"] == "none")
    ids, caps = population.load(db, first)["all"]
    p50, top, _ = timed(lambda: (population.encode(ids), population.encode(caps)), a.repeat)
    stored = db.execute(
        "SELECT SUM(LENGTH(clip_ids) + LENGTH(caption_ids)) FROM sample_populations WHERE sample_id = ?", [first]
    ).fetchone()[0]
    print(f"{'keep the batch':24} {p50:9.0f} {top:9.0f}  N = {len(ids):,}: {stored / 1e6:.2f} MB stored")
    p50, top, r = timed(lambda: rounds.draw_more(db, first, 400, actor="lead", role="lead"), a.repeat)
    print(f"{'draw more 400':24} {p50:9.0f} {top:9.0f}  sample {first}: {r['drawn']:,} drawn after {a.repeat} rounds")
    hold = write_lock_stats(a.db)
    print(f"{'write lock, longest hold':24} {'':9} {hold['max_ms']:9.0f}  over {hold['holds']} transactions")
    big = samples.draw(db, Filter(), 2000, ["ann"], actor="lead", role="lead", stratify="proportional", seed=1)
    # every member approved, 3 % with the weather changed: caption rows written directly (this library's clips have
    # none), without 2,000 review transactions
    rng = random.Random(3)
    with db.conn:
        for m in samples.members(db, big["id"]):
            c = db.execute(
                "SELECT scenario, hazard_level, weather, lighting, road_type FROM clips WHERE id = ?", [m["clip_id"]]
            ).fetchone()
            labels = dict(zip(("scenario_category", "hazard_level", "weather", "lighting", "road_type"), c))
            labels |= {"road_users": ["car"], "ego_maneuver": "going_straight"}
            row = (m["clip_id"], "t", "model", "model", time.time())
            db.execute(
                "INSERT OR IGNORE INTO captions (id, clip_id, version, text, labels, source, author, created_at) "
                "VALUES (?, ?, 1, ?, ?, ?, ?, ?)",
                [m["caption_id"], row[0], row[1], json.dumps(labels, sort_keys=True), *row[2:]],
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
    for label in taxonomy.ENUMS:
        targets.set_target(db, label, 0.999, actor="lead", role="lead")
    p50, top, d = timed(lambda: decision.decide(db, big["id"]), a.repeat)
    print(f"{'decide 2,000':24} {p50:9.0f} {top:9.0f}  N = {big['population']:,}: {d.verdict} {d.more:,} more")
    for name, f in (("compare", Filter()), ("compare high", Filter(hazard_level="high"))):
        p50, top, c = timed(lambda f=f: prompt_compare.compare(db, v1, v2, f), a.repeat)
        hz = c["labels"]["hazard_level"]
        print(
            f"{name:24} {p50:9.0f} {top:9.0f}  {c['clips']:,} clips, hazard_level "
            f"{hz['a_accuracy']:.3f} -> {hz['b_accuracy']:.3f}"
        )
    db.close()


if __name__ == "__main__":
    main()
