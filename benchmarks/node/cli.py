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
from benchmarks.node.context import CHILDREN, SIM_NOTE, STAGES, Ctx, say, write
from benchmarks.node.gputest import stage_gputest
from benchmarks.node.kill import stage_kill
from benchmarks.node.launch import stage_launch
from benchmarks.node.report import stage_report
from benchmarks.node.scaling import stage_scaling
from serving import launcher, procs


def preflight(ctx: Ctx, stages: list[str]) -> None:
    """Say what is missing before any stage starts (an operator's run should not fail an hour in)."""
    import importlib.util

    missing = [m for m in ("sqlite_utils", "av", "psutil", "matplotlib") if importlib.util.find_spec(m) is None]
    if ctx.fleet == "gpu":
        missing += [m for m in ("vllm",) if importlib.util.find_spec(m) is None]
        if "nvdec" in ctx.decoders and importlib.util.find_spec("PyNvVideoCodec") is None:
            say("warning: PyNvVideoCodec not importable here; vLLM's NVDEC backend will fail to decode")
        if (
            launcher._entry("vllm-router", "vllm_router.launch_router") == ["vllm-router"]
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
    for dec in ctx.decoders:
        for slot in ctx.gpus[:2]:
            cmd, env = ctx.replica(s, slot, dec, benchmark=True)
            print(f"# scaling replica ({dec}, slot {slot}):\n" + launcher._shell(cmd, env))
    print(
        "# router:\n"
        + shlex.join(launcher.router_command(s, [f"http://127.0.0.1:{s.fleet_port + g}" for g in ctx.gpus]))
    )
    cmd, env = ctx.replica(s, ctx.gpus[0], ctx.decoders[0], benchmark=False)
    print("# kill-stage replica:\n" + launcher._shell(cmd, env))
    extra = [] if ctx.sim else [t for tok in ctx.vllm_extra(benchmark=False) for t in ("--vllm-arg", shlex.quote(tok))]
    print(
        "# launch:\n"
        + shlex.join(
            [
                "./launch.sh",
                "--fleet",
                ctx.fleet,
                "--detach",
                "--no-install",
                *(["--gpus", ",".join(map(str, ctx.gpus))] if not ctx.sim else ["--replicas", str(ctx.size)]),
                *extra,
            ]
        )
    )
    print(
        f"# gputest:\nCW_GPU_GPUS={','.join(map(str, ctx.gpus))} CW_GPU_CLIPS={ctx.a.clips}"
        f"{' CW_GPU_DUMMY=1' if ctx.a.dummy else ''}{' CW_GPU_REHEARSE=sim' if ctx.sim else ''} "
        f"python3 -m pytest -m gpu tests/test_gpu_fleet.py"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchmarks/node_run.py", description=node.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "stage",
        help=f"what to run: all (every stage in order), one of {', '.join(STAGES)}, or several "
        "comma-separated (e.g. scaling,report)",
    )
    p.add_argument("--out", required=True, help="folder for the reports, logs, table and plot")
    p.add_argument(
        "--fleet",
        choices=("auto", "gpu", "sim"),
        default="auto",
        help="gpu: vLLM replicas; sim: simulated replicas (rehearsal); auto: gpu where nvidia-smi lists GPUs",
    )
    p.add_argument("--gpus", default="", help="GPUs to use (default: every GPU nvidia-smi lists)")
    p.add_argument("--sim-replicas", type=int, default=8, help="simulated replicas with --fleet sim (default 8)")
    p.add_argument(
        "--replicas",
        default="",
        help="replica counts of the scaling stage, e.g. 1,2 (default: 1,2,4,... up to the fleet size)",
    )
    p.add_argument("--decoders", default="nvdec,opencv", help="decoders of the scaling stage (default nvdec,opencv)")
    p.add_argument("--model", default="Qwen/Qwen3-VL-8B-Instruct", help="model folder or id the replicas serve")
    p.add_argument("--dummy", action="store_true", help="random weights (--load-format dummy + compact JSON)")
    p.add_argument("--vllm-arg", action="append", default=[], metavar="ARG", help="extra vLLM argument (repeatable)")
    p.add_argument("--vllm-version", default=None, help="vLLM version to build flags for (default: installed)")
    p.add_argument("--clips", type=int, default=1000, help="distinct clips for the GPU test (default 1000)")
    p.add_argument("--small-clips", action="store_true", help="tiny clips (90p, 2 s): rehearsals only")
    p.add_argument("--clip-cache", default=None, help="where generated clips are kept (default WORK/clip-cache)")
    p.add_argument("--work", default="/tmp/cw-node-run", help="data dirs of the stages (default /tmp/cw-node-run)")
    p.add_argument("--workers", type=int, default=0, help="processes for clip generation and ingest (default: cores)")
    p.add_argument(
        "--per-replica-clips",
        type=int,
        default=120,
        help="clips per replica in each scaling job (default 120: ~30 s at 4 clips/s per GPU)",
    )
    p.add_argument("--warmup", type=int, default=8, help="warm-up clips per replica before each decoder's runs")
    p.add_argument("--kill-clips", type=int, default=600, help="clips in the kill job (default 600)")
    p.add_argument(
        "--kill-at",
        type=float,
        default=0.3,
        help="kill when this share of the job is finished and the victim has requests running (0: as "
        "soon as it has; small rehearsals finish too fast for more)",
    )
    p.add_argument("--kill-replica", type=int, default=1, help="index of the replica to kill (default 1)")
    p.add_argument(
        "--launch-clips",
        type=int,
        default=24,
        help="clips launch.sh ingests before starting the fleet (default 24: the start-up is the figure)",
    )
    p.add_argument("--max-tokens", type=int, default=320, help="output token limit per caption (default 320)")
    p.add_argument("--base-port", type=int, default=8000, help="replica i listens on BASE+i (default 8000)")
    p.add_argument("--router-port", type=int, default=30000, help="router port (default 30000)")
    p.add_argument("--router-prometheus-port", type=int, default=29000)
    p.add_argument("--app-port", type=int, default=7860, help="web app port of the launch stage (default 7860)")
    p.add_argument("--sim-speed", type=float, default=1.0, help="simulated latency factor (default 1)")
    p.add_argument("--no-router", action="store_true", help="measure without vllm-router (runner spreads itself)")
    p.add_argument("--no-mps", action="store_true", help="no CUDA MPS daemon in the scaling and kill stages")
    p.add_argument("--startup-timeout", type=float, default=1800, help="seconds for a fleet to come up")
    p.add_argument("--dry-run", action="store_true", help="print the commands the stages would start; start nothing")
    p.add_argument("--stage-timeout", type=float, default=5400, help="seconds for the GPU test (default 90 min)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    stages = list(STAGES) if a.stage == "all" else [x.strip() for x in a.stage.split(",") if x.strip()]
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
            except Exception as e:  # noqa: BLE001 - one failed stage must not cost the others
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
