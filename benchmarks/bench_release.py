"""A training-set release of a big library (data.release.make): wall and CPU time, and peak memory at three sizes.

    python benchmarks/bench_release.py --db /tmp/release-1m.db --clips 1000000 --out /tmp/release-bench

Builds (or reuses, if it already holds --clips clips) a library through benchmarks.library_build.fresh_library (the
real schema and migrations): 70 % of clips captioned by a machine caption (prompt av-hazard v2, hazard levels
none/low/medium/high/critical 40/30/18/9/3 %, weather clear/rain/fog 50/25/25 %), 2/7 of those approved (200,000
at a million clips), a third of the approved ones edited by a person first (a human version derived from the
machine caption, as data.captions writes it). 95 % of clips name one of 2,000 routes in their sidecar; the rest
are grouped by their folder (2,000 folders). 1 % of machine captions are simulated. The search index is not
built (a release reads no text search).

Then releases, each in a fresh interpreter (so that its peak RSS is its own; `--out` must not hold the release
folders yet): every approved clip twice (on a new library the first release also stores the quality pairs a report
needs, as the first Quality view after an upgrade does, and its row says so; the second compares itself with the
first),
then the approved clips with weather rain (about a quarter) and clear (about a half), to show that memory does not
grow with the clips. Prints clips, wall and CPU seconds, clips per CPU second, the process's peak RSS and how much
it grew during the release (RSS before is after the imports: Python, pandas, pyarrow).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.library_build import fresh_library
from data import prompts, taxonomy

HAZARD_WEIGHTS = (40, 30, 18, 9, 3)
WEATHER = ("clear", "rain", "fog")
WEATHER_WEIGHTS = (50, 25, 25)
ROUTES = 2_000
WORDS = "the ego vehicle slows as a pedestrian crosses while a cyclist waits at the light on a wet street".split()
PARAMS = json.dumps({"max_completion_tokens": 512, "num_frames": 16, "seed": 0, "temperature": 0.2})


def _labels(rng: random.Random) -> dict:
    out = {}
    for name, values in taxonomy.ENUMS.items():
        if name in taxonomy.MULTI:
            out[name] = sorted(rng.sample(values, rng.choice((0, 1, 1, 2, 2, 3))))
        elif name == "hazard_level":
            out[name] = rng.choices(values, HAZARD_WEIGHTS)[0]
        elif name == "weather":
            out[name] = rng.choices(WEATHER, WEATHER_WEIGHTS)[0]
        else:
            out[name] = rng.choice(values)
    return out


def build(db_path: Path, n: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    db = fresh_library(db_path, n)
    if db is None:
        return 0.0
    prompts.ensure_presets(db)
    conn = db.conn
    rng = random.Random(seed)
    now = time.time()
    clip_sql = (
        "INSERT INTO clips (id, path, sha256, duration, width, height, sidecar, review_status, reviewed_by, "
        "reviewed_at, current_caption_id, caption_source, caption_text, labels_text, scenario, hazard_level, "
        "weather, lighting, road_type) VALUES (?, ?, ?, 12.0, 1920, 1080, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?)"
    )
    cap_sql = (
        "INSERT INTO captions (id, clip_id, version, parent_id, derived_from_id, origin_id, text, labels, source, "
        "author, simulated, model, prompt_name, prompt_version, params, frames, replica, decode_backend, latency_ms, "
        "prompt_tokens, completion_tokens, finish_reason, job_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    clip_rows, cap_rows = [], []
    cap_id = 0

    def flush() -> None:
        with conn:
            conn.executemany(clip_sql, clip_rows)
            conn.executemany(cap_sql, cap_rows)
        clip_rows.clear()
        cap_rows.clear()

    for i in range(1, n + 1):
        current = text = labels = source = None
        status, by, at = "unreviewed", None, None
        if i % 10 < 7:
            labels = _labels(rng)
            text = " ".join(rng.choices(WORDS, k=60))
            sim = int(rng.random() < 0.01)
            cap_id += 1
            origin = current = cap_id
            model = "Qwen/Qwen3-VL-8B-Instruct" + (" (simulated)" if sim else "")
            cap_rows.append(
                (cap_id, i, 1, None, None, cap_id, ("[SIMULATED] " if sim else "") + text, json.dumps(labels))
                + ("model", "model", sim, model, "av-hazard", 2, PARAMS, 16, "http://10.0.0.1:8000", "pynvvideocodec")
                + (812.5, 3100, 231, "stop", 1 + i // 100_000, now)
            )
            source = "model"
            if (i // 10) % 7 < 2:
                status, by, at = "approved", "annotator1", now
                if rng.random() < 1 / 3:
                    cap_id += 1
                    labels = {**labels, "hazard_level": rng.choices(taxonomy.HAZARD_LEVELS, HAZARD_WEIGHTS)[0]}
                    text = text + " The reviewer adds what the model missed."
                    cap_rows.append(
                        (cap_id, i, 2, origin, origin, origin, text, json.dumps(labels), "human", "annotator1", 0)
                        + (None,) * 11
                        + (None, now + 1)
                    )
                    current, source = cap_id, "human"
        route = rng.randrange(ROUTES)
        sidecar = json.dumps({"camera": "front_center", "route": f"R{route:04d}"}) if rng.random() < 0.95 else None
        facets = taxonomy.facet_values(labels) if labels else {}
        clip_rows.append(
            (i, f"drive{i // 500:04d}/cam_{i:07d}.mp4", f"{i:064x}", sidecar, status, by, at, current, source, text)
            + tuple(facets.get(c) for c in ("scenario", "hazard_level", "weather", "lighting", "road_type"))
        )
        if len(clip_rows) == 50_000:
            flush()
    flush()
    conn.execute("ANALYZE")
    conn.execute("PRAGMA synchronous=NORMAL")
    db.close()
    return time.perf_counter() - t0


def run_one(db_path: str, out: str, name: str, fdict: dict) -> None:
    """One release in this process; prints its figures as JSON."""
    from data.clips import Filter
    from data.db import connect
    from data.release import make as rel
    from data.release.options import Options

    db = connect(db_path)
    pairs = db.execute("SELECT COUNT(*) FROM quality_pairs").fetchone()[0]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu, wall = time.process_time(), time.perf_counter()
    r = rel.release(db, Options(Filter.from_dict(fdict), name=name), out, actor="bench", role="lead")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stored = db.execute("SELECT COUNT(*) FROM quality_pairs").fetchone()[0] - pairs
    db.close()
    size = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    print(
        json.dumps(
            {"clips": sum(r.counts.values()), "counts": r.counts, "cpu": cpu, "wall": wall, "rss": rss}
            | {"rss0": rss0, "mb": size / 1e6, "changes": r.changes, "stored": stored}
        )
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="/tmp/release-1m.db", help="database file to build or reuse")
    ap.add_argument("--clips", type=int, default=1_000_000, help="clips to build (default 1,000,000)")
    ap.add_argument("--out", default="/tmp/release-bench", help="a folder for the releases (must not hold them yet)")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run-one", nargs=3, metavar=("OUT", "NAME", "FILTER"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build_only:
        print(f"{build(Path(args.db), args.clips):.0f}")
        return 0
    if args.run_one:
        out, name, fjson = args.run_one
        run_one(args.db, out, name, json.loads(fjson))
        return 0
    me = [sys.executable, __file__, "--db", args.db, "--clips", str(args.clips)]
    built = float(subprocess.run([*me, "--build-only"], check=True, capture_output=True, text=True).stdout or 0)
    print(
        f"database {args.db}: {args.clips:,} clips ({'built in %.0f s' % built if built else 'reused'}, "
        f"{os.path.getsize(args.db) / 1e6:,.0f} MB); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print("| release | clips | wall s | CPU s | clips per CPU s | peak RSS MiB | RSS growth MiB | files MB |")
    print("|---|---|---|---|---|---|---|---|")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    cases = (
        ("every approved clip, first", "all", {}),
        ("every approved clip, again (compared with the first)", "all", {}),
        ("approved, weather rain", "rain", {"weather": "rain"}),
        ("approved, weather clear", "clear", {"weather": "clear"}),
    )
    for k, (label, name, fdict) in enumerate(cases):
        out = Path(args.out) / f"{stamp}-{k}-{name}"
        proc = subprocess.run(
            [*me, "--run-one", str(out), f"bench-{stamp}-{name}", json.dumps(fdict)],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return 1
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if r["stored"]:
            label += f" (stored {r['stored']:,} quality pairs first)"
        print(
            f"| {label} | {r['clips']:,} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['clips'] / r['cpu']:,.0f} | "
            f"{r['rss']:.0f} | {r['rss'] - r['rss0']:+.0f} | {r['mb']:,.0f} |",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
