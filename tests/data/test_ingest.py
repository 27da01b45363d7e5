import json
import os
import shutil
import subprocess
import sys

from PIL import Image

from data import captions, clips
from data.library import ingest, media, walk
from data.library.demo import BROKEN_FILES
from tests.support.clip_fixtures import TINY_COUNT

LABELS = {
    "scenario_category": "pedestrian_crossing",
    "hazard_level": "high",
    "road_users": ["pedestrian"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "daylight",
    "road_type": "urban",
}


def run(settings, **kw):
    return ingest.ingest(settings, workers=2, decoder="pyav", **kw)


def test_sample_indices_follow_vllm_qwen3_vl_rule():
    # np.linspace(0, total - 1, n).round(): rounded, not truncated (0, 1.93 -> 2, 3.87 -> 4, ...)
    assert media.sample_indices(30, 16) == [0, 2, 4, 6, 8, 10, 12, 14, 15, 17, 19, 21, 23, 25, 27, 29]
    assert media.sample_indices(10, 16) == list(range(10))  # fewer frames than asked: all of them
    assert media.sample_indices(300, 4) == [0, 100, 199, 299]
    assert media.sample_indices(0, 16) == []


def test_ingest_small_library_probes_every_clip_and_writes_media(settings, db, tiny_library):
    summary = run(settings, db=db)
    assert summary["ok"] == TINY_COUNT and summary["failed"] == len(BROKEN_FILES)
    rows = {r["path"]: r for r in db.query("SELECT * FROM clips")}
    good = [r for r in rows.values() if r["probe_error"] is None]
    assert len(good) == TINY_COUNT
    for r in good:
        assert r["width"] == 160 and r["height"] == 90 and r["codec"] in ("h264", "hevc")
        assert 1.4 <= r["duration"] <= 2.1 and r["fps"] == 15 and r["frames"] >= 16
        assert len(r["sha256"]) == 64
        indices = json.loads(r["filmstrip_indices"])
        assert indices == media.sample_indices(r["frames"], settings.frames)
        with Image.open(settings.media_dir / r["filmstrip"]) as strip:
            assert strip.width == media.TILE_WIDTH * settings.frames
        with Image.open(settings.media_dir / r["thumbnail"]) as thumb:
            assert thumb.width == media.THUMB_WIDTH
        assert json.loads(r["sidecar"])["camera"]
    for name, keyword in BROKEN_FILES.items():
        assert keyword in rows[name]["probe_error"].lower(), (name, rows[name]["probe_error"])


def test_reingest_writes_nothing_new(settings, db, tiny_library):
    run(settings, db=db)
    before = [dict(r) for r in db.query("SELECT * FROM clips ORDER BY id")]
    changes = db.conn.total_changes
    summary = run(settings, db=db)
    assert summary["skipped"] == TINY_COUNT + len(BROKEN_FILES)
    assert summary["ok"] == summary["failed"] == summary["moved"] == summary["missing"] == 0
    assert db.conn.total_changes == changes
    assert [dict(r) for r in db.query("SELECT * FROM clips ORDER BY id")] == before


def test_moved_file_keeps_its_row_and_captions(settings, db, tiny_library):
    run(settings, db=db)
    row = next(db.query("SELECT id, path FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))
    captions.save_human(
        db, row["id"], text="A pedestrian crosses in the rain.", labels=LABELS, author="ann", base_caption_id=None
    )
    src = tiny_library / row["path"]
    (tiny_library / "moved").mkdir()
    shutil.move(src, tiny_library / "moved" / "renamed.mp4")
    summary = run(settings, db=db)
    assert summary["moved"] == 1 and summary["missing"] == 0 and summary["ok"] == 0
    clip = clips.get(db, row["id"])
    assert clip["path"] == "moved/renamed.mp4" and clip["missing"] == 0
    assert clip["caption"]["text"] == "A pedestrian crosses in the rain."
    assert db.execute("SELECT COUNT(*) FROM clips").fetchone()[0] == TINY_COUNT + len(BROKEN_FILES)


def test_deleted_file_is_marked_missing_and_comes_back(settings, db, tiny_library):
    run(settings, db=db)
    row = next(db.query("SELECT id, path FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))
    keep = tiny_library.parent / "kept.mp4"
    shutil.move(tiny_library / row["path"], keep)
    assert run(settings, db=db)["missing"] == 1
    assert clips.get(db, row["id"])["missing"] == 1
    assert row["id"] not in [r["id"] for r in clips.page(db).rows]
    shutil.move(keep, tiny_library / row["path"])
    run(settings, db=db)
    assert clips.get(db, row["id"])["missing"] == 0


def test_changed_file_is_probed_again(settings, db, tiny_library):
    run(settings, db=db)
    row = next(db.query("SELECT id, path FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))
    (tiny_library / row["path"]).write_bytes(b"<html>gone</html>")
    summary = run(settings, db=db)
    assert summary["failed"] == 1
    assert "not a video" in clips.get(db, row["id"])["probe_error"]


def test_hostile_corpus_every_file_recorded_with_its_reason(settings, db, hostile_root):
    root, expected = hostile_root
    summary = run(settings, db=db, timeout=20)
    assert summary["ok"] == 0 and summary["failed"] == len(expected)
    rows = {r["path"]: r["probe_error"] for r in db.query("SELECT path, probe_error FROM clips")}
    for name, keyword in expected.items():
        stored = walk.storable_name(name)[0]
        assert stored in rows, name
        assert keyword in rows[stored].lower(), (name, rows[stored])


def test_a_clip_over_its_deadline_is_recorded_as_timed_out(settings, db, tiny_library):
    summary = run(settings, db=db, timeout=0.001)
    reasons = [r["probe_error"] for r in db.query("SELECT probe_error FROM clips")]
    assert summary["ok"] == 0
    # every good clip overran each of its attempts; a broken file may be refused faster than its deadline
    timed_out = [r for r in reasons if "timed out after 0.001 s, 0.003 s, 0.009 s (3 attempts" in (r or "")]
    assert TINY_COUNT <= len(timed_out) <= TINY_COUNT + len(BROKEN_FILES)
    assert summary["retried"] >= 2 * TINY_COUNT


def test_cli_help_mentions_an_example():
    out = subprocess.run([sys.executable, "-m", "data.ingest", "--help"], capture_output=True, text=True, check=True)
    assert "example" in out.stdout and "--decoder" in out.stdout and "--data-dir" in out.stdout


def test_cli_ingests_and_prints_a_summary(settings, tiny_library):
    env = {**os.environ, "CW_DATA_DIR": str(settings.data_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "data.ingest", str(tiny_library), "--workers", "2", "--decoder", "pyav", "--no-media"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"{TINY_COUNT} ok, {len(BROKEN_FILES)} failed" in out.stderr


def test_hevc_clip_gets_a_browser_playable_preview(settings, db, tmp_path):
    import av

    from data.library import demo

    root = tmp_path / "hevc"
    demo.make_library(root, 2, seed=5, workers=1, broken=False, height=90, min_seconds=1, max_seconds=2, hevc_share=1.0)
    run(settings, root=root)
    rows = list(db.query("SELECT codec, frames, preview FROM clips"))
    assert rows and all(r["codec"] == "hevc" and r["preview"] for r in rows)
    for r in rows:
        with av.open(str(settings.media_dir / r["preview"])) as c:
            v = c.streams.video[0]
            assert v.codec_context.name == "h264" and v.width <= media.PREVIEW_WIDTH
            assert sum(1 for _ in c.demux(v) if _.size) == r["frames"]  # every frame, none dropped
