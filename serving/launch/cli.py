"""Bring the fleet up and down: CUDA MPS, one vLLM replica per GPU (or the simulated fleet), vllm-router in front.

examples:
    python -m serving.launcher up --fleet-mode gpu --gpus 0,1,2,3,4,5,6,7 --clip-root /data/clips
    python -m serving.launcher up --fleet-mode gpu --gpus 0,1 --dry-run --vllm-version 0.33.0 \\
        --vllm-arg=--load-format=dummy
    python -m serving.launcher up --fleet-mode sim --replicas 4 --fleet-port 9000 --router-port 31000 \\
        --router-prometheus-port 29100      # the replicas' first port, the router's, the router's metrics
    python -m serving.launcher status
    python -m serving.launcher url            # what the runner and the app should talk to
    python -m serving.launcher down

The command lines come from serving.launch.commands (NVIDIA's recipe, docs/GPU.md), the addresses and ports from
serving.launch.addresses. Every process gets its own process group and log file under DATA_DIR/logs; its pid/pgid
go to DATA_DIR/run/fleet.json (serving.launch.record) as soon as it starts, so `down` and `status` work from another
shell and a failed start can be cleaned up. Processes are stopped by process group, never by name.

Only the launcher changes a fleet: every replica it starts requires the fleet key (serving.fleet_key, given as
VLLM_API_KEY), and vllm-router listens on a private loopback address behind serving.router_gate, which takes no
worker changes and no cross-site request. A head's first `up` records the deployment (data.deployment), so that
every runner on its library sends signed URLs.
"""

# The command line; what it runs lives beside it: serving.launch.options (the flags of one run), serving.launch.plan
# (what `up` starts), serving.launch.up (starting it, or the dry run) and serving.launch.recorded (`down`, `status`).

from __future__ import annotations

import argparse
import sys

from data.errors import DataError
from data.settings import add_arguments, from_args
from serving.launch.addresses import owns
from serving.launch.options import LaunchOptions
from serving.launch.record import fleet_url
from serving.launch.recorded import down, status
from serving.launch.up import up

SETTING_NAMES = (
    "data_dir",
    "clip_root",
    "fleet_mode",
    "fleet_port",
    "router_port",
    "gpus",
    "model",
    "served_model_name",
    "frames",
    # the CPU budget of each replica (thread pools, pinning)
    "replica_threads",
    "pin_replicas",
    "frame_preprocess",
    "gpu_memory_utilization",
    # beyond one node (issue 12): roles, where replicas bind, the head's worker list, remote media
    "router_prometheus_port",
    "role",
    "replica_host",
    "worker_urls",
    "media_url_base",
    "allowed_media_domains",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m serving.launcher", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "command",
        choices=("up", "down", "status", "url", "owns"),
        help="what to do (owns: exit 0 if process group --pgid listens on --listen-port; launch.sh checks the "
        "app it started with it)",
    )
    add_arguments(p, SETTING_NAMES)
    LaunchOptions.add_arguments(p)
    p.add_argument("--pgid", type=int, default=None, help="owns: the process group to check")
    p.add_argument("--listen-port", type=int, default=None, help="owns: the TCP port it should listen on")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = from_args(args)
    opts = LaunchOptions.from_args(args)
    if args.command == "up":
        try:
            return up(settings, opts)
        except DataError as e:  # the library's record says otherwise (data.library.deployment, data.library.clip_root)
            print(f"launcher: {e}", file=sys.stderr)
            return 2
    if args.command == "down":
        return down(settings, grace=opts.grace)
    if args.command == "status":
        return status(settings)
    if args.command == "owns":
        return owns(args.pgid, args.listen_port)
    print(fleet_url(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
