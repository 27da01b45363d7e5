"""Issue 21, class 8: the smaller holes. `move-root` and a clip root that is no folder of clips; clips of a
disabled user; `serving.cost` on nonsense input; `/logout` as a GET; a data directory left 0755."""

from __future__ import annotations

import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from data import assignments, clips, events, schema, team as people, users
from data.db import immediate
from data.errors import DataError
from data.library import clip_root, ingest
from serving import cost, cost_records
from tests.support.webapp_fixtures import PASSWORD, AppServer, add_users, build_library, write_clip

REPO = Path(__file__).resolve().parents[2]


# ---- move-root --------------------------------------------------------------------------------------------
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


def test_ingest_refuses_a_system_folder_or_the_database_folder_as_the_root(settings, db):
    for bad in (Path("/"), settings.data_dir):
        with pytest.raises(DataError, match="refused as the clip root"):
            clip_root.record_root(db, bad)
    assert clip_root.recorded_root(db) is None


# ---- clips of a disabled user ------------------------------------------------------------------------------
@pytest.fixture
def team(db):
    with immediate(db):
        for i in range(6):  # each with a caption (current_caption_id): the queue serves only those
            db.execute("INSERT INTO clips (path, current_caption_id) VALUES (?, ?)", [f"c{i}.mp4", i + 1])
    for name, role in (("ann", "annotator"), ("ann2", "annotator"), ("lead", "lead")):
        users.create(db, name, role=role, password=PASSWORD)
    return db


def test_disabling_a_user_gives_their_clips_back_to_the_queue_with_an_event(team):
    assignments.assign(team, clips.Filter(), "ann2", actor="lead", role="lead")  # every clip
    assert assignments.next_in_queue(team, clips.Filter(), "ann") is None  # all of them are ann2's
    u = people.set_disabled(team, "ann2", True, actor="admin")
    assert u["released_clips"] == 6 and u["disabled"]
    assert assignments.next_in_queue(team, clips.Filter(), "ann") is not None  # before: None, for everyone
    given_back = list(events.iter_all(team, "clip.unassign"))
    assert len(given_back) == 6 and all('"why": "user disabled"' in e["detail"] for e in given_back)
    assert people.set_disabled(team, "ann2", False)["released_clips"] == 0


def test_the_migration_gives_back_clips_of_users_disabled_before_it(team):
    assignments.assign(team, clips.Filter(), "ann2", actor="lead", role="lead")
    with immediate(team):  # what an older version left: a disabled user who still holds clips
        team.execute("UPDATE users SET disabled = 1 WHERE name = 'ann2'")
    with immediate(team):
        schema.m012_hardening2(team)
    assert team.execute("SELECT COUNT(*) FROM assignments").fetchone()[0] == 0
    assert len(list(events.iter_all(team, "clip.unassign"))) == 6


# ---- serving.cost ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(replicas=0),
        dict(replicas=-8),
        dict(replicas=math.inf),
        dict(replicas=2.5),
        dict(frames=-16),
        dict(frames=math.nan),
        dict(live_rate=-3.0, live_replicas=2),
        dict(live_rate=math.inf, live_replicas=2),
        dict(live_rate=math.nan, live_replicas=2),
        dict(live_rate=2.0, live_replicas=0),
        dict(live_rate=2.0),
    ],
)
def test_cost_refuses_negative_infinite_and_nonsense_inputs(kwargs):
    args = {"replicas": 8, "frames": 16, **kwargs}
    with pytest.raises(ValueError, match="must be|needs"):
        cost.estimate(args.pop("replicas"), args.pop("frames"), "bf16", [cost_records.Measurement(4.0)], **args)


def test_cost_refuses_a_negative_or_infinite_clip_count():
    e = cost.estimate(8, 16, "bf16", [cost_records.Measurement(4.0)])
    for bad in (-100, math.inf, math.nan, 1.5):
        with pytest.raises(ValueError, match="clips must be"):
            e.gpu_hours(bad)
    assert e.gpu_hours(0) == 0


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--replicas", "0"], "--replicas must be a whole number from 1"),
        (["--replicas", "8", "--clips", "-100"], "--clips must be"),
        (["--replicas", "8", "--live-rate", "inf", "--live-replicas", "2"], "--live-rate must be"),
        (["--replicas", "8", "--live-rate", "-1", "--live-replicas", "2"], "--live-rate must be"),
    ],
)
def test_the_cost_cli_answers_bad_input_with_a_message_not_a_traceback(argv, says):
    r = subprocess.run(
        [sys.executable, "-m", "serving.cost", *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---- /logout -------------------------------------------------------------------------------------------------
def _alive(url: str, cookie: str) -> bool:
    return httpx.get(url + "/config", cookies={"cw_session": cookie}, timeout=30, trust_env=False).status_code == 200


def test_logout_is_a_post_and_a_cross_site_navigation_cannot_end_a_session(tmp_path):
    from data.settings import Settings

    s = Settings.load({"data_dir": str(tmp_path / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=2)
    add_users(s)
    with AppServer(s, fleet_urls=[]) as srv:
        cookie = srv.client("ann").cookies["cw_session"]
        jar = {"cw_session": cookie}
        # a link or an <img> on another site: a GET, with the (Lax) cookie and a foreign Referer
        r = httpx.get(
            srv.url + "/logout", cookies=jar, headers={"Referer": "https://evil.example/"}, trust_env=False, timeout=30
        )
        assert r.status_code == 200 and 'method="post"' in r.text
        assert _alive(srv.url, cookie)  # before: the GET ended the session
        r = httpx.post(srv.url + "/logout", cookies=jar, headers={"Origin": "https://evil.example"}, timeout=30)
        assert r.status_code == 403 and _alive(srv.url, cookie)
        r = httpx.post(srv.url + "/logout", cookies=jar, headers={"Origin": srv.url}, timeout=30)
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert not _alive(srv.url, cookie)


# ---- the data directory ----------------------------------------------------------------------------------------
def test_ingest_makes_an_existing_data_dir_private(settings):
    old = os.umask(0o022)
    try:
        settings.data_dir.mkdir(parents=True)
        os.chmod(settings.data_dir, 0o755)
        (settings.data_dir / "notes.txt").write_text("x")
        os.chmod(settings.data_dir / "notes.txt", 0o644)
        root = settings.clip_root
        write_clip(root / "a.mp4", seconds=0.5)
        r = subprocess.run(
            [sys.executable, "-m", "data.ingest", str(root), "--data-dir", str(settings.data_dir), "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "CW_DATA_DIR": str(settings.data_dir)},
        )
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(settings.data_dir.stat().st_mode) == 0o700  # before: 0755 until the app ran
    assert stat.S_IMODE((settings.data_dir / "notes.txt").stat().st_mode) == 0o600
    assert any(settings.media_dir.rglob("*.jpg"))  # the thumbnails are there, under the private folder
