"""Synthetic driving clips for a demo library, and a corpus of hostile files for reliability tests.

Everything is written with PyAV (its wheels bundle FFmpeg with libx264 and libx265): no system ffmpeg.

`make_library(dir, count, seed=...)` writes `count` driving-like clips: sky, a road with lane markings that
move towards the camera, a few boxes as cars and pedestrians, each with a sidecar JSON (camera, route,
timestamp, weather hint) beside it, plus three deliberately broken files (zero-length, truncated, an HTML
page named .mp4). The same seed gives the same file list and sidecars (pixels too, with the same FFmpeg).

Two profiles:
- default (the demo launch.sh makes on first run): 640x360 at 15 fps, 4-8 s, x264 `veryfast` -- about a
  minute for 24 clips on 2 cores;
- `realistic=True` (`--realistic`): 720p and 1080p at 30 fps, 10-20 s, 4-8 Mb/s, some HEVC -- for the GPU
  benchmark. Every clip has a GOP of about one second.

`write_hostile_corpus(dir)` writes >= 30 files that ingest must reject with a specific reason, and returns
{file name: keyword expected in the reason}. Keys are names relative to `dir` as `os.listdir` returns them
(the non-UTF-8 name therefore carries surrogate escapes). Ingest treats `dir` as the clip root.

What "unplayable" means here: a codec that neither vLLM's NVDEC decoder nor a browser plays. The fleet and the
review player accept H.264, HEVC, AV1, VP9 and VP8 (data.probe.PLAYABLE_CODECS); FFV1, MPEG-4 Part 2 and
Motion JPEG are valid video that FFmpeg decodes, but NVDEC and browsers do not, so they are refused at ingest
with "unsupported codec" rather than failing later on the GPU.

The 16k x 16k clip claims 16000x16000 in its MOV sample description (raw video, 2 tiny frames): FFmpeg refuses
to even report sizes above about 16,300 px square (av_image_check_size), and an H.264 stream's size comes from
its SPS, which the container cannot override, so a doctored raw-video header is the smallest honest claim.
The 10 h clip is 11 tiny H.264 frames one hour apart (1.8 kB on disk).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import fractions
import io
import json
import os
import random
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

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
    with av.open(str(tmp), "w", format="mp4") as out:
        s = out.add_stream(spec.codec, rate=spec.fps)
        s.width, s.height, s.pix_fmt = spec.width, spec.height, "yuv420p"
        s.bit_rate = spec.bitrate
        opts = {"preset": spec.preset, "g": str(spec.fps), "keyint_min": str(spec.fps)}
        if spec.codec == "libx265":
            opts["x265-params"] = f"log-level=error:keyint={spec.fps}:min-keyint={spec.fps}"
            s.codec_tag = "hvc1"  # what Apple players expect; FFmpeg reads either
        else:
            opts["x264-params"] = "threads=1"
        s.options = opts
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(scene.frame(i / spec.fps), format="rgb24")
            for p in s.encode(frame):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
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
        (root / "broken/truncated.mp4").write_bytes(_tiny_clip(faststart=False)[:900])
    return sorted(BROKEN_FILES)


# -- the hostile corpus ------------------------------------------------------------------------------------


def _encode(
    codec: str = "libx264",
    *,
    w: int = 64,
    h: int = 48,
    n: int = 30,
    rate: int = 10,
    pix_fmt: str = "yuv420p",
    fmt: str = "mp4",
    faststart: bool = False,
    pts_step: int | None = None,
    time_base: fractions.Fraction | None = None,
    options: dict | None = None,
) -> bytes:
    """A tiny clip in memory: a gradient that changes every frame."""
    if faststart:  # the muxer rewrites the file to move the index first: it needs a real file
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "clip." + fmt)
            _encode_into(
                target, codec, w, h, n, rate, pix_fmt, fmt, {"movflags": "+faststart"}, pts_step, time_base, options
            )
            return Path(target).read_bytes()
    buf = io.BytesIO()
    _encode_into(buf, codec, w, h, n, rate, pix_fmt, fmt, {}, pts_step, time_base, options)
    return buf.getvalue()


def _encode_into(target, codec, w, h, n, rate, pix_fmt, fmt, copts, pts_step, time_base, options) -> None:
    with av.open(target, "w", format=fmt, options=copts) as out:
        s = out.add_stream(codec, rate=rate)
        s.width, s.height, s.pix_fmt = w, h, pix_fmt
        if options:
            s.options = options
        if time_base is not None:
            s.time_base = time_base
        base = np.add.outer(np.arange(h), np.arange(w)).astype(np.uint8)
        for i in range(n):
            img = np.stack([base + i * 8, base * 2, 255 - base], axis=-1).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            if pts_step is not None:
                frame.pts, frame.time_base = i * pts_step, time_base
            for p in s.encode(frame):
                out.mux(p)
        for p in s.encode():
            out.mux(p)


def _tiny_clip(*, faststart: bool) -> bytes:
    return _encode(faststart=faststart, options={"g": "10"})


def _audio_only(codec: str, fmt: str) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        rate = 48000 if codec == "libopus" else 8000
        s = out.add_stream(codec, rate=rate)
        for i in range(10):
            samples = (np.sin(np.arange(960) / 10 + i) * 0.2).astype(np.float32)[None, :]
            f = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
            f.sample_rate, f.pts = rate, i * 960
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return buf.getvalue()


def _header_only(fmt: str) -> bytes:
    buf = io.BytesIO()
    out = av.open(buf, "w", format=fmt)
    s = out.add_stream("libx264", rate=10)
    s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
    out.start_encoding()
    out.close()
    return buf.getvalue()


def _claimed_16k() -> bytes:
    data = bytearray(_encode("rawvideo", w=16, h=16, n=2, rate=1, pix_fmt="rgb24", fmt="mov"))
    stsd = data.find(b"stsd")
    # VisualSampleEntry: size, type, reserved(6), data ref(2), pre-defined/reserved(16), width(2), height(2)
    struct.pack_into(">HH", data, stsd + 44, 16000, 16000)
    return bytes(data)


def _image(fmt: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    frames = [Image.new("RGB", (64, 48), (i * 40, 90, 160)) for i in range(3)]
    if fmt == "GIF":
        frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    else:
        frames[0].save(buf, format=fmt)
    return buf.getvalue()


def write_hostile_corpus(root: str | Path) -> dict[str, str]:
    """Write >= 30 hostile files under `root` (the clip root) and return {name: expected reason keyword}.

    Names are relative to `root`; the keyword is a lower-case substring of the probe_error that ingest
    records for that file (data.probe and data.ingest phrase the reasons)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    expected: dict[str, str] = {}

    def put(name: str, data: bytes, keyword: str) -> None:
        (root / name).write_bytes(data)
        expected[name] = keyword

    moov_end = _tiny_clip(faststart=False)
    faststart = _tiny_clip(faststart=True)
    put("zero_length.mp4", b"", "zero-length")
    for pct in (3, 25, 50, 75, 97):
        put(f"truncated_moov_at_end_{pct:02d}pct.mp4", moov_end[: len(moov_end) * pct // 100], "truncated")
    for pct in (30, 60, 90):
        put(f"truncated_faststart_{pct:02d}pct.mp4", faststart[: len(faststart) * pct // 100], "truncated")
    mdat = faststart.find(b"mdat") - 4
    put("moov_without_media_data.mp4", faststart[:mdat], "truncated")
    put("ftyp_only.mp4", moov_end[:32], "truncated")
    put(
        "html_named.mp4",
        b"<!DOCTYPE html>\n<html><head><title>Video</title></head><body><video src='x.mp4'></video></body></html>\n",
        "not a video",
    )
    put(
        "html_error_page.mov",
        b"\n  <html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>\n",
        "not a video",
    )
    put("plain_text.mp4", b"This is not a video, just a note someone saved with the wrong name.\n" * 20, "not a video")
    put("json_named.mkv", json.dumps({"error": "expired", "code": 403}).encode(), "not a video")
    put("random_bytes.mp4", random.Random(7).randbytes(4096), "not a video")
    put("random_bytes_large.webm", random.Random(8).randbytes(200_000), "not a video")
    put("jpeg_still.mp4", _image("JPEG"), "not a video")
    put("png_still.mov", _image("PNG"), "not a video")
    put("gif_animation.mp4", _image("GIF"), "not a video")
    put("audio_only_aac.mp4", _audio_only("aac", "mp4"), "audio only")
    put("audio_only_opus.mkv", _audio_only("libopus", "matroska"), "audio only")
    put("header_only_no_frames.mkv", _header_only("matroska"), "no frames")
    put("empty_movie_no_tracks.mp4", _header_only("mp4"), "no video stream")
    put("one_by_one_pixel.mp4", _encode(w=1, h=1, n=5, pix_fmt="yuv444p"), "absurd size")
    put("sixteen_k_square_claimed.mov", _claimed_16k(), "absurd size")
    put(
        "ten_hours_long.mp4",
        _encode(w=32, h=32, n=11, rate=1, time_base=fractions.Fraction(1, 1000), pts_step=3_600_000),
        "absurdly long",
    )
    put("ffv1_lossless.mkv", _encode("ffv1", n=5, fmt="matroska"), "unsupported codec")
    put("mpeg4_part2.mp4", _encode("mpeg4", n=5), "unsupported codec")
    put("motion_jpeg.mov", _encode("mjpeg", n=5, pix_fmt="yuvj420p", fmt="mov"), "unsupported codec")
    # a perfectly good clip whose *name* is not UTF-8: it cannot be stored, shown or sent as text
    bad_name = os.fsdecode(b"bad_name_\xff\xfe.mp4")
    (root / bad_name).write_bytes(_tiny_clip(faststart=True))
    expected[bad_name] = "not valid utf-8"
    for name, target in (
        ("symlink_to_etc_passwd.mp4", "/etc/passwd"),
        ("symlink_up_and_out.mp4", "../" * 12 + "outside_the_root.mp4"),
    ):
        link = root / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
        expected[name] = "outside the clip root"
    dangling = root / "symlink_dangling.mp4"
    if dangling.is_symlink() or dangling.exists():
        dangling.unlink()
    dangling.symlink_to("does_not_exist.mp4")
    expected["symlink_dangling.mp4"] = "broken symlink"
    (root / "directory_named.mp4").mkdir(exist_ok=True)
    expected["directory_named.mp4"] = "not a regular file"
    fifo = root / "named_pipe.mp4"
    if not fifo.exists():
        os.mkfifo(fifo)
    expected["named_pipe.mp4"] = "not a regular file"
    return expected


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
