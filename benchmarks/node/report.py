"""Stage `report`: table.md (for docs/BENCHMARKS.md) and scaling.png from the stage reports."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

from benchmarks.node.context import DECODERS, SIM_NOTE, Ctx
from serving import flops


def stage_report(ctx: Ctx) -> dict:
    def load(stage: str) -> dict | None:
        try:
            return json.loads((ctx.out / f"{stage}.json").read_text())
        except (OSError, ValueError):
            return None

    scaling, launch, gputest, kill = load("scaling"), load("launch"), load("gputest"), load("kill")
    threads, workload = load("threads"), load("workload")
    found = [r for r in (launch, gputest, scaling, kill, threads, workload) if r]
    sim = any(r.get("simulated") for r in found) if found else ctx.sim  # what ran, not what this call says
    size = next((r.get("size") for r in found if r.get("size")), ctx.size)
    md = [
        f"### {'SIMULATED REHEARSAL (not GPU figures): ' if sim else ''}node run, "
        f"{found[0]['date'][:10] if found else time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"{size} {'simulated replicas' if sim else 'GPUs'}",
        "",
    ]
    if sim:
        md += [f"> {SIM_NOTE}", ""]
    argv = next((r.get("argv") for r in found if r.get("argv")), None)
    if argv:
        md += [f"Command: `{shlex.join(argv)}`", ""]
    if launch:
        md += [
            f"- start-up (`./launch.sh`, {launch.get('clips_ingested')} clips): fleet up after "
            f"{launch.get('fleet_up_s')} s (fleet start to up {launch.get('fleet_start_to_up_s')} s), app after "
            f"{launch.get('app_up_s')} s; first healthy: {launch.get('first_healthy_s')}"
        ]
    if gputest:
        tr = gputest.get("test_report") if isinstance(gputest.get("test_report"), dict) else {}
        eff = (tr.get("job") or {}).get("efficiency") if isinstance(tr.get("job"), dict) else None
        md += [
            f"- GPU test (`tests/serving/test_gpu_fleet.py`, {gputest.get('clips_asked')} clips, GPUs "
            f"{gputest.get('gpus')}): {'passed' if gputest.get('ok') else 'FAILED'}; job {tr.get('job')}"
            + (f"; compute: {flops.summary(eff)}" if eff else "")
        ]
    if kill:
        j = kill.get("job") or {}
        k = kill.get("killed") or {}
        md += [
            f"- replica killed mid-job ({k.get('replica')} by process group, with {k.get('victim_running')} "
            f"requests running on it, {(k.get('finished_before') or {}).get('done')} clips done; "
            f"{kill.get('replicas')} replicas, {kill.get('clips')} clips): job {j.get('state')}, "
            f"{j.get('missing')} missing, {j.get('duplicated')} duplicated, {j.get('failed')} failed"
        ]
    md.append("")
    if scaling:
        vias = sorted({r.get("via") for r in scaling["rows"] if r.get("via")})
        md += [f"Scaling: {scaling.get('method')}. Requests went through: {'; '.join(vias)}.", ""]
        md += table(scaling)
        md += [""] + [f"- goal {g['goal']}: {g['verdict']}" for g in scaling.get("goals", [])]
        png = plot(ctx, scaling)
        if png:
            md += ["", f"![clips/s vs GPUs]({png.name})"]
    for name, rep in (("CPU threads per replica", threads), ("Work per clip", workload)):
        if rep and rep.get("table"):
            md += ["", f"{name}: {rep.get('method')}.", "", rep["table"]]
    text = "\n".join(md) + "\n"
    (ctx.out / "table.md").write_text(text)
    print(text)
    return {
        "ok": scaling is not None,
        "table": str(ctx.out / "table.md"),
        "plot": str(ctx.out / "scaling.png") if (ctx.out / "scaling.png").exists() else None,
        "stages_found": [
            s for s, v in (("launch", launch), ("gputest", gputest), ("scaling", scaling), ("kill", kill)) if v
        ],
    }


def table(scaling: dict) -> list[str]:
    """One row per replica count, the decoders side by side: clips/s (x vs 1 replica), cores busy, core-s/clip."""
    rows = [r for r in scaling["rows"] if "error" not in r]
    decs = [d for d in DECODERS if any(r["decoder"] == d for r in rows)]
    head = (
        "| GPUs (replicas) | "
        + " | ".join(f"{d} clips/s (x 1 GPU) | {d} cores busy | {d} core-s/clip | {d} % of peak" for d in decs)
        + " | clips per run | failed |"
    )
    out = [head, "|" + "---|" * (3 + 4 * len(decs))]
    for n in sorted({r["replicas"] for r in rows}):
        cells, clips, failed = [], set(), 0
        for d in decs:
            r = next((r for r in rows if r["decoder"] == d and r["replicas"] == n), None)
            if r is None:
                cells += ["", "", "", ""]
                continue
            clips.add(r["clips"])
            failed += r["failed"]
            frac = (r.get("efficiency") or {}).get("fraction_of_peak")
            cells += [
                f"{r['clips_per_s']} ({r.get('vs_1_replica', '?')}x)",
                str(r["cores_busy"]),
                str(r["core_s_per_clip"]),
                "" if frac is None else f"{frac:.0%}",
            ]
        out.append(f"| {n} | " + " | ".join(cells) + f" | {'/'.join(map(str, sorted(clips)))} | {failed} |")
    out += [f"| failed: {r['decoder']} | {r['error'][:100]} |" for r in scaling["rows"] if "error" in r]
    return out


def plot(ctx: Ctx, scaling: dict) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in scaling["rows"] if "error" not in r]
    if not rows:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"nvdec": "tab:green", "opencv": "tab:red"}
    for dec in sorted({r["decoder"] for r in rows}):
        pts = sorted((r["replicas"], r["clips_per_s"], r["cores_busy"]) for r in rows if r["decoder"] == dec)
        label = f"{dec} ({DECODERS[dec]})"
        ax[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", c=colors.get(dec), label=label)
        ax[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", c=colors.get(dec), label=label)
        one = next((p[1] for p in pts if p[0] == 1), None)
        if one and dec == "nvdec":
            xs = [p[0] for p in pts]
            ax[0].plot(xs, [one * x for x in xs], ":", c="gray", label="nvdec ideal (n x 1 replica)")
    ax[1].axhline(os.cpu_count() or 0, ls="--", c="k", lw=0.8, label=f"cores on this machine ({os.cpu_count()})")
    counts = sorted({r["replicas"] for r in rows})
    ax[0].set_xlabel("GPUs (replicas behind the router)")
    ax[0].set_ylabel("clips/s through our runner")
    ax[1].set_xlabel("GPUs (replicas behind the router)")
    ax[1].set_ylabel("machine CPU cores busy")
    for x in ax:
        x.set_xticks(counts)
        x.set_ylim(bottom=0)
        x.legend(fontsize=8)
        x.grid(alpha=0.3)
    title = "clips/s vs GPUs, NVDEC vs CPU decoding"
    if ctx.sim:
        title = "SIMULATED REHEARSAL (no GPU, no decoder): " + title
    fig.suptitle(title, color="red" if ctx.sim else "black")
    fig.tight_layout()
    path = ctx.out / "scaling.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
