"""The job runner's own ceiling, its overhead over a bare HTTP loop, and how busy it keeps a fleet.

    python benchmarks/bench_runner.py                 # all three figures, default sizes
    python benchmarks/bench_runner.py --clips 20000 --replicas 8 --rounds 3
    python benchmarks/bench_runner.py --pools --clips 4000 --rounds 3   # the two connection-pool mechanisms

1. Ceiling: zero-latency simulated replicas (`--speed 0`, in a separate process); the runner (in this process,
   through `serving.runner.run_job`) captions `--clips` clips. Prints requests/s and the CPU seconds per
   request of the runner: this process (its loop, httpx, SQLite writes) and its checker processes (reading the
   answers: serving.answer_check).
2. Overhead: in the same run, on the same replicas, a bare httpx loop sends the same request bodies (built
   beforehand by the runner's request builder) with the same in-flight bound per replica and the same pools
   of at most POOL_SLOTS requests, and reads each answer's JSON: no SQLite, no checks, no retries. The runner's
   CPU per request as a multiple of the loop's is the figure (goal <= 2x: absolute figures differ 3-5x between
   machines, the ratio much less). The two alternate for `--rounds` rounds; the median ratio is reported.
3. Busy share: 8 simulated replicas that each caption 7 clips/s (capacity 1, latency 1/7 s); the share of the
   fleet's capacity the runner keeps busy = achieved clips/s / (8 x 7).

One head (issue 32), against paced replicas answering with answers sized as real vLLM's (benchmarks/replay_fleet.py:
the simulated fleet's answers, rendered beforehand, 5 alternatives per token, ~220 KB each):

    python benchmarks/bench_runner.py --head                      # 28 and 112 clips/s and the ceiling
    python benchmarks/bench_runner.py --head --rates 448 --seconds 40   # the 16-node rehearsal: 128 x 3.5 clips/s
    python benchmarks/bench_runner.py --runners 2                 # the ceiling of 1 vs 2 runner processes
    python benchmarks/bench_runner.py --profile                   # where a runner's CPU goes per answer
    python benchmarks/bench_runner.py --head --rates 28 --gil-hogs 1 --switch both   # a GIL-bound runner process
    python benchmarks/bench_runner.py --head --rates 448 --collect both   # garbage collection: Python's, the runner's

4. --head: at each rate (replicas = rate / 3.5, each running 8 at once; rate 0 = zero-latency replicas, the
   ceiling) the runner (this process, its own checker processes) captions a job while another process saves a
   human caption every 100 ms (data.captions.save_human on clips outside the job). Printed: clips/s, the busy
   share (the replicas' running request-seconds over their capacity, in a window while work is queued), the
   runner's CPU per clip (its process and its checkers), the longest write-lock hold of the runner
   (data.db.write_lock_stats) and of the saves, the saves' p50/p99/max, and the runner process's garbage
   collections (the longest pause, and their time per clip). `--collect off`: Python's automatic collection instead
   of the runner's between its transactions (serving.runner.collector).
5. --runners N: the ceiling (zero-latency replicas) with 1 and with N runner processes sharing one job through
   their leases, alternating; clips/s and the longest write-lock hold each.
6. --profile: each step of reading and storing one answer of the recorded size, timed alone: JSON (json and
   orjson), the schema check, the confidence, the whole reading in this process and through a checker process,
   and storing the result (data.jobs.items.complete), with and without its full-text index.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.child_env import child_env
from data import db as dbmod, jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import (
    runner as runmod,
    simfleet,
)
from serving.client import POOL_SLOTS, CaptionRequest, FleetClient
from serving.runner.collector import Pauses


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
    c0, t0 = cpu() + _children_cpu(), time.perf_counter()
    prog = runmod.run_job(settings, job_id, urls, stop_event=threading.Event())
    # the runner's process and its checker processes (reaped when the runner ends, so counted as children here)
    wall, cpu_s = time.perf_counter() - t0, cpu() + _children_cpu() - c0
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


# ---- one head (issue 32) -------------------------------------------------------------------------------------------
REPLICA_RATE = 3.5  # clips/s of one H200 (docs/GPU.md)
REPLICA_CAPACITY = 8  # requests a paced replica runs at once


def gil_hogs(n: int) -> None:
    """`n` daemon threads in this process that run Python without pause: a stand-in for a runner whose event loop
    needs a whole core (a head reading hundreds of answers a second), on a machine too small to make one."""

    def spin() -> None:
        x = 0
        while True:
            x += 1

    for _ in range(n):
        threading.Thread(target=spin, name="gil-hog", daemon=True).start()


_ANNOTATOR = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from data import captions, db as dbmod, examples
db_path, seconds, ids = sys.argv[2], float(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
d = dbmod.connect(db_path)
waits, t0, n = [], time.perf_counter(), 0
while time.perf_counter() - t0 < seconds:
    clip = ids[n % len(ids)]
    base = d.execute("SELECT current_caption_id FROM clips WHERE id = ?", [clip]).fetchone()[0]
    t = time.perf_counter()
    captions.save_human(d, clip, text=f"An annotator's edit number {n}: the ego vehicle slows for a cyclist.",
                        labels=examples.LABELS, author="annotator", base_caption_id=base)
    print(time.perf_counter() - t, flush=True)  # read when this process is stopped
    n += 1
    time.sleep(0.1)
"""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class ReplayFleet:
    """benchmarks/replay_fleet.py in a process of its own."""

    def __init__(self, replicas: int, rate: float, capacity: int = REPLICA_CAPACITY, top_logprobs: int = 5):
        import json
        import subprocess

        ready = Path(tempfile.mkdtemp(prefix="replay-")) / "ready.json"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).parent / "replay_fleet.py"),
                "--replicas",
                str(replicas),
                "--rate",
                str(rate),
                "--capacity",
                str(capacity),
                "--top-logprobs",
                str(top_logprobs),
                "--ready-file",
                str(ready),
            ],
        )
        t = time.monotonic()
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() - t > 120:
                raise RuntimeError("the replay fleet did not start")
            time.sleep(0.1)
        time.sleep(0.1)
        info = json.loads(ready.read_text())
        self.urls, self.answer_bytes = info["urls"], info["answer_bytes"]
        self.capacity, self.rate = capacity, rate

    def stats(self) -> dict:
        import httpx

        return httpx.get(self.urls[0] + "/stats", timeout=30, trust_env=False).json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _job(settings, db, ids, top_logprobs: int = 5) -> int:
    return jobs.create(
        db,
        name="bench",
        created_by="bench",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(top_logprobs=top_logprobs),
    )


def head_run(rate: float, seconds: float, clips: int, log=print) -> dict:
    """One --head run at `rate` clips/s (0: the ceiling); the figures (module docstring, 4)."""
    import subprocess

    tmp = Path(tempfile.mkdtemp(prefix="bench-head-"))
    replicas = max(1, round(rate / REPLICA_RATE)) if rate else 8
    inflight = REPLICA_CAPACITY + 4 if rate else 48
    n = clips if not rate else int(rate * (seconds + 15)) + replicas * inflight
    settings = Settings.load({"data_dir": str(tmp), "per_replica_inflight": inflight}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, n + 50, prefix="head")
    job_id = _job(settings, db, ids[:n])
    held = dbmod._write_lock(Path(settings.db))  # count the runner's transactions only, not the set-up's
    held.holds, held.total_s, held.max_s = 0, 0.0, 0.0
    pauses = Pauses()  # the process's collections, however started
    fleet = ReplayFleet(replicas, REPLICA_RATE if rate else 0)
    env = child_env(Path(__file__).resolve().parent.parent)
    ann = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _ANNOTATOR,
            str(Path(__file__).resolve().parent.parent),
            str(settings.db),
            str(seconds + 30),
            ",".join(map(str, ids[n:])),
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    window: dict = {}
    stop = threading.Event()

    def watch() -> None:  # the busy window: after a warm-up, while the job still has unclaimed items
        d = dbmod.connect(settings.db)
        try:
            if not rate:
                return
            time.sleep(min(10.0, seconds / 3))
            window["before"] = fleet.stats()
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end and not stop.is_set():
                time.sleep(0.5)
            window["after"] = fleet.stats()
            window["pending"] = job_queries.counts(d, job_id).get("pending", 0)
            if rate:
                stop.set()  # the window is what is measured: the rest of the job is not needed
        finally:
            d.close()

    th = threading.Thread(target=watch)
    c0, k0, t0 = cpu(), _children_cpu(), time.perf_counter()
    th.start()
    try:
        runmod.run_job(settings, job_id, fleet.urls, stop_event=stop)
    finally:
        wall = time.perf_counter() - t0
        runner_cpu, checker_cpu = cpu() - c0, _children_cpu() - k0
        stop.set()
        th.join()
        lock = dbmod.write_lock_stats(settings.db)
        pauses.close()
        ann.terminate()
        out_text = ann.communicate(timeout=60)[0]
        fleet_answer = sum(fleet.answer_bytes) / len(fleet.answer_bytes)
        fleet.stop()
    done = job_queries.counts(db, job_id)["done"]
    db.close()
    saves = {"waits": [float(x) for x in out_text.split()]}
    res = {
        "rate": rate or "ceiling",
        "replicas": replicas,
        "clips_done": done,
        "wall_s": wall,
        "clips_per_s": done / wall,
        "runner_ms_cpu_per_clip": runner_cpu / max(1, done) * 1000,
        "checker_ms_cpu_per_clip": checker_cpu / max(1, done) * 1000,
        "runner_cores": runner_cpu / wall,
        "longest_hold_ms": lock["max_ms"],
        "holds": lock["holds"],
        "gc_longest_ms": max(pauses.took, default=0.0) * 1000,
        "gc_ms_per_clip": sum(pauses.took) * 1000 / max(1, done),
        "save_p50_ms": _pct(saves["waits"], 0.5) * 1000,
        "save_p99_ms": _pct(saves["waits"], 0.99) * 1000,
        "save_max_ms": max(saves["waits"] or [float("nan")]) * 1000,
        "saves": len(saves["waits"]),
        "answer_kb": fleet_answer / 1024,
    }
    if "after" in window:
        b, a = window["before"], window["after"]
        span = a["t"] - b["t"]
        used = sum(x["request_seconds"] for x in a["replicas"]) - sum(x["request_seconds"] for x in b["replicas"])
        completed = sum(x["completed"] for x in a["replicas"]) - sum(x["completed"] for x in b["replicas"])
        res.update(
            busy_share=used / (span * replicas * REPLICA_CAPACITY),
            window_s=span,
            window_clips_per_s=completed / span,
            pending_at_window_end=window["pending"],
        )
    return res


def print_head(r: dict) -> None:
    busy = (
        f"busy {r['busy_share']:.1%} ({r['window_clips_per_s']:.1f} clips/s over {r['window_s']:.0f} s, "
        f"{r['pending_at_window_end']} items still queued); "
        if "busy_share" in r
        else ""
    )
    print(
        f"rate {r['rate']} ({r['replicas']} replicas, answers {r['answer_kb']:.0f} KB): {busy}{r['clips_done']} clips "
        f"at {r['clips_per_s']:.1f} clips/s; "
        + (
            f"runner {r['runner_ms_cpu_per_clip']:.2f} ms CPU/clip ({r['runner_cores']:.2f} cores) + checkers "
            f"{r['checker_ms_cpu_per_clip']:.2f} ms; "
            if r["clips_done"]
            else f"runner {r['runner_cores']:.2f} cores; "
        )
        + f"longest write-lock hold "
        f"{r['longest_hold_ms']:.1f} ms over {r['holds']} transactions; a save alongside p50 "
        f"{r['save_p50_ms']:.1f} / p99 {r['save_p99_ms']:.1f} / max {r['save_max_ms']:.1f} ms ({r['saves']} saves); "
        f"garbage collection: longest pause {r['gc_longest_ms']:.1f} ms, {r['gc_ms_per_clip']:.2f} ms per clip",
        flush=True,
    )


def runners_run(n_runners: int, clips: int, replicas: int = 8) -> dict:
    """The ceiling with `n_runners` runner processes sharing one job (module docstring, 5)."""
    from serving import procs
    from serving.launch import commands as fleet_commands

    tmp = Path(tempfile.mkdtemp(prefix="bench-runners-"))
    settings = Settings.load({"data_dir": str(tmp), "per_replica_inflight": 48}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, clips, prefix="multi")
    job_id = _job(settings, db, ids)
    fleet = ReplayFleet(replicas, 0)
    cmd = fleet_commands.runner_command(settings, fleet.urls, ["--until-idle", "--log-level", "WARNING"])
    kids = []
    t0 = time.perf_counter()
    try:
        for i in range(n_runners):
            kids.append(procs.start(f"runner{i}", cmd, log=tmp / f"runner{i}.log", cwd=Path(__file__).parent.parent))
        for k in kids:
            assert k.wait(timeout=1800) == 0, procs.tail(k.log)
        wall = time.perf_counter() - t0
    finally:
        for k in kids:
            if k.popen.poll() is None:
                procs.kill_group(k.pgid, k.popen)
        fleet.stop()
    done = job_queries.counts(db, job_id)["done"]
    twice = db.execute(
        "SELECT COUNT(*) FROM (SELECT clip_id FROM captions WHERE job_id = ? GROUP BY clip_id HAVING COUNT(*) > 1)",
        [job_id],
    ).fetchone()[0]
    assert twice == 0, f"{twice} clips captioned twice"
    db.close()
    slow = sum(procs.tail(k.log, 100000).count("write lock held") for k in kids)
    return {
        "runners": n_runners,
        "done": done,
        "wall_s": wall,
        "clips_per_s": done / wall,
        "slow_holds": slow,
    }


def profile(rounds: int = 200) -> None:
    """Each step of reading and storing one answer of the recorded size (module docstring, 6)."""
    import asyncio
    import json

    import orjson

    from data import taxonomy
    from data.jobs import items as job_items
    from serving.answer_check import AnswerChecker
    from serving.answers import parse_answer, read_answer
    from serving.logprobs import label_confidence

    sys.path.insert(0, str(Path(__file__).parent))
    from replay_fleet import render_bodies

    raw = render_bodies(1, 5)[0]
    body = raw.split(b"\r\n\r\n", 1)[1]
    schema = taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)
    data = json.loads(body)
    choice = data["choices"][0]
    content, lp = choice["message"]["content"], choice["logprobs"]

    def per(f, n=rounds) -> float:
        f()
        t = time.perf_counter()
        for _ in range(n):
            f()
        return (time.perf_counter() - t) / n * 1000

    print(f"one answer: {len(body) / 1024:.0f} KB, {len(lp['content'])} tokens, 5 alternatives each")
    rows = [
        ("JSON of the whole answer, json.loads", per(lambda: json.loads(body))),
        ("JSON of the whole answer, orjson.loads", per(lambda: orjson.loads(body))),
        ("caption and labels: parse + schema check", per(lambda: parse_answer(content, schema))),
        ("confidence from the logprobs", per(lambda: label_confidence(content, lp, schema))),
        ("the whole reading, in this process (read_answer)", per(lambda: read_answer(body, schema, confidence=True))),
    ]

    async def through_checker(n: int) -> float:
        checker = AnswerChecker(30.0, workers=1)
        try:
            await checker.read(body, schema, confidence=True)
            c0, t = cpu(), time.perf_counter()
            for _ in range(n):
                await checker.read(body, schema, confidence=True)
            return (time.perf_counter() - t) / n * 1000, (cpu() - c0) / n * 1000
        finally:
            await checker.aclose()

    wall_ms, own_ms = asyncio.run(through_checker(rounds))
    rows.append(("the whole reading through a checker process: wall", wall_ms))
    rows.append(("  of which this process's CPU (the runner's)", own_ms))
    for fts in (True, False):
        tmp = Path(tempfile.mkdtemp(prefix="bench-prof-"))
        settings = Settings.load({"data_dir": str(tmp)}, environ={})
        d = dbmod.connect(settings.db)
        ids = tiny_library(settings, d, rounds + 1, prefix="p")
        job_id = _job(settings, d, ids)
        if not fts:
            for (name,) in d.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND sql LIKE '%_fts%'"):
                d.execute(f"DROP TRIGGER {name}")
        got = job_items.claim(d, job_id, "bench", rounds + 1, lease_seconds=600, max_attempts=4)
        read = read_answer(body, schema, confidence=True)
        prov = {"model": "m", "replica": "r", "latency_ms": 1.0, "confidence": read.confidence}
        t = time.perf_counter()
        for it in got:
            with dbmod.immediate(d):
                job_items.complete(d, job_id, it["clip_id"], text=read.text, labels=read.labels, provenance=prov)
        rows.append(
            (
                f"storing one result (its own transaction){'' if fts else ', full-text triggers dropped'}",
                (time.perf_counter() - t) / len(got) * 1000,
            )
        )
        d.close()
    for label, ms in rows:
        print(f"  {label:<62} {ms:7.3f} ms")


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
    ap.add_argument("--head", action="store_true", help="one head: write-lock holds and saves at each of --rates")
    ap.add_argument("--rates", default="28,112,0", help="clips/s for --head (0: the ceiling; 448: 16 nodes)")
    ap.add_argument("--seconds", type=float, default=30.0, help="--head: the measured window at each rate")
    ap.add_argument(
        "--pace",
        default="on",
        choices=("on", "off", "both"),
        help="--head: the runner's pause after a long write (serving.runner.store); both: off then on at each rate",
    )
    ap.add_argument(
        "--switch",
        default="on",
        choices=("on", "off", "both"),
        help="--head: the runner's short GIL switch interval (serving.runner.dbthread.prompt_gil); off: Python's "
        "default; both: off then on at each rate",
    )
    ap.add_argument(
        "--collect",
        default="on",
        choices=("on", "off", "both"),
        help="--head: garbage collection by the runner's loop between its transactions (serving.runner.collector); "
        "off: Python's automatic collection; both: off then on at each rate",
    )
    ap.add_argument(
        "--gil-hogs", type=int, default=0, help="--head: threads beside the runner that hold the GIL (gil_hogs)"
    )
    ap.add_argument("--runners", type=int, default=0, help="the ceiling with 1 and with N runner processes")
    ap.add_argument("--profile", action="store_true", help="where the runner's CPU goes per answer")
    args = ap.parse_args()
    if args.profile:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
        profile()
        return 0
    if args.head:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
        from serving.runner import collector as collector_mod, dbthread, store as store_mod

        gil_hogs(args.gil_hogs)
        default_switch, shipped = sys.getswitchinterval(), dbthread.GIL_SWITCH_S
        both = {"on": [True], "off": [False], "both": [False, True]}
        for rate in (float(x) for x in args.rates.split(",")):
            for pace, switch, collect in itertools.product(both[args.pace], both[args.switch], both[args.collect]):
                store_mod.JobStore.pace = pace
                collector_mod.Collector.active = collect
                sys.setswitchinterval(default_switch)  # prompt_gil only ever shortens it
                dbthread.GIL_SWITCH_S = shipped if switch else default_switch
                got = head_run(rate, args.seconds, args.clips if args.clips != 10000 else 4000)
                print(
                    f"pacing {'on' if pace else 'off'}, switch {sys.getswitchinterval() * 1000:g} ms, "
                    f"collection {'between transactions' if collect else 'automatic'}"
                    f"{f', {args.gil_hogs} GIL hog(s)' if args.gil_hogs else ''}: ",
                    end="",
                )
                print_head(got)
        return 0
    if args.runners:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
        for r in range(args.rounds):
            for n in (1, args.runners):
                got = runners_run(n, args.clips if args.clips != 10000 else 3000)
                print(
                    f"round {r}: {n} runner process(es): {got['done']} clips in {got['wall_s']:.1f} s = "
                    f"{got['clips_per_s']:.1f} clips/s; holds over 500 ms logged: {got['slow_holds']}",
                    flush=True,
                )
        return 0
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
