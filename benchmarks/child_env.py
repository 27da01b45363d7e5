"""The environment a benchmark gives the child process it starts.

A child must import the code under test (this checkout, or another one named by --code) and still find the
packages that this process finds on PYTHONPATH: the GPU machine keeps sqlite-utils, httpx and the rest in
/tmp/site on PYTHONPATH, not in the interpreter's site-packages. So the code's directory goes first, then the
inherited PYTHONPATH, never in its place.
"""

from __future__ import annotations

import os
from pathlib import Path


def pythonpath(code: str | os.PathLike[str]) -> str:
    """PYTHONPATH for a child: the code directory `code` (absolute, as the child may run in another directory),
    then what this process's PYTHONPATH names."""
    return os.pathsep.join(p for p in (str(Path(code).resolve()), os.environ.get("PYTHONPATH")) if p)


def child_env(code: str | os.PathLike[str], **extra: str) -> dict[str, str]:
    """This process's environment with PYTHONPATH = `pythonpath(code)`, and `extra` set on top."""
    return {**os.environ, "PYTHONPATH": pythonpath(code), **extra}
