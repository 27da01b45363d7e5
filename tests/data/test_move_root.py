"""Moving the clip root (data.library.clip_root, `python -m data.library move-root NEW`): it checks the clips even when
every one is missing, refuses a folder that is no clip root even with --force, and says why on the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from data.db import immediate
from data.errors import DataError
from data.library import clip_root, ingest
from tests.support.webapp_fixtures import (
    write_clip,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def moved_library(settings, db, tmp_path):
    """A library of 3 clips whose files all vanished (every clip marked missing), as after an unmount."""
    root = tmp_path / "clips"
    for i in range(3):
        write_clip(root / f"d/{i}.mp4", seconds=0.5)
    assert ingest.ingest(settings, root=root, db=db, workers=1, media=False)["ok"] == 3
    (tmp_path / "gone").mkdir()
    root.rename(tmp_path / "gone" / "clips")
    with immediate(db):
        db.execute("UPDATE clips SET missing = 1")
    return tmp_path / "gone" / "clips"


def test_move_root_checks_the_clips_even_when_every_clip_is_missing(moved_library, db, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "unrelated.txt").write_text("x")
    with pytest.raises(DataError, match="is not this library's clip root"):
        clip_root.move_root(db, other)  # before: accepted (no present clip to sample)
    out = clip_root.move_root(db, moved_library)
    assert out["found"] == 3 and clip_root.recorded_root(db) == moved_library.resolve()


@pytest.mark.parametrize("where", ["/", "/etc", "/usr/share", "home", "data dir", "db parent"])
def test_move_root_refuses_a_folder_that_is_no_clip_root_even_with_force(moved_library, db, settings, where):
    target = {
        "/": Path("/"),
        "/etc": Path("/etc"),
        "/usr/share": Path("/usr/share"),
        "home": Path.home(),
        "data dir": settings.data_dir,
        "db parent": settings.db.parent.parent,
    }[where]
    for force in (False, True):
        with pytest.raises(DataError, match="refused as the clip root"):
            clip_root.move_root(db, target, force=force)
    assert clip_root.recorded_root(db) != target.resolve()


def test_move_root_cli_says_why_it_refuses_root(moved_library, settings):
    r = subprocess.run(
        [sys.executable, "-m", "data.library", "move-root", "/", "--force", "--db", str(settings.db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CW_DATA_DIR": str(settings.data_dir)},
    )
    assert r.returncode == 2 and "system or home folder" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture
def library_root(settings, db, tmp_path):
    root = tmp_path / "clips"
    for i in range(3):
        write_clip(root / f"d/{i}.mp4", seconds=0.5)
    assert ingest.ingest(settings, root=root, db=db, workers=1, media=False)["ok"] == 3
    return root


def _ssh_like(tmp_path) -> Path:
    home_ssh = Path.home() / ".ssh"
    if home_ssh.is_dir():
        return home_ssh
    fake = tmp_path / "home" / ".ssh"
    fake.mkdir(parents=True)
    (fake / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    return fake


@pytest.mark.parametrize("where", ["~/.ssh", "/var/lib", "an unrelated folder"])
def test_move_root_with_force_still_needs_the_librarys_clips_there(library_root, db, tmp_path, where):
    target = {
        "~/.ssh": _ssh_like(tmp_path),
        "/var/lib": Path("/var/lib"),
        "an unrelated folder": tmp_path / "other",
    }[where]
    target.mkdir(exist_ok=True)
    with pytest.raises(DataError, match="must hold the library's clips, even with --force"):
        clip_root.move_root(db, target, force=True)  # before: accepted, and the replicas could read it
    assert clip_root.recorded_root(db) == library_root.resolve()


def test_move_root_with_force_takes_the_librarys_folder_with_some_sizes_changed(library_root, db, tmp_path):
    moved = tmp_path / "moved"
    library_root.rename(moved)
    with open(moved / "d" / "0.mp4", "ab") as f:
        f.write(b"re-encoded since")
    with pytest.raises(DataError, match="pass --force"):
        clip_root.move_root(db, moved)
    out = clip_root.move_root(db, moved, force=True)
    assert out["found"] == 3 and clip_root.recorded_root(db) == moved.resolve()


def test_a_library_without_clips_has_nothing_to_move_and_ingest_records_the_new_root(settings, db, tmp_path):
    empty, real = tmp_path / "empty", tmp_path / "real"
    empty.mkdir()
    write_clip(real / "a.mp4", seconds=0.5)
    clip_root.record_root(db, empty)
    with pytest.raises(DataError, match="no clips yet"):
        clip_root.move_root(db, real, force=True)
    with pytest.raises(DataError, match="refused as the clip root"):
        clip_root.record_root(db, "/etc")  # re-pointing an empty library still refuses system folders
    assert ingest.ingest(settings, root=real, db=db, workers=1, media=False)["ok"] == 1  # no RootMismatch dead end
    assert clip_root.recorded_root(db) == real.resolve()
