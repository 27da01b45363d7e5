"""Browse performance at a million clips: p50/p95 of the queries the browse tab makes.

    python benchmarks/bench_browse.py --db /tmp/browse-1m.db --clips 1000000

Builds (or reuses, if it already holds --clips rows) a database through data.db.connect (so the real schema
and migrations), with realistic facet and caption distributions, fast: FTS triggers dropped during the bulk
insert, executemany in 50k batches, `synchronous=OFF` for the build only, then the FTS index rebuilt in one
pass and its triggers restored (data.schema._fts_clips). Then times, each --repeat times:
  facets      a page of 60 with hazard_level=high AND weather=rain (and a rare pair)
  deep        the same filters, keyset after clip 900,000 (paging far in; its cursor, data.order)
  text        a full-text page for a common word and a rare word, OR, a phrase, prefixes, NOT
  newest      pages in the "newest" order (the UI's default), first and deep
  computed    pages in an order on a computed key (hazard rank, then id, as a risk order would be): without an
              index (each page sorts what the filter matches; --repeat // 10 runs), then with a temporary
              index on (key, id), created for the run and dropped after it
  count       clips.count_capped (cap 10,000) for the same filters, and the unfiltered total
and prints p50/p95 in ms, plus EXPLAIN QUERY PLAN of each query (both id orders).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.library_build import fresh_library
from data import clips, order as orders, schema
from data.clips import Filter
from data.db import connect

HAZARD = (("none", 40), ("low", 30), ("medium", 18), ("high", 9), ("critical", 3))
WEATHER = (("clear", 50), ("cloudy", 20), ("rain", 15), ("fog", 5), ("snow", 5), ("unknown", 5))
LIGHTING = (("daylight", 60), ("dawn_dusk", 15), ("night_lit", 15), ("night_dark", 7), ("tunnel", 3))
ROAD = (("urban", 35), ("highway", 25), ("residential", 15), ("rural", 10), ("intersection", 10), ("parking_lot", 5))
SCENARIO = (
    ("normal_driving", 55),
    ("lane_change", 10),
    ("pedestrian_crossing", 8),
    ("vehicle_cut_in", 6),
    ("hard_braking", 6),
    ("intersection_conflict", 5),
    ("merge", 4),
    ("construction_zone", 3),
    ("near_collision", 1.5),
    ("emergency_vehicle", 1),
    ("animal_on_road", 0.5),
)
SUBJECTS = [
    "a white sedan",
    "a delivery truck",
    "a city bus",
    "a motorcyclist",
    "a cyclist",
    "a pedestrian",
    "two pedestrians",
    "a pickup truck",
    "a taxi",
    "a van",
]
ACTIONS = [
    "merges into the ego lane",
    "brakes hard ahead",
    "crosses at the crosswalk",
    "changes lanes",
    "waits at the light",
    "turns left across traffic",
    "overtakes on the left",
    "stops abruptly",
]
SCENES = [
    "on a wet urban street",
    "on a sunny highway",
    "at a busy intersection",
    "in light fog",
    "on a residential road",
    "near a construction zone",
    "at dusk",
    "in heavy rain",
]
RARE = ["a deer", "a fallen ladder", "an ambulance with sirens", "a horse rider", "a wrong-way driver"]


def _pick(rng: random.Random, table):
    values, weights = zip(*table)
    return rng.choices(values, weights, k=1)[0]


def build(db_path: Path, n: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    db = fresh_library(db_path, n)
    if db is None:
        return 0.0
    conn = db.conn
    rng = random.Random(seed)
    now = time.time()
    batch = []
    cols = (
        "id, path, sha256, size, mtime, duration, fps, frames, width, height, codec, review_status, "
        "current_caption_id, caption_source, caption_text, labels_text, scenario, hazard_level, weather, "
        "lighting, road_type, ingested_at, updated_at, thumbnail, filmstrip"
    )
    sql = f"INSERT INTO clips ({cols}) VALUES ({', '.join('?' * 25)})"
    for i in range(1, n + 1):
        captioned = rng.random() < 0.7
        h, w, lt, r, s = (
            _pick(rng, HAZARD),
            _pick(rng, WEATHER),
            _pick(rng, LIGHTING),
            _pick(rng, ROAD),
            _pick(rng, SCENARIO),
        )
        subject = rng.choice(RARE) if rng.random() < 0.001 else rng.choice(SUBJECTS)
        text = (
            (f"The ego vehicle drives {rng.choice(SCENES)} while {subject} {rng.choice(ACTIONS)}. Hazard is {h}.")
            if captioned
            else None
        )
        review = "unreviewed" if not captioned else rng.choices(("unreviewed", "approved", "rejected"), (60, 35, 5))[0]
        sha = f"{rng.getrandbits(256):064x}"
        batch.append(
            (
                i,
                f"route{i % 997:03d}/cam_{i:07d}.mp4",
                sha,
                8_000_000,
                now,
                12.0,
                30.0,
                360,
                1920,
                1080,
                "h264",
                review,
                i if captioned else None,
                "model" if captioned else None,
                text,
                f"{s} {h} {w} {lt} {r}" if captioned else None,
                s if captioned else None,
                h if captioned else None,
                w if captioned else None,
                lt if captioned else None,
                r if captioned else None,
                now,
                now,
                f"thumbs/{sha[:2]}/{sha}.jpg",
                f"filmstrips/{sha[:2]}/{sha}-16.jpg",
            )
        )
        if len(batch) == 50_000:
            with db.conn:
                conn.executemany(sql, batch)
            batch.clear()
    if batch:
        with db.conn:
            conn.executemany(sql, batch)
    schema._fts_clips(db)  # rebuild the FTS index in one pass and restore its triggers
    conn.execute("ANALYZE")
    conn.execute("PRAGMA synchronous=NORMAL")
    db.close()
    return time.perf_counter() - t0


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm the page cache
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="/tmp/browse-1m.db", help="database file to build or reuse")
    ap.add_argument("--clips", type=int, default=1_000_000, help="rows to build (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=50, help="timed runs per query (default 50)")
    ap.add_argument("--explain", action="store_true", help="print EXPLAIN QUERY PLAN of each query")
    args = ap.parse_args(argv)
    built = build(Path(args.db), args.clips)
    print(
        f"database {args.db}: {args.clips:,} clips ({'built in %.1f s' % built if built else 'reused'}, "
        f"{os.path.getsize(args.db) / 1e6:.0f} MB)"
    )
    db = connect(args.db)
    deep = int(args.clips * 0.9)
    f2 = Filter(hazard_level="high", weather="rain")
    rare2 = Filter(hazard_level="critical", weather="snow")
    at = clips.cursor_at(db, "oldest", deep)
    at_newest = clips.cursor_at(db, "newest", args.clips - deep)
    rank_sql = (
        "CASE {c}hazard_level WHEN 'critical' THEN 4 WHEN 'high' THEN 3 WHEN 'medium' THEN 2 "
        "WHEN 'low' THEN 1 WHEN 'none' THEN 0 END"
    )
    rank = orders.register(orders.Order("bench_hazard_rank", key=rank_sql.format(c="c."), descending=True))
    # a deep clip with a hazard level (one without is in the NULL run, which a facet filter may not reach)
    ranked = db.execute("SELECT MAX(id) FROM clips WHERE id <= ? AND hazard_level = 'low'", [deep]).fetchone()[0]
    at_rank = clips.cursor_at(db, rank, ranked)
    computed = {
        "computed key page: high+rain": lambda: clips.page(db, f2, order=rank),
        "computed key page: unfiltered": lambda: clips.page(db, order=rank),
        "computed key page deep: unfiltered": lambda: clips.page(db, order=rank, after=at_rank),
        "computed key page deep: weather=rain": lambda: clips.page(
            db, Filter(weather="rain"), order=rank, after=at_rank
        ),
    }
    cases = {
        "page: hazard=high AND weather=rain": lambda: clips.page(db, f2),
        "page: hazard=critical AND weather=snow": lambda: clips.page(db, rare2),
        f"page deep: high+rain after_id={deep:,}": lambda: clips.page(db, f2, after=at),
        "page: unfiltered, after_id deep": lambda: clips.page(db, after=at),
        "page: review_status=approved": lambda: clips.page(db, Filter(review_status="approved")),
        "newest page: high+rain": lambda: clips.page(db, f2, order="newest"),
        "newest page deep: high+rain": lambda: clips.page(db, f2, order="newest", after=at_newest),
        "text page: common word 'vehicle'": lambda: clips.page(db, Filter(text="vehicle")),
        "text page: common word deep": lambda: clips.page(db, Filter(text="vehicle"), after=at),
        "text page: rare word 'deer'": lambda: clips.page(db, Filter(text="deer")),
        "text page: 'ambulance' + hazard=high": lambda: clips.page(db, Filter(text="ambulance", hazard_level="high")),
        "text page: 'pedestrian OR cyclist'": lambda: clips.page(db, Filter(text="pedestrian OR cyclist")),
        "text page: OR deep": lambda: clips.page(db, Filter(text="pedestrian OR cyclist"), after=at),
        "text page: 'deer OR ambulance' (rare)": lambda: clips.page(db, Filter(text="deer OR ambulance")),
        'text page: phrase "at the crosswalk"': lambda: clips.page(db, Filter(text='"at the crosswalk"')),
        "text page: prefix 'pedestr*'": lambda: clips.page(db, Filter(text="pedestr*")),
        "text page: prefix 'v*' (one letter)": lambda: clips.page(db, Filter(text="v*")),
        "text page: 4 one-letter prefixes (the most allowed)": lambda: clips.page(db, Filter(text="t* v* w* a*")),
        "text page: '(taxi OR van) NOT fog'": lambda: clips.page(db, Filter(text="(taxi OR van) NOT fog")),
        "text page: 'vehicle NOT ego' (0 rows)": lambda: clips.page(db, Filter(text="vehicle NOT ego")),
        "count capped: 'pedestrian OR cyclist'": lambda: clips.count_capped(db, Filter(text="pedestrian OR cyclist")),
        "count capped: 4 one-letter prefixes": lambda: clips.count_capped(db, Filter(text="t* v* w* a*")),
        "count capped: high+rain": lambda: clips.count_capped(db, f2),
        "count capped: text 'vehicle'": lambda: clips.count_capped(db, Filter(text="vehicle")),
        "count capped: text 'deer'": lambda: clips.count_capped(db, Filter(text="deer")),
        "count exact: high+rain": lambda: clips.count(db, f2),
        "total (unfiltered)": lambda: clips.total(db),
    }
    print(f"{'query':52s} {'p50 ms':>8s} {'p95 ms':>8s}  result")

    def run(cases: dict, repeat: int, suffix: str = "") -> None:
        for name, fn in cases.items():
            p50, p95 = timed(fn, repeat)
            res = fn()
            shown = f"{len(res.rows)} rows" if isinstance(res, clips.Page) else str(res)
            print(f"{name + suffix:52s} {p50:8.2f} {p95:8.2f}  {shown}")

    def explain(f: Filter, after, order_list) -> None:
        for name, (sql, params) in clips.explain_samples(f, after, order_list).items():
            print(f"\n{name}:")
            for row in db.execute("EXPLAIN QUERY PLAN " + sql, params):
                print("   ", row[-1])

    run(cases, args.repeat)
    run(computed, max(3, args.repeat // 10), ", no index")
    if args.explain:
        explain(f2, deep, (orders.OLDEST, orders.NEWEST))
    index = "bench_tmp_rank"
    t = time.perf_counter()
    db.execute(f"CREATE INDEX {index} ON clips(({rank_sql.format(c='')}), id)")
    print(f"(index on (hazard rank, id) built in {time.perf_counter() - t:.1f} s)")
    try:
        run(computed, args.repeat, ", index")
        if args.explain:
            explain(Filter(weather="rain"), rank.decode(at_rank), (rank,))
    finally:
        db.execute(f"DROP INDEX {index}")
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
