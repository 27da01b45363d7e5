"""The command line: options, the preflight check, the dry run, and the stage loop."""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import time

from benchmarks import node
from benchmarks.node.clips import stage_clips
from benchmarks.node.context import ALL_STAGES, CHILDREN, SIM_NOTE, STAGES, Ctx, say, write
from benchmarks.node.gputest import stage_gputest
from benchmarks.node.kill import stage_kill
from benchmarks.node.launch import launch_command, stage_launch
from benchmarks.node.report import stage_report
from benchmarks.node.scaling import stage_scaling
from benchmarks.node.threads import (
    DEV_ROUTES,
    budgets as thread_budgets,
    describe as describe_config,
    parse_configs,
    profile_setup,
    replica_flags,
    replica_key,
    stage_threads,
)
from benchmarks.node.workload import parse_points, stage_workload
from serving import procs
from serving.launch import commands as fleet_commands, up as fleet_up


def preflight(ctx: Ctx, stages: list[str]) -> None:
    """Say what is missing before any stage starts (an operator's run should not fail an hour in)."""
    import importlib.util

    missing = [m for m in ("sqlite_utils", "av", "psutil", "matplotlib") if importlib.util.find_spec(m) is None]
    if ctx.fleet == "gpu":
        missing += [m for m in ("vllm",) if importlib.util.find_spec(m) is None]
        if "nvdec" in ctx.decoders and importlib.util.find_spec("PyNvVideoCodec") is None:
            say("warning: PyNvVideoCodec not importable here; vLLM's NVDEC backend will fail to decode")
        if (
            fleet_commands.entry_command("vllm-router", "vllm_router.launch_router") == ["vllm-router"]
            and not shutil.which("vllm-router")
            and not ctx.a.no_router
        ):
            missing.append("vllm_router (or --no-router)")
    if "launch" in stages and importlib.util.find_spec("gradio") is None:
        missing.append("gradio (the app that ./launch.sh starts)")
    if missing:
        raise SystemExit(
            "node_run: missing Python packages: "
            + ", ".join(missing)
            + " (pip install -e '.[gpu,test]', or the offline bundle + wheels on PYTHONPATH: "
            "docs/GPU.md)"
        )


def dry_run(ctx: Ctx, stages: list[str]) -> int:
    """Print the commands the stages would start (replica, router, launch.sh, the test); start nothing."""
    s = ctx.settings(ctx.work / "scaling", ctx.work / "scaling" / "clips")
    print(
        f"# fleet {ctx.fleet}: {ctx.size} {'GPUs ' + str(ctx.gpus) if not ctx.sim else 'simulated replicas'}; "
        f"scaling counts {ctx.counts}; decoders {ctx.decoders}; stages {', '.join(stages)}"
    )
    budgets = fleet_commands.replica_budgets(s, ctx.size)
    for dec in ctx.decoders:
        for slot, budget in list(zip(ctx.gpus, budgets))[:2]:
            cmd, env = ctx.replica(s, slot, dec, benchmark=True, budget=budget)
            print(
                f"# scaling replica ({dec}, slot {slot}; {budget.describe()}):\n"
                + fleet_up.shell_line(cmd, env, cpus=budget.cpus)
            )
    print(
        "# router:\n"
        + shlex.join(fleet_commands.router_command(s, [f"http://127.0.0.1:{s.fleet_port + g}" for g in ctx.gpus]))
    )
    cmd, env = ctx.replica(s, ctx.gpus[0], ctx.decoders[0], benchmark=False, budget=budgets[0])
    print("# kill-stage replica:\n" + fleet_up.shell_line(cmd, env, cpus=budgets[0].cpus))
    if "threads" in stages:
        before = None
        for config in parse_configs(ctx.a.threads_configs):
            if before is not None and replica_key(config) == replica_key(before):
                print(
                    f"# threads {config} ({describe_config(config, s, ctx.size)}; {ctx.a.threads_clips} clips "
                    f"per replica): the replicas of the configuration before, their caches emptied"
                )
                continue
            before = config
            b = thread_budgets(config, s, ctx.size)[0]
            flags, nocache = replica_flags(config)
            prof_flags, prof_env, _ = profile_setup(ctx, config)
            cmd, env = ctx.replica(
                s, ctx.gpus[0], ctx.decoders[0], benchmark=nocache, budget=b, extra=flags + prof_flags
            )
            env = {**env, **DEV_ROUTES, **prof_env}
            print(
                f"# threads {config} ({describe_config(config, s, ctx.size)}; {ctx.a.threads_clips} clips "
                f"per replica):\n" + fleet_up.shell_line(cmd, env, cpus=b.cpus if b else None)
            )
    if "workload" in stages:
        points = parse_points(ctx)
        print(
            f"# workload: one replica as the kill stage's; {len(points)} jobs of {ctx.a.workload_clips} clips, "
            "frames x pixels: " + ", ".join(f"{f}x{p:,}" for f, p in points)
        )
    print("# launch:\n" + shlex.join(launch_command(ctx)))
    print(
        f"# gputest:\nCW_GPU_GPUS={','.join(map(str, ctx.gpus))} CW_GPU_CLIPS={ctx.a.clips}"
        f"{' CW_GPU_DUMMY=1' if ctx.a.dummy else ''}{' CW_GPU_REHEARSE=sim' if ctx.sim else ''} "
        f"python3 -m pytest -m gpu tests/serving/test_gpu_fleet.py"
    )
    return 0


# The plain options: (flag, default, help). The default's type is the option's type; False makes a switch.
OPTIONS: tuple[tuple[str, object, str], ...] = (
    ("--gpus", "", "GPUs to use (default: every GPU nvidia-smi lists)"),
    ("--sim-replicas", 8, "simulated replicas with --fleet sim (default 8)"),
    ("--replicas", "", "replica counts of the scaling stage, e.g. 1,2 (default: 1,2,4,... up to the fleet size)"),
    ("--decoders", "nvdec,opencv", "decoders of the scaling stage (default nvdec,opencv)"),
    ("--model", "Qwen/Qwen3-VL-8B-Instruct", "model folder or id the replicas serve"),
    ("--dummy", False, "random weights (--load-format dummy + compact JSON)"),
    ("--vllm-version", None, "vLLM version to build flags for (default: installed)"),
    ("--clips", 1000, "distinct clips for the GPU test (default 1000)"),
    ("--small-clips", False, "tiny clips (90p, 2 s): rehearsals only"),
    ("--clip-cache", None, "where generated clips are kept (default WORK/clip-cache)"),
    ("--work", "/tmp/cw-node-run", "data dirs of the stages (default /tmp/cw-node-run)"),
    ("--workers", 0, "processes for clip generation and ingest (default: cores)"),
    ("--per-replica-clips", 120, "clips per replica in each scaling job (default 120: ~30 s at 4 clips/s per GPU)"),
    ("--warmup", 8, "warm-up clips per replica before each decoder's runs"),
    ("--kill-clips", 600, "clips in the kill job (default 600)"),
    (
        "--kill-at",
        0.3,
        "kill when this share of the job is finished and the victim has requests running (0: as soon as it has; "
        "small rehearsals finish too fast for more)",
    ),
    ("--kill-replica", 1, "index of the replica to kill (default 1)"),
    ("--launch-clips", 24, "clips launch.sh ingests before the fleet starts (default 24: the start-up is the figure)"),
    ("--max-tokens", 400, "output token limit per caption (default 400: a 600-character caption and its labels)"),
    ("--base-port", 8000, "replica i listens on BASE+i (default 8000)"),
    ("--router-port", 30000, "router port (default 30000)"),
    ("--router-prometheus-port", 29000, "router's Prometheus metrics port (default 29000)"),
    ("--app-port", 7860, "web app port of the launch stage (default 7860)"),
    ("--sim-speed", 1.0, "simulated latency factor (default 1)"),
    ("--no-router", False, "measure without vllm-router (runner spreads itself)"),
    ("--no-mps", False, "no CUDA MPS daemon in the scaling and kill stages"),
    ("--startup-timeout", 1800.0, "seconds for a fleet to come up"),
    ("--dry-run", False, "print the commands the stages would start; start nothing"),
    (
        "--threads-configs",
        "1,2,4,budget",
        "threads: CPU budgets to compare, in order: threads per pool (1, 2, 4, ...), budget (the launcher's), "
        "pinned (the budget, each replica on its share of cores), unset (vLLM's own pools) (default 1,2,4,budget)",
    ),
    ("--threads-clips", 120, "threads: clips per replica in each configuration's job (default 120)"),
    (
        "--profile-after",
        20.0,
        "threads: seconds into a `+prof` configuration's job at which its engine's profile starts (default 20: "
        "past the first in-flight window)",
    ),
    ("--profile-iterations", 200, "threads: engine steps a `+prof` profile records (default 200)"),
    ("--workload-frames", "8,16,32", "workload: frames per clip of the sweep (default 8,16,32)"),
    (
        "--workload-pixels",
        "9437184,4718592,2359296",
        "workload: pixel budgets per clip of the sweep (default: the recipe's 9437184, half, a quarter)",
    ),
    ("--workload-clips", 120, "workload: clips in each point's job (default 120)"),
    (
        "--stage-deadline",
        570.0,
        "threads, workload: seconds after which no further configuration or point is started (0: none; default "
        "570, the lent machines' 10 minutes per command less a margin)",
    ),
    ("--stage-timeout", 5400.0, "seconds for the GPU test (default 90 min)"),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchmarks/node_run.py", description=node.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "stage",
        help=f"what to run: all ({', '.join(ALL_STAGES)}, in order), one of {', '.join(STAGES)}, or several "
        "comma-separated (e.g. scaling,report)",
    )
    p.add_argument("--out", required=True, help="folder for the reports, logs, table and plot")
    p.add_argument(
        "--fleet-mode",
        "--fleet",  # the first spelling; launch.sh and the launcher call it --fleet-mode
        dest="fleet",
        choices=("auto", "gpu", "sim"),
        default="auto",
        help="gpu: vLLM replicas; sim: simulated replicas (rehearsal); auto: gpu where nvidia-smi lists GPUs",
    )
    p.add_argument("--vllm-arg", action="append", default=[], metavar="ARG", help="extra vLLM argument (repeatable)")
    for flag, default, text in OPTIONS:
        if default is False:
            p.add_argument(flag, action="store_true", help=text)
        else:
            p.add_argument(flag, type=str if default is None else type(default), default=default, help=text)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    stages = list(ALL_STAGES) if a.stage == "all" else [x.strip() for x in a.stage.split(",") if x.strip()]
    unknown = [x for x in stages if x not in STAGES]
    if unknown or not stages:
        raise SystemExit(
            f"node_run: unknown stage {', '.join(unknown) or a.stage!r}; choose all or from {', '.join(STAGES)}"
        )
    ctx = Ctx(a)
    if a.dry_run:
        return dry_run(ctx, stages)
    if stages != ["report"]:
        preflight(ctx, stages)
    say(
        f"fleet {ctx.fleet}, {ctx.size} {'GPUs ' + str(ctx.gpus) if not ctx.sim else 'simulated replicas'}; "
        f"stages {', '.join(stages)}; out {ctx.out}"
    )
    if ctx.sim:
        say(SIM_NOTE)

    def on_signal(signum, frame):  # stop what we started, by process group, then leave
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    results = {}
    runners = {
        "clips": stage_clips,
        "launch": stage_launch,
        "gputest": stage_gputest,
        "scaling": stage_scaling,
        "kill": stage_kill,
        "threads": stage_threads,
        "workload": stage_workload,
        "report": stage_report,
    }
    t_all = time.time()
    try:
        for stage in stages:
            say(f"=== stage {stage}")
            t = time.time()
            try:
                rep = runners[stage](ctx)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # one failed stage must not cost the others
                rep = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                say(f"{stage} FAILED: {e}")
            rep["stage_s"] = round(time.time() - t, 1)
            write(ctx, stage, rep)
            results[stage] = rep.get("ok")
    except KeyboardInterrupt:
        say("interrupted: stopping what this script started")
        return 130
    finally:
        for c in list(CHILDREN):
            procs.stop_group(c.pgid, c.pid, grace=10, popen=c.popen)
    say(
        f"done in {time.time() - t_all:.0f} s: "
        + ", ".join(f"{s} {'ok' if ok else 'FAILED'}" for s, ok in results.items())
    )
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
