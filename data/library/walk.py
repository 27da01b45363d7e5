"""The walk of a clip root: every candidate clip file, classified as far as possible without opening it.

Files refused here, with a reason, never reach a decoder: non-UTF-8 names, symlinks leaving the root, broken
symlinks, anything that is not a regular file (a directory or FIFO named x.mp4). Hidden names (".x") are
ignored. The sidecar JSON beside a clip (`clip.json` for `clip.mp4`) is read here, bounded (R10).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from data import limits
from data.errors import Unstorable

VIDEO_EXTENSIONS = frozenset({".mp4", ".mov", ".m4v", ".mkv", ".webm", ".avi", ".ts", ".mts"})


@dataclass
class Entry:
    """One file found by the walk."""

    rel: str  # path relative to the root, as stored (UTF-8 text)
    abs: str
    size: int | None
    mtime: float | None
    error: str | None = None  # a reason found without opening the file
    sidecar: str | None = None  # JSON text


def storable_name(name: str) -> tuple[str, bool]:
    """(text fit for the database, whether the name was valid UTF-8). Undecodable bytes become \\xNN."""
    raw = os.fsencode(name)
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace"), False


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def read_sidecar(abs_path: str) -> str | None:
    """The sidecar JSON beside a clip, normalised, or a `_sidecar_error` note; never an exception. Bounded
    (R10): at most MAX_SIDECAR_BYTES read, nesting checked by a linear scan before parsing (the stdlib parser
    recurses: a deeply nested file raised RecursionError and stopped the whole ingest), and NaN/Infinity
    refused (they would reach the JSONL export, which strict parsers then reject).

    What is returned is text SQLite stores and that reads back as the value the file holds
    (`limits.storable_json`): a value that parses but cannot be stored (a number out of a double's range, a
    lone surrogate) makes the sidecar an error note, and the clip is ingested all the same."""
    side = os.path.splitext(abs_path)[0] + ".json"
    name = os.path.basename(side)

    def refused(why: str) -> str:
        return json.dumps({"_sidecar_error": f"sidecar {name} {why}"}, ensure_ascii=False)

    try:
        if os.path.islink(side) or not os.path.isfile(side):
            return None
        with open(side, "rb") as f:
            raw = f.read(limits.MAX_SIDECAR_BYTES + 1)
    except OSError:
        return refused("is unreadable")
    if len(raw) > limits.MAX_SIDECAR_BYTES:
        return refused(f"is larger than {limits.MAX_SIDECAR_BYTES:,} bytes (ignored)")
    if not limits.json_depth_ok(raw):
        return refused(f"nests deeper than {limits.MAX_SIDECAR_DEPTH} levels (ignored)")
    try:
        data = limits.strict_json_loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            data = {"value": data}
        return limits.storable_json(data)
    except Unstorable as e:
        return refused(f"cannot be stored as it is: {str(e)[:120]} (ignored)")
    except (ValueError, RecursionError, OverflowError) as e:
        return refused(f"is not valid JSON ({str(e)[:80]})")


def walk(root: str | Path) -> Iterator[Entry]:
    """Every candidate clip under `root`, classified as far as possible without opening it."""
    root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        names = [n for n in filenames if not n.startswith(".")]
        # a directory (or symlinked directory) named like a clip is reported, not silently skipped
        names += [d for d in dirnames if os.path.splitext(d)[1].lower() in VIDEO_EXTENSIONS]
        for name in sorted(names):
            if os.path.splitext(name)[1].lower() not in VIDEO_EXTENSIONS:
                continue
            full = os.path.join(dirpath, name)
            rel_raw = os.path.relpath(full, root)
            rel, utf8 = storable_name(rel_raw)
            if not utf8:
                yield _entry_lstat(rel, full, "file name is not valid UTF-8 (rename the file to ingest it)")
                continue
            if os.path.islink(full):
                target = os.path.realpath(full)
                if os.path.commonpath([root, target]) != root:
                    yield _entry_lstat(rel, full, "symlink points outside the clip root")
                    continue
                if not os.path.exists(target):
                    yield _entry_lstat(rel, full, "broken symlink (its target does not exist)")
                    continue
            try:
                st = os.stat(full)
            except OSError as e:
                yield Entry(rel, full, None, None, f"unreadable: {e.strerror}")
                continue
            if not stat.S_ISREG(st.st_mode):
                yield Entry(rel, full, None, st.st_mtime, f"not a regular file ({_kind(st.st_mode)})")
                continue
            yield Entry(rel, full, st.st_size, st.st_mtime, sidecar=read_sidecar(full))


def _entry_lstat(rel: str, full: str, error: str) -> Entry:
    try:
        st = os.lstat(full)
        return Entry(rel, full, st.st_size, st.st_mtime, error)
    except OSError:
        return Entry(rel, full, None, None, error)
