"""What an idle runner costs and says, on the stack `./launch.sh` starts (issue 45: it used 2.3-3.9 % of a core and
logged ~53 lines a minute with no job to do).

    python benchmarks/bench_idle_runner.py --seconds 120
    python benchmarks/bench_idle_runner.py --seconds 120 --code /tmp/before    # another checkout, for a before

Runs `./launch.sh --detach` of the code under test (this checkout, or `--code`) on a fresh data dir and free ports
without a GPU: a small demo library, the simulated fleet (`--replicas`, default 4) behind vllm-router and the router
gate, the runner under its supervisor, the app. Waits until the first launch's own job is done and `--settle`
seconds more, then, over `--seconds` with nothing to do: the CPU time of the runner process and its children (its
answer checkers) as a share of one core, their wake-ups per second (voluntary context switches), and the lines
the runner's log (`logs/runner.log`) and the router gate's log gained, per minute. Then `./launch.sh stop`.
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.child_env import child_env  # noqa: E402
from serving.procs import free_port  # noqa: E402


def usage(proc: psutil.Process) -> tuple[float, int]:
    """(CPU seconds, voluntary context switches) of `proc` and its children so far."""
    cpu, switches = 0.0, 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            switches += p.num_ctx_switches().voluntary
        except psutil.NoSuchProcess:
            pass
    return cpu, switches


def lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def launch(code: Path, data: Path, *args: str, timeout: float = 600) -> None:
    env = child_env(code, PYTHON=sys.executable)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"  # vllm-router beside python
    r = subprocess.run(
        [str(code / "launch.sh"), *args, "--data-dir", str(data)],
        cwd=code,
        env={k: v for k, v in env.items() if not k.startswith("CW_")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if r.returncode != 0:
        raise SystemExit(f"launch.sh {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def runner_pid(db: Path, deadline: float) -> int:
    """The runner's pid once the first launch's job is done (from its heartbeat and the jobs table)."""
    while time.monotonic() < deadline:
        try:
            c = sqlite3.connect(db, timeout=10)
            try:
                states = [r[0] for r in c.execute("SELECT state FROM jobs")]
                pid = c.execute("SELECT pid FROM heartbeats WHERE name = 'runner'").fetchone()
            finally:
                c.close()
            if states and all(s in ("done", "failed") for s in states) and pid:
                return int(pid[0])
        except sqlite3.Error:
            pass
        time.sleep(1)
    raise SystemExit("the first launch's job did not end in time")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="how long to measure (default 120)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds to wait after the first job before measuring")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--code", default=str(REPO), help="the checkout to launch (default: this one)")
    args = ap.parse_args()
    code = Path(args.code).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-idle-runner-") as d:
        data = Path(d) / "var"
        port = free_port()
        launch(
            code,
            data,
            "--detach",
            "--no-install",
            "--port",
            str(port),
            "--fleet-port",
            str(free_port()),
            "--router-port",
            str(free_port()),
            "--router-prometheus-port",
            str(free_port()),
            "--replicas",
            str(args.replicas),
            "--demo-count",
            "4",
        )
        try:
            pid = runner_pid(data / "workbench.db", time.monotonic() + 600)
            time.sleep(args.settle)
            proc = psutil.Process(pid)
            logs = data / "logs"
            c0, s0, l0, g0, t0 = *usage(proc), lines(logs / "runner.log"), lines(logs / "router-gate.log"), time.time()
            time.sleep(args.seconds)
            c1, s1, l1, g1, t1 = *usage(proc), lines(logs / "runner.log"), lines(logs / "router-gate.log"), time.time()
            if not proc.is_running():
                raise SystemExit("the runner was restarted during the measurement: the figure would be wrong")
            span = t1 - t0
            print(
                f"idle runner ({code.name}, {args.replicas} simulated replicas behind the router): "
                f"{c1 - c0:.3f} CPU s over {span:.0f} s = {100 * (c1 - c0) / span:.2f} % of one core; "
                f"{(s1 - s0) / span:.1f} wake-ups/s; runner log {60 * (l1 - l0) / span:.1f} lines/min, "
                f"router gate log {60 * (g1 - g0) / span:.1f} lines/min"
            )
        finally:
            launch(code, data, "stop", timeout=180)
    return 0


if __name__ == "__main__":
    sys.exit(main())
