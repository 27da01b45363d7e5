"""What every stage shares: the options of a run and what they imply (Ctx), the stage report writer, logged
child commands and the process groups this run started."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from data.settings import gpu_list
from serving import procs
from serving.launch import commands as fleet_commands

ROOT = Path(__file__).resolve().parents[2]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAGES = ("clips", "launch", "gputest", "scaling", "kill", "threads", "workload", "report")
# stages `all` runs; `threads` and `workload` are one-GPU measurements of their own (one device call each)
ALL_STAGES = ("clips", "launch", "gputest", "scaling", "kill", "report")
DECODERS = {"nvdec": "pynvvideocodec", "opencv": "opencv"}
SIM_NOTE = (
    "SIMULATED REHEARSAL: replicas are serving.simfleet processes on a CPU machine; the simulator has no "
    "video decoder (no decoder knob), so 'nvdec' and 'opencv' run the same simulator. These figures "
    "rehearse the script; they are not GPU figures."
)
SERVED = "qwen3-vl-8b"
CHILDREN: list[procs.Child] = []  # every process group this script started and has not stopped yet


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
        self.fleet = fleet_commands.launch_mode(a.fleet)
        if self.fleet == "gpu":
            self.gpus = fleet_commands.choose_gpus(gpu_list(a.gpus))
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
        # replicas get their thread pools from their budget (serving.launch.commands), never from this shell
        for var in fleet_commands.THREAD_POOL_VARS:
            self.env.pop(var, None)
            os.environ.pop(var, None)
        if Path("/usr/local/nvidia/bin").is_dir():  # the lent GPU machines keep nvidia-smi and MPS there
            self.env["PATH"] = self.env.get("PATH", "") + ":/usr/local/nvidia/bin"
            os.environ["PATH"] = self.env["PATH"]
        self.vllm_version = fleet_commands.parse_version(a.vllm_version or fleet_commands.installed_vllm_version())

    @property
    def sim(self) -> bool:
        return self.fleet == "sim"

    @property
    def precision(self) -> str:
        """fp8 when the replicas quantize (--vllm-arg=--quantization=fp8), else bf16: the peak efficiency uses."""
        args = " ".join(self.a.vllm_arg).replace("=", " ").split()
        return "fp8" if "--quantization" in args and "fp8" in args[args.index("--quantization") :][:2] else "bf16"

    @property
    def gpu_model(self) -> str:
        """nvidia-smi's name of the first GPU the stages use (what a work-per-clip point was measured on); "" on a
        simulated fleet or where nvidia-smi does not say."""
        if self.sim or not self.gpus:
            return ""
        if not hasattr(self, "_gpu_model"):
            from serving import gpu_models

            self._gpu_model = (gpu_models.query([self.gpus[0]]).get(self.gpus[0]) or {}).get("name") or ""
        return self._gpu_model

    @property
    def workers(self) -> int:
        """Processes for clip generation and ingest: --workers, or every core."""
        return self.a.workers or os.cpu_count() or 1

    def gpu_peak(self) -> dict | None:
        """The GPU's measured bf16 and FP8 matmul peaks (benchmarks/gpu_peak.py, in a child process: a CUDA
        context in this one would hold GPU memory the replicas need), once per machine (kept in --work); None
        for a simulated fleet."""
        if self.sim:
            return None
        cached = self.work / "peak.json"
        try:
            return json.loads(cached.read_text())
        except (OSError, ValueError):
            pass
        say("measuring the GPU's bf16 and FP8 matmul peaks (benchmarks/gpu_peak.py)")
        rc = run_logged(
            [sys.executable, str(ROOT / "benchmarks" / "gpu_peak.py"), "--out", str(cached)],
            self.logs / "gpu-peak.log",
            self.env,
            timeout=300,
        )
        try:
            got = json.loads(cached.read_text())
        except (OSError, ValueError):
            return {"error": f"benchmarks/gpu_peak.py failed (exit {rc}); see {self.logs / 'gpu-peak.log'}"}
        say(f"GPU peaks: bf16 {got.get('bf16_tflops')} TFLOP/s, FP8 {got.get('fp8_tflops')} TFLOP/s")
        return got

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

    def replica(
        self,
        settings,
        slot: int,
        decoder: str,
        *,
        benchmark: bool,
        budget: fleet_commands.ReplicaBudget | None,
        extra: list[str] = (),
    ) -> tuple[list[str], dict]:
        """(command, environment) of the replica for GPU `slot` (or simulated replica `slot`), with the thread
        pools of `budget` (None: no thread variables, vLLM's own pools)."""
        port = settings.fleet_port + slot
        threads = budget.env() if budget else {}
        if self.sim:
            cmd = fleet_commands.simfleet_command(
                settings.replace(fleet_port=port), 1, ["--speed", str(self.a.sim_speed)]
            )
            return cmd, threads
        cmd = fleet_commands.vllm_command(
            settings,
            port,
            version=self.vllm_version,
            backend=DECODERS[decoder],
            extra=[*self.vllm_extra(benchmark=benchmark), *extra],
        )
        env = {"CUDA_VISIBLE_DEVICES": str(slot), **threads}
        if not self.a.no_mps:
            env.update(fleet_commands.mps_env(settings))
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
        "vllm": fleet_commands.installed_vllm_version(),
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


def run_module(ctx: Ctx, module: str, args: list[str], log: Path, what: str) -> None:
    """`python -m module args` to completion (run_logged); a failure raises: `what` failed, see its log."""
    rc = run_logged([sys.executable, "-m", module, *args], log, ctx.env)
    if rc != 0:
        raise RuntimeError(f"{what} failed (exit {rc}); see {log}")


def interrupt_group(p: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGINT first (pytest and the launch script then run their own clean-up: `launcher down`), then the
    usual SIGTERM / SIGKILL of the group."""
    try:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    procs.stop_group(p.pid, p.pid, grace=10, popen=p)
