"""The job runner's own ceiling and how busy it keeps a fleet.

    python benchmarks/bench_runner.py                 # both figures, default sizes
    python benchmarks/bench_runner.py --clips 20000 --replicas 8

1. Ceiling: zero-latency simulated replicas (`--speed 0`, in a separate process); the runner (in this process,
   through `serving.runner.run_job`) captions `--clips` clips. Prints requests/s and the CPU seconds per
   request of this process (the runner: its loop, httpx, JSON checks and SQLite writes).
2. Busy share: 8 simulated replicas that each caption 7 clips/s (capacity 1, latency 1/7 s); the share of the
   fleet's capacity the runner keeps busy = achieved clips/s / (8 x 7).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data import (  # noqa: E402
    db as dbmod,  # noqa: E402
    jobs,
    prompts,
)
from data.settings import Settings  # noqa: E402
from serving import (
    runner as runmod,  # noqa: E402
    simfleet,  # noqa: E402
)
from serving.client import CaptionRequest, FleetClient  # noqa: E402
from tests.runner_fixtures import tiny_library  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_job(settings, db, urls, ids) -> tuple[float, float, dict]:
    job_id = jobs.create(db, name="bench", created_by="bench", clip_ids=ids, prompt_id=prompts.latest(db)["id"])
    c0, t0 = cpu(), time.perf_counter()
    prog = runmod.run_job(settings, job_id, urls, stop_event=threading.Event())
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    assert prog["counts"]["done"] == len(ids), prog["counts"]
    return wall, cpu_s, prog


def latency_at_speed_1(settings) -> float:
    """Seconds one tiny clip takes on a simulated replica at speed 1 (to size the 7 clips/s fleet)."""
    import asyncio

    f = simfleet.start_fleet(1, 0, settings.clip_root, speed=1.0)
    try:

        async def go():
            c = FleetClient(settings)
            d = dbmod.connect(settings.db)
            p = prompts.latest(d)
            d.close()
            t = time.perf_counter()
            for _ in range(3):
                await c.caption(f.urls[0], CaptionRequest(clip_path="bench/00000.mp4", prompt=p))
            await c.aclose()
            return (time.perf_counter() - t) / 3

        return asyncio.run(go())
    finally:
        f.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=10000, help="clips for the ceiling run")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--busy-clips", type=int, default=1200, help="clips for the busy-share run")
    ap.add_argument("--inflight", type=int, default=48, help="per-replica in-flight bound")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    settings = Settings.load({"data_dir": str(tmp), "per_replica_inflight": args.inflight}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, max(args.clips, args.busy_clips), prefix="bench")
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.replicas} replicas, "
        f"inflight {args.inflight}/replica"
    )

    fleet = simfleet.start_fleet(args.replicas, 0, settings.clip_root, speed=0)
    try:
        wall, cpu_s, _ = one_job(settings, db, fleet.urls, ids[: args.clips])
    finally:
        fleet.stop()
    n = args.clips
    print(
        f"ceiling: {n} requests in {wall:.2f} s = {n / wall:.0f} requests/s; runner CPU {cpu_s:.2f} s "
        f"= {cpu_s / n * 1000:.2f} ms per request ({cpu_s / wall:.2f} cores)"
    )

    lat = latency_at_speed_1(settings)
    speed = 1 / (7 * lat)
    fleet = simfleet.start_fleet(8, 0, settings.clip_root, speed=speed, capacity=1)
    samples: list[int] = []
    sampling = threading.Event()

    def sample() -> None:  # how many of the 8 replicas run a request, every 50 ms, while work is queued
        import httpx

        with httpx.Client(timeout=2, trust_env=False) as http:
            while not sampling.is_set():
                st = [http.get(u + "/sim/stats").json() for u in fleet.urls]
                if sum(s["chat_requests"] for s in st) >= 8:  # started
                    if (
                        any(s["waiting"] == 0 and s["running"] == 0 for s in st)
                        and samples
                        and sum(s["running"] + s["waiting"] for s in st) < 8
                    ):
                        break  # the tail: fewer clips left than replicas
                    samples.append(sum(1 for s in st if s["running"] > 0))
                time.sleep(0.05)

    th = threading.Thread(target=sample)
    try:
        m = args.busy_clips
        th.start()
        wall, cpu_s, _ = one_job(settings, db, fleet.urls, ids[:m])
        sampling.set()
        th.join()
        stats = [fleet.stats(i) for i in range(8)]
    finally:
        fleet.stop()
    rate = m / wall
    busy = sum(samples) / (8 * len(samples)) if samples else 0.0
    print(
        f"busy share: 8 replicas x 7 clips/s (latency {lat * speed * 1000:.0f} ms, capacity 1): {busy:.1%} of "
        f"replica-time busy while work was queued ({len(samples)} samples); end to end {m} clips in {wall:.2f} s "
        f"= {rate:.1f} clips/s = {rate / 56:.1%} of 56 clips/s (includes start-up and the tail); requests per "
        f"replica {[s['chat_requests'] for s in stats]}"
    )
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
