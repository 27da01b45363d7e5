"""What the router gate (serving/router_gate.py) costs: the same requests to vllm-router directly and through the
gate in front of it, over zero-latency simulated replicas.

    python benchmarks/bench_gate.py                          # 3,000 requests, 64 in flight
    python benchmarks/bench_gate.py --requests 6000 --inflight 128 --replicas 4

Prints, for each path: requests/s, the mean and p99 latency, and for the gate its CPU seconds per request (the
gate process's user + system time, read from /proc through psutil). The figure that matters is the gate's CPU
per request against the runner's own (~1.8 ms, docs/BENCHMARKS.md "Job runner"): the head needs that much more
of a core per request per second. The client is in this process; the replicas, the router and the gate are
each their own process, as the launcher starts them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psutil

from data.settings import Settings
from serving import fleet_key, procs, simfleet
from serving.launch.commands import gate_command, router_command

BODY = {"messages": [{"role": "user", "content": "hello"}], "max_completion_tokens": 600}


async def drive(url: str, n: int, inflight: int, headers: dict) -> tuple[float, list[float]]:
    """n chat requests to url, `inflight` at a time: (seconds, latencies)."""
    lat: list[float] = []
    sem = asyncio.Semaphore(inflight)
    limits = httpx.Limits(max_connections=inflight, max_keepalive_connections=inflight)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers, trust_env=False) as c:

        async def one() -> None:
            async with sem:
                t = time.perf_counter()
                r = await c.post(url + "/v1/chat/completions", json=BODY)
                r.raise_for_status()
                lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0, lat


def report(name: str, wall: float, lat: list[float], cpu: float | None) -> None:
    lat.sort()
    p99 = lat[int(len(lat) * 0.99) - 1] * 1000
    extra = f", gate CPU {cpu / len(lat) * 1000:.2f} ms/request" if cpu is not None else ""
    print(
        f"{name:<22} {len(lat) / wall:8.0f} requests/s, latency mean {statistics.mean(lat) * 1000:6.1f} ms, "
        f"p99 {p99:6.1f} ms{extra}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of each path (the best is printed)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    settings = Settings.load(
        {"data_dir": str(tmp), "router_port": procs.free_port(), "router_prometheus_port": procs.free_port()},
        environ={},
    )
    auth = {"authorization": f"Bearer {fleet_key.load(settings, create=True)}"}
    fleet = simfleet.start_fleet(a.replicas, 0, tmp, speed=0, capacity=1024)
    children: list[procs.Child] = []
    try:
        private = f"http://127.0.0.1:{procs.free_port()}"
        port = int(private.rsplit(":", 1)[1])
        children.append(
            procs.start(
                "router",
                router_command(settings, fleet.urls, port=port, health_interval=1, startup_timeout=30),
                log=tmp / "router.log",
                health=private + "/liveness",
            )
        )
        procs.wait_healthy(children, timeout=60)
        gate_url = f"http://127.0.0.1:{settings.router_port}"
        children.append(
            procs.start(
                "gate",
                gate_command(settings, private, fleet.urls),
                log=tmp / "gate.log",
                health=gate_url + "/liveness",
            )
        )
        procs.wait_healthy(children, timeout=60, headers=auth)
        gate = psutil.Process(children[-1].pid)
        asyncio.run(drive(gate_url, 200, a.inflight, auth))  # warm both paths' connections
        asyncio.run(drive(private, 200, a.inflight, {}))
        best: dict[str, tuple] = {}
        for _ in range(a.rounds):
            for name, url in (("router directly", private), ("through the gate", gate_url)):
                c0 = sum(gate.cpu_times()[:2])
                wall, lat = asyncio.run(drive(url, a.requests, a.inflight, auth))
                cpu = sum(gate.cpu_times()[:2]) - c0
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, lat, cpu if url == gate_url else None)
        print(
            f"{a.requests} requests, {a.inflight} in flight, {a.replicas} zero-latency simulated replicas, "
            f"{psutil.cpu_count()} cores (best of {a.rounds} rounds)"
        )
        for name, (wall, lat, cpu) in best.items():
            report(name, wall, lat, cpu)
    finally:
        for c in reversed(children):
            procs.stop_group(c.pgid, c.pid, grace=5, popen=c.popen)
        fleet.stop()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
