"""A small real filesystem that a test can fill to the last byte and free again: a size-limited tmpfs.

    with SmallFilesystem(tmp_path / "disk", size_mb=64) as fs:
        ... put the data dir (database, logs) under fs.path ...
        fs.fill()      # every write there now fails with ENOSPC ("database or disk is full" in SQLite)
        fs.free()      # the space is back

Mounting needs root (CAP_SYS_ADMIN); CI runs the suite as root on a fresh machine, so there it always mounts.
Where it cannot, `small_filesystem` (the fixture) skips the test saying why; nothing is faked: a directory
with a quota, a file of fixed size or /dev/full would not fail the way a full disk fails SQLite's WAL and a
log file together.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

CHUNK = 1 << 20


class CannotMount(RuntimeError):
    """This machine or user cannot mount a tmpfs (not root, or no CAP_SYS_ADMIN in this container)."""


class SmallFilesystem:
    """A tmpfs of `size_mb` MiB mounted at `path` (created), unmounted on exit (lazily, if a process still has
    a file open there)."""

    def __init__(self, path: Path, size_mb: int = 64):
        self.path = Path(path)
        self.size_mb = size_mb
        self._filler = self.path / ".filler"
        self._mounted = False

    def __enter__(self) -> "SmallFilesystem":
        self.path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise CannotMount((r.stderr or r.stdout).strip() or f"mount exited {r.returncode}")
        self._mounted = True
        return self

    def __exit__(self, *exc) -> None:
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self._mounted = False

    def available(self) -> int:
        """Bytes an unprivileged write could still take."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Write a filler file until the filesystem refuses (ENOSPC); returns the bytes it took. Then top up with
        small writes, so that not even a page is left."""
        written = 0
        with open(self._filler, "ab", buffering=0) as f:
            for size in (CHUNK, 4096, 1):
                block = b"\0" * size
                while True:
                    try:
                        written += f.write(block)
                    except OSError as e:
                        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                            raise
                        break
        return written

    def free(self) -> None:
        """Remove the filler: the space is back."""
        with contextlib.suppress(FileNotFoundError):
            self._filler.unlink()


@pytest.fixture
def small_filesystem(tmp_path):
    """A factory: `small_filesystem(size_mb=64)` -> a mounted SmallFilesystem under tmp_path, unmounted after the
    test. Skips (with the reason) only where a tmpfs cannot be mounted."""
    made: list[SmallFilesystem] = []

    def make(size_mb: int = 64, name: str = "disk") -> SmallFilesystem:
        fs = SmallFilesystem(tmp_path / name, size_mb)
        try:
            fs.__enter__()
        except (CannotMount, FileNotFoundError) as e:
            pytest.skip(f"cannot mount a small tmpfs here ({e}); CI runs as root and can")
        made.append(fs)
        return fs

    yield make
    for fs in reversed(made):
        fs.__exit__(None, None, None)
