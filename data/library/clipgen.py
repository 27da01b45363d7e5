"""Writing video with PyAV: the one encode loop that the demo library, the hostile corpus, the review previews,
the tests and the benchmarks use, and `tiny_clip`, the small real H.264 clip that tests and benchmarks need.

PyAV's wheels bundle FFmpeg with libx264 and libx265: no system ffmpeg.

    encode("a.mp4", frames, width=320, height=180, rate=10)   # frames: RGB arrays or av.VideoFrame
    tiny_clip()                                               # 64x48, 10 frames of H.264 in MP4, as bytes
    tiny_clip(root / "a.mp4", width=160, height=90)           # the same written to a file
"""

from __future__ import annotations

import io
import os
from fractions import Fraction
from pathlib import Path
from typing import IO, Any, Iterable

import numpy as np


def encode(
    target: str | Path | IO[bytes],
    frames: Iterable[Any],
    *,
    width: int,
    height: int,
    codec: str = "libx264",
    rate: int | Fraction = 10,
    pix_fmt: str = "yuv420p",
    fmt: str | None = None,
    container_options: dict | None = None,
    options: dict | None = None,
    bit_rate: int | None = None,
    gop_size: int | None = None,
    codec_tag: str | None = None,
    time_base: Fraction | None = None,
) -> None:
    """Encode `frames` (H x W x 3 uint8 RGB arrays, or av.VideoFrame with their own pts) as one video stream
    into `target`, a path (format from its name unless `fmt`) or a writable binary file object (`fmt` needed).

    `options` are the codec's (e.g. {"preset": "ultrafast"}), `container_options` the muxer's (e.g.
    {"movflags": "+faststart"}: the index first, so that a player can start before the whole file arrives)."""
    import av

    target = str(target) if isinstance(target, Path) else target
    with av.open(target, "w", format=fmt, options=container_options or {}) as out:
        s = out.add_stream(codec, rate=rate)
        s.width, s.height, s.pix_fmt = width, height, pix_fmt
        if time_base is not None:
            s.time_base = time_base
        if bit_rate is not None:
            s.bit_rate = int(bit_rate)
        if gop_size is not None:
            s.gop_size = gop_size
        if codec_tag is not None:
            s.codec_tag = codec_tag
        if options:
            s.options = options
        for frame in frames:
            if not isinstance(frame, av.VideoFrame):
                frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            for packet in s.encode(frame):
                out.mux(packet)
        for packet in s.encode():  # flush the encoder's delayed frames
            out.mux(packet)


def gray_frames(width: int, height: int, count: int, *, step: int = 20, shade: int = 0) -> Iterable[np.ndarray]:
    """`count` flat gray frames whose level moves by `step` each frame (from `shade`): every frame differs."""
    for i in range(count):
        yield np.full((height, width, 3), (i * step + shade) % 255, np.uint8)


def tiny_clip(
    path: str | Path | None = None,
    *,
    width: int = 64,
    height: int = 48,
    frames: int = 10,
    fps: int = 10,
    step: int = 20,
    shade: int = 0,
    fmt: str | None = None,
) -> Any:
    """A tiny real H.264 clip of flat gray frames (see `gray_frames`): returned as MP4 bytes without `path`;
    with one, written there (folders made; format from the name unless `fmt`, e.g. "mpegts") and the Path
    returned. Other footage under the same name: another `shade`."""
    pictures = gray_frames(width, height, frames, step=step, shade=shade)
    if path is None:
        buf = io.BytesIO()
        encode(buf, pictures, width=width, height=height, rate=fps, fmt=fmt or "mp4")
        return buf.getvalue()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    encode(path, pictures, width=width, height=height, rate=fps, fmt=fmt)
    return path


def tiny_library(settings, db, n: int, *, prefix: str = "lib", broken: dict[str, str] | None = None) -> list[int]:
    """`n` real tiny H.264 clips under the clip root (`prefix`/00000.mp4 ..., hard links of one file) with their
    clip rows, as ingest would have written them, plus `broken` {name: probe error} rows whose files exist but
    are junk. Returns the ids of the good clips. For tests and benchmarks that need a library at once (no
    ingest run); `db` is an open connection."""
    root = Path(settings.clip_root) / prefix
    root.mkdir(parents=True, exist_ok=True)
    first = root / "00000.mp4"
    first.write_bytes(tiny_clip())
    for i in range(1, n):
        os.link(first, root / f"{i:05d}.mp4")
    rows = [
        {
            "path": f"{prefix}/{i:05d}.mp4",
            "size": first.stat().st_size,
            "duration": 1.0,
            "width": 64,
            "height": 48,
            "frames": 10,
            "codec": "h264",
        }
        for i in range(n)
    ]
    for name, err in (broken or {}).items():
        (root / name).write_bytes(b"<html>not a video</html>")
        rows.append({"path": f"{prefix}/{name}", "size": 24, "probe_error": err})
    with db.conn:
        db["clips"].insert_all(rows)
    return [
        r["id"]
        for r in db.query("SELECT id FROM clips WHERE path LIKE ? AND probe_error IS NULL ORDER BY id", [prefix + "/%"])
    ]
