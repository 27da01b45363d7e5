"""Probing one clip file: is it a video the fleet can caption, and what are its duration, fps, frames, size
and codec? Meant to run inside an ingest worker process (PyAV can crash or hang on hostile input; the
parent enforces the timeout and turns a crash into a reason).

`probe(path)` never raises for a bad file: it returns a `Probe` whose `error` is a specific, human reason:
  "zero-length file"
  "not a video: an HTML document" / "a text file" / "a still image (png)" / "unrecognised data (...)"
  "not a video: no video stream (audio only)" / "not a video: no video stream"
  "truncated: file ends inside the 'mdat' box (1,234 of 5,678 bytes present)"
  "truncated: only 17 of 30 frames present"
  "no frames: the file has a header but no video data"
  "absurd size: 1x1 pixels (allowed 32x32 to 8192x8192)"
  "absurdly long: 10.0 h (limit 2.0 h)"
  "unsupported codec: ffv1 (the fleet's NVDEC decoder and browsers play h264, hevc, av1, vp9, vp8)"
  "corrupt: <FFmpeg's message>"
Checks that need no decoding run first (sniffing bytes, the MP4 box structure, header fields); then the
packets are demuxed (not decoded) to count frames exactly -- header frame counts are often wrong -- and the
first frame is decoded to prove the stream decodes at all.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

PLAYABLE_CODECS = ("h264", "hevc", "av1", "vp9", "vp8")
MIN_SIDE = 32
MAX_SIDE = 8192
MAX_SECONDS = 2 * 3600.0
MAX_FPS = 480.0
HASH_CHUNK = 1 << 20


@dataclass
class Probe:
    """What a probe found. `error` is None for a usable clip."""

    error: str | None = None
    duration: float | None = None
    fps: float | None = None
    frames: int | None = None
    width: int | None = None
    height: int | None = None
    codec: str | None = None
    extra: dict = field(default_factory=dict)

    def as_row(self) -> dict:
        d = asdict(self)
        d["probe_error"] = d.pop("error")
        d.pop("extra")
        return d


_METADATA_OPTION: dict[str, bool] = {}


def open_input(path: str | Path):
    """`av.open(path)` for reading, on every PyAV that pip installs (14 to 19 today). PyAV <= 18 needs
    `metadata_errors="ignore"` to open files whose metadata is not valid UTF-8; PyAV 19 dropped the option
    (TypeError: "open() got an unexpected keyword argument 'metadata_errors'", which failed every clip on
    Python 3.12) and decodes metadata leniently by itself. Which one this PyAV is, is learned once."""
    import av

    if _METADATA_OPTION.get("supported", True):
        try:
            return av.open(str(path), metadata_errors="ignore")
        except TypeError as e:
            if "metadata_errors" not in str(e):
                raise
            _METADATA_OPTION["supported"] = False
    return av.open(str(path))


def sha256_file(path: str | Path, chunk: int = HASH_CHUNK) -> str:
    """Streamed sha256 of a file (constant memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def sniff(head: bytes) -> str | None:
    """A reason if the first bytes show the file is clearly not a video container."""
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if stripped.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or (
        stripped.startswith(b"<") and b"<html" in stripped[:1024]
    ):
        return "not a video: an HTML document"
    if stripped.startswith(b"<?xml") or stripped.startswith(b"<svg"):
        return "not a video: an XML document"
    for magic, kind in (
        (b"\x89png", "png"),
        (b"\xff\xd8\xff", "jpeg"),
        (b"gif87a", "gif"),
        (b"gif89a", "gif"),
        (b"bm", None),
    ):
        if kind and head.lower().startswith(magic):
            return f"not a video: a still image ({kind})"
    if head and b"\x00" not in head:
        try:
            head.decode("utf-8")
            return "not a video: a text file"
        except UnicodeDecodeError as e:
            # a multi-byte character cut by the read boundary is still text
            if e.start >= len(head) - 3 and all(32 <= b < 127 or b in b"\t\r\n" for b in head[: e.start]):
                return "not a video: a text file"
    return None


def mp4_structure(path: str | Path, size: int) -> str | None:
    """For ISO-BMFF files (MP4/MOV): a reason if the top-level boxes show truncation or no index."""
    boxes: list[str] = []
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 8 or head[4:8] not in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"):
            return None
        pos = 0
        while pos < size:
            f.seek(pos)
            hdr = f.read(16)
            if len(hdr) < 8:
                return f"truncated: file ends inside a box header at byte {pos:,}"
            box_size, kind = struct.unpack(">I4s", hdr[:8])
            name = kind.decode("latin-1")
            if box_size == 1:
                if len(hdr) < 16:
                    return f"truncated: file ends inside the '{name}' box header"
                box_size = struct.unpack(">Q", hdr[8:16])[0]
            elif box_size == 0:
                box_size = size - pos  # extends to the end of the file
            if box_size < 8:
                return f"corrupt: invalid MP4 box size {box_size} at byte {pos:,}"
            boxes.append(name)
            if pos + box_size > size:
                return f"truncated: file ends inside the '{name}' box ({size - pos:,} of {box_size:,} bytes present)"
            pos += box_size
    if "moov" not in boxes:
        return "truncated: no 'moov' index (the recording was never finalised)"
    return None


def probe(path: str | Path, *, max_seconds: float = MAX_SECONDS) -> Probe:
    """Probe one file (see the module docstring for the reasons it can give)."""
    import av

    path = str(path)
    size = os.path.getsize(path)
    if size == 0:
        return Probe(error="zero-length file")
    with open(path, "rb") as f:
        head = f.read(4096)
    reason = sniff(head) or mp4_structure(path, size)
    if reason:
        return Probe(error=reason)
    try:
        container = open_input(path)
    except av.error.EOFError:
        return Probe(error="no frames: the file has a header but no video data")
    except av.error.InvalidDataError as e:
        return Probe(error=f"not a video: unrecognised data ({_msg(e)})")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        return Probe(error=f"corrupt: {_msg(e)}")
    with container:
        videos = container.streams.video
        if not videos:
            if container.streams.audio:
                return Probe(error="not a video: no video stream (audio only)")
            return Probe(error="not a video: no video stream")
        stream = videos[0]
        cc = stream.codec_context
        p = Probe(width=cc.width or stream.width or None, height=cc.height or stream.height or None, codec=cc.name)
        if container.format and container.format.name in ("image2", "png_pipe", "jpeg_pipe", "gif"):
            p.error = f"not a video: a still image ({cc.name})"
            return p
        if not p.width or not p.height:
            p.error = "corrupt: the video stream has no picture size"
            return p
        if min(p.width, p.height) < MIN_SIDE or max(p.width, p.height) > MAX_SIDE:
            p.error = (
                f"absurd size: {p.width}x{p.height} pixels (allowed {MIN_SIDE}x{MIN_SIDE} to {MAX_SIDE}x{MAX_SIDE})"
            )
            return p
        if p.codec not in PLAYABLE_CODECS:
            p.error = (
                f"unsupported codec: {p.codec} (the fleet's NVDEC decoder and browsers play "
                f"{', '.join(PLAYABLE_CODECS)})"
            )
            return p
        duration = _duration(container, stream)
        if duration is not None and duration > max_seconds:
            p.duration = duration
            p.error = f"absurdly long: {duration / 3600:.1f} h (limit {max_seconds / 3600:.1f} h)"
            return p
        # count frames exactly by demuxing (no decoding); header counts are often wrong or absent
        frames = 0
        last_end = None
        try:
            for packet in container.demux(stream):
                if packet.size:
                    frames += 1
                    if packet.pts is not None and packet.duration:
                        end = (packet.pts + packet.duration) * packet.time_base
                        last_end = end if last_end is None else max(last_end, end)
        except av.error.FFmpegError as e:
            p.error = f"corrupt: {_msg(e)} (after {frames} frames)"
            return p
        if stream.frames and frames < stream.frames:
            p.error = f"truncated: only {frames} of {stream.frames} frames present"
            return p
        if frames == 0:
            p.error = "no frames: the video stream holds no frames"
            return p
        p.frames = frames
        if duration is None and last_end is not None:
            start = stream.start_time * stream.time_base if stream.start_time is not None else 0
            duration = float(last_end - start)
        rate = stream.average_rate or stream.guessed_rate
        fps = float(rate) if rate else (frames / duration if duration else None)
        if duration is None and fps:
            duration = frames / fps
        p.duration, p.fps = (round(duration, 3) if duration is not None else None), (round(fps, 3) if fps else None)
        if duration is not None and duration > max_seconds:
            p.error = f"absurdly long: {duration / 3600:.1f} h (limit {max_seconds / 3600:.1f} h)"
            return p
        if fps and fps > MAX_FPS:
            p.error = f"absurd frame rate: {fps:.0f} fps (limit {MAX_FPS:.0f})"
            return p
    # the stream must decode: one frame proves the codec parameters are sane
    try:
        with open_input(path) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1  # one frame: threads would only cost (one per core)
            got = next(iter(container.decode(stream)), None)
            if got is None:
                p.error = "corrupt: no frame could be decoded"
    except av.error.FFmpegError as e:
        p.error = f"corrupt: {_msg(e)}"
    return p


def _duration(container, stream) -> float | None:
    if stream.duration is not None and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / 1_000_000
    return None


def _msg(e: BaseException) -> str:
    """FFmpeg's message without the errno noise and the file name PyAV appends."""
    text = getattr(e, "strerror", None) or str(e)
    return str(text).strip() or type(e).__name__
