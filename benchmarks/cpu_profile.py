"""Where a node's CPU goes while the fleet captions: every process and thread, sampled, grouped by role.

Runs beside a GPU test or a node run (benchmarks/gpu_session.sh starts it) until SIGTERM/SIGINT, then writes
one JSON report:
- the phase: the samples while a process of --phase-role is alive (default: our runner or the caption CLI,
  so the captioning and not the fleet's start; with none, the samples with more than --busy-cores busy);
- `by_role`: CPU seconds per role over the phase (engine core, vLLM API servers, the router, our runner,
  ingest, the test itself, other), and the cores each kept busy;
- `threads`: per role, the threads (Linux `comm` and id: vLLM's renamed processes name every thread alike)
  that used the most CPU, and how many threads kept at least a tenth of a core busy;
- `pyspy`: with py-spy on the PATH (or under /tmp/site/bin), one `py-spy record` of --pyspy-seconds on each of
  the --pyspy-top busiest Python processes, taken once, --pyspy-after samples into the phase (raw collapsed
  stacks, with native frames unless --no-native, then a summary: the leaf frames and the functions most often
  anywhere on the stack).

    python benchmarks/cpu_profile.py --out OUT/cpu-profile.json [--interval 2] [--busy-cores 4]

No GPU needed: it reads /proc through psutil.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

ROLES = (
    # (role, a test on the process name and command line), first match wins; vLLM renames its processes
    # (VLLM::EngineCore, VLLM::APIServer: `comm` keeps the first 15 characters)
    ("engine core", lambda cmd, name: "EngineCor" in name or "EngineCore" in cmd),
    ("vllm api server", lambda cmd, name: "APIServer" in name or "APIServer" in cmd),
    ("vllm main", lambda cmd, name: "vllm" in cmd and ("serve" in cmd or "api_server" in cmd)),
    ("router", lambda cmd, name: "vllm_router" in cmd or "vllm-router" in cmd or "router" in name),
    ("vllm other", lambda cmd, name: "vllm" in cmd or name.startswith("VLLM")),
    ("runner / caption cli", lambda cmd, name: "serving.runner" in cmd or "serving.caption" in cmd),
    ("ingest", lambda cmd, name: "data.ingest" in cmd),
    ("clip generation", lambda cmd, name: "data.demo" in cmd or "ffmpeg" in name),
    ("test / benchmark", lambda cmd, name: "pytest" in cmd or "node_run" in cmd or "bench_" in cmd),
    ("mps", lambda cmd, name: "nvidia-cuda-mps" in name),
)


def role_of(cmd: str, name: str) -> str:
    return next((role for role, match in ROLES if match(cmd, name)), "other")


def _thread_names(pid: int) -> dict[int, str]:
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out[int(tid)] = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            except OSError:
                pass
    except OSError:
        pass
    return out


def sample() -> dict:
    """CPU seconds so far of every process and of its threads, with its role."""
    procs = {}
    for p in psutil.process_iter(["pid", "name", "cmdline", "cpu_times"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])[:400]
            t = p.info["cpu_times"]
            if t is None:
                continue
            names = _thread_names(p.pid)
            threads = {}
            for th in p.threads():
                threads[th.id] = (names.get(th.id, "?"), th.user_time + th.system_time)
            procs[p.pid] = {
                "name": p.info["name"] or "",
                "cmd": cmd,
                "role": role_of(cmd, p.info["name"] or ""),
                "cpu": t.user + t.system,
                "threads": threads,
            }
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return procs


def pyspy_binary() -> str | None:
    """py-spy on the PATH, or where gpu_session.sh's setup installs the carried wheel."""
    found = shutil.which("py-spy")
    return found or ("/tmp/site/bin/py-spy" if Path("/tmp/site/bin/py-spy").exists() else None)


class Tally:
    """CPU seconds per role and per thread over the samples added to it, and their length."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.roles: collections.Counter = collections.Counter()
        self.threads: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def add(self, dt: float, roles: dict, threads: dict) -> None:
        self.seconds += dt
        self.roles.update(roles)
        for role, c in threads.items():
            self.threads[role].update(c)

    def report(self) -> dict:
        per = max(self.seconds, 1e-9)
        return {
            "by_role": {k: {"cpu_s": round(v, 1), "cores": round(v / per, 2)} for k, v in self.roles.most_common()},
            "threads": {
                k: {
                    "busy_threads": sum(1 for v in c.values() if v / per >= 0.1),
                    "top": [[n, round(v / per, 2)] for n, v in c.most_common(12)],
                }
                for k, c in self.threads.items()
            },
        }


def summarize_raw(path: Path, top: int = 25) -> dict:
    """py-spy's raw format: `frame;frame;...;leaf COUNT` per line. Returns the most frequent leaf frames and the
    functions most often anywhere on the stack (inclusive), as shares of the samples."""
    leaf, incl, total = collections.Counter(), collections.Counter(), 0
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        frames = stack.split(";")
        total += n
        leaf[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    share = lambda c: [[f, round(k / max(1, total), 3)] for f, k in c.most_common(top)]  # noqa: E731
    return {"samples": total, "leaf": share(leaf), "inclusive": share(incl)}


def _pyspy(spy: str, per_proc: list, dt: float, args) -> list[dict]:
    """One py-spy record of the busiest Python processes (vLLM's included), side by side; their summaries."""
    top = [
        x
        for x in sorted(per_proc, key=lambda x: -x[0])
        if x[0] / dt >= 0.2  # a process that is not working has nothing to show
        and ("python" in (x[2]["name"] + x[2]["cmd"]).lower() or x[2]["role"] in ("engine core", "vllm api server"))
    ][: args.pyspy_top]
    runs = []
    for d, pid, p in top:
        raw = args.out.parent / f"pyspy-{pid}.txt"
        cmd = [spy, "record", "--pid", str(pid), "--duration", str(int(args.pyspy_seconds)), "--rate", "50"]
        cmd += ["--format", "raw", "--output", str(raw), "--threads"]
        cmd += ["--nonblocking"] if args.no_native else ["--native"]  # native frames need the process paused
        runs.append((pid, p, raw, d / dt, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    out = []
    for pid, p, raw, cores_then, proc in runs:
        try:
            log = proc.communicate(timeout=args.pyspy_seconds + 60)[0].decode(errors="replace")[-600:]
        except subprocess.TimeoutExpired:
            proc.kill()
            log = "py-spy did not finish"
        out.append(
            {
                "pid": pid,
                "role": p["role"],
                "name": p["name"],
                "cmd": p["cmd"][:200],
                "cores_then": round(cores_then, 2),
                "log": log,
                "summary": summarize_raw(raw),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--busy-cores", type=float, default=4.0, help="a sample counts as busy above this many cores")
    ap.add_argument("--pyspy-top", type=int, default=4)
    ap.add_argument("--pyspy-seconds", type=float, default=12.0)
    ap.add_argument("--pyspy-after", type=int, default=3, help="samples into the phase before py-spy records")
    ap.add_argument("--phase-role", default="runner / caption cli", help="the phase: while this role runs")
    ap.add_argument("--no-native", action="store_true", help="py-spy without native (C/C++) frames")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    phase, busy_tally = Tally(), Tally()
    spy = pyspy_binary()
    samples, phase_run, pyspy_report = [], 0, None
    prev, t_prev = sample(), time.monotonic()
    while True:
        stopped = stop.wait(args.interval)  # a stop still takes one last sample: the report runs until the stop
        cur, t = sample(), time.monotonic()
        dt = max(t - t_prev, 1e-6)
        roles = collections.Counter()
        role_threads = collections.defaultdict(collections.Counter)
        per_proc = []
        for pid, p in cur.items():
            q = prev.get(pid)
            if pid == os.getpid() or q is None or q["cmd"] != p["cmd"]:
                continue
            d = max(0.0, p["cpu"] - q["cpu"])
            roles[p["role"]] += d
            per_proc.append((d, pid, p))
            for tid, (tname, tcpu) in p["threads"].items():
                old = q["threads"].get(tid)
                if old:
                    role_threads[p["role"]][f"{tname} ({tid})"] += max(0.0, tcpu - old[1])
        cores = sum(roles.values()) / dt
        in_phase = any(p["role"] == args.phase_role for p in cur.values())
        busy = cores > args.busy_cores
        samples.append(
            {"t": round(t, 1), "cores": round(cores, 2), "phase": in_phase, "busy": busy}
            | {k: round(v / dt, 2) for k, v in roles.items()}
        )
        if busy:
            busy_tally.add(dt, roles, role_threads)
        if in_phase:
            phase.add(dt, roles, role_threads)
        phase_run = phase_run + 1 if in_phase else 0
        if spy and pyspy_report is None and phase_run >= args.pyspy_after and not stopped:
            pyspy_report = _pyspy(spy, per_proc, dt, args)
        prev, t_prev = cur, t
        if stopped:
            break

    # with no process of the phase role, the busy samples stand in for it
    tally, label = (phase, args.phase_role) if phase.seconds else (busy_tally, f"busy (> {args.busy_cores} cores)")
    if pyspy_report is None:
        pyspy_report = "py-spy not found" if not spy else "the phase never lasted long enough"
    report = {
        "cpus": psutil.cpu_count(),
        "interval_s": args.interval,
        "phase": label,
        "phase_s": round(tally.seconds, 1),
        **tally.report(),
        "pyspy": pyspy_report,
        "samples": samples,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(
        f"cpu profile: {tally.seconds:.0f} s of {label}; "
        + ", ".join(f"{k} {v['cores']} cores" for k, v in report["by_role"].items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
