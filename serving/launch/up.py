"""`up`: start the fleet a plan (serving.launch.plan) describes, or print it as shell lines for a dry run. Each
process gets its own process group and log file; its pid/pgid go to the fleet record (serving.launch.record) as soon
as it starts, so that `down` and `status` (serving.launch.recorded) work from another shell and a failed start is
stopped again. A head's first `up` records the deployment (data.deployment) before anything starts."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from data import db as dbmod
from data.db import secure_dir
from data.errors import DataError
from data.library import deployment
from data.settings import Settings
from serving import fleet_key, log_sink, procs
from serving.fleet.reader import FleetReader
from serving.launch.addresses import resolve_ports, verify_owners
from serving.launch.commands import cpu_list, launch_mode
from serving.launch.options import LaunchOptions
from serving.launch.plan import plan
from serving.launch.record import fleet_url, load_record, save_record
from serving.launch.recorded import down


def shell_line(
    cmd: Sequence[str],
    env: dict[str, str],
    log: str | None = None,
    secret_env: dict[str, str] | None = None,
    cpus: Sequence[int] | None = None,
) -> str:
    """One line bash can run: `ENV=... [setsid] [taskset -c CPUS] cmd ... [> >(log sink) 2>&1 &]`. A secret is
    never printed: it is read from its file when the line runs (`KEY="$(cat FILE)"`). The launcher pins with
    os.sched_setaffinity; taskset is the shell's way to the same. The output goes to the log through
    serving.log_sink, as serving.procs.start sends it (rotated, lines cut, a free-space floor)."""
    secrets = [f'{k}="$(cat {shlex.quote(v)})"' for k, v in (secret_env or {}).items()]
    envs = " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + secrets)
    pin = f"taskset -c {cpu_list(cpus)} " if cpus else ""
    line = (envs + " " if envs else "") + ("setsid " if log else "") + pin + shlex.join(cmd)
    return line + (f" > >(python -m serving.log_sink --log {shlex.quote(log)}) 2>&1 &" if log else "")


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
        gpu_of = {g["url"]: g for g in p.get("gpus") or ()}
        for s in p["steps"]:
            if s.get("budget"):
                print(f"# {s['name']}: {s['budget']}")
            if s.get("url") in gpu_of:
                g = gpu_of[s["url"]]
                on = f"{g['name']}, {g['memory_mib']} MiB" if g["name"] else "model unknown: nvidia-smi did not say"
                print(f"# GPU {g['index']} under {s['name']}: {on}")
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
        "precision": p.get("precision"),
        "gpus": p.get("gpus"),
        "mps": None,
        "procs": [],
        "replica_urls": p["replica_urls"],
        "router_url": p["router_url"],
        "router_metrics_url": p.get("router_metrics_url"),
        "started_at": time.time(),
    }
    secure_dir(settings.data_dir)  # S9: its logs and run records, before anything is written there
    save_record(settings, rec)
    children: list[procs.Child] = []
    try:
        if p["mps"]:
            for d in p["mps"]["env"].values():
                Path(d).mkdir(parents=True, exist_ok=True)
            # the MPS daemon writes its own logs (a line per client): bounded at each start, not through a sink
            log_sink.rotate_full(p["mps"]["env"]["CUDA_MPS_LOG_DIRECTORY"], settings.log_cap)
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
