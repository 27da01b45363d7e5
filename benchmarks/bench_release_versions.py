"""Ten successive releases of a growing library (issue 44): how many earlier clips change split, and how far each
split's share drifts from the asked one, with splits kept (the default) and re-placed every time (`--reshuffle`,
which is what every release did before).

    python benchmarks/bench_release_versions.py --clips 3000 --routes 150 --versions 10 --out /tmp/versions

The library is made through the real write paths (data.captions, data.review_states) in a fresh SQLite file:
`--clips` approved clips over `--routes` drives (a folder and a route each; sizes vary 1 to 3x; hazard levels
none/low/medium/high/critical 40/30/18/9/3 %). Each later version first approves about 10 % more clips: half in
existing drives, 40 % in new drives, 10 % in existing drives' folders without the route in their sidecar (they join
their drive). Then two releases of the same clips: one of the name "kept" (the default) and one of the name
"reshuffled" with `--reshuffle`, each compared with its own name's release before. Prints one row per version.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data import captions, review_states, taxonomy
from data.clips import Filter
from data.db import connect, immediate
from data.release import make as rel, stratify as splits
from data.release.options import Options

WEIGHTS = (40, 30, 18, 9, 3)
LABELS = {
    "scenario_category": "vehicle_cut_in",
    "road_users": ["car"],
    "ego_maneuver": "slowing",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "highway",
}


def add(db, rng: random.Random, clips: list[tuple[int, bool]], start: int) -> None:
    """Approved clips: (route, whether the sidecar names the route) each, in the route's folder."""
    ids = []
    with immediate(db):
        for i, (route, named) in enumerate(clips, start):
            sidecar = {"route": f"R{route:04d}", "camera": "front"} if named else {"camera": "front"}
            cur = db.execute(
                "INSERT INTO clips (path, sha256, duration, width, height, sidecar) VALUES (?, ?, 8, 640, 360, ?)",
                [f"drive{route:04d}/clip_{i:06d}.mp4", f"{i:064x}", json.dumps(sidecar)],
            )
            ids.append(cur.lastrowid)
    for cid in ids:
        labels = {**LABELS, "hazard_level": rng.choices(taxonomy.HAZARD_LEVELS, WEIGHTS)[0]}
        cap, _ = captions.add_machine(
            db,
            cid,
            job_id=None,
            text=f"Clip {cid}.",
            labels=labels,
            provenance={"model": "m", "prompt_name": "av-hazard", "prompt_version": 2},
        )
        review_states.set_review(db, cid, status="approved", user="lead", base_caption_id=cap["id"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=3000)
    ap.add_argument("--routes", type=int, default=150)
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--splits", default=splits.DEFAULT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="a folder for the database and releases (default: a new temp one)")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-versions-"))
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    shares = tuple(splits.parse(args.splits).items())
    db = connect(out / "versions.db")
    weights = [rng.choice((1, 2, 3)) for _ in range(args.routes)]
    first = rng.choices(range(args.routes), weights, k=args.clips)
    add(db, rng, [(r, True) for r in first], 0)
    routes, total, start = args.routes, args.clips, args.clips
    names = [s for s, _ in shares]
    print(f"{args.clips:,} approved clips over {args.routes} drives, then +~10 % per version; asked {args.splits}")
    print(
        "| version | clips | added | kept: earlier clips that changed split | kept: "
        + " / ".join(names)
        + " % | reshuffled: earlier clips that changed split | reshuffled: "
        + " / ".join(names)
        + " % | s per release |"
    )
    print("|---|---|---|---|---|---|---|---|")
    worst = {"kept": 0.0, "reshuffled": 0.0}
    for version in range(1, args.versions + 1):
        added = 0
        if version > 1:
            step = []
            for _ in range(max(1, round(total * 0.1))):
                u = rng.random()
                if u < 0.5:
                    step.append((rng.randrange(routes), True))
                elif u < 0.9:
                    step.append((routes, True))
                    routes += 1
                else:
                    step.append((rng.randrange(routes), False))
            add(db, rng, step, start)
            start += len(step)
            total += len(step)
            added = len(step)
        cells, t0 = {}, time.perf_counter()
        for name, reshuffle in (("kept", False), ("reshuffled", True)):
            options = Options(Filter(), "route", shares, args.seed, name, reshuffle=reshuffle)
            r = rel.release(db, options, out / f"{name}-v{version}", actor="bench", role="lead")
            n = sum(r.counts.values())
            pct = [100 * r.counts[s] / n for s in names]
            worst[name] = max(worst[name], *(abs(p - 100 * dict(shares)[s]) for p, s in zip(pct, names)))
            moved = "-" if r.changes is None else f"{r.changes['moved']:,} of {r.changes['kept_clips']:,}"
            cells[name] = (moved, " / ".join(f"{p:.1f}" for p in pct))
        secs = (time.perf_counter() - t0) / 2
        print(
            f"| {version} | {total:,} | {added:,} | {cells['kept'][0]} | {cells['kept'][1]} | "
            f"{cells['reshuffled'][0]} | {cells['reshuffled'][1]} | {secs:.1f} |",
            flush=True,
        )
    print(
        f"largest distance of a split's share from the asked one over {args.versions} versions: "
        f"kept {worst['kept']:.2f} points, reshuffled {worst['reshuffled']:.2f} points"
    )
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
