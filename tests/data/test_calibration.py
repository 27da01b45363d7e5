"""Accuracy by confidence bucket (data.quality.calibration) on a generated review history whose truth is known: every
approved clip's origin machine caption, with the confidence the model had, against the labels a person approved
(some changed by hand, some adopted). The buckets equal a plain count over the generated history, and a small
case worked by hand."""

from __future__ import annotations

import random

import pytest

from data import captions, review_states, taxonomy
from data.clips import Filter
from data.db import immediate
from data.errors import DataError
from data.quality.calibration import calibration

BASE = {
    "scenario_category": "normal_driving",
    "hazard_level": "low",
    "road_users": ["car"],
    "ego_maneuver": "going_straight",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "urban",
}


def _clip(db, path: str) -> int:
    with immediate(db):
        return db.execute("INSERT INTO clips (path) VALUES (?)", [path]).lastrowid


def _machine(db, clip_id: int, labels: dict, confidence: dict | None) -> dict:
    prov = {"model": "m"} | ({"confidence": confidence} if confidence is not None else {})
    return captions.add_machine(db, clip_id, job_id=None, text="A car.", labels=labels, provenance=prov)[0]


def _approve(db, clip_id: int, cap: dict) -> None:
    review_states.set_review(db, clip_id, status="approved", user="rev", base_caption_id=cap["id"])


def _history(db, seed: int, n: int = 120) -> list[dict]:
    """n clips: a machine caption with a random confidence per label and list item; a reviewer who keeps each
    label or changes it (less often when the model was sure), then approves; some left unreviewed, some
    rejected, some without a confidence. Returns the truth: what the model said, how sure, what was approved."""
    rng = random.Random(seed)
    truth = []
    for i in range(n):
        cid = _clip(db, f"c{i:03d}.mp4")
        said = {
            k: (rng.sample(v, rng.randint(0, 3)) if k in taxonomy.MULTI else rng.choice(v))
            for k, v in taxonomy.ENUMS.items()
        }
        conf = {
            "labels": {k: round(rng.random(), 4) for k in taxonomy.ENUMS},
            "items": {"road_users": {u: round(rng.random(), 4) for u in said["road_users"]}},
            "end": {},
        }
        if i % 17 == 0:
            conf["labels"]["weather"] = None  # a label whose logprobs could not be read
        with_conf = i % 13 != 0
        m = _machine(db, cid, said, conf if with_conf else None)
        fate = rng.choice(["approve", "approve", "approve", "fix", "fix", "adopt", "reject", "leave"])
        approved = dict(said)
        cur = m
        if fate in ("fix", "adopt"):
            for k, v in taxonomy.ENUMS.items():
                sure = conf["labels"][k] or 0.5
                if rng.random() > sure:
                    approved[k] = rng.sample(v, rng.randint(1, 2)) if k in taxonomy.MULTI else rng.choice(v)
            cur = captions.save_human(db, cid, text="Fixed.", labels=approved, author="ann", base_caption_id=m["id"])
            if fate == "adopt":  # adopting the fixed version: still derived from the same origin
                cur = captions.adopt(db, cid, caption_id=cur["id"], author="lee", base_caption_id=cur["id"])
        if fate == "reject":
            review_states.set_review(db, cid, status="rejected", user="rev", base_caption_id=cur["id"])
        elif fate != "leave":
            _approve(db, cid, cur)
        truth.append(
            {
                "said": said,
                "conf": conf if with_conf else None,
                "approved": approved,
                "counted": with_conf and fate not in ("reject", "leave"),
            }
        )
    return truth


def _expected(truth: list[dict], label: str, buckets: int) -> list[tuple[int, int, float | None]]:
    """(n, correct, mean confidence) per bucket, counted plainly from the generated truth."""
    pairs = []
    for t in truth:
        if not t["counted"]:
            continue
        if label in taxonomy.MULTI:
            for item, p in t["conf"]["items"][label].items():
                pairs.append((p, item in t["approved"][label]))
        elif t["conf"]["labels"][label] is not None:
            pairs.append((t["conf"]["labels"][label], t["said"][label] == t["approved"][label]))
    out = []
    for b in range(buckets):
        inside = [(p, ok) for p, ok in pairs if min(int(p * buckets), buckets - 1) == b]
        mean = sum(p for p, _ in inside) / len(inside) if inside else None
        out.append((len(inside), sum(ok for _, ok in inside), mean))
    return out


@pytest.mark.parametrize("buckets", [1, 4, 10])
def test_buckets_equal_a_plain_count_of_the_review_history(db, buckets):
    truth = _history(db, seed=buckets)
    rows = calibration(db, buckets=buckets)
    assert [r["label"] for r in rows] == [k for k in taxonomy.ENUMS for _ in range(buckets)]
    for label in taxonomy.ENUMS:
        got = [r for r in rows if r["label"] == label]
        want = _expected(truth, label, buckets)
        assert [(r["n"], r["correct"]) for r in got] == [(n, c) for n, c, _ in want], label
        for r, (n, c, mean) in zip(got, want):
            assert r["accuracy"] == (pytest.approx(c / n) if n else None)
            assert r["confidence"] == (pytest.approx(mean) if n else None)
            assert r["low"] == pytest.approx(r["bucket"] / buckets) and r["high"] == pytest.approx(
                r["low"] + 1 / buckets
            )
    assert sum(r["n"] for r in rows if r["label"] == "weather") > 0
    assert calibration(db, label="hazard_level", buckets=buckets) == [r for r in rows if r["label"] == "hazard_level"]


def test_a_hand_worked_case(db):
    """Four approved clips, hazard level: 0.95 right, 0.91 wrong (a reviewer changed it), 0.35 right, 0.3 wrong;
    road users: car 0.9 kept, bus 0.2 dropped. One unreviewed and one without a confidence do not count."""
    for i, (p, fixed) in enumerate([(0.95, False), (0.91, True), (0.35, False), (0.3, True)]):
        cid = _clip(db, f"h{i}.mp4")
        users = ["car", "bus"] if i == 0 else ["car"]
        labels = BASE | {"road_users": users}
        conf = {"labels": {"hazard_level": p}, "items": {"road_users": {"car": 0.9, "bus": 0.2}} if i == 0 else {}}
        m = _machine(db, cid, labels, conf | {"end": {}})
        cur = m
        if fixed or i == 0:
            new = labels | ({"hazard_level": "high"} if fixed else {"road_users": ["car"]})
            cur = captions.save_human(db, cid, text="A car.", labels=new, author="ann", base_caption_id=m["id"])
        _approve(db, cid, cur)
    _machine(db, _clip(db, "u.mp4"), BASE, {"labels": {"hazard_level": 0.99}, "items": {}, "end": {}})
    bare = _clip(db, "n.mp4")
    _approve(db, bare, _machine(db, bare, BASE, None))
    rows = calibration(db, label="hazard_level", buckets=2)
    assert [(r["n"], r["correct"], r["accuracy"]) for r in rows] == [(2, 1, 0.5), (2, 1, 0.5)]
    assert rows[1]["confidence"] == pytest.approx(0.93) and rows[0]["confidence"] == pytest.approx(0.325)
    users = calibration(db, label="road_users", buckets=2)
    assert [(r["n"], r["correct"]) for r in users] == [(1, 0), (1, 1)]


def test_the_filter_narrows_the_clips_and_another_review_status_gives_nothing(db):
    truth = _history(db, seed=5, n=40)
    assert truth
    db.execute("UPDATE clips SET weather = CASE WHEN id % 2 = 0 THEN 'rain' ELSE 'clear' END")
    everything = sum(r["n"] for r in calibration(db, label="lighting"))
    rain = sum(r["n"] for r in calibration(db, Filter(weather="rain"), label="lighting"))
    dry = sum(r["n"] for r in calibration(db, Filter(weather="clear"), label="lighting"))
    assert 0 < rain < everything and rain + dry == everything
    assert sum(r["n"] for r in calibration(db, Filter(review_status="rejected"))) == 0


@pytest.mark.parametrize("kw", [{"label": "colour"}, {"buckets": 0}, {"buckets": 101}, {"buckets": 2.5}])
def test_a_bad_label_or_bucket_count_is_a_message(db, kw):
    with pytest.raises(DataError):
        calibration(db, **kw)


def test_values_are_counted_apart_from_clips(db):
    """Calibration counts values: one per clip for a single-choice label, one per road user listed for the list
    label. Three approved clips list 2, 3 and 1 road users at confidence 0.8-0.9 (6 values on 3 clips); the rows,
    the Quality tab's note and table, and the terminal say 6 road users on 3 clips, and 3 clips for the hazard
    level. (Issue 26: the tab called 343 values "clips" for 169 clips.)"""
    from data.quality.tables import format_calibration
    from webapp.quality import tab as quality_tab

    listed = [{"car": 0.9, "truck": 0.85}, {"car": 0.8, "bus": 0.82, "bicycle": 0.88}, {"pedestrian": 0.81}]
    for i, items in enumerate(listed):
        cid = _clip(db, f"v{i}.mp4")
        labels = BASE | {"road_users": sorted(items)}
        m = _machine(db, cid, labels, {"labels": {"hazard_level": 0.9}, "items": {"road_users": items}, "end": {}})
        _approve(db, cid, m)
    users = calibration(db, label="road_users", buckets=2)
    assert [(r["n"], r["clips"], r["label_clips"]) for r in users] == [(0, 0, 3), (6, 3, 3)]
    hazard = calibration(db, label="hazard_level", buckets=2)
    assert [(r["n"], r["clips"], r["label_clips"]) for r in hazard] == [(0, 0, 3), (3, 3, 3)]
    assert quality_tab.calibration_columns("road_users")[1:3] == ["road users listed", "on clips"]
    assert quality_tab.calibration_rows(users) == [["0.5 - 1.0", "6", "3", "6", "1.000", f"{5.06 / 6:.3f}"]]
    assert quality_tab.calibration_columns("hazard_level")[1] == "clips"
    lines = format_calibration(users + hazard).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("road_users "))
    assert "road users listed  on clips" in lines[head] and lines[head + 1].split()[:3] == ["0.5-1.0", "6", "3"]

    class Ctx:
        def db(self):
            return db

    tab = quality_tab.QualityTab(Ctx())
    tab.cal_note, tab.cal_plot, tab.cal_table = "note", "plot", "table"
    out = tab._calibration(Filter(), "road_users")
    assert "road_users: 6 road users the model listed, on 3 clips" in out["note"]
    assert list(out["table"].columns)[1:3] == ["road users listed", "on clips"]
    out = tab._calibration(Filter(), "hazard_level")
    assert "hazard_level: 3 clips, one value each" in out["note"]
