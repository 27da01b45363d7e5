import csv
import io
import json
import os
import subprocess
import sys

from data import captions, clips, export, taxonomy
from data.clips import Filter
from data.db import immediate

LABELS = {
    "scenario_category": "vehicle_cut_in",
    "hazard_level": "high",
    "road_users": ["car", "truck"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "night_lit",
    "road_type": "highway",
}
CALM = {**LABELS, "scenario_category": "normal_driving", "hazard_level": "none", "road_users": [], "weather": "clear"}


def make_clips(db, n):
    with immediate(db):
        for i in range(n):
            db.execute(
                "INSERT INTO clips (path, sha256, duration, width, height, sidecar) VALUES (?, ?, ?, ?, ?, ?)",
                [f"r/clip_{i}.mp4", f"{i:064x}", 2.0, 160, 90, json.dumps({"camera": "front", "i": i})],
            )
    return [r["id"] for r in db.query("SELECT id FROM clips ORDER BY id")]


def populate(db):
    ids = make_clips(db, 5)
    captions.add_machine(
        db,
        ids[0],
        job_id=None,
        text='A truck cuts in, "close" call, commas, and\nnewline.',
        labels=LABELS,
        provenance={"model": "m", "replica": "r0", "params": {"t": 0}, "simulated": True, "frames": 16},
    )
    captions.save_human(db, ids[1], text="Calm drive.", labels=CALM, author="ann", base_caption_id=None)
    cur = captions.add_machine(db, ids[2], job_id=None, text="Rainy cut-in.", labels=LABELS, provenance={"model": "m"})[
        0
    ]
    captions.set_review(db, ids[2], status="approved", user="lead", base_caption_id=cur["id"])
    return ids  # ids[3], ids[4] have no caption


def expected(db, f=Filter()):
    return [clips.get(db, i) for i in clips.iter_ids(db, f) if clips.get(db, i)["current_caption_id"]]


def test_jsonl_round_trip_matches_the_database(db):
    populate(db)
    out = io.StringIO()
    n = export.export(db, Filter(), "jsonl", out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    want = expected(db)
    assert n == len(rows) == len(want) == 3
    for row, clip in zip(rows, want):
        cap = clip["caption"]
        assert row["clip_id"] == clip["id"] and row["path"] == clip["path"]
        assert row["text"] == cap["text"] and row["labels"] == cap["labels"]
        assert row["source"] == cap["source"] and row["author"] == cap["author"]
        assert row["review_status"] == clip["review_status"] and row["sidecar"] == clip["sidecar"]
        assert row["model"] == cap.get("model") and row["caption_id"] == cap["id"]
    assert rows[0]["params"] == {"t": 0} and rows[0]["simulated"] is True and rows[0]["frames"] == 16


def test_csv_round_trip_matches_the_database(db):
    populate(db)
    out = io.StringIO()
    export.export(db, Filter(), "csv", out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    want = expected(db)
    assert len(rows) == len(want)
    for row, clip in zip(rows, want):
        cap = clip["caption"]
        assert int(row["clip_id"]) == clip["id"] and row["text"] == cap["text"]
        for name in taxonomy.ENUMS:
            value = cap["labels"][name]
            assert row[f"label_{name}"] == (";".join(value) if isinstance(value, list) else value)
        assert json.loads(row["sidecar"]) == clip["sidecar"]


def test_filters_select_what_they_say(db):
    ids = populate(db)
    out = io.StringIO()
    assert export.export(db, Filter(review_status="approved"), "jsonl", out) == 1
    assert json.loads(out.getvalue())["clip_id"] == ids[2]
    assert export.export(db, Filter(hazard_level="high", weather="rain"), "jsonl", io.StringIO()) == 2
    assert export.export(db, Filter(caption_source="human"), "jsonl", io.StringIO()) == 1
    assert export.export(db, Filter(text="close call"), "jsonl", io.StringIO()) == 1


def test_export_streams_from_a_cursor(db):
    ids = make_clips(db, 3)
    for i in ids:
        captions.add_machine(db, i, job_id=None, text=f"clip {i}", labels=LABELS, provenance={})
    rows = export.iter_rows(db)
    assert next(rows)["clip_id"] == ids[0]  # a generator: rows arrive one at a time
    assert [r["clip_id"] for r in rows] == ids[1:]


def test_cli_help_mentions_an_example():
    out = subprocess.run([sys.executable, "-m", "data.export", "--help"], capture_output=True, text=True, check=True)
    assert "example" in out.stdout and "--status" in out.stdout and "--hazard-level" in out.stdout


def test_cli_writes_jsonl_to_stdout(settings, db):
    populate(db)
    env = {**os.environ, "CW_DATA_DIR": str(settings.data_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "data.export", "--format", "jsonl", "--status", "approved"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [json.loads(x)["review_status"] for x in out.stdout.splitlines()] == ["approved"]


def test_cli_stops_quietly_when_the_reader_does(tmp_path, db_path):
    """`python -m data.export ... | head`: the closed pipe is not a traceback."""
    import subprocess
    import sys

    from data import captions, db as dbmod

    d = dbmod.connect(db_path)
    labels = {
        "scenario_category": "other",
        "hazard_level": "low",
        "road_users": ["car"],
        "ego_maneuver": "stopped",
        "weather": "clear",
        "lighting": "daylight",
        "road_type": "urban",
    }
    for i in range(3000):
        cid = d.execute("INSERT INTO clips (path) VALUES (?)", [f"p{i}.mp4"]).lastrowid
        d.conn.commit()
        captions.add_machine(d, cid, job_id=None, text="x" * 200, labels=labels, provenance={"model": "m"})
    d.close()
    p = subprocess.run(
        f"{sys.executable} -m data.export --db {db_path} --format jsonl | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.stdout.count("\n") == 1
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr
