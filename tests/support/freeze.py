"""Freeze a process (SIGSTOP) where a test wants it: inside its own write transaction, or outside any.

A process frozen inside a SQLite write transaction keeps the database's write lock (a POSIX lock on the -shm file)
until it dies: every other writer waits. `freeze_inside_a_write` stops the process at the moment the kernel's lock
table (`data.db.write_lock_holder`) names it as the holder, waits until it is stopped, and checks again: a process
that committed between the look and the stop is let go (SIGCONT) and caught at its next write. A runner captioning a
job writes often (claims, results, heartbeats), so it is caught within a second or two.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from data import db as dbmod


def state(pid: int) -> str:
    """The process's state letter from /proc (R running, S sleeping, T stopped, Z zombie ...); "" when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while state(pid) not in ("T", "t", "", "Z") and time.monotonic() < deadline:
        time.sleep(0)


def freeze_inside_a_write(pid: int, db_path: str | Path, *, timeout: float = 60.0) -> int:
    """SIGSTOP `pid` while it holds the write lock of the database at `db_path`; returns how many stops it took.
    AssertionError when it was not caught within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    tries = 0
    while time.monotonic() < deadline:
        if dbmod.write_lock_holder(db_path) != pid:
            continue
        _stop(pid)
        tries += 1
        if dbmod.write_lock_holder(db_path) == pid:
            return tries
        os.kill(pid, signal.SIGCONT)  # it committed between the look and the stop: let it go, catch the next
    raise AssertionError(f"pid {pid} was not caught holding the write lock within {timeout} s ({tries} stops)")


def freeze_outside_a_write(pid: int, db_path: str | Path, *, timeout: float = 60.0) -> int:
    """SIGSTOP `pid` while it holds no write lock (checked once it is stopped); returns how many stops it took."""
    deadline = time.monotonic() + timeout
    tries = 0
    while time.monotonic() < deadline:
        _stop(pid)
        tries += 1
        if dbmod.write_lock_holder(db_path) != pid:
            return tries
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} held the write lock at every stop for {timeout} s ({tries} stops)")
