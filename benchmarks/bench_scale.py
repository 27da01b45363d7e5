#!/usr/bin/env python3
"""Beyond one node, measured on a CPU machine (issue 12): can one runner keep a large fleet busy through
vllm-router, and how many results per second does SQLite take?

    python benchmarks/bench_scale.py busy --replicas 64 --seconds 20      # busy share of 64 replicas
    python benchmarks/bench_scale.py sqlite --gpus 100 --seconds 10       # write load of 100 GPUs' results

busy: 64 simulated replicas (one process, capacity 1 each, ~1 s per request) behind the real vllm-router
(round_robin), the real runner process (`python -m serving.runner --until-idle`) over the router URL, a
job of distinct clips. Over a window that starts once every replica has had work and ends while the job
still has unclaimed items, each replica's busy share is read from its own /metrics: the simulated fleet's
exact integrals `sim:busy_seconds` (time with >= 1 request running) and `sim:running_request_seconds`
(request-seconds running, / capacity = slot use), differenced between two scrapes. Short simulated
latencies keep it cheap; they make it harder, not easier (the runner must refill 64 slots every second).

sqlite: what 100 GPUs' worth of results costs the database. At the measured 4.35 clips/s per H200 (8 with
FP8), 100 GPUs deliver 435-800 results/s. The runner stores results in batches (one `BEGIN IMMEDIATE` per
flush, `data.jobs.complete` per result); this drives that exact path flat out from one writer process,
while a second process does an annotator's save every 100 ms, and reports results/s sustained and the
write lock's hold p50/p99/max from `data.db.write_lock_stats`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks.child_env import child_env, pythonpath  # noqa: E402
from data import db as dbmod, jobs, prompts  # noqa: E402
from data.job_params import JobParams  # noqa: E402
from data.jobs import queries as job_queries  # noqa: E402
from data.jobs.selection import Selection  # noqa: E402
from data.library import clipgen  # noqa: E402
from data.settings import Settings  # noqa: E402
from serving import procs, simfleet  # noqa: E402
from serving.fleet.reader import FleetReader  # noqa: E402
from serving.launch import commands as fleet_commands  # noqa: E402


def library(settings: Settings, n: int) -> list[int]:
    """`n` distinct clip paths (hard links of one tiny clip) with their rows."""
    d = dbmod.connect(settings.db)
    try:
        return clipgen.tiny_library(settings, d, n, prefix="scale")
    finally:
        d.close()


def _series(urls: list[str], http: httpx.Client) -> list[dict]:
    """Per replica: sim busy integrals and capacity from /metrics (one scrape each)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for u in urls:
        vals = {"busy": 0.0, "slot": 0.0, "capacity": 1.0, "success": 0.0}
        for fam in text_string_to_metric_families(http.get(u + "/metrics").text):
            for s in fam.samples:
                if s.name == "sim:busy_seconds_total":
                    vals["busy"] += s.value
                elif s.name == "sim:running_request_seconds_total":
                    vals["slot"] += s.value
                elif s.name == "sim:capacity":
                    vals["capacity"] = s.value
                elif s.name == "vllm:request_success_total":
                    vals["success"] += s.value
                elif s.name == "vllm:e2e_request_latency_seconds_sum":
                    vals["e2e_sum"] = vals.get("e2e_sum", 0.0) + s.value
        vals["t"] = time.monotonic()
        out.append(vals)
    return out


def measure_busy(
    replicas: int = 64,
    seconds: float = 20.0,
    *,
    latency_s: float = 1.0,
    inflight: int = 4,
    capacity: int = 1,
    warmup_s: float = 4.0,
    clips: int | None = None,
    log=print,
) -> dict:
    """Run the busy-share experiment; returns the figures (see the module docstring)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    rate = replicas * capacity / latency_s
    # enough clips that the queue outlasts warm-up + window even with slow scrapes: the window must end while
    # items are still unclaimed ("while work is queued"), which the result reports (items_left_at_end)
    n = clips or int(rate * (warmup_s + seconds + 30) * 1.5) + replicas * inflight
    settings = Settings.load({"data_dir": str(tmp / "var"), "per_replica_inflight": inflight}, environ={})
    ids = library(settings, n)
    # calibrate the simulated latency: one request at speed 1 on this clip, then scale to `latency_s`
    probe = simfleet.start_fleet(1, 0, settings.clip_root, mode="thread", speed=1.0)
    try:
        import asyncio

        from serving.client import CaptionRequest, FleetClient

        async def one() -> float:
            c = FleetClient(settings)
            try:
                d = dbmod.connect(settings.db)
                p = prompts.latest(d)
                d.close()
                took = []
                for _ in range(3):  # the first pays for connecting and probing the clip: take the fastest
                    t = time.perf_counter()
                    await c.caption(probe.urls[0], CaptionRequest(clip_path="scale/00000.mp4", prompt=p))
                    took.append(time.perf_counter() - t)
                return min(took)
            finally:
                await c.aclose()

        lat1 = asyncio.run(one())
    finally:
        probe.stop()
    speed = latency_s / lat1
    fleet = simfleet.start_fleet(replicas, 0, settings.clip_root, speed=speed, capacity=capacity, timeout=60)
    router_port = procs.free_port()
    router = procs.start(
        "router",
        [
            "vllm-router",
            "--host",
            "127.0.0.1",
            "--port",
            str(router_port),
            "--worker-urls",
            *fleet.urls,
            "--policy",
            "round_robin",
            "--worker-startup-timeout-secs",
            "60",
            "--health-check-interval-secs",
            "5",
            "--request-timeout-secs",
            "120",
            "--retry-max-retries",
            "2",
            "--prometheus-port",
            str(procs.free_port()),
        ],
        log=tmp / "router.log",
        health=f"http://127.0.0.1:{router_port}/readiness",
    )
    runner = None
    try:
        procs.wait_healthy([router], timeout=60)
        router_url = f"http://127.0.0.1:{router_port}"
        d = dbmod.connect(settings.db)
        job_id = jobs.create(
            d,
            name="busy",
            created_by="bench",
            selection=Selection.of_clips(ids),
            prompt_id=prompts.latest(d)["id"],
            params=JobParams(),
        )
        runner = procs.start(
            "runner",
            fleet_commands.runner_command(
                settings,
                router_url,
                ["--until-idle", "--log-level", "WARNING", "--per-replica-inflight", str(inflight)]
                + ["--replicas", str(replicas)],
            ),
            log=tmp / "runner.log",
            env={"PYTHONPATH": pythonpath(ROOT)},  # procs.start adds this to the inherited environment
        )
        t_start = time.monotonic()
        with httpx.Client(timeout=30, trust_env=False) as http:
            while True:  # warm-up: until every replica has finished something, and warmup_s has passed
                time.sleep(1.0)
                if not runner.alive():
                    raise RuntimeError("runner died: " + procs.tail(runner.log))
                s = _series(fleet.urls, http)
                if all(x["success"] > 0 for x in s) and time.monotonic() - t_start >= warmup_s:
                    break
                if time.monotonic() - t_start > 120:
                    raise RuntimeError("replicas never all got work")
            before = _series(fleet.urls, http)
            samples = []
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:  # a cross-check by sampling num_requests_running every ~2 s
                st = FleetReader(settings).fleet_status(fleet.urls, timeout=10)
                samples.append(sum(1 for r in st if r.running > 0) / len(st))
                time.sleep(2.0)
            after = _series(fleet.urls, http)
            queued = job_queries.counts(d, job_id)
        left = queued.get("pending", 0)
        busy = [(a["busy"] - b["busy"]) / (a["t"] - b["t"]) for a, b in zip(after, before)]
        slot = [(a["slot"] - b["slot"]) / ((a["t"] - b["t"]) * a["capacity"]) for a, b in zip(after, before)]
        done = sum(a["success"] - b["success"] for a, b in zip(after, before))
        e2e = sum(a.get("e2e_sum", 0) - b.get("e2e_sum", 0) for a, b in zip(after, before))
        window = statistics.mean(a["t"] - b["t"] for a, b in zip(after, before))
        res = {
            "replicas": replicas,
            "capacity": capacity,
            "latency_s": latency_s,
            "inflight_per_replica": inflight,
            "window_s": round(window, 1),
            "items_left_at_end": left,
            "counts_at_end": queued,
            "busy_mean": statistics.mean(busy),
            "busy_min": min(busy),
            "slot_use_mean": statistics.mean(slot),
            "slot_use_min": min(slot),
            "sampled_busy_mean": statistics.mean(samples) if samples else None,
            "requests_per_s": done / window,
            "mean_latency_s": e2e / done if done else None,
            "ideal_requests_per_s": rate,
            "cores": os.cpu_count(),
        }
        d.close()
        return res
    finally:
        if runner is not None:
            procs.stop_group(runner.pgid, runner.pid, grace=5, popen=runner.popen)
        procs.stop_group(router.pgid, router.pid, grace=5, popen=router.popen)
        fleet.stop()


# ---- SQLite write load ---------------------------------------------------------------------------------------
_WRITER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from data import db as dbmod
from data.jobs import items as job_items
db_path, job_id = sys.argv[2], int(sys.argv[3])
seconds, batch, rate = float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
d = dbmod.connect(db_path)
labels = {"scenario_category": "normal_driving", "hazard_level": "none", "road_users": ["car"],
          "ego_maneuver": "going_straight", "weather": "clear", "lighting": "daylight", "road_type": "urban"}
prov = {"model": "Qwen/Qwen3-VL-8B-Instruct", "prompt_id": 1, "prompt_name": "av-hazard", "prompt_version": 1,
        "params": {"frames": 16, "max_tokens": 320}, "frames": 16, "replica": "http://node7:8003",
        "decode_backend": "pynvvideocodec", "latency_ms": 1234.5, "prompt_tokens": 5400, "completion_tokens": 140,
        "finish_reason": "stop", "simulated": False}
text = "The ego vehicle approaches a signalised intersection in light rain; a cyclist waits at the crosswalk " * 3
n, t0 = 0, time.perf_counter()
holds = []
while time.perf_counter() - t0 < seconds:
    got = job_items.claim(d, job_id, "bench", batch, lease_seconds=600, max_attempts=4)  # what the runner does
    if not got:
        break
    t = time.perf_counter()
    with dbmod.immediate(d):   # the runner's _write: one transaction per flush, one savepoint per result
        for it in got:
            with d.atomic():
                job_items.complete(d, job_id, it["clip_id"], text=text, labels=labels, provenance=prov)
    holds.append(time.perf_counter() - t)
    n += len(got)
    if rate > 0:  # results arrive at the fleet's rate, not as fast as the database takes them
        ahead = t0 + n / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
wall = time.perf_counter() - t0
print(json.dumps({"results": n, "wall_s": wall, "holds": holds, "stats": dbmod.write_lock_stats(db_path)}))
"""

_ANNOTATOR = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from data import db as dbmod
db_path, seconds = sys.argv[2], float(sys.argv[3])
d = dbmod.connect(db_path)
waits, t0 = [], time.perf_counter()
while time.perf_counter() - t0 < seconds:
    t = time.perf_counter()
    with dbmod.immediate(d):   # the shape of a human save: take the write lock, one small write
        d.execute("INSERT INTO heartbeats (name, kind, pid, at, info) VALUES ('bench-annotator', 'bench', 0, ?, '{}') "
                  "ON CONFLICT(name) DO UPDATE SET at = excluded.at", [time.time()])
    waits.append(time.perf_counter() - t)
    time.sleep(0.1)
print(json.dumps({"saves": len(waits), "waits": waits}))
"""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else 0.0


def measure_sqlite(
    gpus: int = 100, seconds: float = 10.0, *, batch: int = 64, per_gpu: float = 4.35, rate: float = 0.0, log=print
) -> dict:
    """Drive `data.jobs.complete` flat out in batches (the runner's write path) for `seconds`, with an annotator
    saving alongside; report results/s and write-lock holds. `gpus` x `per_gpu` is the rate to compare with."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-sqlite-"))
    settings = Settings.load({"data_dir": str(tmp / "var")}, environ={})
    n = int(seconds * 4000) + 1000
    d = dbmod.connect(settings.db)
    with d.conn:
        d["clips"].insert_all(
            {"path": f"scale/{i:06d}.mp4", "size": 1, "width": 1920, "height": 1080, "frames": 300} for i in range(n)
        )
    ids = [r[0] for r in d.execute("SELECT id FROM clips")]
    job_id = jobs.create(
        d,
        name="sqlite load",
        created_by="bench",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(d)["id"],
        params=JobParams(),
    )
    d.close()
    env = child_env(ROOT)
    ann = subprocess.Popen(
        [sys.executable, "-c", _ANNOTATOR, str(ROOT), str(settings.db), str(seconds + 1)],
        stdout=subprocess.PIPE,
        env=env,
    )
    w = subprocess.run(
        [sys.executable, "-c", _WRITER, str(ROOT), str(settings.db), str(job_id), str(seconds), str(batch), str(rate)],
        capture_output=True,
        text=True,
        env=env,
        timeout=seconds * 10 + 120,
    )
    if w.returncode != 0:
        raise RuntimeError(w.stderr[-3000:])
    a = json.loads(ann.communicate(timeout=seconds * 10 + 60)[0])
    r = json.loads(w.stdout)
    holds = r["holds"]
    per_result = [h / batch for h in holds]
    return {
        "results": r["results"],
        "results_per_s": r["results"] / r["wall_s"],
        "batch": batch,
        "hold_p50_ms": _pct(holds, 0.5) * 1000,
        "hold_p99_ms": _pct(holds, 0.99) * 1000,
        "hold_max_ms": max(holds) * 1000,
        "write_lock_stats": r["stats"],
        "ms_per_result": statistics.mean(per_result) * 1000,
        "annotator_save_p50_ms": _pct(a["waits"], 0.5) * 1000,
        "annotator_save_p99_ms": _pct(a["waits"], 0.99) * 1000,
        "annotator_saves": a["saves"],
        "needed_per_s_bf16": gpus * per_gpu,
        "needed_per_s_fp8": gpus * 8.0,
        "db_bytes": os.path.getsize(settings.db),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("busy", help="busy share of N simulated replicas behind vllm-router")
    b.add_argument("--replicas", type=int, default=64)
    b.add_argument("--seconds", type=float, default=20.0)
    b.add_argument("--latency", type=float, default=3.0, help="simulated seconds per request")
    b.add_argument("--inflight", type=int, default=4, help="runner's in-flight bound per replica")
    s = sub.add_parser("sqlite", help="SQLite write load of N GPUs' results")
    s.add_argument("--gpus", type=int, default=100)
    s.add_argument("--seconds", type=float, default=10.0)
    s.add_argument("--batch", type=int, default=64, help="results per write transaction")
    s.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="results/s to write (the fleet's rate, e.g. 435 for 100 GPUs in bf16); 0 = flat out",
    )
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
    if args.cmd == "busy":
        r = measure_busy(args.replicas, args.seconds, latency_s=args.latency, inflight=args.inflight)
        print(
            f"{r['replicas']} replicas x capacity {r['capacity']}, ~{r['latency_s']:.1f} s per request, runner "
            f"in flight {r['inflight_per_replica']}/replica, window {r['window_s']} s, items left at the end "
            f"{r['items_left_at_end']}"
        )
        print(f"busy share (sim:busy_seconds): mean {r['busy_mean']:.3f}, min {r['busy_min']:.3f}")
        print(
            f"slot use (sim:running_request_seconds / capacity): mean {r['slot_use_mean']:.3f}, "
            f"min {r['slot_use_min']:.3f}"
        )
        print(f"sampled num_requests_running > 0: mean {r['sampled_busy_mean']:.3f}")
        print(
            f"throughput {r['requests_per_s']:.1f} requests/s; replicas' mean e2e latency {r['mean_latency_s']:.2f} s "
            f"(queueing at the replica included)"
        )
    else:
        r = measure_sqlite(args.gpus, args.seconds, batch=args.batch, rate=args.rate)
        print(f"writer {'paced at %.0f results/s' % args.rate if args.rate else 'flat out'}")
        print(
            f"{r['results']} results in batches of {r['batch']}: {r['results_per_s']:.0f} results/s sustained "
            f"({r['ms_per_result']:.2f} ms of write lock per result)"
        )
        print(
            f"write-lock hold per batch: p50 {r['hold_p50_ms']:.1f} ms, p99 {r['hold_p99_ms']:.1f} ms, max "
            f"{r['hold_max_ms']:.1f} ms; write_lock_stats {r['write_lock_stats']}"
        )
        print(
            f"an annotator's save meanwhile: p50 {r['annotator_save_p50_ms']:.1f} ms, p99 "
            f"{r['annotator_save_p99_ms']:.1f} ms ({r['annotator_saves']} saves)"
        )
        print(
            f"needed at {args.gpus} GPUs: {r['needed_per_s_bf16']:.0f}/s (4.35 clips/s/GPU, bf16), "
            f"{r['needed_per_s_fp8']:.0f}/s (8/GPU, FP8); headroom x{r['results_per_s'] / r['needed_per_s_fp8']:.1f} "
            f"over FP8; database {r['db_bytes'] / 1e6:.0f} MB"
        )
    print(json.dumps(r, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
