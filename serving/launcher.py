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

The command lines come from serving.fleet_commands (NVIDIA's recipe, docs/GPU.md), the addresses and ports from
serving.fleet_addresses. Every process gets its own process group and log file under DATA_DIR/logs; its pid/pgid
go to DATA_DIR/run/fleet.json (serving.fleet_record) as soon as it starts, so `down` and `status` work from another
shell and a failed start can be cleaned up. Processes are stopped by process group, never by name.

Only the launcher changes a fleet: every replica it starts requires the fleet key (serving.fleet_key, given as
VLLM_API_KEY), and vllm-router listens on a private loopback address behind serving.router_gate, which takes no
worker changes and no cross-site request. A head's first `up` records the deployment (data.deployment), so that
every runner on its library sends signed URLs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import httpx

from data import db as dbmod
from data.db import secure_dir
from data.errors import DataError
from data.library import clip_root, deployment
from data.settings import Settings, add_arguments, from_args
from serving import fleet_key, procs
from serving.fleet_addresses import (
    advertised_host,
    local_host,
    no_local_media,
    owns,
    private_loopback,
    remote_media_args,
    resolve_ports,
    verify_owners,
)
from serving.fleet_commands import (
    choose_gpus,
    cpu_list,
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
from serving.fleet_reader import FleetReader
from serving.fleet_record import fleet_url, load_record, record_path, save_record

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
    # beyond one node (issue 12): roles, where replicas bind, the head's worker list, remote media
    "router_prometheus_port",
    "role",
    "replica_host",
    "worker_urls",
    "media_url_base",
    "allowed_media_domains",
)


def _option(default, help: str, **argparse_kw):
    return dataclasses.field(default=default, metadata={"help": help, **argparse_kw})


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """How one `up` / `down` runs, beyond the settings of the installation: each field is a flag of the same
    name (`vllm_args` is `--vllm-arg`, repeatable), declared here once with its help."""

    dry_run: bool = _option(False, "print every command (with its environment); start nothing")
    vllm_version: str | None = _option(None, "vLLM version to build flags for (default: the installed one)")
    vllm_args: tuple[str, ...] = _option(
        (),
        "extra argument for every vLLM replica, e.g. --vllm-arg=--load-format=dummy (repeatable)",
        flag="--vllm-arg",
        metavar="ARG",
    )
    sim_args: tuple[str, ...] = _option(
        (),
        "extra argument for the simulated fleet, e.g. --sim-arg='--speed 0.1' (repeatable)",
        flag="--sim-arg",
        metavar="ARG",
    )
    replicas: int = _option(4, "replicas of the simulated fleet (default 4)", type=int)
    no_router: bool = _option(False, "do not start vllm-router; the runner talks to replicas")
    no_mps: bool = _option(False, "do not start the CUDA MPS daemon")
    startup_timeout: float | None = _option(
        None, "seconds to wait for health (default 1800 for vLLM, 60 for the simulated fleet)", type=float
    )
    grace: float = _option(20.0, "seconds between SIGTERM and SIGKILL on down", type=float)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field, with the field's help and default (a bool is a switch, a tuple repeatable)."""
        for f in dataclasses.fields(cls):
            meta = dict(f.metadata)
            flag = meta.pop("flag", "--" + f.name.replace("_", "-"))
            if isinstance(f.default, bool):
                parser.add_argument(flag, dest=f.name, action="store_true", **meta)
            elif isinstance(f.default, tuple):
                parser.add_argument(flag, dest=f.name, action="append", default=[], **meta)
            else:
                parser.add_argument(flag, dest=f.name, default=f.default, **meta)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "LaunchOptions":
        """The options `add_arguments` parsed."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


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
        version = parse_version(opts.vllm_version or installed_vllm_version())
        extra = media_args + [t for a in opts.vllm_args for t in shlex.split(a)]
        env_common: dict[str, str] = {}
        if not opts.no_mps:
            mps = {"cmd": ["nvidia-cuda-mps-control", "-d"], "env": mps_env(settings)}
            env_common.update(mps_env(settings))
        replica_urls = []
        for i, budget in zip(gpus, replica_budgets(settings, len(gpus))):
            port = settings.fleet_port + i
            url = f"http://{advertised_host(settings.replica_host)}:{port}"
            replica_urls.append(url)
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
        "mps": mps,
        "steps": steps,
        "replica_urls": replica_urls,
        "router_url": router_url,
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
        "mps": None,
        "steps": router_steps(settings, workers, health_interval=10, timeout=timeout),
        "replica_urls": workers,
        "router_url": f"http://127.0.0.1:{settings.router_port}",
        "timeout": timeout,
    }


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


# ---- commands -------------------------------------------------------------------------------------------------
def shell_line(
    cmd: Sequence[str],
    env: dict[str, str],
    log: str | None = None,
    secret_env: dict[str, str] | None = None,
    cpus: Sequence[int] | None = None,
) -> str:
    """One line a shell can run: `ENV=... [setsid] [taskset -c CPUS] cmd ... [> log 2>&1 &]`. A secret is never
    printed: it is read from its file when the line runs (`KEY="$(cat FILE)"`). The launcher pins with
    os.sched_setaffinity; taskset is the shell's way to the same."""
    secrets = [f'{k}="$(cat {shlex.quote(v)})"' for k, v in (secret_env or {}).items()]
    envs = " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + secrets)
    pin = f"taskset -c {cpu_list(cpus)} " if cpus else ""
    line = (envs + " " if envs else "") + ("setsid " if log else "") + pin + shlex.join(cmd)
    return line + (f" > {shlex.quote(log)} 2>&1 &" if log else "")


def up(settings: Settings, opts: LaunchOptions) -> int:
    """Start the fleet `settings` and `opts` describe, record each process, wait until all are healthy.
    0 when up; 1 (everything started stopped again) when a process failed to start or to become healthy."""
    settings = settings.replace(fleet_mode=launch_mode(settings.fleet_mode))  # 'auto' resolved once, here
    if opts.dry_run:
        # the commands as configured (they may be meant for another machine), plus what `up` would change here
        notes: list[str] = []
        resolve_ports(settings, opts.replicas, dry_run=True, say=notes.append)
    else:
        settings = resolve_ports(settings, opts.replicas)
    p = plan(settings, opts)
    if opts.dry_run:
        if p["mps"]:
            m = p["mps"]
            print("+ mkdir -p " + " ".join(shlex.quote(v) for v in m["env"].values()))
            print("+ " + shell_line(m["cmd"], m["env"]))
        for s in p["steps"]:
            if s.get("budget"):
                print(f"# {s['name']}: {s['budget']}")
            print("+ " + shell_line(s["cmd"], s["env"], s["log"], s.get("secret_env"), s.get("cpus")))
        print(f"# fleet: {fleet_url(settings, p)}")
        if settings.role == "node":
            print("# worker URLs for the head (--worker-urls): " + ",".join(p["replica_urls"]))
            if fleet_key.load(settings) is None:
                notes.append(f"this node has no fleet key yet ({fleet_key.path(settings)}): `up` would refuse")
        for msg in notes:  # last, so that the command lines keep their places
            print(
                "# note: "
                + msg.replace("[launcher] ", "").replace(": using ", ": `up` here now would pick free ones, e.g. ")
            )
        return 0
    old = load_record(settings)
    if old and any(procs.pid_alive(c["pid"]) for c in old.get("procs", [])):
        print("launcher: a fleet is already running (python -m serving.launcher status / down)", file=sys.stderr)
        return 1
    try:
        # a node's replicas require the head's key; elsewhere the key is this data dir's own, made once
        key = fleet_key.require_for_node(settings) if settings.role == "node" else fleet_key.load(settings, create=True)
        if settings.role == "head":
            record_head(settings)
    except (fleet_key.FleetKeyError, DataError, ValueError) as e:
        print(f"launcher: {e}", file=sys.stderr)
        return 1
    reader = FleetReader(settings)  # every health wait with the key the replicas and the router gate require
    rec = {
        "fleet": p["fleet"],
        "mps": None,
        "procs": [],
        "replica_urls": p["replica_urls"],
        "router_url": p["router_url"],
        "started_at": time.time(),
    }
    secure_dir(settings.data_dir)  # S9: its logs and run records, before anything is written there
    save_record(settings, rec)
    children: list[procs.Child] = []
    try:
        if p["mps"]:
            for d in p["mps"]["env"].values():
                Path(d).mkdir(parents=True, exist_ok=True)
            r = subprocess.run(
                p["mps"]["cmd"], env={**os.environ, **p["mps"]["env"]}, capture_output=True, text=True, timeout=30
            )
            if r.returncode != 0:
                raise procs.StartupError(f"nvidia-cuda-mps-control -d failed: {r.stderr.strip() or r.stdout.strip()}")
            rec["mps"] = p["mps"]["env"]
            save_record(settings, rec)
            print(f"[launcher] CUDA MPS daemon started (pipes in {p['mps']['env']['CUDA_MPS_PIPE_DIRECTORY']})")
        for s in p["steps"]:
            if s["name"] == "router":  # the router needs its workers up first
                procs.wait_healthy(children, timeout=p["timeout"], reader=reader)
            health = s["health"]
            c = procs.start(
                s["name"],
                s["cmd"],
                log=s["log"],
                env={**s["env"], **{k: key for k in s.get("secret_env", {})}},
                url=s["url"],
                health=health if isinstance(health, str) else None,
                cpus=s.get("cpus"),
            )
            children.append(c)
            rec["procs"].append(c.record())
            save_record(settings, rec)
            print(f"[launcher] started {c.name} (pgid {c.pgid}, log {c.log})")
            if isinstance(health, list):  # one process serving several replicas
                for i, h in enumerate(health):
                    children.append(
                        procs.Child(
                            name=f"{c.name}[{i}]", pid=c.pid, pgid=c.pgid, cmd=c.cmd, log=c.log, health=h, popen=c.popen
                        )
                    )
        procs.wait_healthy(children, timeout=p["timeout"], reader=reader)
        verify_owners([c for c in children if "[" not in c.name])
    except (procs.StartupError, OSError, subprocess.SubprocessError) as e:
        print(f"launcher: {e}", file=sys.stderr)
        print("launcher: stopping what was started", file=sys.stderr)
        down(settings, grace=opts.grace, quiet=True)
        return 1
    print(f"[launcher] fleet up: {fleet_url(settings, rec)}")
    if settings.role == "node":
        print("[launcher] worker URLs for the head (--worker-urls): " + ",".join(p["replica_urls"]))
    return 0


def record_head(settings: Settings) -> None:
    """Record this head in its library (data.deployment), before anything starts: from then on every runner on
    it sends signed URLs of the recorded media base. Raises DeploymentMismatch (another head is recorded) or
    ValueError (an app the nodes cannot reach)."""
    db = dbmod.connect(settings.db)
    try:
        deployment.record_head(db, settings)
    finally:
        db.close()


def down(settings: Settings, *, grace: float = 20.0, quiet: bool = False) -> int:
    """Stop every process group the record of `settings`' data dir names (SIGTERM, SIGKILL after `grace`
    seconds) and the MPS daemon, then remove the record."""
    rec = load_record(settings)
    if not rec:
        if not quiet:
            print("[launcher] nothing recorded: no fleet to stop")
        return 0
    for c in reversed(rec.get("procs", [])):
        was = procs.stop_group(c["pgid"], c["pid"], grace=grace)
        if not quiet:
            print(f"[launcher] {'stopped' if was else 'already gone:'} {c['name']} (pgid {c['pgid']})")
    if rec.get("mps"):
        try:
            subprocess.run(
                ["nvidia-cuda-mps-control"],
                input="quit\n",
                text=True,
                env={**os.environ, **rec["mps"]},
                capture_output=True,
                timeout=30,
            )
            if not quiet:
                print("[launcher] CUDA MPS daemon told to quit")
        except (OSError, subprocess.SubprocessError) as e:
            print(f"launcher: could not stop the MPS daemon: {e}", file=sys.stderr)
    try:
        record_path(settings).unlink()
    except OSError:
        pass
    return 0


def status(settings: Settings) -> int:
    """Print each recorded process, whether it lives and what its health URL answers. 0: all healthy;
    1: something is down; 3: nothing recorded."""
    rec = load_record(settings)
    if not rec:
        print("[launcher] no fleet recorded (python -m serving.launcher up)")
        return 3
    bad = 0
    reader = FleetReader(settings)  # with the fleet key: the router gate answers nothing without it
    for c in rec.get("procs", []):
        alive = procs.pid_alive(c["pid"])
        urls = [u for u in (c.get("url") or "").split(",") if u]
        health = []
        for u in urls:
            path = "/liveness" if c["name"].startswith("router") else "/health"
            r = reader.get(u + path, max_bytes=procs.HEALTH_BYTES, timeout=2.0)
            health.append(f"{u} {r.status_code if isinstance(r, httpx.Response) else type(r).__name__}")
        ok = alive and all(h.endswith(" 200") for h in health)
        bad += not ok
        print(f"{c['name']:<12} {'up' if alive else 'DOWN':<5} pgid {c['pgid']:<8} {'; '.join(health)}")
    print(f"fleet: {fleet_url(settings, rec)} ({rec.get('fleet')}{', MPS' if rec.get('mps') else ''})")
    return 0 if bad == 0 else 1


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
