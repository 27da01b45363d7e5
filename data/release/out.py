"""Where a release is written (data.release.make): its folder checked before anything is recorded, a hidden
staging folder beside it that only this run made, and the move into place.

- `check_out`: a folder that exists and holds something is never written over; one that cannot even be looked at
  is refused with a sentence.
- `Staging.make`: the folders missing above the release are made (each one remembered), then a staging folder
  with an unpredictable name (`tempfile.mkdtemp`: `.NAME.partial-XXXXXXXX`, mode 0700, made exclusively) beside
  it. A destination that cannot be written (under /proc or /sys, under a file, without permission) fails here,
  with a sentence, before the release takes a version number.
- `Staging.seal`: files made read-only, the folder renamed into place, then its folders read-only too.
- `Staging.remove`: on any failure, the staging folder and the folders this run made above it, nothing else.
  Nothing follows a symbolic link: a link inside the staging folder (`--media link`) is removed as a link, never
  chmod-ed through, and a folder someone else made is never touched.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from data.errors import DataError


def _cannot(out: Path, e: OSError) -> DataError:
    why = e.strerror or type(e).__name__
    return DataError(
        f"A release cannot be written at {out} ({why}{': ' + str(e.filename) if e.filename else ''}). Give a "
        "folder you can write, such as one under the data folder (releases/ there is the app's)."
    )


def check_out(out: Path) -> None:
    """A DataError when `out` holds something (a release is never written over) or cannot be looked at."""
    try:
        holds = out.exists() and (not out.is_dir() or any(out.iterdir()))
    except OSError as e:
        raise _cannot(out, e) from None
    if holds:
        raise DataError(
            f"{out} exists and is not empty: a release is never written over. Give a new folder (for example "
            f"{out.name}-2 beside it)."
        )


class Staging:
    """The hidden folder a release is written into, and the folders made above it (`made`, outermost first)."""

    def __init__(self, path: Path, made: list[Path]):
        self.path = path
        self.made = made

    @classmethod
    def make(cls, parent: Path, name: str, out: Path) -> Staging:
        """A new staging folder in `parent` (made if missing) for the release `out`; a DataError saying so when
        it cannot be made (nothing is left behind)."""
        made: list[Path] = []
        try:
            for folder in reversed([parent, *parent.parents]):
                if not os.path.lexists(folder):
                    folder.mkdir()
                    made.append(folder)
            path = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent))
        except OSError as e:
            cls(parent / ".never", made).remove()
            raise _cannot(out, e) from None
        return cls(path, made)

    def seal(self, out: Path) -> None:
        """The files read-only, the folder renamed to `out`, then its folders read-only too (never through a
        link)."""
        for folder, _, files in os.walk(self.path, followlinks=False):
            for name in files:
                p = os.path.join(folder, name)
                if not os.path.islink(p):
                    os.chmod(p, 0o444)
        self.path.chmod(0o755)  # mkdtemp made it 0700: readable by those who read the release
        try:
            os.rename(self.path, out)  # an empty folder at `out` is replaced; a non-empty one refuses
        except OSError as e:
            raise DataError(
                f"Could not put the release at {out} ({e.strerror}): was something written there meanwhile?"
            ) from None
        self.path = out
        folders = [f for f, _, _ in os.walk(out, followlinks=False)]
        for folder in reversed(folders):
            if not os.path.islink(folder):
                os.chmod(folder, 0o555)
        self.made = []

    def remove(self) -> None:
        """Remove what this run made: the staging folder (its links as links) and the folders made above it,
        where they are still empty."""
        if os.path.isdir(self.path) and not os.path.islink(self.path):
            for folder, dirs, _ in os.walk(self.path, followlinks=False):
                for d in dirs:
                    p = os.path.join(folder, d)
                    if not os.path.islink(p):
                        os.chmod(p, stat.S_IRWXU)
            shutil.rmtree(self.path)  # unlinks a symbolic link, never follows it
        for folder in reversed(self.made):
            try:
                folder.rmdir()
            except OSError:
                break
        self.made = []
