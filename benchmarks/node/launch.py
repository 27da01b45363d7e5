"""Stage `launch`: ./launch.sh --detach timed, with every component's first healthy answer; then stopped."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx

from benchmarks.node.clips import fresh_clips
from benchmarks.node.context import ANSI, ROOT, Ctx, interrupt_group, say
from serving import fleet_key, procs


def launch_command(ctx: Ctx, *where: str) -> list[str]:
    """./launch.sh for this run's fleet, detached; `where`: the stage's --data-dir, --clip-root and --port."""
    cmd = ["./launch.sh", *where, "--fleet-mode", ctx.fleet, "--detach", "--no-install"]
    cmd += ["--gpus", ",".join(map(str, ctx.gpus))] if not ctx.sim else ["--replicas", str(ctx.size)]
    for token in [] if ctx.sim else ctx.vllm_extra(benchmark=False):
        cmd += ["--vllm-arg", shlex.quote(token)]  # the launcher shlex-splits each: keep JSON quotes
    return cmd


def stage_launch(ctx: Ctx) -> dict:
    """./launch.sh --detach, timed, with every component's first healthy answer; then ./launch.sh stop."""
    data_dir = ctx.work / "launch"
    clip_root = data_dir / "clips"
    n = fresh_clips(ctx, data_dir, "clips", ctx.a.launch_clips)
    app_port = ctx.a.app_port
    env = {
        **ctx.env,
        "CW_FLEET_PORT": str(ctx.a.base_port),
        "CW_ROUTER_PORT": str(ctx.a.router_port),
        "CW_MODEL": ctx.a.model,
    }
    cmd = launch_command(ctx, "--data-dir", str(data_dir), "--clip-root", str(clip_root), "--port", str(app_port))
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
                    try:  # the router's address is its gate's, which takes the fleet key (made by the launch)
                        if http.get(url, headers=fleet_key.headers(s)).status_code == 200:
                            ready[name] = round(time.time() - t0, 1)
                    except httpx.HTTPError:
                        pass
                stop.wait(0.25)

    def launch_stop(log_file) -> int:  # ./launch.sh stop of this data dir, its output in the stage's log
        cmd = ["./launch.sh", "stop", "--data-dir", str(data_dir)]
        return subprocess.run(cmd, env=env, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, timeout=300).returncode

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
            launch_stop(f)
            raise
        total = round(time.time() - t0, 1)
        stop.wait(2.0) if len(ready) < len(probes) else None
        stop.set()
        poller.join(timeout=5)
        runner_s = runner_heartbeat(data_dir, t0, deadline=time.time() + 15) if rc == 0 else None
        say(f"launch: exit {rc} after {total} s; stopping it")
        stop_rc = launch_stop(f)
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
    from data import db as dbmod, heartbeats

    while time.time() < deadline:
        try:
            db = dbmod.connect(data_dir / "workbench.db")
            try:
                beats = heartbeats.heartbeats(db, "runner")
            finally:
                db.close()
            if beats:
                return round(min(b["at"] for b in beats) - t0, 1)
        except Exception:  # the database may be busy or not there yet
            pass
        time.sleep(0.5)
    return None


def _between(a: float | None, b: float | None) -> float | None:
    return round(b - a, 1) if a is not None and b is not None else None
