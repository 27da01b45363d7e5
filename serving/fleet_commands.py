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


STRUCTURED_OUTPUTS = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}, separators=(",", ":"))


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
        "--mm-ipc-gpu-memory-gb",
        "2",
        "--media-io-kwargs",
        json.dumps({"video": video}, separators=(",", ":")),
        "--mm-processor-kwargs",
        json.dumps({"size": {"shortest_edge": MIN_PIXELS, "longest_edge": RECIPE_MAX_PIXELS}}, separators=(",", ":")),
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


def router_command(
    settings: Settings,
    worker_urls: Sequence[str],
    *,
    prometheus_port: int = 29000,
    health_interval: int = 10,
    startup_timeout: int = 1800,
) -> list[str]:
    return [
        *entry_command("vllm-router", "vllm_router.launch_router"),
        "--host",
        "127.0.0.1",
        "--port",
        str(settings.router_port),
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
        "--prometheus-port",
        str(prometheus_port),
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
    """`python -m serving.fleet_commands mode [FLEET_MODE]`: print what a launch starts here, gpu or sim
    (FLEET_MODE: the argument, else CW_FLEET_MODE, else auto). It needs nothing installed beyond Python, so
    launch.sh asks it before it installs the packages that mode needs."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m serving.fleet_commands", description=main.__doc__)
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
