import json

import pytest

from data import captions, clips
from data.clips import Filter
from data.db import immediate
from data.errors import DataError

HIGH_RAIN = {
    "scenario_category": "vehicle_cut_in",
    "hazard_level": "high",
    "road_users": ["car"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "daylight",
    "road_type": "highway",
}
CALM = {**HIGH_RAIN, "hazard_level": "none", "weather": "clear", "scenario_category": "normal_driving"}


def library(db, n=30):
    with immediate(db):
        for i in range(n):
            db.execute("INSERT INTO clips (path) VALUES (?)", [f"r/c{i:03d}.mp4"])
    ids = [r["id"] for r in db.query("SELECT id FROM clips ORDER BY id")]
    for i, cid in enumerate(ids):
        if i % 3 == 0:
            captions.add_machine(
                db, cid, job_id=None, text=f"A car cuts in, clip {i}.", labels=HIGH_RAIN, provenance={}
            )
        elif i % 3 == 1:
            captions.add_machine(
                db,
                cid,
                job_id=None,
                text=f"Quiet road, a deer at the side {i}." if i == 4 else f"Quiet road {i}.",
                labels=CALM,
                provenance={},
            )
    return ids


def test_facet_pages_walk_every_match_in_order(db):
    ids = library(db)
    f = Filter(hazard_level="high", weather="rain")
    seen, after, pages = [], None, 0
    while True:
        page = clips.page(db, f, after=after, limit=4)
        seen += [r["id"] for r in page.rows]
        pages += 1
        if page.next is None:
            break
        after = page.next
    assert seen == ids[0::3] and pages == 3  # 10 matches: 4 + 4 + 2, no empty page at the end
    assert clips.count(db, f) == len(seen)


def test_text_pages_keyset_both_directions(db):
    ids = library(db)
    f = Filter(text="car cuts")
    first = clips.page(db, f, limit=3)
    assert [r["id"] for r in first.rows] == ids[0::3][:3]
    nxt = clips.page(db, f, after=first.next, limit=3)
    assert [r["id"] for r in nxt.rows] == ids[0::3][3:6]
    back = clips.page(db, f, order="newest", after=clips.cursor_at(db, "newest", nxt.rows[0]["id"]), limit=2)
    assert [r["id"] for r in back.rows] == [ids[0::3][2], ids[0::3][1]]
    assert [r["id"] for r in clips.page(db, Filter(text="deer")).rows] == [ids[4]]
    assert clips.page(db, Filter(text="deer", hazard_level="high")).rows == []
    assert clips.page(db, Filter(text='car." OR *')).rows == []  # punctuation is literal, not FTS syntax


def test_capped_count_says_when_it_stopped(db):
    library(db)
    assert clips.count_capped(db, Filter(hazard_level="high"), cap=100) == (10, True)
    assert clips.count_capped(db, Filter(hazard_level="high"), cap=5) == (5, False)
    assert clips.count_capped(db, Filter(text="road"), cap=100) == (10, True)
    assert clips.total(db) == 30


def test_neighbours_within_a_text_filter(db):
    ids = library(db)
    assert clips.neighbours(db, Filter(text="cuts"), ids[3]) == (ids[0], ids[6])
    assert clips.neighbours(db, Filter(text="cuts"), ids[3], order="newest") == (ids[6], ids[0])


def test_facet_and_text_queries_use_indexes_not_scans(db):
    library(db)
    db.execute("ANALYZE")
    for name, (sql, args) in clips.explain_samples(Filter(hazard_level="high", weather="rain"), 5).items():
        plan = " | ".join(r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, (name, plan)
        assert "SCAN c" not in plan or "INDEX" in plan, (name, plan)


def _sample(name: str, kind: type):
    return {bool: True, int: 7, str: f"{name}-value"}[kind]


def test_every_filter_field_round_trips_through_its_dict_form_and_json():
    # generated from the fields: a new Filter field gets its cases without touching this test
    cases = [Filter()]
    for name, kind in clips.FIELD_TYPES.items():
        cases.append(Filter(**{name: _sample(name, kind)}))
        if kind is bool:
            cases.append(Filter(**{name: False}))
    cases.append(Filter(**{n: _sample(n, k) for n, k in clips.FIELD_TYPES.items()}))
    cases.append(Filter(**{n: False for n, k in clips.FIELD_TYPES.items() if k is bool}))
    for f in cases:
        d = f.to_dict()
        assert Filter.from_dict(d) == f
        assert Filter.from_dict(json.loads(json.dumps(d))) == f  # through a URL or the browser's state
    assert Filter(has_caption=False, failed=False, unassigned=False).to_dict() == {
        "has_caption": False,  # "without a caption", not "any"
        "failed": False,
        "unassigned": False,
    }
    assert Filter().to_dict() == {} and Filter(include_missing=True).to_dict() == {"include_missing": True}
    assert Filter(text="", job_id=None) == Filter() and Filter.from_dict({"text": "", "weather": None}) == Filter()


def test_a_filter_dict_with_an_unknown_field_is_refused_not_widened():
    # a typo in an export link must not export everything
    with pytest.raises(DataError, match="Unknown filter field.*hazard"):
        Filter.from_dict({"hazard": "high"})
    with pytest.raises(DataError, match="object"):
        Filter.from_dict(["weather", "rain"])


def test_has_caption_false_still_filters_after_the_round_trip(db):
    ids = library(db)
    f = Filter.from_dict(json.loads(json.dumps(Filter(has_caption=False).to_dict())))
    assert [r["id"] for r in clips.page(db, f).rows] == ids[2::3]
