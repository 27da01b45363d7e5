"""Synthetic driving clips for a demo library (the hostile corpus of the reliability tests is data.library.hostile).

Everything is written with PyAV (data.library.clipgen): no system ffmpeg.

`make_library(dir, count, seed=...)` writes `count` driving-like clips: sky, a road with lane markings that
move towards the camera, a few boxes as cars and pedestrians, each with a sidecar JSON (camera, route,
timestamp, weather hint) beside it, plus three deliberately broken files (zero-length, truncated, an HTML
page named .mp4). The same seed gives the same file list and sidecars (pixels too, with the same FFmpeg).

Two profiles:
- default (the demo launch.sh makes on first run): 640x360 at 15 fps, 4-8 s, x264 `veryfast` -- about a
  minute for 24 clips on 2 cores;
- `realistic=True` (`--realistic`): 720p and 1080p at 30 fps, 10-20 s, 4-8 Mb/s, some HEVC -- for the GPU
  benchmark. Every clip has a GOP of about one second.

`python -m data.demo DIR --hostile` writes the hostile corpus instead (data.library.hostile.write_hostile_corpus).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.library import clipgen, hostile
from data.library.hostile import write_hostile_corpus

CAMERAS = ("front_center", "front_wide", "rear", "left_repeater", "right_repeater")
WEATHER_HINTS = ("clear", "cloudy", "rain", "fog", "snow")
LIGHTING_HINTS = ("daylight", "dawn_dusk", "night_lit")
BROKEN_FILES = {
    "broken/zero_length.mp4": "zero-length",
    "broken/truncated.mp4": "truncated",
    "broken/html_page.mp4": "not a video",
}


@dataclass(frozen=True)
class ClipSpec:
    """Everything that decides one synthetic clip (derived from the seed and the clip index alone)."""

    rel_path: str
    seconds: float
    fps: int
    width: int
    height: int
    codec: str  # libx264 | libx265
    bitrate: int
    preset: str
    seed: int
    weather: str
    lighting: str
    sidecar: dict


def plan(
    count: int,
    seed: int = 0,
    *,
    realistic: bool = False,
    height: int | None = None,
    min_seconds: float | None = None,
    max_seconds: float | None = None,
    fps: int | None = None,
    hevc_share: float = 0.2,
) -> list[ClipSpec]:
    """The clips a library of `count` would hold, deterministically for `seed`."""
    lo = min_seconds if min_seconds is not None else (10.0 if realistic else 4.0)
    hi = max_seconds if max_seconds is not None else (20.0 if realistic else 8.0)
    if hi < lo:
        raise ValueError("max seconds must be >= min seconds")
    specs = []
    base = dt.datetime(2024, 3, 1, 6, 0, tzinfo=dt.timezone.utc)
    for i in range(count):
        rng = random.Random(f"{seed}:{i}")
        h = height or (rng.choice((720, 1080)) if realistic else 360)
        w = int(round(h * 16 / 9 / 2)) * 2
        h -= h % 2
        route = f"R{rng.randrange(1, 40):03d}"
        camera = rng.choice(CAMERAS)
        codec = "libx265" if rng.random() < hevc_share else "libx264"
        weather = rng.choice(WEATHER_HINTS)
        lighting = rng.choice(LIGHTING_HINTS)
        when = base + dt.timedelta(days=rng.randrange(0, 200), seconds=rng.randrange(0, 14 * 3600))
        sidecar = {
            "camera": camera,
            "route": route,
            "timestamp": when.isoformat().replace("+00:00", "Z"),
            "vehicle": f"demo-{rng.randrange(1, 6):02d}",
            "weather_hint": weather,
            "lighting_hint": lighting,
            "synthetic": True,
            "generator": "data.demo",
            "seed": seed,
        }
        specs.append(
            ClipSpec(
                rel_path=f"{route}/{camera}_{i:04d}.mp4",
                seconds=round(rng.uniform(lo, hi), 2),
                fps=fps or (30 if realistic else 15),
                width=w,
                height=h,
                codec=codec,
                bitrate=rng.randrange(4_000_000, 8_000_001, 500_000),
                preset=("fast" if codec == "libx264" else "ultrafast")
                if realistic
                else ("veryfast" if codec == "libx264" else "ultrafast"),
                seed=rng.randrange(2**31),
                weather=weather,
                lighting=lighting,
                sidecar=sidecar,
            )
        )
    return specs


# -- rendering ---------------------------------------------------------------------------------------------

_SKY = {
    "clear": ((90, 150, 230), (170, 205, 245)),
    "cloudy": ((140, 150, 160), (190, 195, 200)),
    "rain": ((95, 100, 110), (140, 145, 150)),
    "fog": ((190, 190, 195), (215, 215, 215)),
    "snow": ((200, 205, 215), (230, 232, 236)),
}
_DIM = {"daylight": 1.0, "dawn_dusk": 0.7, "night_lit": 0.35}


class _Scene:
    """A road seen from the ego car. Static parts are drawn once; markings and road users move per frame."""

    def __init__(self, w: int, h: int, weather: str, lighting: str, rng: random.Random):
        self.w, self.h = w, h
        self.horizon = int(h * 0.45)
        dim = _DIM[lighting]
        bg = np.empty((h, w, 3), np.float32)
        top, bottom = (np.array(c, np.float32) for c in _SKY[weather])
        t = np.linspace(0, 1, self.horizon, dtype=np.float32)[:, None]
        bg[: self.horizon] = (top * (1 - t) + bottom * t)[:, None, :]
        bg[self.horizon :] = (70, 110, 60) if weather != "snow" else (225, 228, 232)
        ys = np.arange(self.horizon, h)
        z = (ys - self.horizon + 1) / (h - self.horizon)  # 0 at the horizon, 1 at the bottom
        self.z = z
        xs = np.arange(w)[None, :]
        center = w / 2 + (rng.random() - 0.5) * w * 0.2 * (1 - z)[:, None] ** 2
        half = (w * (0.03 + 0.55 * z))[:, None]
        road = np.abs(xs - center) < half
        region = bg[self.horizon :]
        region[road] = (85, 85, 90)
        edge = np.abs(np.abs(xs - center) - half * 0.97) < np.maximum(1, half * 0.015)
        region[edge & road] = (230, 230, 230)
        self.bg = np.clip(bg * dim, 0, 255).astype(np.uint8)
        # dashed lane markings at +-1/3 of the half width; their "depth" decides whether a dash is on
        marks = (np.abs(np.abs(xs - center) - half / 3) < np.maximum(0.6, half * 0.012)) & road
        yy, xx = np.nonzero(marks)
        self.mark_idx = (yy + self.horizon) * w + xx
        self.mark_depth = (1.0 / z[yy]).astype(np.float32)
        self.mark_color = np.array([235 * dim] * 3, np.uint8)
        self.center, self.half = center[:, 0], half[:, 0]
        self.users = [
            (
                rng.choice((-2 / 3, 0.0, 2 / 3)),
                rng.uniform(2, 30),
                rng.uniform(-0.4, 0.4),
                tuple(
                    int(c)
                    for c in rng.choice(((180, 30, 30), (30, 60, 160), (220, 220, 220), (30, 30, 30), (200, 160, 20)))
                ),
            )
            for _ in range(rng.randrange(1, 5))
        ]
        self.peds = [(rng.choice((-1.3, 1.3)), rng.uniform(4, 25)) for _ in range(rng.randrange(0, 3))]

    def frame(self, t: float) -> np.ndarray:
        img = self.bg.copy()
        flat = img.reshape(-1, 3)
        on = ((self.mark_depth * 0.6 - t * 2.5) % 1.0) < 0.45
        flat[self.mark_idx[on]] = self.mark_color
        rows = len(self.z)
        for lane, dist0, speed, color in self.users:
            dist = 2 + (dist0 + speed * t * 10) % 30  # in road units ahead of the ego car
            self._box(img, lane, dist, rows, 0.5, 0.45, color)
        for side, dist0 in self.peds:
            dist = 2 + (dist0 - t * 6) % 25
            self._box(img, side, dist, rows, 0.12, 0.5, (240, 120, 40))
        return img

    def _box(self, img, lane, dist, rows, width_frac, height_frac, color):
        z = min(1.0, 1.5 / dist)
        r = int(z * (rows - 1))
        y = self.horizon + r
        cx = self.center[r] + lane * self.half[r]
        bw = max(2, int(self.half[r] * width_frac))
        bh = max(2, int(bw * (height_frac / width_frac if width_frac < 0.3 else 0.8)))
        x0, x1 = int(max(0, cx - bw / 2)), int(min(self.w, cx + bw / 2))
        y0 = max(0, y - bh)
        if x1 > x0 and y > y0:
            img[y0:y, x0:x1] = color


def write_clip(path: str | Path, spec: ClipSpec) -> None:
    """Render and encode one clip (H.264 or HEVC in MP4, GOP = 1 s, target bitrate from the spec)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scene = _Scene(spec.width, spec.height, spec.weather, spec.lighting, random.Random(spec.seed))
    n = max(1, int(round(spec.seconds * spec.fps)))
    tmp = path.with_name(path.name + ".part")
    opts = {"preset": spec.preset, "g": str(spec.fps), "keyint_min": str(spec.fps)}
    if spec.codec == "libx265":
        opts["x265-params"] = f"log-level=error:keyint={spec.fps}:min-keyint={spec.fps}"
    else:
        opts["x264-params"] = "threads=1"
    clipgen.encode(
        tmp,
        (scene.frame(i / spec.fps) for i in range(n)),
        width=spec.width,
        height=spec.height,
        codec=spec.codec,
        rate=spec.fps,
        fmt="mp4",
        bit_rate=spec.bitrate,
        codec_tag="hvc1" if spec.codec == "libx265" else None,  # what Apple players expect; FFmpeg reads either
        options=opts,
    )
    os.replace(tmp, path)


def _write_one(root: str, spec: ClipSpec) -> str:
    target = Path(root) / spec.rel_path
    write_clip(target, spec)
    target.with_suffix(".json").write_text(json.dumps(spec.sidecar, indent=2, sort_keys=True) + "\n")
    return spec.rel_path


def make_library(
    root: str | Path,
    count: int,
    seed: int = 0,
    *,
    workers: int | None = None,
    broken: bool = True,
    progress: bool = False,
    **plan_kwargs,
) -> list[str]:
    """Write a demo library of `count` clips (+ sidecars, + broken files) under `root`.

    Clips that already exist are kept (a second run with the same seed is a no-op). Returns the clip paths
    relative to `root`, broken files included."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    specs = plan(count, seed, **plan_kwargs)
    todo = [s for s in specs if not (root / s.rel_path).exists()]
    workers = workers or os.cpu_count() or 1
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="clip", desc="demo clips", file=sys.stderr)
    if todo:
        if workers == 1:
            for s in todo:
                _write_one(str(root), s)
                bar and bar.update()
        else:
            with cf.ProcessPoolExecutor(workers) as pool:
                for fut in cf.as_completed([pool.submit(_write_one, str(root), s) for s in todo]):
                    fut.result()
                    bar and bar.update()
    if bar:
        bar.close()
    paths = [s.rel_path for s in specs]
    if broken:
        paths += _write_broken(root, specs)
    return paths


def _write_broken(root: Path, specs: list[ClipSpec]) -> list[str]:
    (root / "broken").mkdir(exist_ok=True)
    (root / "broken/zero_length.mp4").write_bytes(b"")
    (root / "broken/html_page.mp4").write_text(
        "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>Not Found</body></html>\n"
    )
    source = root / specs[0].rel_path if specs else None
    if source is not None and source.exists():
        data = source.read_bytes()
        (root / "broken/truncated.mp4").write_bytes(data[: len(data) // 2])
    else:
        (root / "broken/truncated.mp4").write_bytes(hostile.gradient_clip(options={"g": "10"})[:900])
    return sorted(BROKEN_FILES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data.demo",
        description="Write a synthetic library of driving-like clips (with sidecar JSON and a few broken "
        "files), or a corpus of hostile files.",
        epilog="examples:\n"
        "  python -m data.demo var/clips --count 24\n"
        "  python -m data.demo /tmp/tiny --count 4 --height 90 --min-seconds 1 --max-seconds 2\n"
        "  python -m data.demo /data/bench --count 8 --realistic --min-seconds 10 --max-seconds 10\n"
        "  python -m data.demo /tmp/hostile --hostile",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dir", help="folder to write into (created if missing)")
    parser.add_argument("--count", type=int, default=24, help="number of clips (default 24)")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same library (default 0)")
    parser.add_argument(
        "--realistic", action="store_true", help="720p/1080p, 30 fps, 10-20 s, 4-8 Mb/s, some HEVC (for GPU benchmarks)"
    )
    parser.add_argument("--height", type=int, help="force every clip to this height (16:9)")
    parser.add_argument("--fps", type=int, help="frames per second (default 15, or 30 with --realistic)")
    parser.add_argument("--min-seconds", type=float, help="shortest clip (default 4, or 10 with --realistic)")
    parser.add_argument("--max-seconds", type=float, help="longest clip (default 8, or 20 with --realistic)")
    parser.add_argument("--hevc-share", type=float, default=0.2, help="share of HEVC clips (default 0.2)")
    parser.add_argument("--no-broken", action="store_true", help="leave out the deliberately broken files")
    parser.add_argument("--workers", type=int, help="encoder processes (default: number of cores)")
    parser.add_argument("--hostile", action="store_true", help="write the hostile corpus instead")
    args = parser.parse_args(argv)
    if args.hostile:
        expected = write_hostile_corpus(args.dir)
        print(f"wrote {len(expected)} hostile files to {args.dir}", file=sys.stderr)
        return 0
    paths = make_library(
        args.dir,
        args.count,
        args.seed,
        workers=args.workers,
        broken=not args.no_broken,
        progress=True,
        realistic=args.realistic,
        height=args.height,
        fps=args.fps,
        min_seconds=args.min_seconds,
        max_seconds=args.max_seconds,
        hevc_share=args.hevc_share,
    )
    print(f"{len(paths)} files in {args.dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
