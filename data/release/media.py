"""A release that can move (data.release.make, `--media`): the clips placed under the release's `media/`
folder, so that every path in every file is relative to the release, and it can go to a training cluster whole.

- `none` (the default): nothing is placed; paths are relative to the clip root, which the trainer then needs.
- `copy`: each clip is copied to `media/<its path>`, its bytes hashed as they are written and compared with the
  sha256 the manifest gives (the one ingest measured): a clip whose file changed since is refused, naming it, and
  nothing is released.
- `link`: a symbolic link to each clip's file (no space used; `cp -rL` or `rsync -L` copies the clips when the
  release moves). The release's sealing and clean-up never follow these links (data.release.out).

A clip's file is looked up inside the clip root only (its real path, after links and `..`, must stay there).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import sqlite_utils

from data.errors import DataError

FOLDER = "media"  # under the release
CHUNK = 1 << 20  # bytes read and written at a time


def clip_root(db: sqlite_utils.Database, media: str, given: str | Path | None) -> Path | None:
    """Where the clips are, for --media copy or link (None for none): `given` (the app's settings), else the root
    recorded at ingest. A DataError when neither is a folder."""
    if media == "none":
        return None
    root = Path(given) if given else None
    if root is None:
        row = db.execute("SELECT path FROM clip_roots ORDER BY id LIMIT 1").fetchone()
        root = Path(row[0]) if row else None
    if root is None or not root.is_dir():
        raise DataError(
            f"--media {media} places the clips in the release, and the clip root "
            f"{'is not recorded' if root is None else f'{root} is not a folder'}: ingest the clips first, or "
            "release with --media none."
        )
    return Path(os.path.realpath(root))


def _inside(root: Path, relative: str) -> Path | None:
    """`root/relative` as a real path if it is a regular file inside `root`, else None."""
    if not relative or "\x00" in relative or os.path.isabs(relative):
        return None
    real = Path(os.path.realpath(root / relative))
    try:
        real.relative_to(root)
    except ValueError:
        return None
    return real if real != root and real.is_file() else None


def _target(media: Path, relative: str) -> Path:
    parts = Path(relative).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or os.path.isabs(relative):
        raise DataError(f"A clip's path {relative[:200]!r} cannot be placed under the release.")
    return media.joinpath(*parts)


def _copy(src: Path, dst: Path, sha256: str, clip_id: int) -> None:
    digest = hashlib.sha256()
    with open(src, "rb") as r, open(dst, "xb") as w:  # "x": never through a file or link already there
        while chunk := r.read(CHUNK):
            digest.update(chunk)
            w.write(chunk)
    if digest.hexdigest() != str(sha256).lower():
        raise DataError(
            f"Clip {clip_id} ({src}) is not the file that was ingested: its sha256 is {digest.hexdigest()}, the "
            f"manifest's {sha256}. Re-ingest the clip (or leave it out of the filter); nothing was released."
        )


def place(
    db: sqlite_utils.Database,
    media: str,
    root: Path,
    release: Path,
) -> int:
    """Copy or link every released clip (temp.release_rows) under `release`/media; returns the clips placed."""
    folder = release / FOLDER
    folder.mkdir()
    made = {folder}
    n = 0
    rows = db.execute(
        "SELECT c.id, c.path, c.sha256 FROM temp.release_rows r JOIN clips c ON c.id = r.clip_id ORDER BY r.clip_id"
    )
    for clip_id, relative, sha256 in rows:
        src = _inside(root, relative)
        if src is None:
            raise DataError(
                f"Clip {clip_id}'s file {relative[:200]} is not a file under the clip root {root}: is it gone, or "
                "did the clips move (python -m data.library move-root)? Nothing was released."
            )
        dst = _target(folder, relative)
        for parent in reversed(dst.parents):
            if parent not in made and parent.is_relative_to(folder):
                parent.mkdir(exist_ok=True)
                made.add(parent)
        if media == "copy":
            _copy(src, dst, sha256, clip_id)
        else:
            os.symlink(src, dst)
        n += 1
    return n
