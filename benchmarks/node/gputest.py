"""Stage `gputest`: tests/serving/test_gpu_fleet.py on every GPU with the cached clips."""

from __future__ import annotations

import json
import shlex
import sys
import time

from benchmarks.node.clips import fresh_clips
from benchmarks.node.context import Ctx, run_logged, say
from serving import procs


def stage_gputest(ctx: Ctx) -> dict:
    clip_root = ctx.work / "gputest-clips"
    # the test's clip root: library/ linked from the cache (exactly --clips clips); the test writes hostile/
    # itself (with a cut-in-half library clip)
    fresh_clips(ctx, clip_root, "library", ctx.a.clips)
    out = ctx.out / "gputest"
    out.mkdir(exist_ok=True)
    peak = ctx.gpu_peak()  # before the test's fleet takes the GPUs; the test reads it for its efficiency
    env = {
        **ctx.env,
        "CW_GPU_GPUS": ",".join(map(str, ctx.gpus)),
        "CW_GPU_CLIPS": str(ctx.a.clips),
        "CW_GPU_OUT": str(out),
        "CW_GPU_MODEL": ctx.a.model,
        "CW_GPU_CLIP_ROOT": str(clip_root),
        "TMPDIR": str(ctx.work),
    }
    if ctx.a.dummy:
        env["CW_GPU_DUMMY"] = "1"
    if ctx.sim:
        env["CW_GPU_REHEARSE"] = "sim"
    if peak:
        env["CW_GPU_PEAK"] = str(ctx.work / "peak.json")
    if ctx.a.vllm_arg:  # e.g. --quantization=fp8: the test's replicas run it, its efficiency uses the FP8 peak
        env["CW_GPU_VLLM_ARGS"] = " ".join(ctx.a.vllm_arg)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "tests/serving/test_gpu_fleet.py",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--basetemp={ctx.work / 'gputest-tmp'}",
    ]
    say(f"gputest: {shlex.join(cmd)} (CW_GPU_GPUS={env['CW_GPU_GPUS']} CW_GPU_CLIPS={ctx.a.clips})")
    t = time.time()
    rc = run_logged(cmd, ctx.logs / "gputest-pytest.log", env, timeout=ctx.a.stage_timeout)
    report: dict = {
        "ok": rc == 0,
        "exit": rc,
        "seconds": round(time.time() - t, 1),
        "command": shlex.join(cmd),
        "gpus": ctx.gpus,
        "clips_asked": ctx.a.clips,
    }
    try:
        test = json.loads((out / "report.json").read_text())
        report["test_report"] = {
            k: test.get(k)
            for k in (
                "gpus",
                "fleet_up_s",
                "ingest_s",
                "clips",
                "caption_s",
                "job",
                "failure_kinds",
                "provenance_example",
                "router_workers",
            )
        }
        report["hostile_with_reason"] = len(test.get("failures") or {})
    except (OSError, ValueError) as e:
        report["test_report"] = f"no report from the test: {e}"
    if not report["ok"]:
        report["pytest_tail"] = procs.tail(ctx.logs / "gputest-pytest.log", 40)
    return report
