"""The job runner's own ceiling, its overhead over a bare HTTP loop, and how busy it keeps a fleet.

    python benchmarks/bench_runner.py                 # all three figures, default sizes
    python benchmarks/bench_runner.py --clips 20000 --replicas 8 --rounds 3
    python benchmarks/bench_runner.py --pools --clips 4000 --rounds 3   # the two connection-pool mechanisms

1. Ceiling: zero-latency simulated replicas (`--speed 0`, in a separate process); the runner (in this process,
   through `serving.runner.run_job`) captions `--clips` clips. Prints requests/s and the CPU seconds per
   request of this process (the runner: its loop, httpx, JSON checks and SQLite writes).
2. Overhead: in the same run, on the same replicas, a bare httpx loop sends the same request bodies (built
   beforehand by the runner's request builder) with the same in-flight bound per replica and the same pools
   of at most POOL_SLOTS requests, and reads each answer's JSON: no SQLite, no checks, no retries. The runner's
   CPU per request as a multiple of the loop's is the figure (goal <= 2x: absolute figures differ 3-5x between
   machines, the ratio much less). The two alternate for `--rounds` rounds; the median ratio is reported.
3. Busy share: 8 simulated replicas that each caption 7 clips/s (capacity 1, latency 1/7 s); the share of the
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

from data import db as dbmod, jobs, prompts  # noqa: E402
from data.job_params import JobParams
from data.jobs import queries as job_queries  # noqa: E402
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library  # noqa: E402
from data.settings import Settings  # noqa: E402
from serving import (
    runner as runmod,  # noqa: E402
    simfleet,  # noqa: E402
)
from serving.client import POOL_SLOTS, CaptionRequest, FleetClient  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_job(settings, db, urls, ids) -> tuple[float, float, dict]:
    job_id = jobs.create(
        db,
        name="bench",
        created_by="bench",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(),
    )
    c0, t0 = cpu(), time.perf_counter()
    prog = runmod.run_job(settings, job_id, urls, stop_event=threading.Event())
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    assert prog["counts"]["done"] == len(ids), prog["counts"]
    return wall, cpu_s, prog


def one_job_with(settings, db, urls, ids, make_client) -> tuple[float, float]:
    """Like `one_job`, with the client `make_client()` builds inside the loop (closed at the end)."""
    import asyncio

    job_id = jobs.create(
        db,
        name="bench",
        created_by="bench",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(),
    )

    async def go():
        client = make_client()
        try:
            r = runmod.Runner(
                settings, urls, client=client, job_ids=[job_id], exit_when_idle=True, stop_event=threading.Event()
            )
            await r.run()
        finally:
            await client.aclose()

    c0, t0 = cpu(), time.perf_counter()
    asyncio.run(go())
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    assert job_queries.progress(db, job_id)["counts"]["done"] == len(ids)
    return wall, cpu_s


class ShardedClient:
    """The runner's former pooling, the baseline of --pools: it made a FleetClient (one pool) for every
    POOL_SLOTS requests in flight to a replica, on demand, all sharing one SSL context."""

    POOL_SLOTS = 8

    def __init__(self, settings):
        import httpx

        self.settings = settings
        self.shards: dict[str, list[list]] = {}  # replica URL -> [[client, in flight], ...]
        self.ssl = httpx.create_ssl_context()

    async def caption(self, replica_url: str, req: CaptionRequest):
        import httpx

        shards = self.shards.setdefault(replica_url, [])
        shard = min(shards, key=lambda s: s[1]) if shards else None
        if shard is None or shard[1] >= self.POOL_SLOTS:
            limits = httpx.Limits(max_connections=4 * self.POOL_SLOTS, keepalive_expiry=30.0)
            transport = httpx.AsyncHTTPTransport(verify=self.ssl, limits=limits)
            shard = [FleetClient(self.settings, transport=transport), 0]
            shards.append(shard)
        shard[1] += 1
        try:
            return await shard[0].caption(replica_url, req)
        finally:
            shard[1] -= 1

    async def aclose(self) -> None:
        for shards in self.shards.values():
            for client, _ in shards:
                await client.aclose()


def compare_pools(settings, db, ids, args) -> None:
    """Runner CPU per clip against the zero-latency simulated fleet, the two connection-pool mechanisms side by
    side in alternating rounds: the former runner shards vs FleetClient's own pools (what the runner uses)."""
    fleet = simfleet.start_fleet(args.replicas, 0, settings.clip_root, speed=0)
    n = args.clips
    makers = {"runner shards": lambda: ShardedClient(settings), "FleetClient pools": lambda: FleetClient(settings)}
    per: dict[str, list[float]] = {k: [] for k in makers}
    try:
        for r in range(args.rounds):
            for i, (label, make) in enumerate(makers.items()):
                chunk = ids[(2 * r + i) * n : (2 * r + i + 1) * n]
                wall, cpu_s = one_job_with(settings, db, fleet.urls, chunk, make)
                per[label].append(cpu_s / n * 1000)
                print(f"round {r}: {label:<18} {n / wall:5.0f} req/s, {cpu_s / n * 1000:.3f} ms CPU per clip")
    finally:
        fleet.stop()
    a, b = (sorted(v)[len(v) // 2] for v in per.values())
    print(f"median CPU per clip: runner shards {a:.3f} ms, FleetClient pools {b:.3f} ms, ratio {b / a:.2f}")


def bare_loop(settings, urls: list[str], bodies: list[dict], inflight: int) -> tuple[float, float]:
    """Send every body once over plain httpx, `inflight` at a time per replica (pools of at most POOL_SLOTS
    in flight, TCP_NODELAY, as FleetClient does), reading each answer's JSON; (wall s, CPU s of this process)."""
    import asyncio
    import socket

    import httpx

    async def go() -> None:
        ssl_ctx = httpx.create_ssl_context()
        limits = httpx.Limits(max_connections=4096, max_keepalive_connections=1024, keepalive_expiry=30.0)
        # a generous connect timeout: hundreds of connections open at once on a loaded 2-core machine
        timeout = httpx.Timeout(connect=60.0, read=float(settings.request_timeout), write=30.0, pool=None)
        clients: dict[str, list[httpx.AsyncClient]] = {
            u: [
                httpx.AsyncClient(
                    transport=httpx.AsyncHTTPTransport(
                        verify=ssl_ctx, limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
                    ),
                    timeout=timeout,
                    limits=limits,
                    trust_env=False,
                )
                for _ in range(-(-inflight // POOL_SLOTS))
            ]
            for u in urls
        }
        todo = iter(bodies)
        errors = []

        async def worker(url: str, client: httpx.AsyncClient) -> None:
            for body in todo:  # one shared iterator: each body is sent once, by whichever worker is free
                for attempt in range(3):  # the runner retries a connection failure too
                    try:
                        r = await client.post(url + "/v1/chat/completions", json=body)
                        break
                    except httpx.TransportError as e:
                        if attempt == 2:
                            raise
                        errors.append(type(e).__name__)
                if r.status_code != 200 or not r.json()["choices"][0]["message"]["content"]:
                    errors.append(r.status_code)

        try:
            await asyncio.gather(
                *(worker(u, clients[u][k // POOL_SLOTS]) for u in urls for k in range(inflight)),
            )
        finally:
            for cs in clients.values():
                for c in cs:
                    await c.aclose()
        assert not [e for e in errors if isinstance(e, int)], errors[:5]
        if errors:
            print(f"bare loop: {len(errors)} connection failures retried ({errors[:3]})", flush=True)

    c0, t0 = cpu(), time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t0, cpu() - c0


def request_bodies(settings, db, ids: list[int]) -> list[dict]:
    """The bodies the runner sends for these clips, built by its own request builder (serving.client)."""
    prompt = prompts.latest(db)
    builder = FleetClient(settings)
    paths = {r["id"]: r["path"] for r in db.query("SELECT id, path FROM clips")}
    return [builder.build_body(CaptionRequest(clip_path=paths[i], prompt=prompt, params=JobParams())) for i in ids]


def overhead(settings, db, ids: list[int], args) -> None:
    """Runner vs the bare loop, alternating, on one zero-latency fleet: CPU per request and the ratio."""
    n = args.clips
    fleet = simfleet.start_fleet(args.replicas, 0, settings.clip_root, speed=0)
    bodies = request_bodies(settings, db, ids[:n])
    ratios = []
    try:
        for r in range(args.rounds):
            wall, cpu_s, _ = one_job(settings, db, fleet.urls, ids[:n])
            bwall, bcpu = bare_loop(settings, fleet.urls, bodies, args.inflight)
            ratios.append((cpu_s / n) / (bcpu / n))
            print(
                f"round {r}: runner {n / wall:.0f} requests/s, {cpu_s / n * 1000:.2f} ms CPU per request; bare "
                f"httpx loop {n / bwall:.0f} requests/s, {bcpu / n * 1000:.2f} ms CPU per request; ratio "
                f"{ratios[-1]:.2f}",
                flush=True,
            )
    finally:
        fleet.stop()
    mid = sorted(ratios)[len(ratios) // 2]
    print(
        f"overhead: the runner's CPU per request is {mid:.2f}x the bare httpx loop's (median of {len(ratios)} "
        f"rounds; goal <= 2x)"
    )


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
    ap.add_argument("--pools", action="store_true", help="only compare the connection-pool mechanisms")
    ap.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds: runner vs bare loop, or (--pools) the mechanisms"
    )
    ap.add_argument("--no-busy", action="store_true", help="skip the busy-share run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    settings = Settings.load({"data_dir": str(tmp), "per_replica_inflight": args.inflight}, environ={})
    db = dbmod.connect(settings.db)
    need = 2 * args.rounds * args.clips if args.pools else max(args.clips, args.busy_clips)
    ids = tiny_library(settings, db, need, prefix="bench")
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.replicas} replicas, "
        f"inflight {args.inflight}/replica"
    )
    if args.pools:
        compare_pools(settings, db, ids, args)
        return 0

    fleet = simfleet.start_fleet(args.replicas, 0, settings.clip_root, speed=0)
    try:
        wall, cpu_s, _ = one_job(settings, db, fleet.urls, ids[: args.clips])
    finally:
        fleet.stop()
    n = args.clips
    print(
        f"ceiling: {n} requests in {wall:.2f} s = {n / wall:.0f} requests/s; runner CPU {cpu_s:.2f} s "
        f"= {cpu_s / n * 1000:.2f} ms per request ({cpu_s / wall:.2f} cores)",
        flush=True,
    )
    overhead(settings, db, ids, args)
    if args.no_busy:
        db.close()
        return 0

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
