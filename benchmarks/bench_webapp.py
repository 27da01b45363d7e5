"""Web app handler latency at a million clips, and save latency under 20 concurrent annotators plus a job.

    python benchmarks/bench_webapp.py --db /tmp/webapp-1m.db --clips 1000000 --repeat 40

Builds the database with benchmarks/bench_browse.build (reused if it already holds --clips rows; a copy of
/tmp/browse-1m.db is taken when that one exists), builds the app (build_app, auth off), and times the
handlers themselves in-process (server time, no browser): browse (first page + counts), filter (hazard and
weather), search (full text), next page, open-clip (review view: clip, caption, history, neighbours).
Then 20 threads, each its own annotator, save human edits through ReviewActions.save for --seconds while a
job thread claims and completes machine captions on overlapping clips; prints save p50/p95/p99, conflicts.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from bench_browse import build

from data import clips, examples, jobs, taxonomy
from data.db import connect
from data.job_params import JobParams
from data.jobs import items as job_items
from data.jobs.selection import Selection
from data.settings import Settings
from webapp.review.form import ReviewForm

LABELS = examples.HAZARD_LABELS


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def timed(fn, repeat: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def current_versions(db, ids: list[int]) -> int:
    """Write the caption version that each of these clips names as its current one, where it is missing; how many.

    bench_browse.build gives a captioned clip `current_caption_id = id` and its text on the row but writes no
    `captions` row (its benchmarks read `clips` only), while a save reads the current version (its lineage's
    origin). The version written is the model caption the row shows: its own origin, labels from the facets."""
    rows = db.execute(
        "SELECT c.id, c.current_caption_id, c.caption_text, c.scenario, c.hazard_level, c.weather, c.lighting, "
        "c.road_type FROM clips c LEFT JOIN captions k ON k.id = c.current_caption_id "
        f"WHERE c.current_caption_id IS NOT NULL AND k.id IS NULL AND c.id IN ({', '.join('?' * len(ids))})",
        ids,
    ).fetchall()
    now = time.time()
    out = []
    for clip_id, cap_id, text, scenario, hazard, weather, lighting, road in rows:
        labels = {"scenario_category": scenario, "hazard_level": hazard, "road_users": ["car"]}
        labels |= {"ego_maneuver": "going_straight", "weather": weather, "lighting": lighting, "road_type": road}
        out.append((cap_id, clip_id, clip_id, cap_id, text, taxonomy.dumps(labels), now))
    with db.conn:
        db.conn.executemany(  # the next version number: a library used before may hold the job's versions
            "INSERT INTO captions (id, clip_id, version, origin_id, text, labels, source, author, created_at) "
            "VALUES (?, ?, (SELECT COALESCE(MAX(version), 0) + 1 FROM captions WHERE clip_id = ?), ?, ?, ?, "
            "'model', 'model', ?)",
            out,
        )
    return len(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="/tmp/webapp-1m.db")
    ap.add_argument("--clips", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--annotators", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="mean seconds an annotator spends on a clip between saves (0: save back to back, saturated)",
    )
    ap.add_argument(
        "--job-rate",
        type=float,
        default=0.0,
        help="machine captions per second the job writes (e.g. 56: 8 replicas at 7 clips/s; 0: flat out)",
    )
    a = ap.parse_args(argv)
    db_path = Path(a.db)
    shared = Path("/tmp/browse-1m.db")
    if not db_path.exists() and shared.exists() and a.clips == 1_000_000 and shared != db_path:
        d = connect(shared)
        d.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        d.close()
        shutil.copy(shared, db_path)
    print(f"build: {build(db_path, a.clips):.1f} s")

    from webapp.app import build_app

    data_dir = db_path.parent / (db_path.stem + "-var")
    settings = Settings.load({"data_dir": str(data_dir), "db": str(db_path), "auth": "off"}, environ={})
    app = build_app(settings)
    wb = app.state.workbench
    b, r, act = wb.browse, wb.review.view, wb.review.actions
    rng = random.Random(0)
    mid = min(500_000, a.clips // 2)  # a deep page at a million clips; the middle of a smaller library
    deep = clips.cursor_at(wb.ctx.db(), "newest", mid)

    def browse(**kw):
        args = dict(
            status="any",
            scenario="any",
            hazard="any",
            weather="any",
            lighting="any",
            has_caption="any",
            failed="any",
            job=None,
            text="",
            assignee="any",
            sort="newest",
        )
        args.update(kw)
        return lambda: b.apply(None, *args.values())

    results = {
        "browse (first page + counts)": timed(browse(), a.repeat),
        "filter hazard=high & weather=rain": timed(browse(hazard="high", weather="rain"), a.repeat),
        "filter approved & night_dark": timed(browse(status="approved", lighting="night_dark"), a.repeat),
        "search 'pedestrian'": timed(browse(text="pedestrian"), a.repeat),
        "search rare word": timed(browse(text="kangaroo"), a.repeat),
        f"next page (deep, after id {mid})": timed(
            lambda: b.page({"hazard_level": "high"}, [None, deep], "newest", None), a.repeat
        ),
        "open clip (review view)": timed(lambda: r.show(rng.randint(1, a.clips), None), a.repeat),
        "next clip within filter": timed(
            lambda: act.step(+1)(None, *ReviewForm(rng.randint(1, a.clips)).values(), {"weather": "rain"}, "newest"),
            a.repeat,
        ),
    }
    print(f"\nhandler server time at {a.clips:,} clips ({a.repeat} runs each), ms")
    print(f"{'handler':40s} {'p50':>8s} {'p95':>8s}")
    for name, xs in results.items():
        print(f"{name:40s} {statistics.median(xs):8.1f} {pct(xs, 95):8.1f}")

    # --- saves under load --------------------------------------------------------------------------------
    pool = list(range(1, min(2000, a.clips) + 1))  # 2,000 hot clips shared by annotators and the job
    db = connect(db_path)
    current_versions(db, pool)
    job_id = jobs.create(
        db, name="bench job", created_by="bench", selection=Selection.of_clips(pool), prompt_id=None, params=JobParams()
    )
    db.close()
    stop = threading.Event()
    lat: list[float] = []
    conflicts = [0]
    errors: list[str] = []
    lock = threading.Lock()
    run = time.time_ns()

    def annotator(i: int) -> None:
        rnd = random.Random(i)
        if a.think:
            stop.wait(rnd.uniform(0, a.think))  # do not start in lock step
        while not stop.is_set():
            if a.think:  # reading the clip and typing: a uniform 0.5x..1.5x of --think between saves
                if stop.wait(rnd.uniform(0.5, 1.5) * a.think):
                    break
            cid = rnd.choice(pool)
            view = r.show(cid, None)
            base = view[r.base]
            t = time.perf_counter()
            text = f"annotator {i} run {run} edit {rnd.random():.6f}"  # not a text an earlier run saved
            form = ReviewForm(cid, base, None, text, tuple(LABELS[k] for k in taxonomy.ENUMS))
            try:
                out = act.save(None, *form.values())
            except Exception as e:  # counted and shown below, and the run fails: a thread must not die unseen
                with lock:
                    errors.append(f"clip {cid}: {type(e).__name__}: {e}")
                continue
            ms = (time.perf_counter() - t) * 1000
            msg = out.get(r.msg, "")
            with lock:
                lat.append(ms)
                if "conflict" in msg:
                    conflicts[0] += 1
                elif "Saved" not in msg:
                    errors.append(msg)

    machine = [0]

    def job_writer() -> None:
        d = connect(db_path)
        runner = job_items.runner_identity()
        while not stop.is_set():
            items = job_items.claim(d, job_id, runner, 16, lease_seconds=60, max_attempts=3)
            if not items:
                break
            for it in items:
                job_items.complete(
                    d,
                    job_id,
                    it["clip_id"],
                    text="machine caption",
                    labels=LABELS,
                    provenance={"model": "bench", "simulated": True, "latency_ms": 1.0},
                )
                machine[0] += 1
            # a fleet delivers results at its own pace: 16 results every 16/rate s (as fast as possible if 0)
            time.sleep(16 / a.job_rate if a.job_rate else 0.01)
        d.close()

    threads = [threading.Thread(target=annotator, args=(i,)) for i in range(a.annotators)]
    threads.append(threading.Thread(target=job_writer))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(a.seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(
        f"\nsaves: {len(lat)} in {wall:.1f} s by {a.annotators} annotators (think {a.think} s), "
        f"{machine[0]} machine captions written meanwhile (job rate {a.job_rate or 'flat out'}); "
        f"conflicts {conflicts[0]}, other errors {len(errors)}"
    )
    if lat:
        print(
            f"save ms: p50 {statistics.median(lat):.1f}  p95 {pct(lat, 95):.1f}  p99 {pct(lat, 99):.1f}  "
            f"max {max(lat):.1f}"
        )
    from data.db import write_lock_stats

    ws = write_lock_stats(db_path)
    print(
        f"write lock (this process: annotators + job): {ws['holds']} transactions, longest hold "
        f"{ws['max_ms']} ms, mean {ws['total_ms'] / max(1, ws['holds']):.2f} ms"
    )
    if errors:
        print("first error:", errors[0][:200])
    app.state.ctx.close()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
