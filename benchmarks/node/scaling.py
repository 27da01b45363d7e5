"""Stage `scaling`: clips/s through our runner for 1, 2, 4, ... replicas and both decoders; the goals."""

from __future__ import annotations

import json

from benchmarks.node.context import DECODERS, Ctx, say
from benchmarks.node.cpu import CpuMeter
from benchmarks.node.fleet import Fleet, mps_daemon, router
from benchmarks.node.jobs import (
    cache_per_clip,
    cached_prompt_tokens,
    caption_job,
    efficiency,
    good_clip_ids,
    in_flight,
    job_check,
    job_work,
    new_job,
    prepare_db,
    steady_rate,
)
from serving import flops


def stage_scaling(ctx: Ctx) -> dict:
    per = ctx.a.per_replica_clips
    need = min(ctx.a.clips, per * max(ctx.counts))
    settings, _ = prepare_db(ctx, "scaling", need)
    ids = good_clip_ids(settings)
    rows: list[dict] = []
    report: dict = {
        "counts": ctx.counts,
        "decoders": ctx.decoders,
        "gpus": ctx.gpus,
        "clips_available": len(ids),
        "per_replica_clips": per,
        "rows": rows,
        "method": (
            "one fleet of max(counts) replicas per decoder, started in parallel; for each count "
            "n a vllm-router over the first n replicas and one caption job over "
            "min(per_replica_clips x n, clips) distinct clips through serving.runner.run_job; "
            "whole-machine CPU from psutil over the job; prefix caching off"
        ),
    }
    slots = ctx.gpus[: max(ctx.counts)]
    peak = ctx.gpu_peak()  # before any replica takes the GPUs
    report["peak"] = peak
    with mps_daemon(ctx, settings) as mps:
        report["mps"] = mps
        for decoder in ctx.decoders:
            fleet = Fleet(ctx, settings, decoder, slots, f"scaling-{decoder}", benchmark=True)
            try:
                startup = fleet.start()
                say(f"scaling: {decoder} fleet of {len(slots)} up in {startup} s")
                warm = ids[: ctx.a.warmup * len(slots)]
                if warm:  # first requests pay compilation and caches on every replica
                    caption_job(settings, new_job(settings, f"warm-up {decoder}", warm), fleet.urls(), len(slots))
                for n in ctx.counts:
                    sel = ids[: min(len(ids), per * n)]
                    with router(ctx, settings, fleet.urls(n), f"scaling-{decoder}-{n}") as (urls, via):
                        job = new_job(settings, f"scaling {decoder} x{n}", sel)
                        # read, not assumed: prefix caching is off here, so the replicas should say 0
                        cache0 = cached_prompt_tokens(fleet.urls(n))
                        with CpuMeter() as cpu:
                            prog, wall = caption_job(settings, job, urls, n)
                        cache1 = cached_prompt_tokens(fleet.urls(n))
                    check = job_check(settings, job)
                    done = check["counts"]["done"]
                    work = job_work(settings, job)
                    steady = steady_rate(work, in_flight(settings, n))
                    row = {
                        "decoder": decoder,
                        "backend": DECODERS[decoder],
                        "replicas": n,
                        "clips": len(sel),
                        "done": done,
                        "failed": check["failed"],
                        "seconds": round(wall, 2),
                        "clips_per_s": round(done / wall, 3) if wall else None,
                        # the same from the job's own clock (first claim to last result): without the
                        # runner's start-up and idle detection
                        "clips_per_s_in_job": round(done / check["span_s"], 3) if check["span_s"] else None,
                        "cores_busy": round(cpu.busy / cpu.wall, 2),
                        "core_s_per_clip": round(cpu.busy / done, 3) if done else None,
                        "steady_clips_per_s": steady,
                        "via": via,
                        "fleet_startup_s": startup,
                        "job_state": check["state"],
                        "efficiency": efficiency(
                            ctx,
                            work,
                            steady or (done / wall if wall else None),
                            n,
                            peak,
                            cache_per_clip(cache0, cache1, done),
                        ),
                    }
                    rows.append(row)
                    say(
                        f"scaling: {decoder} x{n}: {row['clips_per_s']} clips/s, {row['cores_busy']} cores busy, "
                        f"{row['core_s_per_clip']} core-s/clip ({done}/{len(sel)} done, {check['failed']} failed); "
                        f"{flops.summary(row['efficiency'])}"
                    )
            except Exception as e:  # record, stop this decoder's fleet, go on with the next
                rows.append({"decoder": decoder, "error": f"{type(e).__name__}: {e}"})
                say(f"scaling: {decoder} FAILED: {e}")
            finally:
                fleet.stop()
    merge_earlier(ctx, rows, report)
    add_ratios(rows)
    report["goals"] = goals(ctx, rows)
    report["decoders"] = sorted({r["decoder"] for r in rows})
    report["ok"] = bool(rows) and not any("error" in r for r in rows)
    for g in report["goals"]:
        say(f"goal {g['goal']}: {g['verdict']}")
    return report


def merge_earlier(ctx: Ctx, rows: list[dict], report: dict) -> None:
    """Keep the rows of the other decoders from an earlier `scaling` call into the same --out (same fleet kind):
    on machines lent 10 minutes per command, `--decoders nvdec` then `--decoders opencv` still give one table."""
    try:
        old = json.loads((ctx.out / "scaling.json").read_text())
    except (OSError, ValueError):
        return
    if old.get("simulated") != ctx.sim:
        return
    kept = [r for r in old.get("rows", []) if r.get("decoder") not in ctx.decoders]
    if kept:
        rows[:0] = kept
        report["merged_from_earlier_call"] = {"date": old.get("date"), "decoders": sorted({r["decoder"] for r in kept})}
        say(
            f"scaling: kept {len(kept)} row(s) of {report['merged_from_earlier_call']['decoders']} from the "
            f"earlier call of {old.get('date')}"
        )


def add_ratios(rows: list[dict]) -> None:
    for r in rows:
        base = next(
            (
                b
                for b in rows
                if b.get("decoder") == r.get("decoder") and b.get("replicas") == 1 and b.get("clips_per_s")
            ),
            None,
        )
        if base and r.get("clips_per_s") is not None:
            r["vs_1_replica"] = round(r["clips_per_s"] / base["clips_per_s"], 2)


def goals(ctx: Ctx, rows: list[dict]) -> list[dict]:
    """NVDEC at N >= 7.5/8 x N x NVDEC at 1 (7.5x at 8), and NVDEC >= 2x opencv at N (N = largest count)."""

    def rate(dec: str, n: int) -> float | None:
        return next((r["clips_per_s"] for r in rows if r.get("decoder") == dec and r.get("replicas") == n), None)

    n = max(ctx.counts)
    want = round(7.5 / 8 * n, 3)
    out = []
    one, top, cpu = rate("nvdec", 1), rate("nvdec", n), rate("opencv", n)
    tag = " (simulated: says nothing about GPUs)" if ctx.sim else ""
    if one and top is not None and n > 1:
        ratio = top / one
        out.append(
            {
                "goal": f"NVDEC@{n} >= {want}x NVDEC@1",
                "measured": round(ratio, 2),
                "met": ratio >= want,
                "verdict": f"{'MET' if ratio >= want else 'NOT MET'}: {ratio:.2f}x{tag}",
            }
        )
    else:
        out.append(
            {
                "goal": f"NVDEC@{n} >= {want}x NVDEC@1",
                "measured": None,
                "met": None,
                "verdict": "not measured (needs nvdec at 1 and at a larger count)",
            }
        )
    if top and cpu:
        ratio = top / cpu
        out.append(
            {
                "goal": f"NVDEC@{n} >= 2x opencv@{n}",
                "measured": round(ratio, 2),
                "met": ratio >= 2,
                "verdict": f"{'MET' if ratio >= 2 else 'NOT MET'}: {ratio:.2f}x{tag}",
            }
        )
    else:
        out.append(
            {
                "goal": f"NVDEC@{n} >= 2x opencv@{n}",
                "measured": None,
                "met": None,
                "verdict": "not measured (needs both decoders at the largest count)",
            }
        )
    return out
