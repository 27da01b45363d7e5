"""benchmarks/node_run.py, the 8-GPU node run of issue 14, in its rehearsal mode: simulated replicas (each its own
process group), the real vllm-router, our runner, a handful of tiny clips. Keeps the operator's script working:
the stage reports have the fields the docs and the plot read, the scaling counts are the ones asked (the lead's
`--replicas 1,2` on a 2-GPU machine), and a replica SIGKILLed mid-job loses no caption and duplicates none."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from serving.procs import free_port

ROOT = Path(__file__).resolve().parents[2]


def _free_block(n: int) -> int:
    """A first port with the n-1 ports after it free too (simulated replica i listens on BASE+i)."""
    for _ in range(50):
        base = free_port()
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports")


@pytest.mark.load
def test_rehearsal_scaling_kill_and_report(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    replicas = 3
    cmd = [
        sys.executable,
        "benchmarks/node_run.py",
        "clips,scaling,kill,report",
        "--fleet",
        "sim",
        "--sim-replicas",
        str(replicas),
        "--replicas",
        "1,2",
        "--clips",
        "6",
        "--small-clips",
        "--workers",
        "2",
        "--per-replica-clips",
        "3",
        "--warmup",
        "0",
        "--kill-clips",
        "6",
        "--kill-at",
        "0",
        "--sim-speed",
        "0.5",
        "--base-port",
        str(_free_block(replicas)),
        "--router-port",
        str(free_port()),
        "--router-prometheus-port",
        str(free_port()),
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]

    for stage in ("clips", "scaling", "kill", "report"):
        rep = json.loads((out / f"{stage}.json").read_text())
        assert rep["ok"] is True, (stage, rep)
        assert rep["simulated"] is True and "SIMULATED REHEARSAL" in rep["note"]  # never passes for GPU figures

    scaling = json.loads((out / "scaling.json").read_text())
    rows = scaling["rows"]
    assert sorted((r["decoder"], r["replicas"]) for r in rows) == [
        ("nvdec", 1),
        ("nvdec", 2),
        ("opencv", 1),
        ("opencv", 2),
    ]
    for r in rows:
        assert r["done"] == r["clips"] == min(6, 3 * r["replicas"]) and r["failed"] == 0
        assert r["clips_per_s"] > 0 and r["cores_busy"] > 0 and r["core_s_per_clip"] > 0
        assert r["vs_1_replica"] == (1.0 if r["replicas"] == 1 else r["vs_1_replica"]) and r["vs_1_replica"] > 0
    goals = {g["goal"]: g for g in scaling["goals"]}
    # two replicas at most: the 8-GPU goals at the same efficiency (7.5/8 x 2 = 1.875x), and the decoder ratio
    assert set(goals) == {"NVDEC@2 >= 1.875x NVDEC@1", "NVDEC@2 >= 2x opencv@2"}
    assert all(g["measured"] is not None and "simulated" in g["verdict"] for g in goals.values())

    kill = json.loads((out / "kill.json").read_text())
    assert kill["killed"]["replica"] == "replica-1" and kill["victim_alive_after"] is False
    # killed with requests running on it: the job had to get them answered elsewhere
    assert kill["killed"]["victim_running"] + kill["killed"]["victim_waiting"] >= 1
    job = kill["job"]
    assert job["state"] == "done" and job["missing"] == 0 and job["duplicated"] == 0
    assert job["counts"] == {"pending": 0, "leased": 0, "done": 6, "failed": 0}
    assert kill["nothing_lost"] is True

    table = (out / "table.md").read_text()
    assert table.startswith("### SIMULATED REHEARSAL")
    assert "| 2 | " in table and "0 missing, 0 duplicated" in table
    assert (out / "scaling.png").stat().st_size > 10_000
    assert list((out / "logs").glob("kill-replica-*.log"))


def test_dry_run_prints_each_thread_budget_and_the_workload_points(tmp_path):
    p = subprocess.run(
        [sys.executable, "benchmarks/node_run.py", "threads,workload", "--fleet", "gpu", "--gpus", "0", "--dry-run"]
        + [
            "--vllm-version",
            "0.25.0",
            "--threads-configs",
            "1,4,unset,1+api2+nocache,budget+fp8+mbt64,budget+gpupre,2+gpupre+shm,budget+cpupre,budget+infl96,budget+gmu90,"
            "2+infl96+kvfp8,2+fp8+prof,2,2+fill12,2+infl96+fill24,budget+fill12",
            "--out",
            str(tmp_path / "o"),
        ]
        + ["--work", str(tmp_path / "w"), "--workload-frames", "8,32", "--workload-pixels", "9437184,2359296"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "7"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for config, env in (("1", "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1"), ("4", "OMP_NUM_THREADS=4 MKL_NUM_THREADS=4")):
        i = next(k for k, ln in enumerate(lines) if ln.startswith(f"# threads {config} ("))
        assert env in lines[i + 1] and " serve " in lines[i + 1]
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads unset (no thread variables"))
    assert "NUM_THREADS" not in lines[i + 1]  # no thread variable: vLLM sizes its own pools
    # modifiers: fewer API servers and renderer workers (a later flag wins over the recipe's), prefix caching off
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads 1+api2+nocache ("))
    cmd = lines[i + 1]
    assert "OMP_NUM_THREADS=1" in cmd and cmd.endswith("--api-server-count 2 --renderer-num-workers 2")
    assert "--no-enable-prefix-caching" in cmd and cmd.count("--api-server-count") == 2
    # FP8 and a larger prefill batch: each said once, in words, and the batch flag after the recipe's
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads budget+fp8+mbt64 ("))
    assert "FP8 weights" in lines[i] and "--max-num-batched-tokens 65536 (the recipe: 32768)" in lines[i]
    assert "API servers" not in lines[i]
    assert lines[i + 1].endswith("--quantization fp8 --max-num-batched-tokens 65536")
    # the video processor on the GPU: the recipe's size kept in the one value that replaces the recipe's
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads budget+gpupre ("))
    assert "the video processor on the GPU" in lines[i]
    kwargs = shlex.split(lines[i + 1])[-1]
    assert shlex.split(lines[i + 1])[-2] == "--mm-processor-kwargs"
    assert json.loads(kwargs) == {"size": {"shortest_edge": 65536, "longest_edge": 9437184}, "device": "cuda"}
    assert "--mm-tensor-ipc" not in lines[i + 1]
    # ... and its tensors handed over through shared memory
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads 2+gpupre+shm ("))
    assert "shared memory" in lines[i] and "the video processor on the GPU" in lines[i]
    assert lines[i + 1].endswith("--mm-tensor-ipc torch_shm") and "OMP_NUM_THREADS=2" in lines[i + 1]
    # the recipe processes frames on the GPU; `cpupre` puts them back on the CPU, in the value that wins (the last)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads budget+cpupre ("))
    assert "the video processor on the CPU" in lines[i]
    argv = shlex.split(lines[i + 1])
    given = [json.loads(argv[k + 1]) for k, a in enumerate(argv) if a == "--mm-processor-kwargs"]
    assert given[0]["device"] == "cuda" and given[-1] == {"size": {"shortest_edge": 65536, "longest_edge": 9437184}}
    # a deeper window is the runner's: said in words, the replica's command the recipe's
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads budget+infl96 ("))
    assert "96 requests in flight per replica (the setting: 48)" in lines[i]
    assert "--max-num-seqs 1024" in lines[i + 1]  # the replica admits the deeper window
    # the engine's share of GPU memory: after the recipe's 0.8, so the row's is the one vLLM takes
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads budget+gmu90 ("))
    assert "90 % of the GPU's memory for the engine (the recipe: 80 %)" in lines[i]
    argv = shlex.split(lines[i + 1])
    given = [argv[k + 1] for k, a in enumerate(argv) if a == "--gpu-memory-utilization"]
    assert given == ["0.8", "0.9"]
    # an FP8 KV cache: the flag after the recipe's, said in words
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads 2+infl96+kvfp8 ("))
    assert "FP8 KV cache" in lines[i] and lines[i + 1].endswith("--kv-cache-dtype fp8")
    # a profiled row: the engine's torch profiler into the stage's work folder, vLLM's scopes on, said in words
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads 2+fp8+prof ("))
    assert "clips/s not comparable" in lines[i] and "FP8 weights" in lines[i]
    argv = shlex.split(lines[i + 1])
    assert "VLLM_CUSTOM_SCOPES_FOR_PROFILING=1" in argv
    conf = json.loads(argv[argv.index("--profiler-config") + 1])
    assert conf["profiler"] == "torch" and conf["max_iterations"] == 200 and conf["ignore_frontend"] is True
    assert conf["torch_profiler_dir"] == str((tmp_path / "w" / "profile-2+fp8+prof").resolve())
    # vLLM's cache routes on every replica of the stage (a later configuration may share it)
    assert "VLLM_SERVER_DEV_MODE=1" in shlex.split(lines[i + 1])
    # the window's fill is the runner's: configurations that differ only in the runner share the replicas
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads 2 ("))
    assert " serve " in lines[i + 1]
    for config in ("2+fill12", "2+infl96+fill24"):
        i = next(k for k, ln in enumerate(lines) if ln.startswith(f"# threads {config} ("))
        assert lines[i].endswith("the replicas of the configuration before, their caches emptied")
        assert lines[i + 1].startswith("# ")  # no replica command of its own
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads 2+infl96+fill24 ("))
    assert "the window filled over 24 s after idle (the setting: 0)" in lines[i]
    assert "96 requests in flight per replica" in lines[i]
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# threads budget+fill12 ("))
    assert " serve " in lines[i + 1]  # another budget: replicas of its own
    assert "4 jobs of 120 clips, frames x pixels: 8x9,437,184, 32x9,437,184, 8x2,359,296, 32x2,359,296" in p.stdout
    bad = subprocess.run(
        [sys.executable, "benchmarks/node_run.py", "workload", "--fleet", "sim", "--dry-run", "--workload-pixels", "1"]
        + ["--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "Pixels per clip must be 65,536-9,437,184" in bad.stderr


@pytest.mark.load
def test_rehearsal_of_the_thread_budget_and_work_per_clip_stages(tmp_path):
    """The two one-GPU measurements of issue 20 against a simulated replica: a replica per thread configuration
    and the same clips through our runner; then one replica and a job per frames x pixels point."""
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [
        sys.executable,
        "benchmarks/node_run.py",
        "clips,threads,workload",
        "--fleet",
        "sim",
        "--sim-replicas",
        "1",
        "--clips",
        "7",
        "--small-clips",
        "--workers",
        "2",
        "--warmup",
        "1",
        "--threads-configs",
        "1+infl1,1+infl3+fill2,budget",
        "--threads-clips",
        "6",
        "--workload-frames",
        "16",
        # tiny clips (160x90) fit the recipe's budget: 65,536 pixels for 16 frames must shrink them
        "--workload-pixels",
        "9437184,65536",
        "--workload-clips",
        "6",
        "--sim-speed",
        "0.3",
        "--base-port",
        str(_free_block(1)),
        "--router-port",
        str(free_port()),
        "--router-prometheus-port",
        str(free_port()),
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]

    threads = json.loads((out / "threads.json").read_text())
    assert threads["ok"] is True and threads["simulated"] is True
    rows = {r["config"]: r for r in threads["rows"]}
    assert set(rows) == {"1+infl1", "1+infl3+fill2", "budget"}
    for r in rows.values():
        assert r["done"] == r["clips"] == 6 and r["failed"] == 0
        assert r["clips_per_s"] > 0 and r["core_s_per_clip"] > 0 and r["cores_busy"] > 0
        assert r["efficiency"]["tflop_per_clip"] > 0 and "SIMULATED" in r["efficiency"]["simulated"]
        # the engines' view over the job, from the replicas' /metrics every second
        assert r["engine"]["samples"] == len(r["engine_timeline"]) >= 1
    # `infl1`: our runner kept one request in flight, the recipe's setting 48 (all 6 at once)
    assert rows["1+infl1"]["in_flight_per_replica"] == 1 and rows["budget"]["in_flight_per_replica"] == 48
    assert _most_at_once(rows["1+infl1"]) == 1 and _most_at_once(rows["budget"]) >= 4
    # `1+infl3+fill2` differs from `1+infl1` only in our runner: it ran on the same replica, said so, and started
    # none; its runner had the window of 3 filled over 2 s (the fill itself: tests/serving/test_window_fill.py)
    shared = rows["1+infl3+fill2"]
    assert shared["replicas_of"] == "1+infl1" and shared["fleet_startup_s"] is None
    assert shared["cache_reset"] == "caches not emptied: the simulated replicas keep none"
    assert rows["budget"]["fleet_startup_s"] > 0 and "replicas_of" not in rows["budget"]
    assert shared["window_fill_s"] == 2.0 and shared["in_flight_per_replica"] == 3 and _most_at_once(shared) <= 3
    one = rows["1+infl1"]["cpu_budget"]
    assert one.startswith("1 thread(s) per pool") and "REPLICA_THREADS" in one
    assert "cores / 1 replica(s)" in rows["budget"]["cpu_budget"]
    assert "| budget |" in (out / "threads.md").read_text()

    wl = json.loads((out / "workload.json").read_text())
    assert wl["ok"] is True
    points = {r["max_pixels"]: r for r in wl["rows"]}
    full, small = points[9_437_184], points[65_536]
    assert full["done"] == small["done"] == 6
    # the budget reached the replica: fewer vision tokens, fewer prompt tokens, and the check says so
    assert small["vision_tokens"] < full["vision_tokens"] and small["prompt_tokens"] < full["prompt_tokens"]
    assert small["size_honoured"] is True
    table = json.loads((out / "work-per-clip.json").read_text())
    assert "SIMULATED" in table["simulated"]
    measured = [p for p in table["points"] if p.get("simulated")]
    assert {(p["frames"], p["max_pixels"]) for p in measured} == {(16, 9_437_184), (16, 65_536)}
    # each point says how it was measured: the recipe's frames on the GPU, no flag added to the recipe
    assert {p["frame_preprocess"] for p in measured} == {"gpu"} and not [p for p in measured if "replica_args" in p]
    from serving import cost_records

    assert not [m for m in cost_records.load_measurements(out / "work-per-clip.json") if m.max_pixels == 65_536]
    assert (out / "work-per-clip.png").stat().st_size > 10_000


def _most_at_once(row: dict) -> int:
    """The most requests of a threads row that were in flight at once, from each result's time and latency (a
    result is written a little after it arrives: each span is trimmed by 50 ms at its end)."""
    spans = [
        (t - lat, t - lat + max(0.0, lat - 0.05)) for t, lat in zip(row["result_times_s"], row["result_latencies_s"])
    ]
    return max(sum(1 for a, b in spans if a <= s0 < b) for s0, _ in spans)


def _closed_loop(n: int, window: int, latency, start: float = 100.0) -> list[dict]:
    """Results of a runner that keeps `window` requests in flight over `n` clips: the first window sent at
    `start`, then one request per result; `latency(i, sent)` is request i's. Each result: when written and its
    latency, as job_work gives them."""
    import heapq

    flight = [(start + latency(i, start), i, start) for i in range(min(window, n))]
    heapq.heapify(flight)
    out, nxt = [], len(flight)
    while flight:
        end, i, sent = heapq.heappop(flight)
        out.append({"created_at": end, "latency_s": end - sent})
        if nxt < n:
            heapq.heappush(flight, (end + latency(nxt, end), nxt, end))
            nxt += 1
    return out


def test_a_job_no_longer_than_its_pipeline_has_no_steady_rate():
    """A 48-clip job with 48 requests in flight is sent at once and its results come back in a burst: the middle
    80 % of that burst read as 105 clips/s for a replica doing 3.4 (GPU run of 2026-12-02). Such a job has no
    steady rate (the whole job's is the figure); a job of four in-flight windows has one, at the rate it ran.
    Nor has a job whose results do not carry their latency."""
    from benchmarks.node.jobs import steady_rate

    burst = _closed_loop(48, 48, lambda i, t: 14.0 + i * 0.01)
    assert steady_rate(burst, in_flight=48) is None
    spread = _closed_loop(208, 48, lambda i, t: 48 / 3.4)  # a replica doing 3.4 clips/s
    assert steady_rate(spread, in_flight=48) == pytest.approx(3.4, rel=0.01)
    assert steady_rate(spread, in_flight=64) is None  # 208 < 4 x 64
    assert steady_rate([{**w, "latency_s": None} for w in spread], in_flight=48) is None


def test_the_steady_rate_holds_when_results_come_back_in_waves():
    """Measured on one H200 (2026-12-02): the 48 requests of a window came back within 0.3 s of each other,
    one wave every ~12.6 s. A replica doing 48 clips per 12.6 s runs 3.81 clips/s, whatever the job's length
    and wherever a share of its results ends; and the same replica with results spread evenly (first window
    ramping up) reads the same. The old rule (the middle 80 % of results over their span) read 3.57 to 4.4 in
    such jobs, by where its ends fell within a wave."""
    from benchmarks.node.jobs import result_times, steady_rate

    def old_rule(work):
        ends = sorted(w["created_at"] for w in work)
        return (len(ends) * 9 // 10 - len(ends) // 10) / (ends[len(ends) * 9 // 10] - ends[len(ends) // 10])

    cycle, rate = 12.6, 48 / 12.6
    olds = []
    for n in (192, 208, 230, 260, 300):
        waves = _closed_loop(n, 48, lambda i, t: cycle + (i % 48) * 0.006)  # a wave: 48 within 0.3 s
        assert steady_rate(waves, in_flight=48) == pytest.approx(rate, rel=0.03), n
        even = _closed_loop(n, 48, lambda i, t: 20.0 + i / rate if i < 48 else 48 / rate)  # ramp, then even
        assert steady_rate(even, in_flight=48) == pytest.approx(rate, rel=0.03), n
        olds.append(old_rule(waves))
        times = result_times(waves)
        assert times[0] == 0.0 and times == sorted(times) and len(times) == n
    assert max(olds) > rate * 1.1 or min(olds) < rate * 0.9  # what the old rule made of the same waves


def test_a_job_whose_replica_died_stops_at_the_stage_deadline(tmp_path):
    """A replica that dies mid-row (as `--mm-tensor-ipc torch_shm` made vLLM 0.25's engine do) leaves our runner
    waiting for the fleet to come back, as it should in production; the benchmark stops the job at its deadline
    and says so, instead of running out the device call's time."""
    import time

    from benchmarks.node.jobs import PastDeadline, caption_job
    from data import db as dbmod, jobs, prompts
    from data.job_params import JobParams
    from data.jobs.selection import Selection
    from data.library.clipgen import tiny_library
    from data.settings import Settings

    settings = Settings.load({"data_dir": str(tmp_path)}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, 3, prefix="dead")
    job = jobs.create(
        db,
        name="dead",
        created_by="t",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(),
    )
    db.close()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: every request fails to connect
    t = time.time()
    with pytest.raises(PastDeadline, match=r"with 0 of 3 clips done"):
        caption_job(settings, job, [dead], 1, deadline=t + 4)
    assert 3.5 < time.time() - t < 40


def test_a_stage_refuses_a_port_something_else_already_listens_on():
    """A replica an earlier call left running answered /health at once, and the stage measured it: 0 of 64 clips
    done, reported as a row (2026-12-03). The stage now names the holder and starts nothing."""
    from benchmarks.node.fleet import port_not_taken
    from serving import procs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(procs.StartupError) as e:
            port_not_taken(port, "replica-0")
        said = str(e.value)
        assert f"port {port} for replica-0 is already taken" in said and "kill -- -PGID" in said
        assert f"pid {os.getpid()}" in said  # the holder, by pid and process group
    port_not_taken(port, "replica-0")  # free again: nothing to say


def test_a_job_with_no_clip_done_is_no_measurement():
    from benchmarks.node.jobs import none_done

    check = {"counts": {"done": 0, "failed": 64}, "failed": 64, "failed_errors": {7: "HTTP 400: not allowed"}}
    assert none_done(check, 64) == "0 of 64 clips done (64 failed; the first: HTTP 400: not allowed)"
    assert none_done({**check, "counts": {"done": 1}}, 64) is None


def test_a_workload_point_whose_clips_failed_replaces_the_old_rate_with_why(tmp_path):
    """32 frames ran the replicas out of GPU memory on 2026-12-03; the table still priced 32 frames from the
    day before. A point with failed clips now says so in the table, and serving.cost gives no figure for it."""
    from types import SimpleNamespace

    from benchmarks.node import workload
    from serving import cost, cost_records

    ctx = SimpleNamespace(sim=False, precision="bf16", out=tmp_path, gpu_model="NVIDIA H200")
    # a point the committed table has measured on that GPU (so the old rate is what must not survive)
    row = {"frames": 8, "max_pixels": 2_359_296, "clips": 48, "done": 46, "failed": 2, "clips_per_s": 1.3}
    row |= {"failed_errors": {3: "HTTP 500: CUDA out of memory. Tried to allocate 760.00 MiB"}, "date": "2026-12-09"}
    # measured off the recipe: the point says so
    path = workload.write_table(ctx, [row], frame_preprocess="gpu", replica_args="--gpu-memory-utilization=0.8")
    points = [p for p in json.loads(path.read_text())["points"] if (p["frames"], p["max_pixels"]) == (8, 2_359_296)]
    assert len(points) == 1 and points[0]["status"] == "failed" and points[0]["clips_per_s"] is None
    assert "ran out of GPU memory" in points[0]["note"] and "46 of 48 clips done" in points[0]["note"]
    assert points[0]["frame_preprocess"] == "gpu" and points[0]["replica_args"] == "--gpu-memory-utilization=0.8"
    e = cost.estimate(1, 8, "bf16", cost_records.load_measurements(path), max_pixels=2_359_296)
    assert e.basis == "failed" and e.clips_per_s is None and "2026-12-09" in e.note
    # a point measured on another GPU model is its own point: it never replaces this one
    h100 = SimpleNamespace(sim=False, precision="bf16", out=tmp_path / "h100", gpu_model="NVIDIA H100 80GB HBM3")
    h100.out.mkdir()
    ok = {"frames": 8, "max_pixels": 9_437_184, "clips": 48, "done": 48, "failed": 0, "clips_per_s": 3.1}
    ok |= {"steady_clips_per_s": None, "prompt_tokens": 5000, "completion_tokens": 278, "vision_tokens": 4000}
    ok |= {"efficiency": {}, "date": "2026-12-09"}
    table = json.loads(workload.write_table(h100, [ok]).read_text())["points"]
    at = [(p["gpu"], p["clips_per_s"]) for p in table if (p["frames"], p["max_pixels"]) == (8, 9_437_184)]
    assert ("NVIDIA H100 80GB HBM3", 3.1) in at and any(g == "NVIDIA H200" for g, _ in at)


def test_an_fp8_row_is_measured_against_the_fp8_peak_and_runner_modifiers_keep_the_replica():
    """A `+fp8` row's replicas compute in FP8: its share is of the FP8 peak, not the run's bf16 one (the rows of
    2026-12-04 used bf16). `inflN` and `fillN` change only the runner: the replica is the same."""
    import types

    from benchmarks.node.threads import precision, replica_key

    ctx = types.SimpleNamespace(precision="bf16")
    assert precision("2+infl96+fp8", ctx) == "fp8" and precision("2+infl96+kvfp8", ctx) == "bf16"
    assert precision("2", ctx) == "bf16"
    assert replica_key("2+infl96+fill24") == replica_key("2") == ("2", ())
    assert replica_key("2+kvfp8+fill12") == replica_key("2+kvfp8") != replica_key("2")
    assert replica_key("budget+fill12") != replica_key("2+fill12")
