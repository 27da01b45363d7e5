"""A process's own output (stdout, stderr, and the logging that goes there), written best-effort.

launch.sh sends each process's output to DATA_DIR/logs/NAME.log, on the data dir's filesystem. When that
filesystem is full, every write there raises OSError (ENOSPC): a print, a log line, the traceback Gradio prints
inside its own error path. Reporting must never stop a process from doing its work: the supervisor died of its
restart message and the app's events never answered (issue 31). `install()` replaces sys.stdout and sys.stderr
with streams that drop what cannot be written, count it, and say how much was lost at the next write that
succeeds. The long-running commands (serving.supervisor, serving.runner, webapp) call it first thing. It also
bounds every log record the process makes (serving.log_clip: values cut to a few hundred characters with their
length, a traceback written in full once in a while, then as one line).

Writes go straight to the file descriptor (no buffer that could hold stale lines, or fail again at exit).
"""

from __future__ import annotations

import io
import os
import sys
import threading

from serving import log_clip


class BestEffortStream(io.TextIOBase):
    """A text stream over file descriptor `fd` whose writes never raise: what cannot be written is dropped and
    counted (`lost`), and the next write that succeeds is preceded by a line saying how many were lost."""

    def __init__(self, fd: int, name: str = "<best-effort>", encoding: str = "utf-8"):
        super().__init__()
        self._fd = fd
        self._name = name
        self._encoding = encoding
        self._lock = threading.Lock()
        self.lost = 0
        self._why = ""

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:
        return self._encoding

    @property
    def errors(self) -> str:
        return "backslashreplace"

    @property
    def buffer(self) -> "_Binary":
        return _Binary(self)

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False

    def writable(self) -> bool:
        return True

    def flush(self) -> None:  # nothing is buffered
        return None

    def write(self, s: str) -> int:
        self.write_bytes(str(s).encode(self._encoding, "backslashreplace"))
        return len(s)

    def write_bytes(self, data: bytes) -> None:
        with self._lock:
            if self.lost:
                note = f"[{self.lost} writes to this output were lost: {self._why}]\n".encode()
                if not self._write_all(note):
                    self.lost += 1
                    return
                self.lost = 0
            if not self._write_all(data):
                self.lost += 1

    def _write_all(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._fd, view)
            except InterruptedError:
                continue
            except OSError as e:  # ENOSPC, EIO, a closed descriptor: nothing the process can do about it here
                self._why = e.strerror or type(e).__name__
                return False
            view = view[n:]
        return True


class _Binary:
    """`stream.buffer` for code that writes bytes to sys.stdout.buffer: the same best-effort writes."""

    def __init__(self, stream: BestEffortStream):
        self._stream = stream

    def write(self, data: bytes) -> int:
        self._stream.write_bytes(bytes(data))
        return len(data)

    def flush(self) -> None:
        return None

    def fileno(self) -> int:
        return self._stream.fileno()


def install() -> None:
    """Make this process's stdout and stderr best-effort and its log records bounded (idempotent). Call it before
    logging is configured: a logging handler keeps the stream it was given."""
    log_clip.install()
    for attr, fd in (("stdout", 1), ("stderr", 2)):
        current = getattr(sys, attr)
        if isinstance(current, BestEffortStream):
            continue
        try:
            if current is not None:
                current.flush()
        except (OSError, ValueError):
            pass
        setattr(sys, attr, BestEffortStream(fd, name=f"<{attr}>"))
