"""What `up` starts, in order, worked out before anything starts: the replicas of a node (one vLLM per GPU under
CUDA MPS, with its CPU budget, or the simulated fleet), the head's router over the GPU nodes' replicas, and
vllm-router on a private loopback address behind serving.router_gate. A plan is data (each step's command,
environment, log and health URLs); serving.launch.up prints it for a dry run or starts it."""

from __future__ import annotations

import shlex
import shutil
from typing import Sequence

from data.library import clip_root, deployment
from data.settings import Settings, env_name
from serving import fleet_key, gpu_models, procs
from serving.cost_records import precision_of_args
from serving.launch.addresses import advertised_host, local_host, no_local_media, private_loopback, remote_media_args
from serving.launch.commands import (
    choose_gpus,
    entry_command,
    gate_command,
    installed_vllm_version,
    launch_mode,
    mps_env,
    parse_version,
    replica_budgets,
    router_command,
    simfleet_command,
    vllm_command,
)
from serving.launch.options import LaunchOptions

# the deepest in-flight window measured safe on any GPU: deeper windows need room for the replica's API servers,
# which decode and prepare the frames of every request in flight on the same GPU. What is left to them is the GPU's
# memory the engine does not take: 96 in flight killed an H200 replica at 0.9 (14 GiB left, 2026-12-03) and an H100
# replica at 0.8 (15.9 GiB left: its API servers ran out at 32 frames after a 96-deep job, 2026-12-07), and ran
# on an H200 at 0.8 (28.1 GiB left; the GPU test of 2026-12-04: 392 of 392, 4.06 clips/s steady)
DEEP_WINDOW, SAFE_MEMORY_SHARE = 48, 0.8
DEEP_WINDOW_MIN_FREE_MIB = 28 * 1024  # the least left to the API servers that a deeper window was measured safe with


def refuse_deep_window_at_high_memory(settings: Settings, memory_mib: dict[int, int | None] | None = None) -> None:
    """Stop before anything starts where the replicas would keep more requests in flight than was measured safe
    with the GPU memory left to their API servers: the engine's share of each GPU (`memory_mib`: nvidia-smi's
    total per GPU, where known) must leave DEEP_WINDOW_MIN_FREE_MIB; where the GPU's memory is not known, the
    share must be at most SAFE_MEMORY_SHARE."""
    if settings.per_replica_inflight <= DEEP_WINDOW:
        return
    share = settings.gpu_memory_utilization
    known = {i: m for i, m in (memory_mib or {}).items() if m}
    short = {i: m for i, m in known.items() if (1 - share) * m < DEEP_WINDOW_MIN_FREE_MIB}
    if short:
        i, m = min(short.items(), key=lambda kv: kv[1])
        most = max(0.0, 1 - DEEP_WINDOW_MIN_FREE_MIB / m)
        raise SystemExit(
            f"launcher: {settings.per_replica_inflight} requests in flight per replica leave each replica's API "
            f"servers {(1 - share) * m / 1024:.1f} GiB of GPU {i}'s {m / 1024:.0f} GiB (the engine takes "
            f"{share:g}): deeper windows than {DEEP_WINDOW} ran replicas out of GPU memory with 14-16 GiB left "
            f"(an H200 at 0.9, an H100 at 0.8) and were measured safe with 28 GiB (docs/GPU.md). Use "
            f"--gpu-memory-utilization {int(most * 100) / 100:g} or less, or {env_name('per_replica_inflight')}="
            f"{DEEP_WINDOW} or less. Nothing was started."
        )
    if not known and share > SAFE_MEMORY_SHARE:
        raise SystemExit(
            f"launcher: {settings.per_replica_inflight} requests in flight per replica with the engine taking "
            f"{share:g} of each GPU's memory: at 0.9, 96 in flight ran an H200 replica's API "
            f"servers out of GPU memory and killed it (docs/GPU.md). Use --gpu-memory-utilization "
            f"{SAFE_MEMORY_SHARE:g} or less, or {env_name('per_replica_inflight')}={DEEP_WINDOW} or less. "
            "Nothing was started."
        )


def plan(settings: Settings, opts: LaunchOptions) -> dict:
    """Everything `up` would start, in order: [{name, cmd, env, log, url, health}] (a replica also with its CPU
    budget: `budget`, and `cpus` where it is pinned), plus the fleet URLs."""
    settings = clip_root.settings_for_path(settings)  # replicas may read only the library's recorded clip root
    logs = settings.data_dir / "logs"
    if settings.role == "head":
        return head_plan(settings, opts)
    if settings.role == "node":  # replicas fetch clips over signed URLs only: file:// reaches an empty folder
        settings = settings.replace(clip_root=no_local_media(settings))
    fleet = launch_mode(settings.fleet_mode)
    steps: list[dict] = []
    media_args = remote_media_args(settings)
    mps = None
    if fleet == "gpu":
        gpus = choose_gpus(settings.gpus)
        if not gpus:
            raise SystemExit("launcher: no GPU found (nvidia-smi -L); pass --gpus 0,1,... or use --fleet-mode sim")
        models = gpu_models.query(gpus)  # what each replica runs on, for whoever prices work on it
        refuse_deep_window_at_high_memory(settings, {i: g.get("memory_mib") for i, g in models.items()})
        version = parse_version(opts.vllm_version or installed_vllm_version())
        extra = media_args + [t for a in opts.vllm_args for t in shlex.split(a)]
        env_common: dict[str, str] = {}
        if not opts.no_mps:
            mps = {"cmd": ["nvidia-cuda-mps-control", "-d"], "env": mps_env(settings)}
            env_common.update(mps_env(settings))
        replica_urls = []
        replica_gpus = []
        for i, budget in zip(gpus, replica_budgets(settings, len(gpus))):
            port = settings.fleet_port + i
            url = f"http://{advertised_host(settings.replica_host)}:{port}"
            replica_urls.append(url)
            replica_gpus.append({"url": url, "index": i, **models.get(i, {"name": None, "memory_mib": None})})
            steps.append(
                {
                    "name": f"replica-{i}",
                    "cmd": vllm_command(settings, port, version=version, extra=extra, host=settings.replica_host),
                    "env": {"CUDA_VISIBLE_DEVICES": str(i), **budget.env(), **env_common},
                    "secret_env": {fleet_key.ENV: str(fleet_key.path(settings))},
                    "log": str(logs / f"replica-{i}.log"),
                    "url": url,
                    "health": f"http://{local_host(settings.replica_host)}:{port}/health",
                    "budget": budget.describe(),
                    "cpus": budget.cpus,
                }
            )
        timeout = opts.startup_timeout or 1800
    else:
        n = opts.replicas
        replica_urls = [f"http://{advertised_host(settings.replica_host)}:{settings.fleet_port + i}" for i in range(n)]
        steps.append(
            {
                "name": "simfleet",
                "cmd": simfleet_command(
                    settings,
                    n,
                    remote_media_args(settings, sim=True) + [t for a in opts.sim_args for t in shlex.split(a)],
                ),
                "env": {},
                "secret_env": {fleet_key.ENV: str(fleet_key.path(settings))},
                "log": str(logs / "simfleet.log"),
                "url": ",".join(replica_urls),
                "health": [
                    f"http://{local_host(settings.replica_host)}:{settings.fleet_port + i}/health" for i in range(n)
                ],
            }
        )
        timeout = opts.startup_timeout or 60
    router_url = None
    router_cmd = entry_command("vllm-router", "vllm_router.launch_router")
    # the router runs when its script is on PATH or its module is importable (an offline bundle on PYTHONPATH)
    if (
        not opts.no_router
        and settings.role != "node"
        and (router_cmd != ["vllm-router"] or shutil.which("vllm-router") or opts.dry_run)
    ):
        router_url = f"http://127.0.0.1:{settings.router_port}"
        steps += router_steps(settings, replica_urls, health_interval=10 if fleet == "gpu" else 1, timeout=timeout)
    return {
        "fleet": fleet,
        # what the replicas compute in, for whoever prices work on them (the job form, serving.launch.record)
        "precision": precision_of_args(extra) if fleet == "gpu" else None,
        # and the GPU each replica runs on (nvidia-smi's name and memory): a rate is priced on its own model
        "gpus": replica_gpus if fleet == "gpu" else None,
        "mps": mps,
        "steps": steps,
        "replica_urls": replica_urls,
        "router_url": router_url,
        "router_metrics_url": router_metrics_url(settings) if router_url else None,
        "timeout": timeout,
    }


def head_plan(settings: Settings, opts: LaunchOptions) -> dict:
    """The head: no replicas here, vllm-router over the GPU nodes' replicas (WORKER_URLS)."""
    workers = list(settings.worker_urls)
    if not workers:
        raise SystemExit(
            "launcher: --role head needs --worker-urls http://node1:8000,http://node1:8001,... (what "
            "`./launch.sh --role node` printed on each GPU node)"
        )
    try:
        deployment.media_base(settings)  # the runner needs it: fail here, not in a restart loop
    except ValueError as e:
        raise SystemExit(f"launcher: {e}") from None
    timeout = opts.startup_timeout or 1800
    return {
        "fleet": "remote",
        "precision": None,  # each node's launcher knows its replicas' flags, the head does not
        "gpus": None,  # nor their GPUs
        "mps": None,
        "steps": router_steps(settings, workers, health_interval=10, timeout=timeout),
        "replica_urls": workers,
        "router_url": f"http://127.0.0.1:{settings.router_port}",
        "router_metrics_url": router_metrics_url(settings),
        "timeout": timeout,
    }


def router_metrics_url(settings: Settings) -> str:
    """Where the router the launcher starts serves its Prometheus metrics (vllm-router's `--prometheus-port`, on
    loopback): the Fleet tab reads the requests it refused there."""
    return f"http://127.0.0.1:{settings.router_prometheus_port}"


def router_steps(settings: Settings, workers: Sequence[str], *, health_interval: int, timeout: float) -> list[dict]:
    """vllm-router over `workers` on a private loopback address (a random 127.x.y.z and port: vllm-router lets
    anyone add workers), then serving.router_gate on ROUTER_PORT in front of it (the only way in: the fleet key,
    no cross-site request, no worker changes)."""
    logs = settings.data_dir / "logs"
    host = private_loopback()
    private = f"http://{host}:{procs.free_port(host)}"
    public = f"http://127.0.0.1:{settings.router_port}"
    router = router_command(
        settings,
        workers,
        host=host,
        port=int(private.rsplit(":", 1)[1]),
        prometheus_port=settings.router_prometheus_port,
        health_interval=health_interval,
        startup_timeout=int(timeout),
    )
    return [
        {
            "name": "router",
            "cmd": router,
            "env": {},
            "log": str(logs / "router.log"),
            "url": private,
            "health": private + "/liveness",
        },
        {
            "name": "router-gate",
            "cmd": gate_command(settings, private, workers),
            "env": {},
            "log": str(logs / "router-gate.log"),
            "url": public,
            "health": public + "/liveness",
        },
    ]
