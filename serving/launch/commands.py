"""The command lines of the fleet's processes, from one settings object: `vllm serve` for a replica (NVIDIA's
recipe adapted to the vLLM version), vllm-router in front, the simulated fleet, the CUDA MPS environment; and
what they depend on here (the installed vLLM, the visible GPUs, the launch mode).

The replica command is NVIDIA's recipe for vLLM with NVDEC decoding (docs/GPU.md, "Running the fleet"): GPU video
decoding selected through the `backend` key of `--media-io-kwargs` (never VLLM_VIDEO_LOADER_BACKEND, which Qwen3-VL
ignores), a decode budget from `--mm-ipc-gpu-memory-gb`, `hw_decoders` only on vLLM releases after 0.25.1, one replica
per GPU through `CUDA_VISIBLE_DEVICES` (the decoder always uses device 0 of its process), started with `vllm serve` (the
bare api_server module ignores `--api-server-count`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Sequence

from data.job_params import MIN_PIXELS, RECIPE_MAX_PIXELS
from data.settings import Settings, env_name

HW_DECODERS_SINCE = (0, 25, 1)  # hw_decoders exists in releases after this one
API_SERVERS = 4  # the recipe's --api-server-count (and --renderer-num-workers)


# ---- versions, GPUs, the launch mode -----------------------------------------------------------------------
def parse_version(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    nums = re.findall(r"\d+", v.split("+")[0])[:3]
    return tuple(int(n) for n in nums) if nums else None


def installed_vllm_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def visible_gpus() -> list[int]:
    """GPU indices from `nvidia-smi -L` ([] without a GPU or driver)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(m.group(1)) for m in re.finditer(r"^GPU (\d+):", out, re.M)]


def choose_gpus(gpus: Sequence[int]) -> list[int]:
    """The GPUs a node uses: those named (the GPUS setting), else every visible one."""
    return list(gpus) or visible_gpus()


def launch_mode(fleet_mode: str) -> str:
    """What a fleet mode starts here: 'gpu' or 'sim' as it says; 'auto' is 'gpu' on a machine with a GPU, else
    'sim'. The one place 'auto' is resolved: the launcher's `up`, and launch.sh through `main` below."""
    if fleet_mode in ("sim", "gpu"):
        return fleet_mode
    return "gpu" if visible_gpus() else "sim"


def entry_command(script: str, module: str) -> list[str]:
    """`script` when it is on PATH (or nothing is installed: dry runs print the usual name), else
    `python -m module`: on an offline GPU node the packages are often importable from a bundle on PYTHONPATH
    without their console scripts (`vllm serve` is `python -m vllm.entrypoints.cli.main serve`)."""
    import importlib.util

    if shutil.which(script):
        return [script]
    try:
        found = importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    return [sys.executable, "-m", module] if found else [script]


# ---- the CPU budget of a replica ------------------------------------------------------------------------------
# Each vLLM process sizes its thread pools by the cores it sees: torch's intra-op pool (read from OMP_NUM_THREADS,
# MKL_NUM_THREADS winning where both are set), OpenMP's and the BLAS libraries'. vLLM shrinks torch's pool to one
# thread only in its multiprocessing executor (tensor/pipeline parallel, `set_multiprocessing_worker_envs`,
# and only when OMP_NUM_THREADS is unset); a one-GPU replica runs the "uni" executor inside the engine core
# (vllm/config/parallel.py: world_size 1 -> "uni"), so every process of every replica keeps a pool of every core.
# One run on one H200 / 16 cores (docs/BENCHMARKS.md, "CPU threads per replica"): OMP_NUM_THREADS=1 cut the CPU
# per clip from 1.83 to 1.02 core-s at the same clips/s; `benchmarks/node_run.py threads` measures 1, 2, 4 and
# this budget side by side.
THREAD_POOL_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# The ops these pools run are short: more threads mostly spin (OpenMP waits busy). With frames prepared on the
# GPU, two sessions on one H200 measured 4 > 3 > 2 ~ 1 threads in CPU per clip (0.87, 0.73-0.77, 0.60-0.72,
# 0.61-0.71 core-s) at the same clips/s within the noise, 1 a little slower than 2 in both (docs/BENCHMARKS.md,
# "CPU threads per replica"): 2 is the most a budget gives.
MAX_BUDGET_THREADS = 2


def node_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: a container's or taskset's limit, not the host's)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def thread_budget(cores: int, replicas: int, processes: int = API_SERVERS + 1) -> int:
    """Threads per thread pool in each process of a replica: the node's cores shared by its replicas, that
    share shared by the replica's busy processes (the API servers and the engine core), at least 1 and at most
    MAX_BUDGET_THREADS. 16 cores, 1 replica: 2 (16 // 5 = 3, capped); 112 cores, 8 replicas: 2; 32 cores, 4
    replicas: 1."""
    share = max(1, cores) // max(1, replicas)
    return max(1, min(MAX_BUDGET_THREADS, share // max(1, processes)))


@dataclasses.dataclass(frozen=True)
class ReplicaBudget:
    """The CPU budget of one replica: threads per pool, and the cores it is pinned to (None: not pinned)."""

    threads: int
    cpus: tuple[int, ...] | None
    why: str

    def env(self) -> dict[str, str]:
        """The environment that sets every pool of every process of the replica to `threads`."""
        return {var: str(self.threads) for var in THREAD_POOL_VARS}

    def describe(self) -> str:
        pinned = f"pinned to cores {cpu_list(self.cpus)}" if self.cpus else "not pinned"
        return f"{self.threads} thread(s) per pool ({', '.join(THREAD_POOL_VARS)}; {self.why}), {pinned}"


def cpu_list(cpus: Sequence[int]) -> str:
    """CPUs as taskset writes them: 0-13,28-41."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def replica_budgets(settings: Settings, replicas: int, cpus: Sequence[int] | None = None) -> list[ReplicaBudget]:
    """The budget of each of `replicas` replicas on a node with `cpus` (default: this process's): the
    REPLICA_THREADS setting, else `thread_budget`; with PIN_REPLICAS on, replica i gets the i-th contiguous block
    of len(cpus) // replicas cores."""
    cpus = list(cpus if cpus is not None else node_cpus())
    replicas = max(1, replicas)
    if settings.replica_threads > 0:
        threads, why = settings.replica_threads, "the REPLICA_THREADS setting"
    else:
        threads = thread_budget(len(cpus), replicas)
        why = f"{len(cpus)} cores / {replicas} replica(s) / {API_SERVERS + 1} processes, 1-{MAX_BUDGET_THREADS}"
    share = max(1, len(cpus) // replicas)
    out = []
    for i in range(replicas):
        block = tuple(cpus[i * share : (i + 1) * share]) or tuple(cpus)
        out.append(ReplicaBudget(threads, block if settings.pin_replicas == "on" else None, why))
    return out


STRUCTURED_OUTPUTS = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}, separators=(",", ":"))


def processor_kwargs(settings: Settings) -> dict:
    """The replica's `--mm-processor-kwargs`: the recipe's frame size and, with FRAME_PREPROCESS=gpu, Qwen3-VL's
    video processor on the GPU (`device`; the resize and normalization of every decoded frame were most of the
    API servers' CPU: docs/GPU.md). A request's own `mm_processor_kwargs` (a job's pixel budget) replaces keys
    of this one, not the whole: its `size` leaves `device` as the server has it."""
    kwargs: dict = {"size": {"shortest_edge": MIN_PIXELS, "longest_edge": RECIPE_MAX_PIXELS}}
    if settings.frame_preprocess == "gpu":
        kwargs["device"] = "cuda"
    return kwargs


# ---- command lines --------------------------------------------------------------------------------------------
def vllm_command(
    settings: Settings,
    port: int,
    *,
    version: tuple[int, ...] | None,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
    frames: int | None = None,
    backend: str = "pynvvideocodec",
) -> list[str]:
    """`vllm serve` for one replica, the NVIDIA recipe adapted to the vLLM `version`. `backend` is the video
    decoder (`pynvvideocodec` = NVDEC; `opencv` = CPU decoding, for side-by-side benchmarks)."""
    frames = frames or settings.frames
    video: dict = {"backend": backend, "min_frames": frames, "max_frames": frames}
    # hw_decoders is a knob of the NVDEC backend only
    if backend == "pynvvideocodec" and (version is None or version > HW_DECODERS_SINCE):
        video["hw_decoders"] = 2
    cmd = [
        *entry_command("vllm", "vllm.entrypoints.cli.main"),
        "serve",
        settings.model,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "1024",
        "--max-num-batched-tokens",
        "32768",
        "--api-server-count",
        str(API_SERVERS),
        "--renderer-num-workers",
        str(API_SERVERS),
        "--async-scheduling",
        # what the engine leaves is the API servers' room to decode and prepare frames on the GPU
        "--gpu-memory-utilization",
        f"{settings.gpu_memory_utilization:g}",
        "--mm-ipc-gpu-memory-gb",
        "2",
        "--media-io-kwargs",
        json.dumps({"video": video}, separators=(",", ":")),
        "--mm-processor-kwargs",
        json.dumps(processor_kwargs(settings), separators=(",", ":")),
        "--allowed-local-media-path",
        str(settings.clip_root),
        # 0.25: renderer workers > 1 refuse to start with the (not thread-safe) processor cache on
        "--mm-processor-cache-gb",
        "0",
        # structured output chosen on purpose: xgrammar (the schema we send is what it compiles, see
        # data.taxonomy.model_schema) and compact JSON (no whitespace tokens; 0.25 refuses this option
        # with backend "auto")
        "--structured-outputs-config",
        STRUCTURED_OUTPUTS,
    ]
    if settings.served_model_name:
        cmd += ["--served-model-name", settings.served_model_name]
    return cmd + list(extra)


# vllm-router answers every origin with `Access-Control-Allow-Origin: *` unless given origins; this one no web page
# can have (.invalid never resolves, RFC 6761), so no page may read its answers or send it a preflighted request
NO_CORS_ORIGIN = "http://no-page.invalid"
# seconds vllm-router's circuit breaker stays open for a worker before it lets a request try it again (its default,
# 60, kept a fixed fleet refused for a minute and more after its fix: "503 No available workers"; with 10, the
# first answer came 9.5 s after the fix, 2026-12-07: docs/RELIABILITY.md F8). The runner paces a failing fleet itself.
ROUTER_BREAKER_OPEN_S = 10


def router_command(
    settings: Settings,
    worker_urls: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    prometheus_port: int = 29000,
    health_interval: int = 10,
    startup_timeout: int = 1800,
) -> list[str]:
    """vllm-router over `worker_urls`, listening on `host`:`port` (default: the ROUTER_PORT setting); the
    launcher gives it a private loopback address and puts serving.router_gate on ROUTER_PORT."""
    return [
        *entry_command("vllm-router", "vllm_router.launch_router"),
        "--host",
        host,
        "--port",
        str(settings.router_port if port is None else port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        "round_robin",
        "--worker-startup-timeout-secs",
        str(startup_timeout),
        "--health-check-interval-secs",
        str(health_interval),
        "--request-timeout-secs",
        "1800",
        "--retry-max-retries",
        "2",
        "--cb-timeout-duration-secs",
        str(ROUTER_BREAKER_OPEN_S),
        "--prometheus-port",
        str(prometheus_port),
        "--cors-allowed-origins",
        NO_CORS_ORIGIN,
    ]


def gate_command(settings: Settings, upstream: str, workers: Sequence[str]) -> list[str]:
    """serving.router_gate on ROUTER_PORT in front of the router at `upstream`, keeping its worker list
    `workers` (it reads the fleet key from the data dir)."""
    return [
        sys.executable,
        "-m",
        "serving.router_gate",
        "--port",
        str(settings.router_port),
        "--upstream",
        upstream,
        "--keep-workers",
        ",".join(workers),
        "--data-dir",
        str(settings.data_dir),
    ]


def simfleet_command(settings: Settings, replicas: int, extra: Sequence[str] = ()) -> list[str]:
    # imported here: only a simulated fleet needs it, and `status`/`down`/`url` should start fast
    from serving.simfleet import FleetSpec, command

    spec = FleetSpec(replicas, settings.fleet_port, settings.clip_root, settings.replica_host, settings.model_name)
    return command(spec, extra)


def runner_command(settings: Settings, fleet_urls: str | Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """`python -m serving.runner` on `settings`' data dir, captioning through `fleet_urls` (the router, or the
    replicas: a list or one comma-separated string)."""
    urls = fleet_urls if isinstance(fleet_urls, str) else ",".join(fleet_urls)
    return [sys.executable, "-m", "serving.runner", "--data-dir", str(settings.data_dir), "--fleet-urls", urls, *extra]


def mps_env(settings: Settings) -> dict[str, str]:
    return {
        "CUDA_MPS_PIPE_DIRECTORY": str(settings.data_dir / "run" / "mps"),
        "CUDA_MPS_LOG_DIRECTORY": str(settings.data_dir / "logs" / "mps"),
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m serving.launch.commands mode [FLEET_MODE]`: print what a launch starts here, gpu or sim
    (FLEET_MODE: the argument, else CW_FLEET_MODE, else auto). It needs nothing installed beyond Python, so
    launch.sh asks it before it installs the packages that mode needs."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m serving.launch.commands", description=main.__doc__)
    p.add_argument("command", choices=("mode",))
    p.add_argument("fleet_mode", nargs="?", help="auto, sim or gpu (default: the FLEET_MODE setting)")
    args = p.parse_args(argv)
    try:
        env = {k: v for k, v in os.environ.items() if k == env_name("fleet_mode")}  # no other setting matters
        mode = Settings.load({"fleet_mode": args.fleet_mode}, environ=env).fleet_mode
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(launch_mode(mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
