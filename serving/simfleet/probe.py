"""Opening a clip the way the replica's decoder would: metadata from PyAV, or the error real vLLM gave.

The simulator never decodes frames; it needs a clip's size (for the latency model and the decode budget) and
whether a real decoder would have choked on it. `ProbeCache` keeps the answer per (path, size, mtime), so a
clip is opened once, not once per request.
"""

from __future__ import annotations

import io
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from serving.simfleet.errors import SimError, decode_failure, frames_missing, no_video_stream


@dataclass(frozen=True)
class ClipInfo:
    width: int
    height: int
    frames: int
    duration: float
    size: int


class ProbeCache:
    """PyAV metadata per (path, size, mtime): the same clip is opened once, not once per request."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self._items: OrderedDict[tuple, ClipInfo | SimError] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, path: Path) -> ClipInfo | None:
        """The clip's metadata if it was opened before (one stat, no file opened), else None. Raises the
        SimError a missing file, a directory or a FIFO gets, or the one the clip got when it was opened."""
        return self._lookup(path)[1]

    def probe(self, path: Path) -> ClipInfo:
        """The clip's metadata, opening it with PyAV on a miss (blocking: call it from a worker thread)."""
        (key, size), hit = self._lookup(path)
        if hit is None:
            got = probe_file(path, size)
            with self._lock:
                self._items[key] = got
                while len(self._items) > self.limit:
                    self._items.popitem(last=False)
            if isinstance(got, SimError):
                raise got
            hit = got
        return hit

    def _lookup(self, path: Path) -> tuple[tuple[tuple, int], ClipInfo | None]:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise SimError(500, f"[Errno 2] No such file or directory: '{path}'", "InternalServerError") from None
        except OSError as e:
            raise SimError(500, str(e), "InternalServerError") from None
        if stat.S_ISDIR(st.st_mode):
            raise SimError(500, f"[Errno 21] Is a directory: '{path}'", "InternalServerError")
        if not stat.S_ISREG(st.st_mode):
            raise decode_failure(path)  # a FIFO or device: never open it (a read could block forever)
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
        if isinstance(hit, SimError):
            raise hit
        return (key, st.st_size), hit


def probe_file(path: Path | None, size: int, data: bytes | None = None) -> ClipInfo | SimError:
    """Open a clip (a file, or `data` fetched over http) with PyAV: its metadata, or the error vLLM gave."""
    # imported here: PyAV is heavy, and only a replica that is sent a clip needs it
    import av

    from data.library.probe import mp4_structure

    try:
        with av.open(io.BytesIO(data) if data is not None else str(path), "r") as container:
            streams = container.streams.video
            if not streams:
                return no_video_stream()
            vs = streams[0]
            width, height = int(vs.codec_context.width or 0), int(vs.codec_context.height or 0)
            if width <= 0 or height <= 0:
                return decode_failure(path)
            duration = (
                float(vs.duration * vs.time_base)
                if vs.duration and vs.time_base
                else (container.duration / 1e6 if container.duration else 0.0)
            )
            rate = float(vs.average_rate) if vs.average_rate else 0.0
            frames = int(vs.frames or round(duration * rate))
            if frames <= 0 and duration <= 0:
                return decode_failure(path)
        if path is not None and data is None and (mp4_structure(path, size) or "").startswith("truncated"):
            return frames_missing()
        return ClipInfo(width, height, frames, duration, size)
    except Exception:  # any PyAV failure is the clip's fault, as for the real decoder
        return decode_failure(path)
