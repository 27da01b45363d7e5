"""The clip library (generated once into a cache, reused by later runs), clip roots linked from it, ingest."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from benchmarks.node.context import Ctx, run_module, say


def clip_args(ctx: Ctx) -> list[str]:
    if ctx.a.small_clips:  # rehearsal: tiny clips, so 2 cores generate and ingest them in seconds
        return ["--height", "90", "--min-seconds", "1.5", "--max-seconds", "2", "--fps", "15"]
    return []


def clip_library(ctx: Ctx, count: int | None = None) -> Path:
    """The cached library (library/ + hostile/) holding at least `count` clips (default --clips). data.demo's
    plan is the same prefix for any count and it keeps the clips already written (atomically), so a larger
    count only adds clips; generation runs on every core."""
    count = count or ctx.a.clips
    d = ctx.clip_cache / ("small" if ctx.a.small_clips else "realistic")
    try:
        have = json.loads((d / ".complete").read_text()).get("clips", 0)
    except (OSError, ValueError):
        have = 0
    if have >= count:
        return d
    say(
        f"generating {count} distinct clips into {d} on {ctx.workers} processes "
        f"({have} there already; cached for later runs)"
    )
    log = ctx.logs / "clips.log"
    t = time.time()
    library = ["--count", str(count), "--realistic", "--no-broken", "--workers", str(ctx.workers), *clip_args(ctx)]
    run_module(ctx, "data.demo", [str(d / "library"), *library], log, "clip generation")
    run_module(ctx, "data.demo", [str(d / "hostile"), "--hostile"], log, "hostile corpus")
    (d / ".complete").write_text(
        json.dumps({"clips": count, "seconds": round(time.time() - t, 1), "generated_now": count - have})
    )
    return d


def link_tree(src: Path, dst: Path, limit: int | None = None) -> int:
    """Hard-link (copy where links fail) the first `limit` .mp4 files of `src` (and their .json sidecars) into
    `dst`, or every file when there is no limit: real files inside the clip root (a symlink leaving the root is
    refused, as vLLM's --allowed-local-media-path does), nothing copied on one file system."""
    if limit is None:
        files = [
            f
            for f in sorted(src.rglob("*"))
            if f.is_file() and not f.name.startswith(".") and not f.name.endswith(".part")
        ]
    else:
        files = []
        for f in sorted(src.rglob("*.mp4"))[:limit]:
            files += [f] + ([f.with_suffix(".json")] if f.with_suffix(".json").exists() else [])
    for f in files:
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, target)
        except OSError:
            shutil.copy2(f, target)
    return sum(f.suffix == ".mp4" for f in files)


def fresh_clips(ctx: Ctx, folder: Path, into: str, count: int) -> int:
    """Empty `folder`, then link the first `count` cached clips into folder/`into` (the cache grows to `count`
    first); returns how many clips are there."""
    lib = clip_library(ctx, count)
    shutil.rmtree(folder, ignore_errors=True)
    return link_tree(lib / "library", folder / into, limit=count)


def stage_clips(ctx: Ctx) -> dict:
    t = time.time()
    d = clip_library(ctx, ctx.a.clips)
    info = json.loads((d / ".complete").read_text())
    files = sorted((d / "library").rglob("*.mp4"))
    return {
        "ok": len(files) >= ctx.a.clips,
        "cache": str(d),
        "clips": len(files),
        "asked": ctx.a.clips,
        "hostile": len([f for f in (d / "hostile").iterdir() if f.is_file()]),
        "generation_s": info.get("seconds"),
        "this_run_s": round(time.time() - t, 1),
        "bytes": sum(f.stat().st_size for f in files),
    }


def ingest(ctx: Ctx, data_dir: Path, clip_root: Path, log: Path, *, media: bool = True) -> None:
    # PyAV on the CPU: the NVDEC path is slower for thumbnails (docs/GPU.md) and the GPUs are not up yet
    args = [str(clip_root), "--data-dir", str(data_dir), "--decoder", "pyav", "--quiet", "--workers", str(ctx.workers)]
    if not media:  # captioning needs the probe, not the review's thumbnails and filmstrips
        args.append("--no-media")
    run_module(ctx, "data.ingest", args, log, "ingest")
