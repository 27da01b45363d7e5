"""Distinct synthetic clips for the fleet benchmark (`python3 benchmarks/bench_fleet.py clips DIR`): a road
with moving lane markings, textured asphalt and a few boxes as cars, different per clip (seeded), H.264 and HEVC
alternating, encoded on NVENC when PyAV has it, else libx264/libx265 (data.library.clipgen.encode)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.library import clipgen


def _frame_maker(width: int, height: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    base = np.zeros((height, width, 3), np.uint8)
    horizon = height // 2
    sky = np.linspace(200, 120, horizon, dtype=np.float32)[:, None]
    base[:horizon] = np.stack([sky * 0.8, sky * 0.9, sky], -1).astype(np.uint8)
    base[horizon:] = (60, 60, 65)
    texture = rng.integers(0, 40, (height * 2, width, 3), dtype=np.uint8)
    cars = [
        (rng.uniform(0.2, 0.8), rng.uniform(0.55, 0.9), rng.uniform(-0.004, 0.004), rng.integers(40, 255, 3))
        for _ in range(int(rng.integers(2, 6)))
    ]

    def frame(i: int):
        img = base.copy()
        off = (i * 7) % height
        img[horizon:] = img[horizon:] + texture[off : off + height - horizon]
        for k in range(8):  # lane markings moving towards the camera
            y = horizon + ((k * (height // 16) + i * 9) % (height - horizon))
            w = max(2, (y - horizon) // 12)
            for lane in (0.35, 0.65):
                x = int(width * (0.5 + (lane - 0.5) * (y - horizon) / (height - horizon) * 2))
                img[y : y + w * 2, max(0, x - w) : x + w] = 230
        for cx, cy, vx, color in cars:
            x = int((cx + vx * i) % 1.0 * width)
            y = int(cy * height)
            s = int((cy - 0.45) * height * 0.5)
            img[max(0, y - s) : y, max(0, x - s) : min(width, x + s)] = color
        return img

    return frame


def make_clip(
    path: str,
    seconds: float,
    height: int,
    codec: str,
    bitrate: float,
    gop: int,
    fps: int,
    seed: int,
    prefer_nvenc: bool = True,
) -> str:
    width = int(round(height * 16 / 9 / 2)) * 2
    names = {"h264": ["h264_nvenc", "libx264"], "hevc": ["hevc_nvenc", "libx265"]}[codec]
    if not prefer_nvenc:
        names = names[1:]
    last_err = None
    for name in names:
        try:
            options = None
            if name.startswith("lib"):
                options = (
                    {"preset": "ultrafast"}
                    if name == "libx264"
                    else {"preset": "ultrafast", "x265-params": "log-level=error"}
                )
            make = _frame_maker(width, height, seed)
            clipgen.encode(
                path,
                (make(i) for i in range(int(seconds * fps))),
                width=width,
                height=height,
                codec=name,
                rate=fps,
                bit_rate=int(bitrate),
                gop_size=gop,
                options=options,
            )
            return name
        except Exception as e:  # encoder missing or refused (no NVENC here): try the next
            last_err = e
    raise RuntimeError(f"no encoder for {codec}: {last_err}")


def cmd_clips(a) -> None:
    from concurrent.futures import ProcessPoolExecutor

    out = Path(a.dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for i in range(a.count):
        codec = "hevc" if i % 3 == 2 else "h264"  # two thirds H.264, one third HEVC
        jobs.append((str(out / f"bench_{i:04d}_{codec}.mp4"), a.seconds, a.height, codec, a.bitrate, a.gop, 30, i))
    t0 = time.time()
    encoders: dict[str, int] = {}
    with ProcessPoolExecutor(max_workers=a.workers or os.cpu_count()) as ex:
        for name in ex.map(make_clip, *zip(*jobs)):
            encoders[name] = encoders.get(name, 0) + 1
    size = sum(Path(j[0]).stat().st_size for j in jobs)
    print(
        json.dumps(
            {
                "clips": a.count,
                "seconds": round(time.time() - t0, 1),
                "encoders": encoders,
                "mean_mb": round(size / a.count / 1e6, 2),
            }
        )
    )
