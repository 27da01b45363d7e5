"""Throughput of the simulated fleet through the real FleetClient.

    python benchmarks/simfleet_throughput.py            # both figures
    python benchmarks/simfleet_throughput.py --requests 2000 --replicas 8 --concurrency 128

1. ceiling: speed 0 (no simulated latency), N replicas in one child process, one client with C in flight:
   what the harness itself can do -- the most a runner benchmark against the simulator can show -- and the
   fleet process's CPU time per request.
2. calibration: speed 1, one replica, a 1080p clip, saturated (C >> capacity): clips/s per replica,
   which the latency model aims at ~4-7 (one H200 measured ~4.2).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data import examples
from data.library import clipgen
from data.settings import Settings
from serving import simfleet
from serving.client import CaptionRequest, FleetClient

PROMPT = examples.PROMPT


def write_clip(path: Path, w: int, h: int, frames: int = 20, fps: int = 10) -> None:
    clipgen.tiny_clip(path, width=w, height=h, frames=frames, fps=fps, step=11)


async def drive(settings: Settings, urls: list[str], clips: list[str], n: int, concurrency: int) -> dict:
    client = FleetClient(settings)
    latencies: list[float] = []
    errors = 0
    queue = iter(range(n))

    async def worker(k: int) -> None:
        nonlocal errors
        for i in queue:
            t0 = time.monotonic()
            try:
                await client.caption(urls[i % len(urls)], CaptionRequest(clips[i % len(clips)], PROMPT))
                latencies.append(time.monotonic() - t0)
            except Exception:  # counted, the benchmark goes on
                errors += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    wall = time.monotonic() - t0
    await client.aclose()
    lat = sorted(latencies)
    return {
        "requests": n,
        "ok": len(lat),
        "errors": errors,
        "wall_s": round(wall, 2),
        "clips_per_s": round(len(lat) / wall, 1),
        "p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
        "p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1000, 1) if lat else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--calibration-seconds", type=float, default=12.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "clips"
        for i in range(16):
            write_clip(root / f"small/{i:02d}.mp4", 160, 90)
        write_clip(root / "hd/1080p.mp4", 1920, 1080, frames=10)
        settings = Settings.load({"data_dir": tmp, "clip_root": str(root)}, environ={})

        fleet = simfleet.start_fleet(args.replicas, 0, root, mode="process", speed=0)
        try:
            small = [f"small/{i:02d}.mp4" for i in range(16)]
            asyncio.run(drive(settings, fleet.urls, small, 200, 32))  # warm-up
            # the fleet process's own CPU per request: on a shared machine it moves far less than clips/s
            cpu0 = psutil.Process(fleet.process.pid).cpu_times()
            r = asyncio.run(drive(settings, fleet.urls, small, args.requests, args.concurrency))
            cpu1 = psutil.Process(fleet.process.pid).cpu_times()
            cpu = cpu1.user - cpu0.user + cpu1.system - cpu0.system
            r["fleet_cpu_ms_per_request"] = round(cpu * 1000 / args.requests, 3)
            print(f"ceiling: speed 0, {args.replicas} replicas, concurrency {args.concurrency}: {r}")
        finally:
            fleet.stop()

        fleet = simfleet.start_fleet(1, 0, root, mode="process", speed=1)
        try:
            n = int(args.calibration_seconds * 6)
            r = asyncio.run(drive(settings, fleet.urls, ["hd/1080p.mp4"], n, 24))
            print(
                f"calibration: speed 1, 1 replica (capacity {simfleet.DEFAULT_CAPACITY}), 1080p 16 frames, "
                f"concurrency 24: {r}"
            )
        finally:
            fleet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
