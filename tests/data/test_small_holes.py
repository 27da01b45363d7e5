"""Issue 31, item 6: the smaller holes, each closed at its root. The clip root holds the library's clips even
with --force; disabling a person ends their review lease; every JSON a person types is depth-checked before it
is parsed; controls a reader cannot see are not stored and not exported. (One return shape for open_clip:
tests/webapp/test_event_errors.py.)"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data import captions, clips, errors, export, limits, review_queue, team as people, users
from data.db import immediate
from data.errors import DataError
from data.library import clip_root, ingest
from tests.support.webapp_fixtures import LABELS, PASSWORD, machine_provenance, write_clip

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "a\x1b[2J\x1b]0;owned\x07b\x08c\u202ed\u2066e\x85f\x7fg\x0ch"  # ESC sequences, BEL, BS, bidi, C1, DEL, FF
PLAIN = "a[2J]0;ownedbcdefgh"  # what is left: the printable rest of the sequences


# ---- the clip root holds the library's clips, --force or not ------------------------------------------------
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


# ---- disabling a person ends their review lease ------------------------------------------------------------
def test_disabling_a_person_hands_the_clip_they_were_on_to_the_others_at_once(db):
    with immediate(db):
        for i in range(2):
            db.execute("INSERT INTO clips (path) VALUES (?)", [f"c{i}.mp4"])
    for cid in (1, 2):  # the queue serves captioned clips
        captions.add_machine(db, cid, job_id=None, text="A car waits.", labels=LABELS, provenance=machine_provenance())
    for name in ("ann", "ann2"):
        users.create(db, name, role="annotator", password=PASSWORD)
    first = review_queue.take_next(db, clips.Filter(), "ann", ttl=300)
    second = review_queue.take_next(db, clips.Filter(), "ann2", ttl=300)
    assert {first, second} == {1, 2}
    assert review_queue.take_next(db, clips.Filter(), "lead-less", ttl=300) is None  # both are held
    out = people.set_disabled(db, "ann", True, actor="admin")
    assert out["released_lease"] == 1
    assert review_queue.holder(db, first) is None
    assert review_queue.take_next(db, clips.Filter(), "lead-less", ttl=300) == first  # before: after 300 s


# ---- every JSON a person types is depth-checked first -------------------------------------------------------
NESTED = '{"a":' * 5000 + "1" + "}" * 5000


def test_typed_json_is_depth_checked_before_it_is_parsed():
    with pytest.raises(errors.UnreadableJson, match="nests deeper than"):
        limits.outside_json(NESTED, "--filter")
    with pytest.raises(errors.UnreadableJson, match="not JSON"):
        limits.outside_json("{'weather': 'rain'}")
    assert limits.outside_json('{"weather": "rain"}') == {"weather": "rain"}


def test_the_quality_cli_answers_a_deep_filter_with_a_message(settings, db):
    r = subprocess.run(
        [sys.executable, "-m", "data.quality", "--db", str(settings.db), "--filter", NESTED],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 2, r.stderr[-500:]
    assert "nests deeper than" in r.stderr and "Traceback" not in r.stderr  # before: RecursionError


def test_a_deep_filter_in_a_link_or_an_export_is_a_message(server):
    lead = server.client("lead")
    try:
        r = lead.get("/export", params={"fmt": "csv", "filter": "[" * 4000})
        assert r.status_code == 400 and "nests deeper than" in r.text
    finally:
        lead.close()


# ---- controls a reader cannot see: not stored, not exported -------------------------------------------------
def test_captions_are_stored_without_invisible_controls(db):
    with immediate(db):
        db.execute("INSERT INTO clips (path) VALUES ('a.mp4')")
        db.execute("INSERT INTO clips (path) VALUES ('b.mp4')")
    human = captions.save_human(db, 1, text=HOSTILE, labels=LABELS, author="ann", base_caption_id=None, note=HOSTILE)
    model, _ = captions.add_machine(
        db, 2, job_id=None, text=HOSTILE + "\r\nline two", labels=LABELS, provenance=machine_provenance()
    )
    assert human["text"] == PLAIN and human["note"] == PLAIN
    assert model["text"] == PLAIN + "\nline two"  # line ends kept, as newlines
    assert (
        captions.save_human(db, 1, text="tab\there", labels=LABELS, author="ann", base_caption_id=human["id"])["text"]
        == "tab\there"
    )


def test_the_export_carries_no_control_to_a_terminal(db, monkeypatch):
    with immediate(db):
        db.execute("INSERT INTO clips (path) VALUES (?)", ["evil\x1b[31m\u202e.mp4"])
    with monkeypatch.context() as m:  # a caption stored before saves dropped the controls
        m.setattr(limits, "plain_text", lambda value: value)
        captions.add_machine(db, 1, job_id=None, text=HOSTILE, labels=LABELS, provenance=machine_provenance())
    out = io.StringIO()
    export.export(db, None, "csv", out)
    text = out.getvalue()
    assert not limits.CONTROLS.search(text), repr(text)  # before: ESC, BEL, BS, bidi overrides kept
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["text"] == PLAIN and row["path"] == "evil[31m.mp4"
    out = io.StringIO()
    export.export(db, None, "jsonl", out)
    line = out.getvalue()
    assert not limits.CONTROLS.search(line) and "\x1b" not in line
    assert json.loads(line)["text"] == PLAIN  # removed from the records too (issue 46), also from rows stored before
