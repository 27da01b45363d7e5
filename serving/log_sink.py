"""The one writer of a process's log file: the process's stdout and stderr come through a pipe to this, which keeps
the file bounded whatever the process writes (issue 46, point 1).

    some-command 2>&1 | python -m serving.log_sink --log var/logs/app.log
    python -m serving.log_sink --log var/logs/app.log --log-cap 20M --log-free-floor 64M < /some/pipe

launch.sh starts the app and the supervised runner with their output piped into one of these each, and
serving.procs.start (the launcher's replicas, vllm-router, the router gate, the simulated fleet) does the same: a
process writes to a pipe, never to a file on the data dir's disk. A log redirected by the shell cannot be rotated by
the process that writes it (it keeps its descriptor, offset and all), and a process that is not ours (vLLM,
vllm-router) has no logging of ours to configure: the pipe bounds them all alike.

- **Lines**: a line longer than LINE_BYTES is cut there and ends with its length ("… [4,194,321 bytes]").
- **Size**: the file is opened to append (O_APPEND: a truncation by hand frees the space, and writing goes on at the
  new end, never at an old offset); once it holds half of `log_cap` it becomes NAME.log.1 (replacing the older
  copy) and a new NAME.log is started, so a log takes at most `log_cap` bytes on disk, plus a line. A log deleted by
  hand is let go within a second (its space freed) and started again under its name.
- **Free space**: while the log's filesystem has less than `log_free_floor` free, nothing is written (a line says
  so when it starts, if it fits): the database on the same disk keeps that room for saves. Lines not written are
  counted, as are writes the disk refuses, and the next line written says how many and why.
- **Lifetime**: it exits when every writer has closed the pipe (the process and its children have exited), never on
  a signal (SIGINT, SIGTERM, SIGHUP are ignored: the last lines of a process being stopped are kept). If it fails,
  it goes on reading and dropping, so that a writer never blocks on a full pipe.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
import time
from pathlib import Path

LINE_BYTES = 2048  # a line longer than this is cut, with its length
READ_BYTES = 1 << 16
PIPE_BYTES = 1 << 20  # the pipe a writer fills before it blocks (Linux: F_SETPIPE_SZ; the default is 64 KiB)
SPACE_EVERY_S = 1.0  # how often the free space of the log's filesystem is read
F_SETPIPE_SZ = 1031


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class BoundedLog:
    """Appends lines to `path` within the bounds of the module docstring. `feed(chunk)` takes bytes as they come
    (lines may span chunks); `close()` ends a last unfinished line."""

    def __init__(self, path: str | Path, *, cap: int, floor: int, clock=time.monotonic):
        self.path = Path(path)
        self.cap = max(int(cap), 8 * LINE_BYTES)
        self.floor = max(int(floor), 0)
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._size = 0
        self._line = 0  # bytes of the current line seen so far (written or not)
        self._lost_lines = 0
        self._lost_bytes = 0
        self._lost_since: float | None = None
        self._why = ""
        self._space_at = -SPACE_EVERY_S
        self._low = False  # below the floor at the last look
        self._open()

    # ---- the file ------------------------------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._size = os.fstat(self._fd).st_size
        except OSError as e:
            self._fd, self._why = None, e.strerror or type(e).__name__

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        except OSError:
            pass
        self._open()

    def _reopen_if_deleted(self) -> None:
        """A log deleted by hand: let go of it (its space is freed) and go on in a new file of the same name."""
        if self._fd is None:
            return
        try:
            gone = os.fstat(self._fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            os.close(self._fd)
            self._fd = None
            self._open()

    def _low_on_space(self) -> bool:
        now = self.clock()
        if now - self._space_at >= SPACE_EVERY_S:
            self._space_at = now
            self._reopen_if_deleted()
            try:
                st = os.statvfs(self.path.parent)
                free = st.f_bavail * st.f_frsize
            except OSError:
                free = None
            low = free is not None and free < self.floor
            if low and not self._low:
                why = f"{_mib(free)} free on this disk, below the floor of {_mib(self.floor)} kept for the database"
                note = f"[log_sink {time.strftime('%H:%M:%S')}: no more lines until space is back: {why}]\n"
                self._put(note.encode(), force=True)
                self._why = why
            self._low = low
        return self._low

    def _put(self, data: bytes, *, force: bool = False) -> bool:
        """Write `data` (whole lines) now, starting a new file at the line that would take this one past half the
        cap; False when it could not all be written (counted by the caller)."""
        half = self.cap // 2
        if len(data) > half - self._size and self._fd is not None:
            try:  # the file may have been truncated or removed by hand since: its own size counts
                self._size = os.fstat(self._fd).st_size
            except OSError:
                pass
        while len(data) > half - self._size:
            cut = data.rfind(b"\n", 0, max(half - self._size, 0)) + 1  # the lines that still fit this file
            if not cut and self._size == 0:
                cut = len(data)  # a line longer than half the cap: written whole (not with LINE_BYTES lines)
            if cut and not self._append(data[:cut], force):
                return False
            data = data[cut:]
            if not data:
                return True
            self._rotate()
        return self._append(data, force)

    def _append(self, data: bytes, force: bool) -> bool:
        if self._fd is None:
            self._open()
            if self._fd is None:
                return False
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._fd, view)
            except InterruptedError:
                continue
            except OSError as e:  # ENOSPC, EIO: the rest of these lines is lost
                if not force:
                    self._why = e.strerror or type(e).__name__
                return False
            self._size += n
            view = view[n:]
        return True

    def _write(self, data: bytes, lines: int) -> None:
        if not data:
            return
        if self._low_on_space() or (self._lost_lines and not self._say_lost()):
            self._count(data, lines)
            return
        if not self._put(data):
            self._count(data, lines)

    def _count(self, data: bytes, lines: int) -> None:
        if self._lost_since is None:
            self._lost_since = time.time()
        self._lost_lines += max(lines, 1)
        self._lost_bytes += len(data)

    def _say_lost(self) -> bool:
        since = time.strftime("%H:%M:%S", time.localtime(self._lost_since or time.time()))
        note = (
            f"[log_sink {time.strftime('%H:%M:%S')}: {self._lost_lines:,} lines ({self._lost_bytes:,} bytes) were not "
            f"written since {since}: "
            f"{self._why}]\n"
        )
        if not self._put(note.encode()):
            return False
        self._lost_lines = self._lost_bytes = 0
        self._lost_since = None
        return True

    # ---- the stream ------------------------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream: whole lines are written at once, the rest of a line when it ends."""
        out: list[bytes] = []
        lines = 0
        pos, n = 0, len(chunk)
        while pos < n:
            nl = chunk.find(b"\n", pos)
            end = n if nl < 0 else nl
            room = LINE_BYTES - self._line
            if room > 0:
                out.append(chunk[pos : min(end, pos + room)])
            self._line += end - pos
            if nl < 0:
                break
            if self._line > LINE_BYTES:
                out.append(f"… [{self._line:,} bytes]".encode())
            out.append(b"\n")
            lines += 1
            self._line = 0
            pos = nl + 1
        self._write(b"".join(out), lines)

    def close(self) -> None:
        if self._line:
            self.feed(b"\n")
        if self._lost_lines:
            self._say_lost()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def rotate_full(folder: str | Path, cap: int) -> list[Path]:
    """For logs that a program writes itself, which no pipe can bound (the CUDA MPS daemon's control.log and
    server.log): each file in `folder` holding half of `cap` or more becomes NAME.1 (replacing the older copy).
    Called before the program starts; returns what was rotated."""
    rotated = []
    for f in sorted(Path(folder).glob("*.log")) if Path(folder).is_dir() else ():
        try:
            if f.stat().st_size >= max(int(cap), 8 * LINE_BYTES) // 2:
                os.replace(f, f.with_name(f.name + ".1"))
                rotated.append(f)
        except OSError:
            continue
    return rotated


def run(log: BoundedLog, fd: int = 0) -> None:
    """Copy what comes on `fd` into `log` until every writer has closed it."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)  # more room before a writer blocks; best effort
    except OSError:
        pass
    failed = False
    while True:
        try:
            chunk = os.read(fd, READ_BYTES)
        except InterruptedError:
            continue
        if not chunk:
            break
        if failed:
            continue  # a broken sink still drains: a writer must never block on its pipe
        try:
            log.feed(chunk)
        except Exception:
            failed = True
    if not failed:
        log.close()


def build_parser() -> argparse.ArgumentParser:
    from data.settings import add_arguments

    p = argparse.ArgumentParser(
        prog="python -m serving.log_sink", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--log", required=True, help="the log file to append to")
    add_arguments(p, ("log_cap", "log_free_floor"))
    return p


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # stopped by its writers closing the pipe, never by a signal
    from data.settings import from_args

    args = build_parser().parse_args(argv)
    settings = from_args(args)
    run(BoundedLog(args.log, cap=settings.log_cap, floor=settings.log_free_floor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
