"""CPU an idle web app uses with no browser open (issue 10: it used ~10 % of a core).

    python benchmarks/bench_idle.py --seconds 60

Starts `python -m webapp` (login on, simulated fleet setting, a fresh data dir) on a free loopback port in its
own process group, waits until it answers, then samples its CPU time (process and children, psutil) over
`--seconds` with nothing connected. Prints the share of one core, and the wake-ups per second (voluntary context
switches of all its threads: a thread that sleeps on a timer or a poll counts one each time it wakes).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.child_env import child_env  # noqa: E402
from serving.procs import free_port  # noqa: E402


def cpu_seconds(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def wakeups(proc: psutil.Process) -> int:
    """Voluntary context switches of the process's threads and its children's, so far."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.num_ctx_switches().voluntary
        except psutil.NoSuchProcess:
            pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to measure (default 60)")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds to wait after start-up before measuring")
    args = ap.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        env = child_env(REPO, GRADIO_ANALYTICS_ENABLED="False")
        proc = subprocess.Popen(
            [sys.executable, "-m", "webapp", "--data-dir", d, "--port", str(port), "--fleet-mode", "sim"],
            cwd=REPO,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except httpx.HTTPError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        print("the app did not start", file=sys.stderr)
                        return 1
                    time.sleep(0.2)
            time.sleep(args.settle)
            p = psutil.Process(proc.pid)
            c0, w0, t0 = cpu_seconds(p), wakeups(p), time.monotonic()
            time.sleep(args.seconds)
            c1, w1, t1 = cpu_seconds(p), wakeups(p), time.monotonic()
            share = 100.0 * (c1 - c0) / (t1 - t0)
            print(
                f"idle app, no browser: {c1 - c0:.3f} CPU s over {t1 - t0:.1f} s = {share:.2f} % of one core; "
                f"{(w1 - w0) / (t1 - t0):.1f} wake-ups/s"
            )
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
