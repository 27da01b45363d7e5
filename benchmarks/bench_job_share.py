"""A normal job's throughput alone and beside a hostile job on the same runner (issue 46, point 3): does one job
whose every answer costs its whole check budget starve another?

    python benchmarks/bench_job_share.py                         # this checkout
    git archive 640bdfa | tar -x -C /tmp/before && \\
        python benchmarks/bench_job_share.py --code /tmp/before    # the code before the fix

Each scenario runs in a fresh child process (PYTHONPATH = --code) with its own data dir: a library of tiny clips,
a simulated fleet of `--replicas` replicas (in the child, answering as real vLLM was recorded answering, after
`--latency` seconds), and the runner process (`python -m serving.runner`, as launch.sh starts it: its default
checkers, one per core beside its own, with `--budget` s of CPU per answer). Scenarios:
- alone: the normal job (`--clips` clips, the shipped prompt) and nothing else;
- beside/pattern: first a hostile job (`--hostile` clips) whose prompt version, stored before the save rules,
  hides `(\\w+\\s?)*$` in a draft-07 `dependencies` (the issue's), then the normal job;
- beside/refs: the same with a schema whose check doubles per level (`allOf` of two `$ref`s, 40 levels): a check
  that costs its whole budget in any code, so it measures the checkers' sharing, whatever matches patterns.
Printed per scenario: the normal job's clips/s (its clips over the time from the runner's start to its last clip
done) and its share of the alone figure, and how the hostile job's clips ended. The acceptance: at least 0.5.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if "--child" not in sys.argv:  # a child imports the code under test, from PYTHONPATH (--code)
    sys.path.insert(0, str(REPO))

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def hostile_schema(kind: str, safe: dict) -> dict:
    import copy

    s = copy.deepcopy(safe)
    if kind == "pattern":
        s["$schema"] = DRAFT7
        s["dependencies"] = {"caption": {"properties": {"caption": {"pattern": r"(\w+\s?)*$"}}}}
    else:
        s["$defs"] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(40)}
        s["$defs"]["d40"] = {"type": "string"}
        s["properties"]["caption"] = {"type": "string", "$ref": "#/$defs/d0"}
    return s


def child(a: argparse.Namespace) -> None:
    """Runs in the child: one scenario, then its figures as JSON on stdout."""
    from data import db as dbmod, jobs, prompts
    from data.job_params import JobParams
    from data.jobs import queries as job_queries
    from data.jobs.selection import Selection
    from data.library.clipgen import tiny_library
    from data.settings import Settings
    from serving import simfleet
    from serving.launch import commands as fleet_commands

    root = Path(tempfile.mkdtemp(prefix="bench-share-"))
    s = Settings.load(
        {"data_dir": str(root / "var"), "answer_check_seconds": a.budget, "per_replica_inflight": a.inflight},
        environ={},
    )
    db = dbmod.connect(s.db)
    hostile_n = a.hostile if a.scenario != "alone" else 0
    ids = tiny_library(s, db, a.clips + max(hostile_n, 1))
    safe = prompts.latest(db)
    made = {}
    if hostile_n:
        with db.conn:  # a version stored before the save rules: straight into the table
            pid = (
                db["prompts"]
                .insert(
                    {
                        "name": "hostile",
                        "version": 1,
                        "description": "",
                        "system": safe["system"],
                        "user": safe["user"],
                        "schema": json.dumps(hostile_schema(a.scenario.split("/")[1], safe["schema"])),
                        "created_at": time.time(),
                    }
                )
                .last_pk
            )
        made["hostile"] = jobs.create(
            db,
            name="hostile",
            created_by="b",
            selection=Selection.of_clips(ids[a.clips : a.clips + hostile_n]),
            prompt_id=pid,
            params=JobParams(),
        )
    made["normal"] = jobs.create(
        db,
        name="normal",
        created_by="a",
        selection=Selection.of_clips(ids[: a.clips]),
        prompt_id=safe["id"],
        params=JobParams(),
    )
    fleet = simfleet.start_fleet(a.replicas, 0, s.clip_root, mode="process", speed=a.latency_speed)
    cmd = fleet_commands.runner_command(s, fleet.urls, ["--log-level", "WARNING"])
    log = open(root / "runner.log", "wb")
    t0 = time.monotonic()
    runner = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    normal = made["normal"]
    try:
        deadline = t0 + a.deadline
        while time.monotonic() < deadline:
            c = job_queries.counts(db, normal)
            if c["done"] + c["failed"] >= a.clips:
                break
            time.sleep(0.05)
        took = time.monotonic() - t0
        counts = {name: job_queries.counts(db, j) for name, j in made.items()}
    finally:
        os.killpg(runner.pid, signal.SIGTERM)
        try:
            runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        fleet.stop()
        log.close()
    kinds = [r[0] for r in db.execute("SELECT error_kind FROM job_items WHERE state = 'failed'")]
    db.close()
    done = counts["normal"]["done"]
    print(json.dumps({"s": took, "rate": done / took, "counts": counts, "failed_kinds": sorted(set(kinds))}))


def run(a: argparse.Namespace, scenario: str) -> dict:
    from benchmarks.child_env import child_env

    with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp:
        env = child_env(a.code, TMPDIR=tmp, NO_PROXY="127.0.0.1")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--case", scenario]
        for k in ("clips", "hostile", "budget", "replicas", "inflight", "latency_speed", "deadline"):
            cmd += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
        p = subprocess.run(cmd, cwd=a.code, env=env, capture_output=True, text=True)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (p.stderr or p.stdout).strip()[-400:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose runner is measured")
    ap.add_argument("--clips", type=int, default=60, help="clips of the normal job")
    ap.add_argument("--hostile", type=int, default=24, help="clips of the hostile job (the issue's: 24)")
    ap.add_argument("--budget", type=float, default=5.0, help="answer_check_seconds (the default: 5)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--inflight", type=int, default=4, help="per_replica_inflight")
    ap.add_argument("--latency-speed", type=float, default=1.0, help="the simulated fleet's latency multiplier")
    ap.add_argument("--deadline", type=float, default=300.0, help="give up on the normal job after this many s")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the scenarios this many times")
    ap.add_argument("--only", action="append", help="run only these scenarios")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--case", dest="scenario", default="alone", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    a.code = a.code.resolve()
    scenarios = a.only or ["alone", "beside/pattern", "beside/refs"]
    print(f"code: {a.code}; normal job {a.clips} clips, hostile job {a.hostile} clips, budget {a.budget:g} s, ")
    print(f"{a.replicas} replicas x {a.inflight} in flight, latency x{a.latency_speed:g}, {os.cpu_count()} cores")
    print(f"{'scenario':16s} {'normal clips/s':>15s} {'of alone':>9s} {'s':>7s}  normal / hostile counts")
    alone: list[float] = []
    for _ in range(a.rounds):
        for name in scenarios:
            r = run(a, name)
            if "error" in r:
                print(f"{name:16s} error: {r['error']}")
                continue
            if name == "alone":
                alone.append(r["rate"])
            share = f"{r['rate'] / alone[-1]:.2f}" if alone else "-"
            c = r["counts"]
            hostile = c.get("hostile", {})
            print(
                f"{name:16s} {r['rate']:15.2f} {share:>9s} {r['s']:7.1f}  normal {c['normal']['done']} done "
                f"{c['normal']['failed']} failed; hostile {hostile.get('done', '-')} done "
                f"{hostile.get('failed', '-')} failed {','.join(r['failed_kinds'])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
