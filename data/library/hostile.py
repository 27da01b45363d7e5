"""A corpus of hostile files for the reliability tests: `write_hostile_corpus(dir)` writes >= 30 files that
ingest must reject with a specific reason, and returns {file name: keyword expected in the reason}. Keys are
names relative to `dir` as `os.listdir` returns them (the non-UTF-8 name therefore carries surrogate escapes).
Ingest treats `dir` as the clip root. `python -m data.demo DIR --hostile` writes it from the command line.

What "unplayable" means here: a codec that neither vLLM's NVDEC decoder nor a browser plays. The fleet and the
review player accept H.264, HEVC, AV1, VP9 and VP8 (data.library.probe.PLAYABLE_CODECS); FFV1, MPEG-4 Part 2 and
Motion JPEG are valid video that FFmpeg decodes, but NVDEC and browsers do not, so they are refused at ingest
with "unsupported codec" rather than failing later on the GPU.

The 16k x 16k clip claims 16000x16000 in its MOV sample description (raw video, 2 tiny frames): FFmpeg refuses
to even report sizes above about 16,300 px square (av_image_check_size), and an H.264 stream's size comes from
its SPS, which the container cannot override, so a doctored raw-video header is the smallest honest claim.
The 10 h clip is 11 tiny H.264 frames one hour apart (1.8 kB on disk).
"""

from __future__ import annotations

import fractions
import io
import json
import os
import random
import struct
from pathlib import Path

import av
import numpy as np

from data.library.clipgen import encode


def gradient_clip(
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
    """A tiny clip in memory: a gradient that changes every frame. `pts_step` spaces the frames' timestamps
    (in `time_base` units) to make a clip absurdly long with few frames."""
    frames = _gradient_frames(w, h, n, pts_step, time_base)
    kw = dict(width=w, height=h, codec=codec, rate=rate, pix_fmt=pix_fmt, fmt=fmt, time_base=time_base)
    if faststart:  # the muxer rewrites the file to move the index first: it needs a real file
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "clip." + fmt)
            encode(target, frames, container_options={"movflags": "+faststart"}, options=options, **kw)
            return Path(target).read_bytes()
    buf = io.BytesIO()
    encode(buf, frames, options=options, **kw)
    return buf.getvalue()


def _gradient_frames(w: int, h: int, n: int, pts_step: int | None, time_base: fractions.Fraction | None):
    base = np.add.outer(np.arange(h), np.arange(w)).astype(np.uint8)
    for i in range(n):
        img = np.stack([base + i * 8, base * 2, 255 - base], axis=-1).astype(np.uint8)
        frame = av.VideoFrame.from_ndarray(img, format="rgb24")
        if pts_step is not None:
            frame.pts, frame.time_base = i * pts_step, time_base
        yield frame


def _tiny_clip(*, faststart: bool) -> bytes:
    return gradient_clip(faststart=faststart, options={"g": "10"})


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
    data = bytearray(gradient_clip("rawvideo", w=16, h=16, n=2, rate=1, pix_fmt="rgb24", fmt="mov"))
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
    records for that file (data.library.probe and data.ingest phrase the reasons)."""
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
    put("one_by_one_pixel.mp4", gradient_clip(w=1, h=1, n=5, pix_fmt="yuv444p"), "absurd size")
    put("sixteen_k_square_claimed.mov", _claimed_16k(), "absurd size")
    put(
        "ten_hours_long.mp4",
        gradient_clip(w=32, h=32, n=11, rate=1, time_base=fractions.Fraction(1, 1000), pts_step=3_600_000),
        "absurdly long",
    )
    put("ffv1_lossless.mkv", gradient_clip("ffv1", n=5, fmt="matroska"), "unsupported codec")
    put("mpeg4_part2.mp4", gradient_clip("mpeg4", n=5), "unsupported codec")
    put("motion_jpeg.mov", gradient_clip("mjpeg", n=5, pix_fmt="yuvj420p", fmt="mov"), "unsupported codec")
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
