"""A secret kept in a file of the data dir: made once, readable by its owner only.

Two secrets live this way: the key that signs media URLs (`serving.media_urls`) and the key fleet replicas
require (`serving.fleet_key`). Both are made on first use with O_EXCL (two processes starting at once agree on
one), mode 0600, and a file loosened by someone (0644) is tightened again when it is read, rather than refused:
a workbench that will not start is worse than one that fixes the mode it can fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable


def read_or_make(path: Path, make: Callable[[], bytes] | None) -> bytes | None:
    """The bytes in `path`; made with `make()` (0600) when the file does not exist, or None when `make` is None
    and it does not exist. A file others can read or write is made owner-only first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if make is not None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(make())
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        os.chmod(path, 0o600)
    return path.read_bytes()


def write(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, owner-only from its first byte (written beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
