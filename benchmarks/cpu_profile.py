"""Where a node's CPU goes while the fleet captions: every process and thread, sampled, grouped by role.

Runs beside a GPU test or a node run (benchmarks/gpu_session.sh starts it) until SIGTERM/SIGINT, then writes
one JSON report:
- `busy`: the samples where the machine had more than --busy-cores cores busy (the captioning, not the start);
- `by_role`: CPU seconds per role over those samples (vLLM API server, engine core, the router, our runner,
  ingest, the test itself, other), and the cores each kept busy;
- `threads`: per role, the thread names (Linux `comm`: torch's intra-op pool, tokenizer threads, uvloop ...)
  that used the most CPU;
- `pyspy`: with py-spy on the PATH (or under /tmp/site/bin), one `py-spy record` of --pyspy-seconds on each of
  the --pyspy-top busiest Python processes, taken once, while the machine is busy (raw collapsed stacks, then a
  summary of the functions that were on the stack most often, own frames and leaf frames).

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
    # (role, a test on the command line), first match wins
    ("engine core", lambda cmd, name: "EngineCore" in name or "EngineCore" in cmd),
    ("vllm api server", lambda cmd, name: "vllm" in cmd and ("serve" in cmd or "api_server" in cmd)),
    ("vllm other", lambda cmd, name: "vllm" in cmd or name.startswith("VLLM")),
    ("router", lambda cmd, name: "vllm_router" in cmd or "vllm-router" in cmd or "router" in name),
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
    return shutil.which("py-spy") or next((str(p) for p in (Path("/tmp/site/bin/py-spy"),) if p.exists()), None)


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--busy-cores", type=float, default=4.0, help="a sample counts as busy above this many cores")
    ap.add_argument("--pyspy-top", type=int, default=4)
    ap.add_argument("--pyspy-seconds", type=float, default=12.0)
    ap.add_argument("--pyspy-after", type=int, default=3, help="busy samples in a row before py-spy records")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    by_role = collections.defaultdict(float)
    threads = collections.defaultdict(collections.Counter)
    busy_s, samples, busy_run, pyspy_done, pyspy_report = 0.0, [], 0, False, []
    prev, t_prev = sample(), time.monotonic()
    ncpu = psutil.cpu_count()
    while not stop.wait(args.interval):
        cur, t = sample(), time.monotonic()
        dt = t - t_prev
        roles = collections.defaultdict(float)
        role_threads = collections.defaultdict(collections.Counter)
        per_proc = []
        for pid, p in cur.items():
            q = prev.get(pid)
            if pid == os.getpid():
                continue
            if q is None or q["cmd"] != p["cmd"]:
                continue
            d = max(0.0, p["cpu"] - q["cpu"])
            roles[p["role"]] += d
            per_proc.append((d, pid, p))
            for tid, (tname, tcpu) in p["threads"].items():
                old = q["threads"].get(tid)
                if old:
                    role_threads[p["role"]][tname] += max(0.0, tcpu - old[1])
        cores = sum(roles.values()) / dt
        busy = cores > args.busy_cores
        samples.append(
            {
                "t": round(t, 1),
                "cores": round(cores, 2),
                "busy": busy,
                **{k: round(v / dt, 2) for k, v in roles.items()},
            }
        )
        if busy:
            busy_s += dt
            for k, v in roles.items():
                by_role[k] += v
            for k, c in role_threads.items():
                threads[k].update(c)
            busy_run += 1
        else:
            busy_run = 0
        spy = pyspy_binary()
        if spy and not pyspy_done and busy_run >= args.pyspy_after:
            pyspy_done = True
            top = [
                x
                for x in sorted(per_proc, key=lambda x: -x[0])
                if "python" in (x[2]["name"] + x[2]["cmd"]).lower()
                or x[2]["role"] in ("engine core", "vllm api server", "vllm other")
            ][: args.pyspy_top]
            runs = []
            for d, pid, p in top:
                raw = args.out.parent / f"pyspy-{pid}.txt"
                cmd = [
                    spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(int(args.pyspy_seconds)),
                    "--rate",
                    "50",
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                    "--nonblocking",
                    "--threads",
                ]
                runs.append(
                    (pid, p, raw, d / dt, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                )
            for pid, p, raw, cores_then, proc in runs:
                try:
                    log = proc.communicate(timeout=args.pyspy_seconds + 60)[0].decode(errors="replace")[-600:]
                except subprocess.TimeoutExpired:
                    proc.kill()
                    log = "py-spy did not finish"
                pyspy_report.append(
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
        prev, t_prev = cur, t

    report = {
        "cpus": ncpu,
        "interval_s": args.interval,
        "busy_cores_threshold": args.busy_cores,
        "busy_s": round(busy_s, 1),
        "by_role": {
            k: {"cpu_s": round(v, 1), "cores": round(v / max(busy_s, 1e-9), 2)}
            for k, v in sorted(by_role.items(), key=lambda kv: -kv[1])
        },
        "threads": {k: [[n, round(v, 1)] for n, v in c.most_common(12)] for k, c in threads.items()},
        "pyspy": pyspy_report if pyspy_report else ("py-spy not found" if not pyspy_binary() else "machine never busy"),
        "samples": samples,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(
        f"cpu profile: {busy_s:.0f} s busy; "
        + ", ".join(f"{k} {v['cores']} cores" for k, v in report["by_role"].items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
