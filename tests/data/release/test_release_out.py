"""Nothing lost, nothing burned (issue 44): an --out that cannot be written is refused with a sentence before the
release takes a version number; the staging folder's name cannot be guessed, and a failure removes only what that
run made, never following a link (data.release.out)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from data.errors import DataError
from data.release import make as rel, meta as release_meta
from data.release.options import Options
from tests.support.release_library import ClipSpec, build

ROOT = Path(__file__).resolve().parents[3]


def library(db):
    return build(db, [ClipSpec(f"d{i % 6}", {"route": f"R{i % 6}"}) for i in range(24)])


def versions(db) -> list[tuple[int, str]]:
    return [(r["version"], r["state"]) for r in db.query("SELECT version, state FROM releases ORDER BY id")]


def test_an_out_that_cannot_be_written_is_refused_with_a_sentence_and_uses_no_version(db, tmp_path):
    library(db)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for out in (Path("/proc/cw-release/v1"), Path("/sys/cw-release"), a_file / "release", a_file / "a" / "b"):
        with pytest.raises(DataError, match=f"A release cannot be written at {out} .*Give a folder you can write"):
            rel.release(db, Options(name="av"), out, actor="lead", role="lead")
        assert not os.path.lexists(out)
    assert versions(db) == [] and a_file.read_text() == "x"
    r = rel.release(db, Options(name="av"), tmp_path / "deep" / "er" / "v1", actor="lead", role="lead")
    assert r.version == 1 and versions(db) == [(1, "done")]  # the first good one is v1


def test_the_command_line_says_so_without_a_traceback(db, db_path, tmp_path):
    library(db)
    db.close()
    proc = subprocess.run(
        [sys.executable, "-m", "data.release", "--db", str(db_path), "--out", "/proc/cw-release"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: A release cannot be written at /proc/cw-release")
    assert "Traceback" not in proc.stderr


def test_the_staging_folder_cannot_be_guessed_and_a_failure_removes_only_what_it_made(db, tmp_path, monkeypatch):
    """A folder with the old predictable name (`.NAME.partial-ID`) holding a link to a folder elsewhere is left
    as it was, that folder's mode too; the failed run's own staging folder and the parent folders it made go."""
    library(db)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    outside.chmod(0o750)
    trap = tmp_path / "out" / ".v1.partial-1"
    trap.mkdir(parents=True)
    (trap / "link").symlink_to(outside)
    seen = []

    def fail(root, *a, **k):
        seen.append(root)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(release_meta, "write", fail)
    with pytest.raises(OSError, match="No space left"):
        rel.release(db, Options(name="av"), tmp_path / "out" / "v1", actor="lead", role="lead")
    (staging,) = seen
    assert staging.parent == tmp_path / "out" and staging.name.startswith(".v1.partial-") and staging != trap
    assert not staging.exists() and not (tmp_path / "out" / "v1").exists()
    assert (trap / "link").is_symlink() and (outside / "keep.txt").read_text() == "mine"
    assert stat.S_IMODE(outside.stat().st_mode) == 0o750
    assert versions(db) == [(1, "failed")]
    # a parent folder the failed run made is removed with it; one that was there stays
    with pytest.raises(OSError):
        rel.release(db, Options(name="av"), tmp_path / "new" / "sub" / "v2", actor="lead", role="lead")
    assert not (tmp_path / "new").exists() and (tmp_path / "out").is_dir()
    monkeypatch.undo()
    a = rel.release(db, Options(name="av"), tmp_path / "out" / "v3", actor="lead", role="lead")
    b = rel.release(db, Options(name="av"), tmp_path / "out" / "v4", actor="lead", role="lead")
    assert a.path.is_dir() and b.path.is_dir() and trap.is_dir()  # the trap untouched by successes too
    assert stat.S_IMODE(outside.stat().st_mode) == 0o750
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == [".v1.partial-1"]
