"""Thumbnails and filmstrips: the frames a reviewer sees before (and instead of) playing a clip.

The filmstrip shows **exactly the frames the model sees**. For Qwen3-VL, vLLM 0.25.0 does not use its generic
loader rule but its own `qwen3_vl` sampler (vllm/multimodal/video.py, `Qwen3VLVideoBackend.
compute_frames_index_to_sample`, read in the vLLM 0.25.0 wheel; it ports transformers' Qwen3-VL video processor):

    n = int(total_frames / original_fps * fps)          # fps = 2 unless the request sets one
    n = min(max(n, min_frames), max_frames, total_frames)
    frame_idx = np.linspace(0, total_frames - 1, n).round().astype(int)

The fleet is started with min_frames = max_frames = settings.frames (serving.launch.commands.vllm_command puts them in
`--media-io-kwargs`), so n = settings.frames for any clip with at least that many frames, and the indices are spread
uniformly from the first to the last frame, **rounded** to the nearest frame (the generic OpenCV/PyAV loaders truncate
instead: `dtype=int`). `sample_indices(total, settings.frames)` reproduces the Qwen3-VL choice. `total` is the exact
frame count found by demuxing (data.library.probe), not the header's guess.

Two decoders, chosen by `--decoder auto|pyav|nvdec`:
- `pyav` (CPU): decodes sequentially and keeps the wanted indices -- exact for any GOP structure, like
  the OpenCV loader's grab/retrieve loop.
- `nvdec` (GPU): PyNvVideoCodec `SimpleDecoder(path, gpu_id=0, output_color_type=OutputColorType.RGB)` and
  `get_batch_frames_by_index(indices)`; frames come back as DLPack tensors on the GPU (HWC for RGB).
  `auto` uses NVDEC when PyNvVideoCodec imports and a CUDA device is present, and falls back to PyAV with a
  logged warning otherwise (or when NVDEC fails on one clip).

Files live under settings.media_dir, named by content hash so that a moved or duplicated clip reuses them:
`thumbs/ab/<sha256>.jpg` (320 px wide) and `filmstrips/ab/<sha256>-<n>.jpg` (n tiles of 160 px side by side,
left to right in time). The clips row stores these paths relative to media_dir.
"""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import DataError
from data.library import clipgen
from data.library.probe import open_input

log = logging.getLogger(__name__)

THUMB_WIDTH = 320
TILE_WIDTH = 160
JPEG_QUALITY = 82
DECODERS = ("auto", "pyav", "nvdec")


class DecodeError(DataError):
    """A clip's frames could not be decoded (message fit for clips.probe_error after 'corrupt: ')."""


def sample_indices(total_frames: int, num_frames: int) -> list[int]:
    """The frame indices vLLM's Qwen3-VL sampler takes from a clip of `total_frames` when the fleet runs with
    min_frames = max_frames = `num_frames` (see the module docstring)."""
    if total_frames <= 0:
        return []
    if num_frames == -1 or total_frames <= num_frames:
        return list(range(total_frames))
    return np.linspace(0, total_frames - 1, num_frames).round().astype(int).tolist()


def thumbnail_path(sha256: str) -> str:
    return f"thumbs/{sha256[:2]}/{sha256}.jpg"


def filmstrip_path(sha256: str, num_frames: int) -> str:
    return f"filmstrips/{sha256[:2]}/{sha256}-{num_frames}.jpg"


# -- decoders ------------------------------------------------------------------------------------------------


def _use_threads(stream, threads: int) -> None:
    """Frame + slice threads for a PyAV stream: `threads` of them, or FFmpeg's default (one per core) for 0."""
    stream.thread_type = "AUTO"
    if threads > 0:
        stream.codec_context.thread_count = threads


def decode_pyav(
    path: str | Path, indices: Sequence[int], *, threads: int = 0, size: tuple[int, int] | None = None
) -> list[np.ndarray]:
    """RGB frames at `indices` (sorted, unique), decoding sequentially from the start. With `size` (the
    probed width, height) every decoded frame up to the last sampled one (the last frame) must have it: a
    stream that changes resolution mid-way is refused (R10: the probe sees only the first frame, and a small
    clip that grows to 16k x 16k later takes an ingest worker to gigabytes)."""
    import av

    wanted = sorted(set(indices))
    if not wanted:
        return []
    out: dict[int, np.ndarray] = {}
    changed = None
    last = wanted[-1]
    want = set(wanted)
    try:
        with open_input(path) as container:
            stream = container.streams.video[0]
            _use_threads(stream, threads)
            for i, frame in enumerate(container.decode(stream)):
                if size is not None and (frame.width, frame.height) != tuple(size):
                    # break, then raise: raising with a frame-threaded decoder alive hangs the worker (the
                    # same trap as in make_preview)
                    changed = (i, frame.width, frame.height)
                    break
                if i in want:
                    out[i] = frame.to_ndarray(format="rgb24")
                if i >= last:
                    break
    except av.error.FFmpegError as e:
        raise DecodeError(getattr(e, "strerror", None) or str(e)) from e
    if changed is not None:
        raise DecodeError(
            f"resolution changes mid-stream: frame {changed[0]} is {changed[1]}x{changed[2]}, "
            f"the stream starts at {size[0]}x{size[1]}"
        )
    if len(out) < len(wanted):
        raise DecodeError(f"only {len(out)} of the {len(wanted)} sampled frames decoded (the stream ends early)")
    return [out[i] for i in indices]


_NVDEC_STATE: dict[str, object] = {}


def nvdec_available() -> bool:
    """True when PyNvVideoCodec imports and a CUDA device is visible (checked once per process)."""
    if "ok" in _NVDEC_STATE:
        return bool(_NVDEC_STATE["ok"])
    ok, why = False, ""
    try:
        import PyNvVideoCodec  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        why = f"PyNvVideoCodec is not importable ({e})"
    else:
        try:
            import torch

            ok = torch.cuda.is_available() and torch.cuda.device_count() > 0
            why = "" if ok else "no CUDA device visible to torch"
        except ImportError:
            ok = os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")
            why = "" if ok else "no /dev/nvidia* device"
    _NVDEC_STATE["ok"], _NVDEC_STATE["why"] = ok, why
    return ok


def resolve_decoder(name: str) -> str:
    """'auto' -> 'pyav'; an explicit 'nvdec' is kept if NVDEC is available, else refused.

    'auto' picks PyAV even on a GPU node: measured there, 24 clips took 9-10 s with PyAV against 25-29 s with
    NVDEC (a CUDA context and a decoder per clip per worker cost more than 16 CPU-decoded frames), while the
    replicas' NVDEC engines are busy captioning (docs/GPU.md)."""
    if name not in DECODERS:
        raise ValueError(f"unknown decoder {name!r}; expected one of {', '.join(DECODERS)}")
    if name != "nvdec":
        return "pyav"
    if nvdec_available():
        return "nvdec"
    raise RuntimeError(f"--decoder nvdec asked for, but NVDEC is unavailable: {_NVDEC_STATE.get('why')}")


def decode_nvdec(path: str | Path, indices: Sequence[int], *, gpu_id: int = 0) -> list[np.ndarray]:
    """RGB frames at `indices` decoded on NVDEC (PyNvVideoCodec SimpleDecoder), copied to host memory."""
    import PyNvVideoCodec as nvc

    wanted = sorted(set(indices))
    if not wanted:
        return []
    try:
        decoder = nvc.SimpleDecoder(
            str(path), gpu_id=gpu_id, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB
        )
        total = len(decoder)
        if wanted[-1] >= total:
            raise DecodeError(f"NVDEC sees {total} frames, frame {wanted[-1]} was asked for")
        frames = decoder.get_batch_frames_by_index(wanted)
        arrays = [_to_host(f) for f in frames]
    except DecodeError:
        raise
    except Exception as e:  # PyNvVideoCodec raises its own types (and RuntimeError) for bad input
        raise DecodeError(f"NVDEC: {e}") from e
    if len(arrays) != len(wanted):
        raise DecodeError(f"NVDEC returned {len(arrays)} of {len(wanted)} frames")
    by_index = dict(zip(wanted, arrays))
    return [by_index[i] for i in indices]


def _to_host(frame) -> np.ndarray:
    """A decoded frame (DLPack, HWC RGB or planar CHW) -> HWC uint8 numpy array."""
    try:
        import torch

        arr = torch.from_dlpack(frame).cpu().numpy()
    except ImportError:  # host-memory frames without torch
        arr = np.from_dlpack(frame)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[-1] != 3:
        arr = np.transpose(arr, (1, 2, 0))
    return np.ascontiguousarray(arr, dtype=np.uint8)


def decode(
    path: str | Path, indices: Sequence[int], decoder: str, size: tuple[int, int] | None = None, threads: int = 0
) -> tuple[list[np.ndarray], str]:
    """Frames at `indices` with the resolved decoder; NVDEC failures fall back to PyAV (logged, with
    `threads` decoder threads, 0 = one per core). Returns (frames, backend actually used)."""
    if decoder == "nvdec":
        try:
            return decode_nvdec(path, indices), "nvdec"
        except DecodeError as e:
            log.warning("NVDEC failed on %s (%s); decoding with PyAV", path, e)
    return decode_pyav(path, indices, size=size, threads=threads), "pyav"


# -- images ---------------------------------------------------------------------------------------------------


def _resize(frame: np.ndarray, width: int):
    from PIL import Image

    img = Image.fromarray(frame)
    h = max(1, round(img.height * width / img.width))
    return img.resize((width, h), Image.BILINEAR)


def _save_jpeg(img, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    img.save(tmp, format="JPEG", quality=JPEG_QUALITY)
    os.replace(tmp, target)  # atomic: a reader never sees half an image


def filmstrip_image(frames: Sequence[np.ndarray], tile_width: int = TILE_WIDTH):
    """Frames side by side, `tile_width` each, in time order."""
    from PIL import Image

    tiles = [_resize(f, tile_width) for f in frames]
    h = max(t.height for t in tiles)
    strip = Image.new("RGB", (tile_width * len(tiles), h))
    for i, t in enumerate(tiles):
        strip.paste(t, (i * tile_width, 0))
    return strip


PREVIEW_WIDTH = 640
PREVIEW_CODECS = frozenset({"hevc", "h265"})  # what browsers (Chromium included) cannot play


def preview_path(sha256: str) -> str:
    return f"previews/{sha256[:2]}/{sha256}.mp4"


def make_preview(
    path: str | Path, media_dir: str | Path, sha256: str, *, width: int = PREVIEW_WIDTH, threads: int = 0
) -> str:
    """A browser-playable H.264 copy of a clip the browser cannot play (HEVC), at most `width` px wide, for
    review only: the model always gets the original. Skipped when it exists for this content hash. Returns
    its path relative to media_dir; raises DecodeError if the clip cannot be transcoded."""
    import av

    rel = preview_path(sha256)
    target = Path(media_dir) / rel
    if target.exists():
        return rel
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp.mp4")
    try:
        with open_input(path) as src:
            vin = src.streams.video[0]
            _use_threads(vin, threads)
            w = min(width, vin.codec_context.width or width)
            w -= w % 2
            h = max(2, round((vin.codec_context.height or w) * w / max(1, vin.codec_context.width or w)))
            h -= h % 2
            rate = Fraction(vin.average_rate or 30)

            def frames():
                for i, frame in enumerate(src.decode(vin)):
                    frame = frame.reformat(width=w, height=h, format="yuv420p")
                    frame.pts, frame.time_base = i, 1 / rate  # constant rate from 0
                    yield frame

            clipgen.encode(
                tmp,
                frames(),
                width=w,
                height=h,
                rate=rate,
                time_base=1 / rate,
                container_options={"movflags": "+faststart"},
                options={"preset": "veryfast", "crf": "28"},
                gop_size=max(1, int(round(float(rate)))),  # a keyframe a second: the player can seek
            )
        os.replace(tmp, target)  # atomic: the route never serves half a file
    except (av.FFmpegError, IndexError, ValueError) as e:
        tmp.unlink(missing_ok=True)
        raise DecodeError(f"no preview: {e}") from e
    return rel


def make_media(
    path: str | Path,
    media_dir: str | Path,
    sha256: str,
    total_frames: int,
    num_frames: int,
    decoder: str = "pyav",
    size: tuple[int, int] | None = None,
    threads: int = 0,
) -> dict:
    """Write the thumbnail and filmstrip of one clip (skipped when both exist for this content hash).

    Returns {thumbnail, filmstrip, filmstrip_indices, decode_backend} with paths relative to media_dir.
    Raises DecodeError when the sampled frames cannot be decoded."""
    media_dir = Path(media_dir)
    indices = sample_indices(total_frames, num_frames)
    thumb_rel, strip_rel = thumbnail_path(sha256), filmstrip_path(sha256, num_frames)
    result = {"thumbnail": thumb_rel, "filmstrip": strip_rel, "filmstrip_indices": indices, "decode_backend": "cached"}
    if (media_dir / thumb_rel).exists() and (media_dir / strip_rel).exists():
        return result
    if not indices:
        raise DecodeError("no frames to sample")
    frames, backend = decode(path, indices, decoder, size=size, threads=threads)
    if size is not None and any(f.shape[1::-1] != tuple(size) for f in frames):
        raise DecodeError("resolution changes mid-stream (a sampled frame differs from the stream's size)")
    _save_jpeg(filmstrip_image(frames), media_dir / strip_rel)
    _save_jpeg(_resize(frames[len(frames) // 2], THUMB_WIDTH), media_dir / thumb_rel)
    result["decode_backend"] = backend
    return result
