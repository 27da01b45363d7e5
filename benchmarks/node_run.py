#!/usr/bin/env python3
"""Everything issue 14 asks of an 8-GPU node, as one script: start-up, the GPU test, scaling, a replica killed.

    # on the GPU node (offline bundle on PYTHONPATH, see docs/GPU.md "Operator run on an 8-GPU node"):
    python3 benchmarks/node_run.py all --fleet gpu --model /models/Qwen3-VL-8B-Instruct --out docs/gpu-runs/8xh200
    # the rehearsal on any machine: 8 simulated replicas, a few clips, same stages, same reports
    python3 benchmarks/node_run.py all --fleet sim --sim-replicas 8 --clips 24 --out /tmp/rehearsal
    # one stage at a time (each reads nothing but the clip cache and writes OUT/<stage>.json):
    python3 benchmarks/node_run.py scaling --fleet gpu --gpus 0,1 --replicas 1,2 --out docs/gpu-runs/2xh200

Stages (`all` runs them in this order; a failed stage is reported and the next one still runs):
  clips    >= --clips distinct realistic clips + the hostile corpus, generated in parallel on every core into
           a cache folder (--clip-cache) and reused by later runs
  launch   ./launch.sh (GPU mode on every GPU, or the simulated fleet) with --detach: the time to "fleet up" and
           to the app answering, and when each replica, the router and the app first answered; then stopped
  gputest  tests/test_gpu_fleet.py with CW_GPU_GPUS=<all GPUs>, CW_GPU_CLIPS=<--clips>, the cached clips
  scaling  clips/s through our runner (serving.runner.run_job, the code behind `python -m serving.caption`)
           with 1, 2, 4, 8 replicas behind vllm-router, NVDEC (pynvvideocodec) and CPU (opencv) decoding side by
           side; machine CPU cores busy (psutil), CPU core-seconds per clip, ratio to 1 replica; the goals
  kill     a caption job over the whole fleet; one replica SIGKILLed (its process group) mid-job; the job must
           finish with 0 clips missing and 0 duplicated captions
  report   table.md (for docs/BENCHMARKS.md) and scaling.png (clips/s vs GPUs, both decoders) from the JSON

Everything lands in --out: <stage>.json, logs/<stage>-*.log, table.md, scaling.png. Replica command lines come
from serving.launcher.vllm_command (NVIDIA's NVDEC recipe, docs/GPU.md); processes are started in their own
process groups and stopped by group, never by name. With --fleet sim the replicas are `python -m
serving.simfleet --replicas 1` processes (one process group each, so one can be killed like a GPU replica);
the simulator has no video decoder, so the two decoder columns run the same simulator and every report says
so: rehearsal figures say nothing about GPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from serving import (  # noqa: E402
    fleet as fleet_mod,  # noqa: E402
    launcher,
    procs,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAGES = ("clips", "launch", "gputest", "scaling", "kill", "report")
DECODERS = {"nvdec": "pynvvideocodec", "opencv": "opencv"}
SIM_NOTE = (
    "SIMULATED REHEARSAL: replicas are serving.simfleet processes on a CPU machine; the simulator has no "
    "video decoder (no decoder knob), so 'nvdec' and 'opencv' run the same simulator. These figures "
    "rehearse the script; they are not GPU figures."
)
SERVED = "qwen3-vl-8b"
_CHILDREN: list[procs.Child] = []  # every process group this script started and has not stopped yet


def say(msg: str) -> None:
    print(f"[node_run {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- context -----------------------------------------------------------------------------------------------
class Ctx:
    """Parsed options plus what every stage derives from them (paths, GPUs, settings, environment)."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.out = Path(a.out).resolve()
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.work = Path(a.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.fleet = a.fleet if a.fleet != "auto" else ("gpu" if launcher.visible_gpus() else "sim")
        if self.fleet == "gpu":
            self.gpus = launcher.choose_gpus(a.gpus)
            if not self.gpus:
                raise SystemExit("node_run: no GPU found (nvidia-smi -L); pass --gpus or use --fleet sim")
        else:
            self.gpus = list(range(a.sim_replicas))
        self.size = len(self.gpus)
        self.counts = [int(x) for x in a.replicas.split(",") if x.strip()] if a.replicas else default_counts(self.size)
        if max(self.counts) > self.size or min(self.counts) < 1:
            raise SystemExit(
                f"node_run: --replicas {a.replicas} needs 1..{self.size} replicas "
                f"({'GPUs' if self.fleet == 'gpu' else '--sim-replicas'}: {self.size})"
            )
        self.decoders = [d.strip() for d in a.decoders.split(",") if d.strip()]
        for d in self.decoders:
            if d not in DECODERS:
                raise SystemExit(f"node_run: unknown decoder {d!r} (choose from {', '.join(DECODERS)})")
        self.clip_cache = Path(a.clip_cache or self.work / "clip-cache").resolve()
        self.env = dict(os.environ)
        self.env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "GRADIO_ANALYTICS_ENABLED": "False",
                "HF_HUB_OFFLINE": "1",
                "NO_PROXY": "localhost,127.0.0.1",
                "no_proxy": "localhost,127.0.0.1",
                "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p),
            }
        )
        self.env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        if Path("/usr/local/nvidia/bin").is_dir():  # the lent GPU machines keep nvidia-smi and MPS there
            self.env["PATH"] = self.env.get("PATH", "") + ":/usr/local/nvidia/bin"
            os.environ["PATH"] = self.env["PATH"]
        self.vllm_version = launcher.parse_version(a.vllm_version or launcher.installed_vllm_version())

    @property
    def sim(self) -> bool:
        return self.fleet == "sim"

    def settings(self, data_dir: Path, clip_root: Path):
        from data.settings import Settings

        return Settings.load(
            {
                "data_dir": str(data_dir),
                "clip_root": str(clip_root),
                "model": self.a.model,
                "served_model_name": SERVED,
                "fleet_port": self.a.base_port,
                "router_port": self.a.router_port,
                "max_tokens": self.a.max_tokens,
                "request_timeout": 900.0,
            },
            environ={},
        )

    def vllm_extra(self, *, benchmark: bool) -> list[str]:
        extra = [t for arg in self.a.vllm_arg for t in shlex.split(arg)]
        if self.a.dummy:  # random weights (the recipe already asks for compact xgrammar JSON)
            extra += ["--load-format", "dummy"]
        if benchmark:  # the same clip sent again must be decoded and prefilled again, as a new clip would be
            extra += ["--no-enable-prefix-caching"]
        return extra

    def replica(self, settings, slot: int, decoder: str, *, benchmark: bool) -> tuple[list[str], dict]:
        """(command, environment) of the replica for GPU `slot` (or simulated replica `slot`)."""
        port = settings.fleet_port + slot
        if self.sim:
            cmd = launcher.simfleet_command(settings.replace(fleet_port=port), 1, ["--speed", str(self.a.sim_speed)])
            return cmd, {}
        cmd = launcher.vllm_command(
            settings,
            port,
            version=self.vllm_version,
            backend=DECODERS[decoder],
            extra=self.vllm_extra(benchmark=benchmark),
        )
        env = {"CUDA_VISIBLE_DEVICES": str(slot)}
        if not self.a.no_mps:
            env.update(launcher.mps_env(settings))
        return cmd, env


def default_counts(size: int) -> list[int]:
    """1, 2, 4, ... up to the fleet size, and the size itself (1,2 on two GPUs; 1,2,4,8 on eight)."""
    counts, n = [], 1
    while n < size:
        counts.append(n)
        n *= 2
    return counts + [size]


def write(ctx: Ctx, stage: str, report: dict) -> Path:
    path = ctx.out / f"{stage}.json"
    report = {
        "stage": stage,
        "fleet": ctx.fleet,
        "simulated": ctx.sim,
        **({"note": SIM_NOTE} if ctx.sim else {}),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "size": ctx.size,
        "argv": ["python3", "benchmarks/node_run.py", *sys.argv[1:]],
        "host": host_info(),
        **report,
    }
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    say(f"{stage}: report written to {path}")
    return path


def host_info() -> dict:
    import platform

    import psutil

    info = {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30),
        "python": platform.python_version(),
        "vllm": launcher.installed_vllm_version(),
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            info["gpus"] = (
                subprocess.run(
                    [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                .stdout.strip()
                .splitlines()
            )
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def run_logged(cmd: list[str], log: Path, env: dict, timeout: float | None = None, cwd: Path = ROOT) -> int:
    """Run `cmd` to completion with its output appended to `log` (in its own process group, so a timeout
    stops everything it started)."""
    with log.open("a") as f:
        f.write(f"\n$ {shlex.join(cmd)}\n")
        f.flush()
        t = time.time()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            interrupt_group(p)
            rc = 124
        except BaseException:  # Ctrl-C / SIGTERM of this script: the child is in its own group, stop it too
            interrupt_group(p)
            raise
        f.write(f"[exit {rc} after {time.time() - t:.1f} s]\n")
    return rc


def interrupt_group(p: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGINT first (pytest and the launch script then run their own clean-up: `launcher down`), then the
    usual SIGTERM / SIGKILL of the group."""
    try:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    procs.stop_group(p.pid, p.pid, grace=10, popen=p)


# ---- MPS ---------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def mps_daemon(ctx: Ctx, settings):
    """The CUDA MPS control daemon for the replicas of one stage (as the launcher starts it)."""
    if ctx.sim or ctx.a.no_mps:
        yield None
        return
    env = launcher.mps_env(settings)
    for d in env.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**ctx.env, **env}, capture_output=True, text=True)
    state = "started" if r.returncode == 0 else f"failed: {(r.stderr or r.stdout).strip()}"
    say(f"CUDA MPS daemon {state}")
    try:
        yield state
    finally:
        if r.returncode == 0:
            subprocess.run(
                ["nvidia-cuda-mps-control"], input="quit\n", env={**ctx.env, **env}, capture_output=True, text=True
            )


# ---- clips -------------------------------------------------------------------------------------------------
def clip_args(ctx: Ctx) -> list[str]:
    if ctx.a.small_clips:  # rehearsal: tiny clips, so 2 cores generate and ingest them in seconds
        return ["--height", "90", "--min-seconds", "1.5", "--max-seconds", "2", "--fps", "15"]
    return []


def clip_library(ctx: Ctx, count: int | None = None) -> Path:
    """The cached library (library/ + hostile/) holding at least `count` clips (default --clips). data.demo's
    plan is the same prefix for any count and it keeps the clips already written (atomically), so a larger
    count only adds clips; generation runs on every core."""
    count = count or ctx.a.clips
    d = ctx.clip_cache / ("small" if ctx.a.small_clips else "realistic")
    try:
        have = json.loads((d / ".complete").read_text()).get("clips", 0)
    except (OSError, ValueError):
        have = 0
    if have >= count:
        return d
    say(
        f"generating {count} distinct clips into {d} on {ctx.a.workers or os.cpu_count()} processes "
        f"({have} there already; cached for later runs)"
    )
    log = ctx.logs / "clips.log"
    t = time.time()
    rc = run_logged(
        [
            sys.executable,
            "-m",
            "data.demo",
            str(d / "library"),
            "--count",
            str(count),
            "--realistic",
            "--no-broken",
            "--workers",
            str(ctx.a.workers or os.cpu_count() or 1),
            *clip_args(ctx),
        ],
        log,
        ctx.env,
    )
    if rc != 0:
        raise RuntimeError(f"clip generation failed (exit {rc}); see {log}")
    rc = run_logged([sys.executable, "-m", "data.demo", str(d / "hostile"), "--hostile"], log, ctx.env)
    if rc != 0:
        raise RuntimeError(f"hostile corpus failed (exit {rc}); see {log}")
    (d / ".complete").write_text(
        json.dumps({"clips": count, "seconds": round(time.time() - t, 1), "generated_now": count - have})
    )
    return d


def link_tree(src: Path, dst: Path, limit: int | None = None) -> int:
    """Hard-link (copy where links fail) the first `limit` .mp4 files of `src` (and their .json sidecars) into
    `dst`, or every file when there is no limit: real files inside the clip root (a symlink leaving the root is
    refused, as vLLM's --allowed-local-media-path does), nothing copied on one file system."""
    if limit is None:
        files = [
            f
            for f in sorted(src.rglob("*"))
            if f.is_file() and not f.name.startswith(".") and not f.name.endswith(".part")
        ]
    else:
        files = []
        for f in sorted(src.rglob("*.mp4"))[:limit]:
            files += [f] + ([f.with_suffix(".json")] if f.with_suffix(".json").exists() else [])
    for f in files:
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, target)
        except OSError:
            shutil.copy2(f, target)
    return sum(f.suffix == ".mp4" for f in files)


def stage_clips(ctx: Ctx) -> dict:
    t = time.time()
    d = clip_library(ctx, ctx.a.clips)
    info = json.loads((d / ".complete").read_text())
    files = sorted((d / "library").rglob("*.mp4"))
    return {
        "ok": len(files) >= ctx.a.clips,
        "cache": str(d),
        "clips": len(files),
        "asked": ctx.a.clips,
        "hostile": len([f for f in (d / "hostile").iterdir() if f.is_file()]),
        "generation_s": info.get("seconds"),
        "this_run_s": round(time.time() - t, 1),
        "bytes": sum(f.stat().st_size for f in files),
    }


def ingest(ctx: Ctx, data_dir: Path, clip_root: Path, log: Path) -> None:
    # PyAV on the CPU: the NVDEC path is slower for thumbnails (docs/GPU.md) and the GPUs are not up yet
    rc = run_logged(
        [
            sys.executable,
            "-m",
            "data.ingest",
            str(clip_root),
            "--data-dir",
            str(data_dir),
            "--decoder",
            "pyav",
            "--quiet",
            "--workers",
            str(ctx.a.workers or os.cpu_count() or 1),
        ],
        log,
        ctx.env,
    )
    if rc != 0:
        raise RuntimeError(f"ingest failed (exit {rc}); see {log}")


# ---- launch ------------------------------------------------------------------------------------------------
def stage_launch(ctx: Ctx) -> dict:
    """./launch.sh --detach, timed, with every component's first healthy answer; then ./launch.sh stop."""
    lib = clip_library(ctx, ctx.a.launch_clips)
    data_dir = ctx.work / "launch"
    shutil.rmtree(data_dir, ignore_errors=True)
    clip_root = data_dir / "clips"
    n = link_tree(lib / "library", clip_root, limit=ctx.a.launch_clips)
    app_port = ctx.a.app_port
    env = {
        **ctx.env,
        "CW_FLEET_PORT": str(ctx.a.base_port),
        "CW_ROUTER_PORT": str(ctx.a.router_port),
        "CW_MODEL": ctx.a.model,
    }
    cmd = [
        "./launch.sh",
        "--data-dir",
        str(data_dir),
        "--clip-root",
        str(clip_root),
        "--port",
        str(app_port),
        "--fleet",
        ctx.fleet,
        "--detach",
        "--no-install",
    ]
    cmd += ["--gpus", ",".join(map(str, ctx.gpus))] if not ctx.sim else ["--replicas", str(ctx.size)]
    for token in [] if ctx.sim else ctx.vllm_extra(benchmark=False):
        cmd += ["--vllm-arg", shlex.quote(token)]  # the launcher shlex-splits each: keep JSON quotes
    s = ctx.settings(data_dir, clip_root)
    probes = {
        f"replica-{g}": f"http://127.0.0.1:{s.fleet_port + (g if not ctx.sim else k)}/health"
        for k, g in enumerate(ctx.gpus)
    }
    probes["router"] = f"http://127.0.0.1:{s.router_port}/liveness"
    probes["app"] = f"http://127.0.0.1:{app_port}/healthz"
    ready: dict[str, float] = {}
    stop = threading.Event()
    t0 = time.time()

    def poll() -> None:
        with httpx.Client(timeout=1.0, trust_env=False) as http:
            while not stop.is_set() and len(ready) < len(probes):
                for name, url in probes.items():
                    if name in ready:
                        continue
                    try:
                        if http.get(url).status_code == 200:
                            ready[name] = round(time.time() - t0, 1)
                    except httpx.HTTPError:
                        pass
                stop.wait(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    say(f"launch: {shlex.join(cmd)}")
    log = ctx.logs / "launch.log"
    lines: list[dict] = []
    rc = None
    with log.open("w") as f:
        p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True, start_new_session=True
        )
        try:
            for line in p.stdout:
                if "password" in line:  # the first admin's password of this throwaway data dir: not for docs/
                    line = line.split("password")[0] + "password <redacted>\n"
                f.write(line)
                f.flush()
                lines.append({"t": round(time.time() - t0, 1), "line": ANSI.sub("", line.rstrip())[-300:]})
            rc = p.wait(timeout=ctx.a.startup_timeout)
        except subprocess.TimeoutExpired:
            rc = 124
        except BaseException:  # interrupted: whatever launch.sh started must not outlive this script
            interrupt_group(p, grace=10)
            subprocess.run(
                ["./launch.sh", "stop", "--data-dir", str(data_dir)],
                env=env,
                cwd=ROOT,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=300,
            )
            raise
        total = round(time.time() - t0, 1)
        stop.wait(2.0) if len(ready) < len(probes) else None
        stop.set()
        poller.join(timeout=5)
        runner_s = runner_heartbeat(data_dir, t0, deadline=time.time() + 15) if rc == 0 else None
        say(f"launch: exit {rc} after {total} s; stopping it")
        stop_rc = subprocess.run(
            ["./launch.sh", "stop", "--data-dir", str(data_dir)],
            env=env,
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=300,
        ).returncode
        if p.poll() is None:
            procs.stop_group(p.pid, p.pid, grace=10, popen=p)

    def when(text: str) -> float | None:
        return next((x["t"] for x in lines if text in x["line"]), None)

    for src in sorted((data_dir / "logs").glob("*.log")):
        shutil.copy(src, ctx.logs / f"launch-{src.name}")
    report = {
        "ok": rc == 0,
        "command": shlex.join(cmd),
        "exit": rc,
        "clips_ingested": n,
        "startup_s": total,
        "ingest_s": _between(when("ingesting"), when("starting the")),
        "fleet_up_s": when("fleet up"),
        "fleet_start_to_up_s": _between(when("starting the"), when("fleet up")),
        "app_up_s": when("the workbench is up"),
        "first_healthy_s": ready,
        "runner_heartbeat_s": runner_s,
        "not_healthy": sorted(set(probes) - set(ready)),
        "stop_exit": stop_rc,
        "launch_output": lines[-60:],
    }
    if ctx.sim and "router" not in ready:
        report["router_note"] = "no vllm-router here: the simulated fleet ran without a router"
    return report


def runner_heartbeat(data_dir: Path, t0: float, deadline: float) -> float | None:
    """Seconds from t0 to the job runner's first heartbeat in the database (its sign of life), or None."""
    from data import db as dbmod, jobs

    while time.time() < deadline:
        try:
            db = dbmod.connect(data_dir / "workbench.db")
            try:
                beats = jobs.heartbeats(db, "runner")
            finally:
                db.close()
            if beats:
                return round(min(b["at"] for b in beats) - t0, 1)
        except Exception:  # noqa: BLE001 - the database may be busy or not there yet
            pass
        time.sleep(0.5)
    return None


def _between(a: float | None, b: float | None) -> float | None:
    return round(b - a, 1) if a is not None and b is not None else None


# ---- gputest -----------------------------------------------------------------------------------------------
def stage_gputest(ctx: Ctx) -> dict:
    lib = clip_library(ctx, ctx.a.clips)
    clip_root = ctx.work / "gputest-clips"
    shutil.rmtree(clip_root, ignore_errors=True)
    # the test's clip root: library/ linked from the cache (exactly --clips clips); the test writes hostile/
    # itself (with a cut-in-half library clip)
    link_tree(lib / "library", clip_root / "library", limit=ctx.a.clips)
    out = ctx.out / "gputest"
    out.mkdir(exist_ok=True)
    env = {
        **ctx.env,
        "CW_GPU_GPUS": ",".join(map(str, ctx.gpus)),
        "CW_GPU_CLIPS": str(ctx.a.clips),
        "CW_GPU_OUT": str(out),
        "CW_GPU_MODEL": ctx.a.model,
        "CW_GPU_CLIP_ROOT": str(clip_root),
        "TMPDIR": str(ctx.work),
    }
    if ctx.a.dummy:
        env["CW_GPU_DUMMY"] = "1"
    if ctx.sim:
        env["CW_GPU_REHEARSE"] = "sim"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "tests/test_gpu_fleet.py",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--basetemp={ctx.work / 'gputest-tmp'}",
    ]
    say(f"gputest: {shlex.join(cmd)} (CW_GPU_GPUS={env['CW_GPU_GPUS']} CW_GPU_CLIPS={ctx.a.clips})")
    t = time.time()
    rc = run_logged(cmd, ctx.logs / "gputest-pytest.log", env, timeout=ctx.a.stage_timeout)
    report: dict = {
        "ok": rc == 0,
        "exit": rc,
        "seconds": round(time.time() - t, 1),
        "command": shlex.join(cmd),
        "gpus": ctx.gpus,
        "clips_asked": ctx.a.clips,
    }
    try:
        test = json.loads((out / "report.json").read_text())
        report["test_report"] = {
            k: test.get(k)
            for k in (
                "gpus",
                "fleet_up_s",
                "ingest_s",
                "clips",
                "caption_s",
                "job",
                "failure_kinds",
                "provenance_example",
                "router_workers",
            )
        }
        report["hostile_with_reason"] = len(test.get("failures") or {})
    except (OSError, ValueError) as e:
        report["test_report"] = f"no report from the test: {e}"
    if not report["ok"]:
        report["pytest_tail"] = procs.tail(ctx.logs / "gputest-pytest.log", 40)
    return report


# ---- a fleet of separately started replicas (scaling, kill) ------------------------------------------------
class Fleet:
    """One replica per GPU (or simulated replica), each in its own process group, started in parallel."""

    def __init__(self, ctx: Ctx, settings, decoder: str, slots: list[int], tag: str, *, benchmark: bool):
        self.ctx, self.settings, self.decoder, self.slots, self.tag = ctx, settings, decoder, slots, tag
        self.benchmark = benchmark
        self.children: list[procs.Child] = []
        self.ready_s: dict[str, float] = {}

    def urls(self, n: int | None = None) -> list[str]:
        return [c.url for c in self.children[:n]]

    def start(self) -> float:
        t0 = time.time()
        for slot in self.slots:
            cmd, env = self.ctx.replica(self.settings, slot, self.decoder, benchmark=self.benchmark)
            url = f"http://127.0.0.1:{self.settings.fleet_port + slot}"
            log = self.ctx.logs / f"{self.tag}-replica-{slot}.log"
            c = procs.start(
                f"replica-{slot}", cmd, log=log, env={**self.ctx.env, **env}, url=url, health=url + "/health", cwd=ROOT
            )
            self.children.append(c)
            _CHILDREN.append(c)
        if self.slots:
            say(
                f"{self.tag}: started {len(self.slots)} replica(s) ({self.decoder}); first command: "
                f"{shlex.join(self.children[0].cmd)}"
            )
        deadline = t0 + self.ctx.a.startup_timeout
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            while len(self.ready_s) < len(self.children):
                for c in self.children:
                    if c.name in self.ready_s:
                        continue
                    if not c.alive():
                        raise procs.StartupError(
                            f"{c.name} exited during start-up; last lines of {c.log}:\n{procs.tail(c.log)}"
                        )
                    try:
                        if http.get(c.health).status_code == 200:
                            self.ready_s[c.name] = round(time.time() - t0, 1)
                    except httpx.HTTPError:
                        pass
                if time.time() > deadline:
                    raise procs.StartupError(f"replicas not healthy within {self.ctx.a.startup_timeout:.0f} s")
                time.sleep(0.5)
        return round(time.time() - t0, 1)

    def kill(self, i: int) -> procs.Child:
        c = self.children[i]
        procs.kill_group(c.pgid, c.popen)
        return c

    def stop(self) -> None:
        for c in self.children:
            procs.stop_group(c.pgid, c.pid, grace=30, popen=c.popen)
            if c in _CHILDREN:
                _CHILDREN.remove(c)
        if not self.ctx.sim:
            time.sleep(3)  # let the GPU memory go before the next fleet starts


@contextlib.contextmanager
def router(ctx: Ctx, settings, worker_urls: list[str], tag: str):
    """vllm-router (round robin, as the launcher starts it) over `worker_urls`; yields (fleet URLs, note).
    Without vllm-router on the simulated fleet the runner talks to the replicas itself (and says so)."""
    cmd = launcher.router_command(
        settings,
        worker_urls,
        prometheus_port=ctx.a.router_prometheus_port,
        health_interval=10 if not ctx.sim else 1,
        startup_timeout=600,
    )
    if ctx.a.no_router or (cmd[0] == "vllm-router" and not shutil.which("vllm-router")):
        if not ctx.sim and not ctx.a.no_router:
            raise RuntimeError(
                "vllm-router is not installed (pip install vllm-router, or put the offline "
                "bundle with vllm_router on PYTHONPATH); --no-router to measure without it"
            )
        yield worker_urls, "no router: the runner spread requests over the replicas itself"
        return
    url = f"http://127.0.0.1:{settings.router_port}"
    c = procs.start(
        "router", cmd, log=ctx.logs / f"{tag}-router.log", env=ctx.env, url=url, health=url + "/readiness", cwd=ROOT
    )
    _CHILDREN.append(c)
    try:
        procs.wait_healthy([c], timeout=120)
        yield [url], "vllm-router, round robin"
    finally:
        procs.stop_group(c.pgid, c.pid, grace=10, popen=c.popen)
        _CHILDREN.remove(c)


def prepare_db(ctx: Ctx, name: str, clips: int) -> tuple[object, Path]:
    """A data dir with `clips` cached clips linked in and ingested; returns (settings, data_dir)."""
    lib = clip_library(ctx, clips)
    data_dir = ctx.work / name
    shutil.rmtree(data_dir, ignore_errors=True)
    clip_root = data_dir / "clips"
    link_tree(lib / "library", clip_root, limit=clips)
    t = time.time()
    ingest(ctx, data_dir, clip_root, ctx.logs / f"{name}-ingest.log")
    say(f"{name}: {clips} clips ingested in {time.time() - t:.1f} s")
    return ctx.settings(data_dir, clip_root), data_dir


def good_clip_ids(settings) -> list[int]:
    from data import db as dbmod

    db = dbmod.connect(settings.db)
    try:
        return [r["id"] for r in db.query("SELECT id FROM clips WHERE probe_error IS NULL ORDER BY id")]
    finally:
        db.close()


def new_job(settings, name: str, clip_ids: list[int]) -> int:
    from data import db as dbmod, jobs, prompts

    db = dbmod.connect(settings.db)
    try:
        prompt = prompts.latest(db)
        return jobs.create(
            db,
            name=name,
            created_by="node_run",
            clip_ids=clip_ids,
            prompt_id=prompt["id"],
            params={"frames": settings.frames, "max_tokens": settings.max_tokens, "temperature": settings.temperature},
        )
    finally:
        db.close()


def caption_job(settings, job_id: int, urls: list[str], replicas: int) -> tuple[dict, float]:
    """Run job `job_id` to its end through our runner (serving.runner.run_job); (final progress, seconds)."""
    from serving.runner import run_job

    t = time.time()
    prog = run_job(settings, job_id, urls, replicas=replicas, stop_event=threading.Event())
    return prog, time.time() - t


def job_check(settings, job_id: int) -> dict:
    """What the job left: items per state, clips without a caption, clips with more than one."""
    from data import db as dbmod, jobs

    db = dbmod.connect(settings.db)
    try:
        c = jobs.counts(db, job_id)
        state = jobs.get(db, job_id)["state"]
        missing = [
            r["clip_id"]
            for r in db.query(
                "SELECT i.clip_id FROM job_items i JOIN clips k ON k.id = i.clip_id WHERE i.job_id = ? AND "
                "k.probe_error IS NULL AND NOT EXISTS (SELECT 1 FROM captions c WHERE c.job_id = i.job_id AND "
                "c.clip_id = i.clip_id)",
                [job_id],
            )
        ]
        dup = [
            r["clip_id"]
            for r in db.query(
                "SELECT clip_id FROM captions WHERE job_id = ? GROUP BY clip_id HAVING COUNT(*) > 1", [job_id]
            )
        ]
        failed = {
            r["clip_id"]: r["last_error"]
            for r in db.query(
                "SELECT clip_id, last_error FROM job_items WHERE job_id = ? AND state = 'failed'", [job_id]
            )
        }
        attempts = db.execute("SELECT COALESCE(SUM(attempts), 0) FROM job_items WHERE job_id = ?", [job_id]).fetchone()[
            0
        ]
        job = jobs.get(db, job_id)
        last = db.execute("SELECT MAX(finished_at) FROM job_items WHERE job_id = ?", [job_id]).fetchone()[0]
        span = (last - job["started_at"]) if last and job.get("started_at") else None
        replicas = {
            r["replica"]: r["n"]
            for r in db.query("SELECT replica, COUNT(*) AS n FROM captions WHERE job_id = ? GROUP BY replica", [job_id])
        }
    finally:
        db.close()
    return {
        "state": state,
        "counts": c,
        "missing": len(missing),
        "missing_ids": missing[:20],
        "duplicated": len(dup),
        "duplicated_ids": dup[:20],
        "failed": len(failed),
        "failed_errors": dict(list(failed.items())[:10]),
        "attempts": attempts,
        "captions_by_replica": replicas,
        "span_s": round(span, 3) if span else None,
    }


class CpuMeter:
    """Whole-machine CPU time (psutil): cores busy and core-seconds over an interval."""

    def __enter__(self):
        import psutil

        self.t, self.c = time.time(), psutil.cpu_times()
        return self

    def __exit__(self, *exc):
        import psutil

        c1 = psutil.cpu_times()
        self.wall = time.time() - self.t
        self.busy = _busy(c1) - _busy(self.c)
        return False


def _busy(t) -> float:
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


# ---- scaling -----------------------------------------------------------------------------------------------
def stage_scaling(ctx: Ctx) -> dict:
    per = ctx.a.per_replica_clips
    need = min(ctx.a.clips, per * max(ctx.counts))
    settings, _ = prepare_db(ctx, "scaling", need)
    ids = good_clip_ids(settings)
    rows: list[dict] = []
    report: dict = {
        "counts": ctx.counts,
        "decoders": ctx.decoders,
        "gpus": ctx.gpus,
        "clips_available": len(ids),
        "per_replica_clips": per,
        "rows": rows,
        "method": (
            "one fleet of max(counts) replicas per decoder, started in parallel; for each count "
            "n a vllm-router over the first n replicas and one caption job over "
            "min(per_replica_clips x n, clips) distinct clips through serving.runner.run_job; "
            "whole-machine CPU from psutil over the job; prefix caching off"
        ),
    }
    slots = ctx.gpus[: max(ctx.counts)]
    with mps_daemon(ctx, settings) as mps:
        report["mps"] = mps
        for decoder in ctx.decoders:
            fleet = Fleet(ctx, settings, decoder, slots, f"scaling-{decoder}", benchmark=True)
            try:
                startup = fleet.start()
                say(f"scaling: {decoder} fleet of {len(slots)} up in {startup} s")
                warm = ids[: ctx.a.warmup * len(slots)]
                if warm:  # first requests pay compilation and caches on every replica
                    caption_job(settings, new_job(settings, f"warm-up {decoder}", warm), fleet.urls(), len(slots))
                for n in ctx.counts:
                    sel = ids[: min(len(ids), per * n)]
                    with router(ctx, settings, fleet.urls(n), f"scaling-{decoder}-{n}") as (urls, via):
                        job = new_job(settings, f"scaling {decoder} x{n}", sel)
                        with CpuMeter() as cpu:
                            prog, wall = caption_job(settings, job, urls, n)
                    check = job_check(settings, job)
                    done = check["counts"]["done"]
                    row = {
                        "decoder": decoder,
                        "backend": DECODERS[decoder],
                        "replicas": n,
                        "clips": len(sel),
                        "done": done,
                        "failed": check["failed"],
                        "seconds": round(wall, 2),
                        "clips_per_s": round(done / wall, 3) if wall else None,
                        # the same from the job's own clock (first claim to last result): without the
                        # runner's start-up and idle detection
                        "clips_per_s_in_job": round(done / check["span_s"], 3) if check["span_s"] else None,
                        "cores_busy": round(cpu.busy / cpu.wall, 2),
                        "core_s_per_clip": round(cpu.busy / done, 3) if done else None,
                        "via": via,
                        "fleet_startup_s": startup,
                        "job_state": check["state"],
                    }
                    rows.append(row)
                    say(
                        f"scaling: {decoder} x{n}: {row['clips_per_s']} clips/s, {row['cores_busy']} cores busy, "
                        f"{row['core_s_per_clip']} core-s/clip ({done}/{len(sel)} done, {check['failed']} failed)"
                    )
            except Exception as e:  # noqa: BLE001 - record, stop this decoder's fleet, go on with the next
                rows.append({"decoder": decoder, "error": f"{type(e).__name__}: {e}"})
                say(f"scaling: {decoder} FAILED: {e}")
            finally:
                fleet.stop()
    merge_earlier(ctx, rows, report)
    add_ratios(rows)
    report["goals"] = goals(ctx, rows)
    report["decoders"] = sorted({r["decoder"] for r in rows})
    report["ok"] = bool(rows) and not any("error" in r for r in rows)
    for g in report["goals"]:
        say(f"goal {g['goal']}: {g['verdict']}")
    return report


def merge_earlier(ctx: Ctx, rows: list[dict], report: dict) -> None:
    """Keep the rows of the other decoders from an earlier `scaling` call into the same --out (same fleet kind):
    on machines lent 10 minutes per command, `--decoders nvdec` then `--decoders opencv` still give one table."""
    try:
        old = json.loads((ctx.out / "scaling.json").read_text())
    except (OSError, ValueError):
        return
    if old.get("simulated") != ctx.sim:
        return
    kept = [r for r in old.get("rows", []) if r.get("decoder") not in ctx.decoders]
    if kept:
        rows[:0] = kept
        report["merged_from_earlier_call"] = {"date": old.get("date"), "decoders": sorted({r["decoder"] for r in kept})}
        say(
            f"scaling: kept {len(kept)} row(s) of {report['merged_from_earlier_call']['decoders']} from the "
            f"earlier call of {old.get('date')}"
        )


def add_ratios(rows: list[dict]) -> None:
    for r in rows:
        base = next(
            (
                b
                for b in rows
                if b.get("decoder") == r.get("decoder") and b.get("replicas") == 1 and b.get("clips_per_s")
            ),
            None,
        )
        if base and r.get("clips_per_s") is not None:
            r["vs_1_replica"] = round(r["clips_per_s"] / base["clips_per_s"], 2)


def goals(ctx: Ctx, rows: list[dict]) -> list[dict]:
    """NVDEC at N >= 7.5/8 x N x NVDEC at 1 (7.5x at 8), and NVDEC >= 2x opencv at N (N = largest count)."""

    def rate(dec: str, n: int) -> float | None:
        return next((r["clips_per_s"] for r in rows if r.get("decoder") == dec and r.get("replicas") == n), None)

    n = max(ctx.counts)
    want = round(7.5 / 8 * n, 3)
    out = []
    one, top, cpu = rate("nvdec", 1), rate("nvdec", n), rate("opencv", n)
    tag = " (simulated: says nothing about GPUs)" if ctx.sim else ""
    if one and top is not None and n > 1:
        ratio = top / one
        out.append(
            {
                "goal": f"NVDEC@{n} >= {want}x NVDEC@1",
                "measured": round(ratio, 2),
                "met": ratio >= want,
                "verdict": f"{'MET' if ratio >= want else 'NOT MET'}: {ratio:.2f}x{tag}",
            }
        )
    else:
        out.append(
            {
                "goal": f"NVDEC@{n} >= {want}x NVDEC@1",
                "measured": None,
                "met": None,
                "verdict": "not measured (needs nvdec at 1 and at a larger count)",
            }
        )
    if top and cpu:
        ratio = top / cpu
        out.append(
            {
                "goal": f"NVDEC@{n} >= 2x opencv@{n}",
                "measured": round(ratio, 2),
                "met": ratio >= 2,
                "verdict": f"{'MET' if ratio >= 2 else 'NOT MET'}: {ratio:.2f}x{tag}",
            }
        )
    else:
        out.append(
            {
                "goal": f"NVDEC@{n} >= 2x opencv@{n}",
                "measured": None,
                "met": None,
                "verdict": "not measured (needs both decoders at the largest count)",
            }
        )
    return out


# ---- kill --------------------------------------------------------------------------------------------------
def stage_kill(ctx: Ctx) -> dict:
    clips = min(ctx.a.clips, ctx.a.kill_clips)
    settings, _ = prepare_db(ctx, "kill", clips)
    ids = good_clip_ids(settings)
    victim = min(ctx.a.kill_replica, ctx.size - 1)
    report: dict = {"replicas": ctx.size, "clips": len(ids), "decoder": ctx.decoders[0], "kill_at_share": ctx.a.kill_at}
    with mps_daemon(ctx, settings):
        fleet = Fleet(ctx, settings, ctx.decoders[0], ctx.gpus, "kill", benchmark=False)
        try:
            report["fleet_startup_s"] = fleet.start()
            with router(ctx, settings, fleet.urls(), "kill") as (urls, via):
                report["via"] = via
                job = new_job(settings, "kill a replica mid-job", ids)
                killed: dict = {}
                waited: dict = {}
                done_flag = threading.Event()

                def killer() -> None:
                    from data import db as dbmod, jobs

                    db = dbmod.connect(settings.db)
                    try:
                        t0 = time.time()
                        while not done_flag.wait(0.1):
                            c = jobs.counts(db, job)
                            if c["done"] + c["failed"] >= ctx.a.kill_at * len(ids):
                                # kill while the victim has requests in flight (they die with it), or give up
                                # waiting for that after 15 s and kill anyway
                                st = fleet_mod.scrape(fleet.children[victim].url, timeout=2.0)
                                if (
                                    st.running + st.waiting == 0
                                    and time.time() - t0 < 15 + waited.setdefault("since", time.time() - t0)
                                    and c["pending"] + c["leased"] > 0
                                ):
                                    continue
                                child = fleet.kill(victim)
                                killed["victim_running"] = st.running
                                killed["victim_waiting"] = st.waiting
                                killed.update(
                                    {
                                        "replica": child.name,
                                        "pgid": child.pgid,
                                        "url": child.url,
                                        "at_s": round(time.time() - t0, 2),
                                        "finished_before": c,
                                        "inflight_at_kill": c["leased"],
                                    }
                                )
                                say(
                                    f"kill: SIGKILL to process group {child.pgid} ({child.name}, {st.running:.0f} "
                                    f"requests running on it) with {c['done']} done, {c['leased']} in flight"
                                )
                                return
                    finally:
                        db.close()

                th = threading.Thread(target=killer, daemon=True)
                th.start()
                prog, wall = caption_job(settings, job, urls, ctx.size)
                done_flag.set()
                th.join(timeout=5)
                check = job_check(settings, job)
            report.update(
                {
                    "killed": killed or None,
                    "seconds": round(wall, 1),
                    "job": check,
                    "victim_alive_after": fleet.children[victim].alive(),
                }
            )
            report["ok"] = (
                bool(killed)
                and check["state"] == "done"
                and check["missing"] == 0
                and check["duplicated"] == 0
                and check["counts"]["pending"] == 0
                and check["counts"]["leased"] == 0
            )
            report["nothing_lost"] = check["missing"] == 0 and check["duplicated"] == 0
            say(
                f"kill: job {check['state']} in {wall:.1f} s; {check['counts']['done']} captioned, "
                f"{check['missing']} missing, {check['duplicated']} duplicated, {check['failed']} failed"
                + ("" if killed else "; the job ended before the kill point (use more --kill-clips)")
            )
        finally:
            fleet.stop()
    return report


# ---- report ------------------------------------------------------------------------------------------------
def stage_report(ctx: Ctx) -> dict:
    def load(stage: str) -> dict | None:
        try:
            return json.loads((ctx.out / f"{stage}.json").read_text())
        except (OSError, ValueError):
            return None

    scaling, launch, gputest, kill = load("scaling"), load("launch"), load("gputest"), load("kill")
    found = [r for r in (launch, gputest, scaling, kill) if r]
    sim = any(r.get("simulated") for r in found) if found else ctx.sim  # what ran, not what this call says
    size = next((r.get("size") for r in found if r.get("size")), ctx.size)
    md = [
        f"### {'SIMULATED REHEARSAL (not GPU figures): ' if sim else ''}node run, "
        f"{found[0]['date'][:10] if found else time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"{size} {'simulated replicas' if sim else 'GPUs'}",
        "",
    ]
    if sim:
        md += [f"> {SIM_NOTE}", ""]
    argv = next((r.get("argv") for r in found if r.get("argv")), None)
    if argv:
        md += [f"Command: `{shlex.join(argv)}`", ""]
    if launch:
        md += [
            f"- start-up (`./launch.sh`, {launch.get('clips_ingested')} clips): fleet up after "
            f"{launch.get('fleet_up_s')} s (fleet start to up {launch.get('fleet_start_to_up_s')} s), app after "
            f"{launch.get('app_up_s')} s; first healthy: {launch.get('first_healthy_s')}"
        ]
    if gputest:
        tr = gputest.get("test_report") if isinstance(gputest.get("test_report"), dict) else {}
        md += [
            f"- GPU test (`tests/test_gpu_fleet.py`, {gputest.get('clips_asked')} clips, GPUs "
            f"{gputest.get('gpus')}): {'passed' if gputest.get('ok') else 'FAILED'}; job {tr.get('job')}"
        ]
    if kill:
        j = kill.get("job") or {}
        k = kill.get("killed") or {}
        md += [
            f"- replica killed mid-job ({k.get('replica')} by process group, with {k.get('victim_running')} "
            f"requests running on it, {(k.get('finished_before') or {}).get('done')} clips done; "
            f"{kill.get('replicas')} replicas, {kill.get('clips')} clips): job {j.get('state')}, "
            f"{j.get('missing')} missing, {j.get('duplicated')} duplicated, {j.get('failed')} failed"
        ]
    md.append("")
    if scaling:
        vias = sorted({r.get("via") for r in scaling["rows"] if r.get("via")})
        md += [f"Scaling: {scaling.get('method')}. Requests went through: {'; '.join(vias)}.", ""]
        md += table(scaling)
        md += [""] + [f"- goal {g['goal']}: {g['verdict']}" for g in scaling.get("goals", [])]
        png = plot(ctx, scaling)
        if png:
            md += ["", f"![clips/s vs GPUs]({png.name})"]
    text = "\n".join(md) + "\n"
    (ctx.out / "table.md").write_text(text)
    print(text)
    return {
        "ok": scaling is not None,
        "table": str(ctx.out / "table.md"),
        "plot": str(ctx.out / "scaling.png") if (ctx.out / "scaling.png").exists() else None,
        "stages_found": [
            s for s, v in (("launch", launch), ("gputest", gputest), ("scaling", scaling), ("kill", kill)) if v
        ],
    }


def table(scaling: dict) -> list[str]:
    """One row per replica count, the decoders side by side: clips/s (x vs 1 replica), cores busy, core-s/clip."""
    rows = [r for r in scaling["rows"] if "error" not in r]
    decs = [d for d in DECODERS if any(r["decoder"] == d for r in rows)]
    head = (
        "| GPUs (replicas) | "
        + " | ".join(f"{d} clips/s (x 1 GPU) | {d} cores busy | {d} core-s/clip" for d in decs)
        + " | clips per run | failed |"
    )
    out = [head, "|" + "---|" * (3 + 3 * len(decs))]
    for n in sorted({r["replicas"] for r in rows}):
        cells, clips, failed = [], set(), 0
        for d in decs:
            r = next((r for r in rows if r["decoder"] == d and r["replicas"] == n), None)
            if r is None:
                cells += ["", "", ""]
                continue
            clips.add(r["clips"])
            failed += r["failed"]
            cells += [
                f"{r['clips_per_s']} ({r.get('vs_1_replica', '?')}x)",
                str(r["cores_busy"]),
                str(r["core_s_per_clip"]),
            ]
        out.append(f"| {n} | " + " | ".join(cells) + f" | {'/'.join(map(str, sorted(clips)))} | {failed} |")
    out += [f"| failed: {r['decoder']} | {r['error'][:100]} |" for r in scaling["rows"] if "error" in r]
    return out


def plot(ctx: Ctx, scaling: dict) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in scaling["rows"] if "error" not in r]
    if not rows:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"nvdec": "tab:green", "opencv": "tab:red"}
    for dec in sorted({r["decoder"] for r in rows}):
        pts = sorted((r["replicas"], r["clips_per_s"], r["cores_busy"]) for r in rows if r["decoder"] == dec)
        label = f"{dec} ({DECODERS[dec]})"
        ax[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", c=colors.get(dec), label=label)
        ax[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", c=colors.get(dec), label=label)
        one = next((p[1] for p in pts if p[0] == 1), None)
        if one and dec == "nvdec":
            xs = [p[0] for p in pts]
            ax[0].plot(xs, [one * x for x in xs], ":", c="gray", label="nvdec ideal (n x 1 replica)")
    ax[1].axhline(os.cpu_count() or 0, ls="--", c="k", lw=0.8, label=f"cores on this machine ({os.cpu_count()})")
    counts = sorted({r["replicas"] for r in rows})
    ax[0].set_xlabel("GPUs (replicas behind the router)")
    ax[0].set_ylabel("clips/s through our runner")
    ax[1].set_xlabel("GPUs (replicas behind the router)")
    ax[1].set_ylabel("machine CPU cores busy")
    for x in ax:
        x.set_xticks(counts)
        x.set_ylim(bottom=0)
        x.legend(fontsize=8)
        x.grid(alpha=0.3)
    title = "clips/s vs GPUs, NVDEC vs CPU decoding"
    if ctx.sim:
        title = "SIMULATED REHEARSAL (no GPU, no decoder): " + title
    fig.suptitle(title, color="red" if ctx.sim else "black")
    fig.tight_layout()
    path = ctx.out / "scaling.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ---- main --------------------------------------------------------------------------------------------------
def preflight(ctx: Ctx, stages: list[str]) -> None:
    """Say what is missing before any stage starts (an operator's run should not fail an hour in)."""
    import importlib.util

    missing = [m for m in ("sqlite_utils", "av", "psutil", "matplotlib") if importlib.util.find_spec(m) is None]
    if ctx.fleet == "gpu":
        missing += [m for m in ("vllm",) if importlib.util.find_spec(m) is None]
        if "nvdec" in ctx.decoders and importlib.util.find_spec("PyNvVideoCodec") is None:
            say("warning: PyNvVideoCodec not importable here; vLLM's NVDEC backend will fail to decode")
        if (
            launcher._entry("vllm-router", "vllm_router.launch_router") == ["vllm-router"]
            and not shutil.which("vllm-router")
            and not ctx.a.no_router
        ):
            missing.append("vllm_router (or --no-router)")
    if "launch" in stages and importlib.util.find_spec("gradio") is None:
        missing.append("gradio (the app that ./launch.sh starts)")
    if missing:
        raise SystemExit(
            "node_run: missing Python packages: "
            + ", ".join(missing)
            + " (pip install -e '.[gpu,test]', or the offline bundle + wheels on PYTHONPATH: "
            "docs/GPU.md)"
        )


def dry_run(ctx: Ctx, stages: list[str]) -> int:
    """Print the commands the stages would start (replica, router, launch.sh, the test); start nothing."""
    s = ctx.settings(ctx.work / "scaling", ctx.work / "scaling" / "clips")
    print(
        f"# fleet {ctx.fleet}: {ctx.size} {'GPUs ' + str(ctx.gpus) if not ctx.sim else 'simulated replicas'}; "
        f"scaling counts {ctx.counts}; decoders {ctx.decoders}; stages {', '.join(stages)}"
    )
    for dec in ctx.decoders:
        for slot in ctx.gpus[:2]:
            cmd, env = ctx.replica(s, slot, dec, benchmark=True)
            print(f"# scaling replica ({dec}, slot {slot}):\n" + launcher._shell(cmd, env))
    print(
        "# router:\n"
        + shlex.join(launcher.router_command(s, [f"http://127.0.0.1:{s.fleet_port + g}" for g in ctx.gpus]))
    )
    cmd, env = ctx.replica(s, ctx.gpus[0], ctx.decoders[0], benchmark=False)
    print("# kill-stage replica:\n" + launcher._shell(cmd, env))
    extra = [] if ctx.sim else [t for tok in ctx.vllm_extra(benchmark=False) for t in ("--vllm-arg", shlex.quote(tok))]
    print(
        "# launch:\n"
        + shlex.join(
            [
                "./launch.sh",
                "--fleet",
                ctx.fleet,
                "--detach",
                "--no-install",
                *(["--gpus", ",".join(map(str, ctx.gpus))] if not ctx.sim else ["--replicas", str(ctx.size)]),
                *extra,
            ]
        )
    )
    print(
        f"# gputest:\nCW_GPU_GPUS={','.join(map(str, ctx.gpus))} CW_GPU_CLIPS={ctx.a.clips}"
        f"{' CW_GPU_DUMMY=1' if ctx.a.dummy else ''}{' CW_GPU_REHEARSE=sim' if ctx.sim else ''} "
        f"python3 -m pytest -m gpu tests/test_gpu_fleet.py"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchmarks/node_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "stage",
        help=f"what to run: all (every stage in order), one of {', '.join(STAGES)}, or several "
        "comma-separated (e.g. scaling,report)",
    )
    p.add_argument("--out", required=True, help="folder for the reports, logs, table and plot")
    p.add_argument(
        "--fleet",
        choices=("auto", "gpu", "sim"),
        default="auto",
        help="gpu: vLLM replicas; sim: simulated replicas (rehearsal); auto: gpu where nvidia-smi lists GPUs",
    )
    p.add_argument("--gpus", default="", help="GPUs to use (default: every GPU nvidia-smi lists)")
    p.add_argument("--sim-replicas", type=int, default=8, help="simulated replicas with --fleet sim (default 8)")
    p.add_argument(
        "--replicas",
        default="",
        help="replica counts of the scaling stage, e.g. 1,2 (default: 1,2,4,... up to the fleet size)",
    )
    p.add_argument("--decoders", default="nvdec,opencv", help="decoders of the scaling stage (default nvdec,opencv)")
    p.add_argument("--model", default="Qwen/Qwen3-VL-8B-Instruct", help="model folder or id the replicas serve")
    p.add_argument("--dummy", action="store_true", help="random weights (--load-format dummy + compact JSON)")
    p.add_argument("--vllm-arg", action="append", default=[], metavar="ARG", help="extra vLLM argument (repeatable)")
    p.add_argument("--vllm-version", default=None, help="vLLM version to build flags for (default: installed)")
    p.add_argument("--clips", type=int, default=1000, help="distinct clips for the GPU test (default 1000)")
    p.add_argument("--small-clips", action="store_true", help="tiny clips (90p, 2 s): rehearsals only")
    p.add_argument("--clip-cache", default=None, help="where generated clips are kept (default WORK/clip-cache)")
    p.add_argument("--work", default="/tmp/cw-node-run", help="data dirs of the stages (default /tmp/cw-node-run)")
    p.add_argument("--workers", type=int, default=0, help="processes for clip generation and ingest (default: cores)")
    p.add_argument(
        "--per-replica-clips",
        type=int,
        default=120,
        help="clips per replica in each scaling job (default 120: ~30 s at 4 clips/s per GPU)",
    )
    p.add_argument("--warmup", type=int, default=8, help="warm-up clips per replica before each decoder's runs")
    p.add_argument("--kill-clips", type=int, default=600, help="clips in the kill job (default 600)")
    p.add_argument(
        "--kill-at",
        type=float,
        default=0.3,
        help="kill when this share of the job is finished and the victim has requests running (0: as "
        "soon as it has; small rehearsals finish too fast for more)",
    )
    p.add_argument("--kill-replica", type=int, default=1, help="index of the replica to kill (default 1)")
    p.add_argument(
        "--launch-clips",
        type=int,
        default=24,
        help="clips launch.sh ingests before starting the fleet (default 24: the start-up is the figure)",
    )
    p.add_argument("--max-tokens", type=int, default=320, help="output token limit per caption (default 320)")
    p.add_argument("--base-port", type=int, default=8000, help="replica i listens on BASE+i (default 8000)")
    p.add_argument("--router-port", type=int, default=30000, help="router port (default 30000)")
    p.add_argument("--router-prometheus-port", type=int, default=29000)
    p.add_argument("--app-port", type=int, default=7860, help="web app port of the launch stage (default 7860)")
    p.add_argument("--sim-speed", type=float, default=1.0, help="simulated latency factor (default 1)")
    p.add_argument("--no-router", action="store_true", help="measure without vllm-router (runner spreads itself)")
    p.add_argument("--no-mps", action="store_true", help="no CUDA MPS daemon in the scaling and kill stages")
    p.add_argument("--startup-timeout", type=float, default=1800, help="seconds for a fleet to come up")
    p.add_argument("--dry-run", action="store_true", help="print the commands the stages would start; start nothing")
    p.add_argument("--stage-timeout", type=float, default=5400, help="seconds for the GPU test (default 90 min)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    stages = list(STAGES) if a.stage == "all" else [x.strip() for x in a.stage.split(",") if x.strip()]
    unknown = [x for x in stages if x not in STAGES]
    if unknown or not stages:
        raise SystemExit(
            f"node_run: unknown stage {', '.join(unknown) or a.stage!r}; choose all or from {', '.join(STAGES)}"
        )
    ctx = Ctx(a)
    if a.dry_run:
        return dry_run(ctx, stages)
    if stages != ["report"]:
        preflight(ctx, stages)
    say(
        f"fleet {ctx.fleet}, {ctx.size} {'GPUs ' + str(ctx.gpus) if not ctx.sim else 'simulated replicas'}; "
        f"stages {', '.join(stages)}; out {ctx.out}"
    )
    if ctx.sim:
        say(SIM_NOTE)

    def on_signal(signum, frame):  # stop what we started, by process group, then leave
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    results = {}
    runners = {
        "clips": stage_clips,
        "launch": stage_launch,
        "gputest": stage_gputest,
        "scaling": stage_scaling,
        "kill": stage_kill,
        "report": stage_report,
    }
    t_all = time.time()
    try:
        for stage in stages:
            say(f"=== stage {stage}")
            t = time.time()
            try:
                rep = runners[stage](ctx)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - one failed stage must not cost the others
                rep = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                say(f"{stage} FAILED: {e}")
            rep["stage_s"] = round(time.time() - t, 1)
            write(ctx, stage, rep)
            results[stage] = rep.get("ok")
    except KeyboardInterrupt:
        say("interrupted: stopping what this script started")
        return 130
    finally:
        for c in list(_CHILDREN):
            procs.stop_group(c.pgid, c.pid, grace=10, popen=c.popen)
    say(
        f"done in {time.time() - t_all:.0f} s: "
        + ", ".join(f"{s} {'ok' if ok else 'FAILED'}" for s, ok in results.items())
    )
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
