"""Stage `workload`: work per clip as the lead's choice, measured. One running replica (the launcher's recipe),
and for each point of --workload-frames x --workload-pixels a job of --workload-clips clips through our runner
whose requests ask for those frames (`media_io_kwargs`) and that pixel budget (`mm_processor_kwargs.size`), the
same clips at every point, no restart between points. Per point: clips/s (steady and whole job), prompt tokens,
the vision tokens Qwen3-VL's processor gives those clips (serving.flops.vision_grid), TFLOP per clip and the
share of the GPU's peak.

Whether the replica honoured a point's pixel budget is checked, not assumed: against the point of the same
frames with the largest budget, its prompt tokens must fall by at least 80 % of what the vision grid predicts. A
point that fails the check is reported and left out of the table.

Writes OUT/workload.json, OUT/workload.md, OUT/work-per-clip.json (the committed docs/work-per-clip.json with
the points measured now replaced: copy it over the committed one) and OUT/work-per-clip.png. A point that would
end past --stage-deadline is not started; a later call with the remaining --workload-frames/--workload-pixels
adds to the same table while the machine keeps its /tmp.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from benchmarks.node.context import ROOT, Ctx, say
from benchmarks.node.fleet import Fleet, mps_daemon
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
    none_done,
    prepare_db,
    steady_rate,
)
from benchmarks.node.threads import earlier_rows
from data.job_params import JobParams
from serving import flops

TABLE = ROOT / "docs" / "work-per-clip.json"


def parse_points(ctx: Ctx) -> list[tuple[int, int]]:
    """(frames, max_pixels) of every point, pixels outer: the recipe's budget first. Each value is checked as
    a job would check it."""
    try:
        frames = [int(x) for x in ctx.a.workload_frames.split(",") if x.strip()]
        pixels = [int(x) for x in ctx.a.workload_pixels.split(",") if x.strip()]
        for f in frames:
            JobParams.checked(frames=f)
        for p in pixels:
            JobParams.checked(max_pixels=p)
    except Exception as e:  # a bad option ends the stage with the reason
        raise SystemExit(f"node_run: --workload-frames/--workload-pixels: {e}") from None
    return [(f, p) for p in pixels for f in frames]


def stage_workload(ctx: Ctx) -> dict:
    points = parse_points(ctx)
    per, warm = ctx.a.workload_clips, ctx.a.warmup
    deadline = time.time() + ctx.a.stage_deadline if ctx.a.stage_deadline else None
    rows: list[dict] = []
    report: dict = {
        "points": [list(p) for p in points],
        "precision": ctx.precision,
        "gpu": ctx.gpu_model,  # the model every point of this run was measured on
        "clips_per_point": per,
        "replica_args": " ".join(ctx.a.vllm_arg) or None,  # flags added to the recipe's replica command
        "rows": rows,
        "method": (
            "one replica (the launcher's recipe, prefix caching on as in production) on the first GPU, "
            f"{warm} warm-up clips, then per point one job of {per} clips through our runner (serving.runner.run_job) "
            "with the point's frames and pixel budget in every request; the same clips at every point"
        ),
    }
    peak = ctx.gpu_peak()
    report["peak"] = peak
    earlier = earlier_rows(ctx, "workload")
    # the clips first: preparing empties the stage's data dir, where the MPS pipes are about to live
    settings, _ = prepare_db(ctx, "workload", warm + per, media=False)
    report["frame_preprocess"] = settings.frame_preprocess  # where the replicas prepared the frames
    ids = good_clip_ids(settings)
    if len(ids) < warm + per:
        raise RuntimeError(f"{len(ids)} good clips, {warm + per} needed")
    with mps_daemon(ctx, settings) as mps:
        report["mps"] = mps
        fleet = Fleet(ctx, settings, ctx.decoders[0], ctx.gpus[:1], "workload", benchmark=False)
        try:
            report["fleet_startup_s"] = fleet.start()
            urls = fleet.urls()
            if warm:
                caption_job(settings, new_job(settings, "warm-up workload", ids[:warm]), urls, 1, deadline=deadline)
            measured = ids[warm : warm + per]
            last_cost = None
            for frames, pixels in points:
                if deadline and last_cost and time.time() + last_cost > deadline:
                    rows.append(
                        {
                            "frames": frames,
                            "max_pixels": pixels,
                            "skipped": f"would end past --stage-deadline {ctx.a.stage_deadline:g} s",
                        }
                    )
                    say(f"workload: {frames} frames x {pixels:,} pixels not started (stage deadline)")
                    continue
                t = time.time()
                rows.append(point(ctx, settings, urls, measured, frames, pixels, peak, deadline))
                last_cost = time.time() - t
        except Exception as e:  # the replica or the clips failed: the report says so
            rows.append({"error": f"{type(e).__name__}: {e}"})
            say(f"workload FAILED: {e}")
        finally:
            fleet.stop()
    now = {(r["frames"], r["max_pixels"]) for r in rows if "clips_per_s" in r}
    # an earlier call's points of the same precision only: an FP8 call must not write bf16 rows as its own
    kept = [
        r
        for r in earlier
        if "clips_per_s" in r
        and (r["frames"], r["max_pixels"]) not in now
        and r.get("precision", "bf16") == ctx.precision
    ]
    if kept:
        rows[:0] = kept
        report["merged_from_earlier_call"] = [[r["frames"], r["max_pixels"]] for r in kept]
    check_honoured(rows)
    (ctx.work / "workload-rows.json").write_text(json.dumps([r for r in rows if "clips_per_s" in r], default=str))
    report["table"] = table(ctx, rows)
    (ctx.out / "workload.md").write_text(report["table"] + "\n")
    print(report["table"], flush=True)
    report["work_per_clip"] = str(
        write_table(ctx, rows, frame_preprocess=report["frame_preprocess"], replica_args=report["replica_args"])
    )
    png = plot(ctx, report["work_per_clip"])
    report["plot"] = str(png) if png else None
    report["ok"] = any("clips_per_s" in r for r in rows) and not any("error" in r for r in rows)
    return report


def point(ctx: Ctx, settings, urls: list[str], clips: list[int], frames: int, pixels: int, peak, deadline=None) -> dict:
    """One job at `frames` x `pixels`; its row. Past `deadline` the runner stops (a replica that died leaves
    the runner waiting for it to come back, as in production) and the stage reports it."""
    job = new_job(settings, f"workload {frames} frames {pixels} pixels", clips, frames=frames, max_pixels=pixels)
    cache0 = cached_prompt_tokens(urls)
    _, wall = caption_job(settings, job, urls, 1, deadline=deadline)
    cache1 = cached_prompt_tokens(urls)
    check = job_check(settings, job)
    if why := none_done(check, len(clips)):
        say(f"workload: {frames} frames x {pixels:,} pixels: {why}")
        return {"frames": frames, "max_pixels": pixels, "error": why}
    work = job_work(settings, job)
    done = check["counts"]["done"]
    steady = steady_rate(work, in_flight(settings, 1))
    vision = [
        flops.vision_tokens(flops.vision_grid(w["frames"], w["height"], w["width"], w["max_pixels"]))
        for w in work
        if w["width"] and w["height"]
    ]
    row = {
        "frames": frames,
        "max_pixels": pixels,
        "clips": len(clips),
        "done": done,
        "failed": check["failed"],
        "failed_errors": check["failed_errors"],
        "seconds": round(wall, 2),
        "clips_per_s": round(done / wall, 3) if wall else None,
        "steady_clips_per_s": steady,
        "prompt_tokens": round(sum(w["prompt_tokens"] for w in work) / len(work), 1) if work else None,
        "completion_tokens": round(sum(w["completion_tokens"] for w in work) / len(work), 1) if work else None,
        "vision_tokens": round(sum(vision) / len(vision), 1) if vision else None,
        "efficiency": efficiency(
            ctx, work, steady or (done / wall if wall else None), 1, peak, cache_per_clip(cache0, cache1, done)
        ),
        "precision": ctx.precision,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    say(
        f"workload: {frames} frames x {pixels:,} pixels: {row['clips_per_s']} clips/s ({steady} steady), "
        f"{row['prompt_tokens']} prompt tokens ({row['vision_tokens']} vision), "
        f"{flops.summary(row['efficiency'])}; {done}/{len(clips)} done"
    )
    return row


def check_honoured(rows: list[dict]) -> None:
    """Mark each point whose prompt tokens did not fall with its pixel budget as the vision grid says they
    should (against the point of the same frames with the largest budget measured)."""
    measured = [r for r in rows if r.get("prompt_tokens") and r.get("vision_tokens") is not None]
    for r in measured:
        ref = max((x for x in measured if x["frames"] == r["frames"]), key=lambda x: x["max_pixels"])
        if ref is r:  # the reference: nothing to compare it with
            r["size_honoured"] = None
            continue
        want = ref["vision_tokens"] - r["vision_tokens"]
        got = ref["prompt_tokens"] - r["prompt_tokens"]
        r["size_honoured"] = got >= 0.8 * want
        if not r["size_honoured"]:
            r["size_note"] = (
                f"prompt tokens fell by {got:.0f} from the {ref['max_pixels']:,}-pixel point, the vision grid says "
                f"{want:.0f}: the replica did not apply this pixel budget"
            )


def table(ctx: Ctx, rows: list[dict]) -> str:
    head = (
        "| frames | pixels per clip | clips/s steady | clips/s whole job | prompt tokens | vision tokens | "
        "TFLOP per clip | % of peak | done / clips |"
    )
    out = [head, "|" + "---|" * 9]
    for r in rows:
        if "clips_per_s" not in r:
            where = f"{r.get('frames', '')} | {r.get('max_pixels', ''):,}" if r.get("max_pixels") else " | "
            out.append(f"| {where} | {r.get('error') or r.get('skipped')} | | | | | | |")
            continue
        eff = r["efficiency"]
        frac = eff.get("fraction_of_peak")
        flag = "" if r.get("size_honoured") is not False else " (budget NOT applied)"
        out.append(
            f"| {r['frames']} | {r['max_pixels']:,}{flag} | {r['steady_clips_per_s'] or '-'} | {r['clips_per_s']} | "
            f"{r['prompt_tokens']} | {r['vision_tokens']} | {eff.get('tflop_per_clip')} | "
            f"{'' if frac is None else f'{frac:.0%}'} | {r['done']} / {r['clips']} |"
        )
    if ctx.sim:
        out += ["", "SIMULATED REHEARSAL: simulated replicas on a CPU machine; not GPU figures."]
    return "\n".join(out)


def provenance(frame_preprocess: str | None, replica_args: str | None) -> dict:
    """What a point was measured with beyond frames and pixels: where the frames were prepared, and the
    replica flags the call added to the recipe (e.g. --gpu-memory-utilization), so that a point measured off the
    recipe never reads as the recipe's."""
    out = {"frame_preprocess": frame_preprocess, "replica_args": replica_args}
    return {k: v for k, v in out.items() if v}


def failed_point(ctx: Ctx, r: dict, how: dict) -> dict:
    """The work-per-clip entry of a point whose clips failed: no rate, and why, in words a lead can act on."""
    errors = " ".join(str(e) for e in (r.get("failed_errors") or {}).values()) + " " + str(r.get("error") or "")
    if "out of memory" in errors.lower().replace("_", " "):  # torch's words and CUDA_ERROR_OUT_OF_MEMORY
        why = "the replica ran out of GPU memory decoding and preparing the frames"
    else:
        why = (errors.strip() or "its clips failed")[:160]
    done = f"{r['done']} of {r['clips']} clips done" if "done" in r else "no clip done"
    point = {
        "frames": r["frames"],
        "max_pixels": r["max_pixels"],
        "precision": ctx.precision,
        "gpu": _gpu(ctx),
        "gpus": 1,
        "via": "runner",
        "status": "failed",
        "clips_per_s": None,
        "note": f"{why} ({done}); fewer frames or pixels per clip",
        "date": r.get("date") or time.strftime("%Y-%m-%d", time.gmtime()),
        "source": "benchmarks/node_run.py workload (workload.json)",
    } | how
    if ctx.sim:
        point["simulated"] = True
    return point


def _gpu(ctx) -> str:
    """The GPU model a point is measured on (a repriced report's, else the machine's)."""
    return getattr(ctx, "gpu_model", "") or ""


def _key(p: dict, ctx, precision: str | None = None, gpu: str | None = None) -> tuple:
    """What one point of the table is: its frames, pixel budget, precision and GPU model (a point measured on an
    H100 never replaces an H200's)."""
    return (p.get("frames"), p.get("max_pixels"), precision or ctx.precision, gpu if gpu is not None else _gpu(ctx))


def write_table(ctx: Ctx, rows: list[dict], *, frame_preprocess: str | None = None, replica_args: str | None = None):
    """The committed work-per-clip table with the points measured now (and honoured) replaced, to OUT; each
    point says how it was measured (`provenance`)."""
    how = provenance(frame_preprocess, replica_args)
    try:
        table = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        table = {"points": []}
    points = table.setdefault("points", [])
    for r in rows:
        if r.get("failed") or (r.get("error") and r.get("max_pixels")):
            # its clips/s counts the clips that got through, not the work of a point: not priced, and the point
            # says so (an older rate at it would price a job the fleet now fails)
            key = _key(r, ctx)
            points[:] = [p for p in points if _key(p, ctx, p.get("precision"), p.get("gpu")) != key]
            points.append(failed_point(ctx, r, how))
            continue
        if "clips_per_s" not in r or r.get("size_honoured") is False or not r.get("clips_per_s"):
            continue
        eff = r["efficiency"]
        new = {
            "frames": r["frames"],
            "max_pixels": r["max_pixels"],
            "precision": ctx.precision,
            "gpu": _gpu(ctx),
            "gpus": 1,
            "via": "runner",
            "status": "measured",
            # steady where the job was long enough for one (>= 20 clips), else the whole job, and it says which
            "clips_per_s": r["steady_clips_per_s"] or r["clips_per_s"],
            "rate": (
                "steady (while the runner held its in-flight window)"
                if r["steady_clips_per_s"]
                else "whole job (too few clips)"
            ),
            "clips_per_s_whole_job": r["clips_per_s"],
            "prompt_tokens": r["prompt_tokens"],
            "completion_tokens": r["completion_tokens"],
            "vision_tokens": r["vision_tokens"],
            "tflop_per_clip": eff.get("tflop_per_clip"),
            "fraction_of_peak": eff.get("fraction_of_peak"),
            "peak_tflops": eff.get("peak_tflops_per_gpu"),
            "peak_source": eff.get("peak_source"),
            "config": f"node_run workload, {'steady over' if r['steady_clips_per_s'] else 'whole job of'} "
            f"{r['done']} clips",
            "date": r["date"],
            "source": "benchmarks/node_run.py workload (workload.json)",
        } | how
        if ctx.sim:
            new["simulated"] = True  # serving.cost never reads a simulated point
        key = _key(r, ctx)
        points[:] = [p for p in points if _key(p, ctx, p.get("precision"), p.get("gpu")) != key]
        points.append(new)
    points.sort(key=lambda p: (p.get("gpu") or "", p.get("precision", ""), p.get("frames", 0), -p.get("max_pixels", 0)))
    table["updated"] = time.strftime("%Y-%m-%d", time.gmtime())
    if ctx.sim:
        table["simulated"] = "SIMULATED REHEARSAL: do not commit over docs/work-per-clip.json"
    path = ctx.out / "work-per-clip.json"
    path.write_text(json.dumps(table, indent=1) + "\n")
    return path


def table_points(path, precision: str | None = None) -> list[dict]:
    """The measured points of a work-per-clip table (at `precision`, or every one), as plot() draws them."""
    from serving import cost_records

    return [
        p
        for p in cost_records.load_table(path)["points"]
        if (precision is None or p.get("precision") == precision)
        and p.get("status") == "measured"
        and p.get("clips_per_s")
    ]


def plot(ctx: Ctx, table_path) -> Path | None:
    """The whole work-per-clip table (its measured points, the ones measured now included): clips/s, prompt
    tokens and the share of the peak against the pixel budget, one row of panels per GPU model, one line per frame
    count and precision (FP8 dashed); a point whose frames were prepared on the CPU (before 2026-12-02's recipe)
    drawn hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = table_points(table_path)
    if not points:
        return None
    models = sorted({p.get("gpu") or "GPU not recorded" for p in points})
    fig, axes = plt.subplots(len(models), 3, figsize=(14, 4 * len(models)), squeeze=False)
    all_frames = sorted({p["frames"] for p in points})
    for ax, model in zip(axes, models):
        on = [p for p in points if (p.get("gpu") or "GPU not recorded") == model]
        for precision in sorted({p.get("precision") or "bf16" for p in on}):
            for frames in sorted({p["frames"] for p in on}):
                pts = sorted(
                    (p for p in on if p["frames"] == frames and (p.get("precision") or "bf16") == precision),
                    key=lambda p: p["max_pixels"],
                )
                if not pts:
                    continue
                xs = [p["max_pixels"] / 1e6 for p in pts]
                color = f"C{all_frames.index(frames)}"
                style = "--" if precision == "fp8" else "-"
                ys = (
                    [p["clips_per_s"] for p in pts],
                    [p.get("prompt_tokens") or 0 for p in pts],
                    [100 * (p.get("fraction_of_peak") or 0) for p in pts],
                )
                for a, y in zip(ax, ys):
                    a.plot(xs, y, style, color=color, label=f"{frames} frames, {precision}")
                    for x, v, p in zip(xs, y, pts):
                        cpu = p.get("frame_preprocess") == "cpu"
                        marker = "^" if precision == "fp8" else "o"
                        a.plot([x], [v], marker, color=color, markerfacecolor="white" if cpu else color)
        labels = ("clips/s per GPU (steady, else whole job)", "prompt tokens per clip", "% of the precision's peak")
        for a, y in zip(ax, labels):
            a.set_title(model, fontsize=9)
            a.set_xlabel("pixels per clip, all frames (millions)")
            a.set_ylabel(y)
            a.set_ylim(bottom=0)
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
    title = "Work per clip: Qwen3-VL-8B through our runner, one GPU per row (hollow: frames prepared on the CPU)"
    if ctx.sim:
        title = "SIMULATED REHEARSAL (no GPU): " + title
    fig.suptitle(title, color="red" if ctx.sim else "black")
    fig.tight_layout()
    path = ctx.out / "work-per-clip.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def reprice(report: dict, in_flight: int) -> list[dict]:
    """The rows of a saved workload report priced again under today's rules: a point whose job was shorter than
    STEADY_WAVES in-flight windows has no steady rate (its whole-job rate is the figure) and its share of the peak
    is taken at that rate. For a report written before the rule (2026-12-02: 48-clip points at 48 in flight read
    as 5-105 'steady' clips/s, 283-1421 % of the peak)."""
    from benchmarks.node.jobs import STEADY_WAVES

    rows = []
    for r in report["rows"]:
        r = copy.deepcopy(r)
        if "clips_per_s" in r and r["done"] < max(20, STEADY_WAVES * in_flight):
            r["steady_clips_per_s"] = None
            eff = r["efficiency"]
            rate = r["clips_per_s"]
            eff["clips_per_s"] = rate
            eff["achieved_tflops"] = round(eff["tflop_per_clip"] * rate, 1)
            eff["fraction_of_peak"] = round(eff["tflop_per_clip"] * rate / eff["peak_tflops_per_gpu"], 3)
            eff["rate"] = "whole job (too few clips for a steady rate)"
        rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.node.workload REPORT OUT [--in-flight N]`: price a saved workload.json again (see
    `reprice`) and write OUT/workload.md, OUT/work-per-clip.json (the committed table with these points replaced:
    copy it over docs/work-per-clip.json) and OUT/work-per-clip.png (that whole table)."""
    import argparse
    import types

    p = argparse.ArgumentParser(prog="python -m benchmarks.node.workload", description=main.__doc__)
    p.add_argument("report", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--in-flight", type=int, default=48, help="requests in flight when it ran (default 48: one replica)")
    a = p.parse_args(argv)
    report = json.loads(a.report.read_text())
    a.out.mkdir(parents=True, exist_ok=True)
    ctx = types.SimpleNamespace(
        out=a.out,
        precision=report.get("precision", "bf16"),
        sim=bool(report.get("simulated")),
        gpu_model=report.get("gpu") or "",
    )
    rows = reprice(report, a.in_flight)
    check_honoured(rows)
    (a.out / "workload.md").write_text(table(ctx, rows) + "\n")
    print(table(ctx, rows))
    # the report's own provenance: a repriced point keeps the flags it was measured with
    written = write_table(
        ctx, rows, frame_preprocess=report.get("frame_preprocess"), replica_args=report.get("replica_args")
    )
    print(written, plot(ctx, written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
