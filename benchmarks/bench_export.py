"""Export of a big library with lineage: throughput and memory of data.export, against the export before lineage.

    python benchmarks/bench_export.py --db /tmp/export-1m.db --clips 1000000

Builds (or reuses, if it already holds --clips clips) a library through data.db.connect (the real schema and
migrations): 70 % of clips captioned by a machine caption; of those, 30 % edited by people (a chain of 1 to 3
human versions, one in ten of them an adopt of the machine version) and 40 % approved; 20 % of the machine
captions simulated. Rows are bulk-inserted with their lineage columns (what data.captions would write), the FTS
triggers dropped during the build and the index rebuilt once.

Then writes the export of every captioned clip and of the approved ones, JSONL and CSV, to /dev/null, and prints
rows, CPU seconds (the figure to compare on a shared machine), rows per CPU second, wall seconds, and the
process's peak RSS with how much it grew during that export: constant memory means no growth with the row
count. `--baseline` also times the export as it was before lineage (the same cursor without the origin join
and the edits lookup) on the same database.
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
from data import captions, clips, export, schema
from data.clips import Filter
from data.db import connect
from data.examples import LABELS

WEATHER = ("clear", "rain", "fog", "snow", "cloudy")
WORDS = "the ego vehicle slows as a pedestrian crosses while a cyclist waits at the light on a wet street".split()


def build(db_path: Path, n: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    db = fresh_library(db_path, n)
    if db is None:
        return 0.0
    conn = db.conn
    rng = random.Random(seed)
    now = time.time()
    clip_rows, cap_rows = [], []
    cap_id = 0
    clip_sql = (
        "INSERT INTO clips (id, path, sha256, duration, width, height, sidecar, review_status, reviewed_by, "
        "reviewed_at, current_caption_id, caption_source, caption_text, labels_text, weather) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    cap_sql = (
        "INSERT INTO captions (id, clip_id, version, parent_id, derived_from_id, origin_id, text, labels, source, "
        "author, simulated, model, prompt_id, prompt_name, prompt_version, params, frames, replica, decode_backend, "
        "latency_ms, prompt_tokens, completion_tokens, finish_reason, job_id, note, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    params = json.dumps({"max_completion_tokens": 512, "num_frames": 16, "seed": 0, "temperature": 0.2})

    def flush() -> None:
        with conn:
            conn.executemany(clip_sql, clip_rows)
            conn.executemany(cap_sql, cap_rows)
        clip_rows.clear()
        cap_rows.clear()

    for i in range(1, n + 1):
        current, text, labels, source = None, None, dict(LABELS), None
        if rng.random() < 0.7:
            labels["weather"] = rng.choice(WEATHER)
            text = " ".join(rng.choices(WORDS, k=40))
            sim = int(rng.random() < 0.2)
            cap_id += 1
            origin = prev = current = cap_id
            cap_rows.append(
                (cap_id, i, 1, None, None, cap_id, ("[SIMULATED] " if sim else "") + text, json.dumps(labels))
                + ("model", "model", sim, "Qwen/Qwen3-VL-8B-Instruct", 1, "av-hazard", 2, params, 16)
                + ("http://10.0.0.1:8000", "pynvvideocodec", 812.5, 3100, 231, "stop", 1 + i // 10_000, None, now)
            )
            source = "model"
            if rng.random() < 0.3:
                for v in range(2, 2 + rng.randint(1, 3)):
                    cap_id += 1
                    adopt = rng.random() < 0.1
                    derived = origin if adopt else prev
                    if not adopt:
                        labels = {**labels, "weather": rng.choice(WEATHER)}
                        text = text + " edited"
                    cap_rows.append(
                        (cap_id, i, v, prev, derived, origin, text, json.dumps(labels), "human", f"annotator{v}")
                        + (0,)
                        + (None,) * 13
                        + ("adopted version 1" if adopt else None, now + v)
                    )
                    prev = current = cap_id
                    source = "human"
        review = "unreviewed" if current is None or rng.random() < 0.6 else "approved"
        clip_rows.append(
            (i, f"route{i % 997:03d}/cam_{i:07d}.mp4", f"{rng.getrandbits(256):064x}", 12.0, 1920, 1080)
            + ('{"camera": "front_center", "route": %d}' % (i % 997), review)
            + (("lead", now) if review == "approved" else (None, None))
            + (current, source, text, "", labels["weather"] if current else None)
        )
        if len(clip_rows) == 50_000:
            flush()
    flush()
    schema._fts_clips(db)
    conn.execute("ANALYZE")
    conn.execute("PRAGMA synchronous=NORMAL")
    db.close()
    return time.perf_counter() - t0


def baseline(db, f: Filter, out) -> int:
    """The export before lineage: one cursor over clips joined with their current caption, nothing else."""
    where, args = clips._where(Filter(**{**f.to_dict(), "has_caption": True}))
    prov = ", ".join(f"k.{p}" for p in captions.PROVENANCE_FIELDS)
    cursor = db.execute(
        "SELECT c.id AS clip_id, c.path, c.sha256, c.duration, c.width, c.height, c.review_status, c.reviewed_by, "
        "c.reviewed_at, c.sidecar, k.id AS caption_id, k.version, k.text, k.labels, k.source, k.author, "
        f"k.created_at, k.job_id, {prov} FROM clips c JOIN captions k ON k.id = c.current_caption_id "
        f"WHERE {' AND '.join(where)} ORDER BY c.id",
        args,
    )
    names = [d[0] for d in cursor.description]
    n = 0
    for values in cursor:
        row = dict(zip(names, values))
        row["labels"] = json.loads(row["labels"])
        row["sidecar"] = json.loads(row["sidecar"]) if row["sidecar"] else {}
        row["params"] = json.loads(row["params"]) if row["params"] else None
        out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        n += 1
    return n


def measure(label: str, fn) -> None:
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu, wall = time.process_time(), time.perf_counter()
    with open(os.devnull, "w") as out:
        n = fn(out)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"| {label} | {n:,} | {cpu:.1f} | {n / cpu:,.0f} | {wall:.1f} | {rss:.0f} | {rss - rss_before:+.0f} |",
        flush=True,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="/tmp/export-1m.db", help="database file to build or reuse")
    ap.add_argument("--clips", type=int, default=1_000_000, help="clips to build (default 1,000,000)")
    ap.add_argument("--baseline", action="store_true", help="also time the export as it was before lineage")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build_only:
        print(f"{build(Path(args.db), args.clips):.0f}")
        return 0
    # built in a child process, so that this one's peak RSS is the export's alone
    out = subprocess.run(
        [sys.executable, __file__, "--db", args.db, "--clips", str(args.clips), "--build-only"],
        check=True,
        capture_output=True,
        text=True,
    )
    built = float(out.stdout.strip() or 0)
    db = connect(args.db)
    kinds = dict(db.execute("SELECT source, COUNT(*) FROM captions GROUP BY source").fetchall())
    print(
        f"database {args.db}: {args.clips:,} clips, {kinds.get('model', 0):,} machine and "
        f"{kinds.get('human', 0):,} human versions ({'built in %.0f s' % built if built else 'reused'}, "
        f"{os.path.getsize(args.db) / 1e6:.0f} MB)"
    )
    print("| export | rows | CPU s | rows per CPU s | wall s | peak RSS MiB | peak RSS growth MiB |")
    print("|---|---|---|---|---|---|---|")
    approved = Filter(review_status="approved")
    measure("JSONL, approved", lambda out: export.export(db, approved, "jsonl", out))
    measure("JSONL, every captioned clip", lambda out: export.export(db, Filter(), "jsonl", out))
    measure("CSV, every captioned clip", lambda out: export.export(db, Filter(), "csv", out))
    if args.baseline:
        measure("before lineage: JSONL, approved", lambda out: baseline(db, approved, out))
        measure("before lineage: JSONL, every captioned clip", lambda out: baseline(db, Filter(), out))
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
