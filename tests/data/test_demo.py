"""The demo and hostile clip corpora (data.library.demo, data.library.hostile): seeded, real video of the asked
shape, broken and hostile files written on purpose, and the command's help."""

import json
import os
import subprocess
import sys

import av

from data.library import demo, hostile


def test_same_seed_gives_same_files_and_sidecars(tmp_path):
    a = demo.make_library(tmp_path / "a", 3, seed=11, height=90, min_seconds=1, max_seconds=1.5, workers=1)
    b = demo.make_library(tmp_path / "b", 3, seed=11, height=90, min_seconds=1, max_seconds=1.5, workers=1)
    c = demo.plan(3, seed=12)
    assert a == b
    assert [s.rel_path for s in c] != [s.rel_path for s in demo.plan(3, seed=11)]
    for rel in a:
        if rel.startswith("broken/"):
            continue
        side_a = json.loads((tmp_path / "a" / rel).with_suffix(".json").read_text())
        side_b = json.loads((tmp_path / "b" / rel).with_suffix(".json").read_text())
        assert side_a == side_b
        assert {"camera", "route", "timestamp", "weather_hint"} <= set(side_a)


def test_clips_are_real_video_with_requested_shape_and_gop(tmp_path):
    paths = demo.make_library(tmp_path, 2, seed=1, height=90, min_seconds=2, max_seconds=2, workers=1, broken=False)
    for rel in paths:
        with av.open(str(tmp_path / rel)) as c:
            v = c.streams.video[0]
            assert (v.codec_context.width, v.codec_context.height) == (160, 90)
            assert v.codec_context.name in ("h264", "hevc")
            keyframes = [p.pts for p in c.demux(v) if p.is_keyframe and p.size]
            assert len(keyframes) == 2  # 2 s at a 1 s GOP


def test_realistic_plan_has_hd_sizes_hevc_and_bitrates():
    specs = demo.plan(40, seed=0, realistic=True)
    assert {s.height for s in specs} == {720, 1080}
    assert {s.codec for s in specs} == {"libx264", "libx265"}
    assert all(4_000_000 <= s.bitrate <= 8_000_000 and 10 <= s.seconds <= 20 and s.fps == 30 for s in specs)


def test_broken_files_are_written(tmp_path):
    demo.make_library(tmp_path, 1, seed=0, height=90, min_seconds=1, max_seconds=1, workers=1)
    assert (tmp_path / "broken/zero_length.mp4").stat().st_size == 0
    assert (tmp_path / "broken/html_page.mp4").read_text().lstrip().lower().startswith("<!doctype html")
    assert 0 < (tmp_path / "broken/truncated.mp4").stat().st_size


def test_hostile_corpus_has_at_least_30_named_files(tmp_path):
    expected = hostile.write_hostile_corpus(tmp_path)
    assert len(expected) >= 30
    on_disk = set(os.listdir(tmp_path))
    assert set(expected) <= on_disk
    assert os.path.islink(tmp_path / "symlink_to_etc_passwd.mp4")
    assert any(not n.isascii() for n in expected)  # the non-UTF-8 name
    # writing twice is fine (launch.sh and tests may re-run it)
    assert hostile.write_hostile_corpus(tmp_path) == expected


def test_cli_help_mentions_an_example():
    out = subprocess.run([sys.executable, "-m", "data.demo", "--help"], capture_output=True, text=True, check=True)
    assert "example" in out.stdout and "python -m data.demo" in out.stdout
