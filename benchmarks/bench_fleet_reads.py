"""CPU of one fleet read through a FleetReader, as the app's Fleet tab and the runner's look make them.

    python benchmarks/bench_fleet_reads.py --reads 100 --replicas 4

Starts a simulated fleet (serving.simfleet, its own process, loopback, answers at once), makes one FleetReader
(the app and the runner each keep one) and times each kind of read --reads times, after one read to warm up:
`get` (one bounded GET of a replica's /health: the launcher's health waits), `look` (the runner: /health of each
replica) and `watch` (the Fleet tab: /health and /metrics of each). Prints this process's CPU (time.process_time,
every thread) and wall time per read, median and mean; the fleet's own CPU is not counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.settings import Settings
from serving import simfleet
from serving.fleet.reader import FleetReader


def measure(read, reads: int) -> tuple[list[float], list[float]]:
    """(CPU ms, wall ms) of each of `reads` calls of `read`, after one to warm up."""
    read()
    cpu, wall = [], []
    for _ in range(reads):
        c, w = time.process_time(), time.perf_counter()
        read()
        cpu.append((time.process_time() - c) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
    return cpu, wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=100, help="reads of each kind (default 100)")
    ap.add_argument("--replicas", type=int, default=4, help="simulated replicas (default 4)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-reads-") as d:
        root = Path(d)
        settings = Settings.load({"data_dir": str(root / "var"), "clip_root": str(root)}, environ={})
        with simfleet.start_fleet(a.replicas, 0, root, speed=0) as fleet:
            reader = FleetReader(settings, timeout=5.0)
            for name, read in (
                ("get (one /health)", lambda: reader.get(fleet.urls[0] + "/health")),
                (f"look ({a.replicas} replicas' /health)", lambda: reader.look(fleet.urls)),
                (f"watch ({a.replicas} replicas, /metrics too)", lambda: reader.watch(fleet.urls)),
            ):
                cpu, wall = measure(read, a.reads)
                print(
                    f"{name:36s} CPU ms median {statistics.median(cpu):6.2f} mean {statistics.mean(cpu):6.2f}"
                    f"   wall ms median {statistics.median(wall):6.2f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
