"""Replicas started one by one in their own process groups, vllm-router over some of them, the MPS daemon."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from benchmarks.node.context import CHILDREN, ROOT, Ctx, say
from serving import procs
from serving.launch import addresses as fleet_addresses, commands as fleet_commands


# ---- MPS ---------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def mps_daemon(ctx: Ctx, settings):
    """The CUDA MPS control daemon for the replicas of one stage (as the launcher starts it)."""
    if ctx.sim or ctx.a.no_mps:
        yield None
        return
    env = fleet_commands.mps_env(settings)
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


# ---- a fleet of separately started replicas (scaling, kill) ------------------------------------------------
class Fleet:
    """One replica per GPU (or simulated replica), each in its own process group, started in parallel."""

    def __init__(
        self,
        ctx: Ctx,
        settings,
        decoder: str,
        slots: list[int],
        tag: str,
        *,
        benchmark: bool,
        budgets: list | None = None,
        extra: list[str] = (),
        env: dict | None = None,
    ):
        """`budgets`: each replica's CPU budget (serving.launch.commands.ReplicaBudget, None for vLLM's own
        pools); default: what the launcher gives len(slots) replicas on this node. `extra`: more replica flags
        (a later flag of the same name wins over the recipe's). `env`: more variables in every replica's
        environment."""
        self.ctx, self.settings, self.decoder, self.slots, self.tag = ctx, settings, decoder, slots, tag
        self.benchmark = benchmark
        self.extra = list(extra)
        self.env = dict(env or {})
        self.budgets = budgets if budgets is not None else fleet_commands.replica_budgets(settings, len(slots))
        self.children: list[procs.Child] = []
        self.ready_s: dict[str, float] = {}

    def urls(self, n: int | None = None) -> list[str]:
        return [c.url for c in self.children[:n]]

    def start(self) -> float:
        """Start every replica and wait until all are healthy; seconds it took."""
        t0 = time.time()
        for slot in self.slots:  # before any starts: a replica another run left there would answer for ours
            port_not_taken(self.settings.fleet_port + slot, f"replica-{slot}")
        for slot, budget in zip(self.slots, self.budgets):
            cmd, env = self.ctx.replica(
                self.settings, slot, self.decoder, benchmark=self.benchmark, budget=budget, extra=self.extra
            )
            url = f"http://127.0.0.1:{self.settings.fleet_port + slot}"
            log = self.ctx.logs / f"{self.tag}-replica-{slot}.log"
            c = procs.start(
                f"replica-{slot}",
                cmd,
                log=log,
                env={**self.ctx.env, **env, **self.env},
                url=url,
                health=url + "/health",
                cwd=ROOT,
                cpus=budget.cpus if budget else None,
            )
            self.children.append(c)
            CHILDREN.append(c)
        if self.slots:
            b = self.budgets[0]
            say(
                f"{self.tag}: started {len(self.slots)} replica(s) ({self.decoder}; CPU: "
                f"{b.describe() if b else 'no thread variables (vLLM sizes its own pools)'}); first command: "
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
            if c in CHILDREN:
                CHILDREN.remove(c)
        if not self.ctx.sim:
            time.sleep(3)  # let the GPU memory go before the next fleet starts


def port_not_taken(port: int, what: str) -> None:
    """Refuse to start `what` on a port something already listens on. A replica left running by an earlier call
    (cut by its time limit) answers /health at once: the stage would take it for its own, send it every clip, and
    report a row of failed clips as a measurement (seen on 2026-12-03: docs/gpu-runs/2026-12-03-h200)."""
    if fleet_addresses.port_free("127.0.0.1", port):
        return
    import psutil  # node_run checks its packages before any stage

    holders = []
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        conns = []
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            with contextlib.suppress(psutil.Error, OSError):
                name = psutil.Process(conn.pid).name()
                holders.append(f"pid {conn.pid} {name}, process group {os.getpgid(conn.pid)}")
    held = "; ".join(holders) or "a process this user cannot see"
    raise procs.StartupError(
        f"port {port} for {what} is already taken ({held}): a process left by an earlier run answers there. "
        "Stop it by its process group (kill -- -PGID), then run the stage again"
    )


@contextlib.contextmanager
def router(ctx: Ctx, settings, worker_urls: list[str], tag: str):
    """vllm-router (round robin, as the launcher starts it) over `worker_urls`; yields (fleet URLs, note).
    Without vllm-router on the simulated fleet the runner talks to the replicas itself (and says so)."""
    cmd = fleet_commands.router_command(
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
    port_not_taken(settings.router_port, "the router")
    c = procs.start(
        "router", cmd, log=ctx.logs / f"{tag}-router.log", env=ctx.env, url=url, health=url + "/readiness", cwd=ROOT
    )
    CHILDREN.append(c)
    try:
        procs.wait_healthy([c], timeout=120)
        yield [url], "vllm-router, round robin"
    finally:
        procs.stop_group(c.pgid, c.pid, grace=10, popen=c.popen)
        CHILDREN.remove(c)
