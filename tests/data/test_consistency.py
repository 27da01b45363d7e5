"""Text against labels (data.consistency), and what data.captions stores of it and of the model's confidence: the
per-version columns, the clip's mirrors kept in step by every way a caption changes, and migration m014 leaving
older rows unknown (NULL), never guessed."""

from __future__ import annotations

import json

import pytest

from data import caption_confidence, captions, clips, consistency, db as dbmod, review_states, schema, taxonomy
from data.db import immediate

LABELS = {
    "scenario_category": "pedestrian_crossing",
    "hazard_level": "none",
    "road_users": ["car"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "daylight",
    "road_type": "urban",
}


@pytest.mark.parametrize(
    "text, labels, found",
    [
        ("A car waits at the light.", {}, []),
        (
            "A pedestrian crosses in front of the car.",
            {},
            ["the text names a pedestrian but road users lacks pedestrian"],
        ),
        ("Two Pedestrians cross; buses pass.", {}, ["pedestrian", "bus"]),  # plurals, any case
        ("People walk by, a child among them.", {"road_users": ["car", "pedestrian"]}, []),
        # a negation within three words before a mention takes it back
        ("No pedestrians are visible, nor any cyclist.", {}, []),
        ("The road is free of cyclists. It isn't raining.", {}, []),
        # whole words only: a card, a scarf, a carpet are not cars; a motorbike is not a bike
        ("A scarf on the carpet, a card, a motorbike.", {"road_users": ["motorcycle"]}, []),
        # two words win over one: a fire truck is an emergency vehicle, not a truck
        (
            "A fire truck passes.",
            {},
            ["the text names a fire truck but road users lacks emergency_vehicle"],
        ),
        ("A fire truck passes.", {"road_users": ["emergency_vehicle"]}, []),
        # single labels: a value the text names, the label another, and nothing in the text for the label's value
        ("The street at night.", {}, ["the text says 'night' but lighting is daylight"]),
        ("Daylight fades to night.", {}, []),  # the text also names the label's value
        ("Clear skies after the rain.", {}, []),
        ("Heavy snow and fog.", {}, ["the text says 'fog', 'snow' but weather is rain"]),
        ("A crash on the motorway.", {}, ["hazard level is none", "road type is urban"]),
        ("A near miss.", {"hazard_level": "high"}, []),
        ("", {}, []),
        ("No text about anything we check.", {}, []),
    ],
)
def test_the_check_finds_what_a_person_would_call_obvious(text, labels, found):
    got = consistency.conflicts(text, {**LABELS, **labels})
    assert len(got) == len(found), got
    for sentence, want in zip(got, found):
        assert want in sentence


def test_every_phrase_names_values_of_its_label():
    for label, table in consistency.SYNONYMS.items():
        assert label in taxonomy.ENUMS
        for phrase, values in table.items():
            assert phrase == phrase.lower() and 1 <= len(phrase.split()) <= 2, phrase
            assert set(values) <= set(taxonomy.ENUMS[label]), (label, phrase)


def test_labels_the_check_does_not_cover_or_that_are_missing_are_left_alone():
    assert consistency.conflicts("A pedestrian at night.", {}) == []
    assert consistency.conflicts("A pedestrian at night.", None) == []
    assert consistency.conflicts(None, LABELS) == []


# ---- what is stored --------------------------------------------------------------------------------------------
CONF = {
    "labels": {**dict.fromkeys(taxonomy.ENUMS, 0.9), "weather": 0.42},
    "items": {"road_users": {"car": 0.9}},
    "end": {"road_users": 0.95},
}


def _clip(db) -> int:
    with immediate(db):
        return db.execute("INSERT INTO clips (path) VALUES (?)", [f"c{db['clips'].count}.mp4"]).lastrowid


def _mirror(db, clip_id) -> tuple:
    return db.execute("SELECT confidence_min, label_conflicts FROM clips WHERE id = ?", [clip_id]).fetchone()


def test_a_machine_caption_stores_its_confidence_and_conflicts_and_the_clip_mirrors_them(db):
    cid = _clip(db)
    text = "A pedestrian steps out."
    row, current = captions.add_machine(
        db, cid, job_id=None, text=text, labels=LABELS, provenance={"model": "m", "confidence": CONF}
    )
    assert current
    assert row["confidence"] == CONF and caption_confidence.confidence_of(row)["weather"] == 0.42
    assert row["conflicts"] == ["the text names a pedestrian but road users lacks pedestrian"]
    assert _mirror(db, cid) == (0.42, 1)
    raw = db.execute("SELECT confidence, conflicts FROM captions WHERE id = ?", [row["id"]]).fetchone()
    assert json.loads(raw[0]) == CONF and json.loads(raw[1]) == row["conflicts"]  # JSON text, as documented


def test_a_person_s_version_has_no_model_confidence_and_is_checked_too(db):
    cid = _clip(db)
    m, _ = captions.add_machine(db, cid, job_id=None, text="A car.", labels=LABELS, provenance={"confidence": CONF})
    assert _mirror(db, cid) == (0.42, 0)
    h = captions.save_human(
        db, cid, text="A cyclist passes at night.", labels=LABELS, author="ann", base_caption_id=m["id"]
    )
    assert h["confidence"] is None and caption_confidence.confidence_of(h) == dict.fromkeys(taxonomy.ENUMS)
    assert len(h["conflicts"]) == 2
    assert _mirror(db, cid) == (None, 2)
    # adopting the machine version back is a person's version too: the check runs again, no confidence
    a = captions.adopt(db, cid, caption_id=m["id"], author="lee", base_caption_id=h["id"])
    assert a["confidence"] is None and a["conflicts"] == [] and _mirror(db, cid) == (None, 0)


def test_a_candidate_leaves_the_clip_s_mirrors_as_they_are(db):
    cid = _clip(db)
    m, _ = captions.add_machine(db, cid, job_id=None, text="A car.", labels=LABELS, provenance={})
    review_states.set_review(db, cid, status="approved", user="ann", base_caption_id=m["id"])
    cand, current = captions.add_machine(
        db, cid, job_id=None, text="A pedestrian.", labels=LABELS, provenance={"confidence": CONF}
    )
    assert not current and cand["confidence"] == CONF and len(cand["conflicts"]) == 1
    assert _mirror(db, cid) == (None, 0)  # the approved caption's: asked for no confidence, agrees with itself


def test_confidence_of_reads_only_probabilities(db):
    odd = {"labels": {"weather": 1.5, "lighting": "high", "road_type": True, "hazard_level": 0.3}}
    got = caption_confidence.confidence_of({"confidence": json.dumps(odd)})
    assert got["hazard_level"] == 0.3 and got["weather"] is got["lighting"] is got["road_type"] is None
    assert set(got) == set(taxonomy.ENUMS)
    assert caption_confidence.lowest_confidence(odd) == 0.3 and caption_confidence.lowest_confidence(None) is None
    assert caption_confidence.confidence_of(None) == dict.fromkeys(taxonomy.ENUMS)


def test_caption_versions_keep_their_confidence_and_conflicts(db):
    cid = _clip(db)
    m, _ = captions.add_machine(db, cid, job_id=None, text="A car.", labels=LABELS, provenance={"confidence": CONF})
    for column in ("confidence", "conflicts"):
        with pytest.raises(Exception, match="append-only"):
            db.execute(f"UPDATE captions SET {column} = NULL WHERE id = ?", [m["id"]])


def test_the_migration_leaves_older_captions_unknown(settings):
    path = settings.db
    d = dbmod.connect(path, migrate=False)
    schema.MIGRATIONS.apply(d, stop_before="m014_confidence")
    d.execute("INSERT INTO clips (id, path, hazard_level, current_caption_id) VALUES (1, 'a.mp4', 'high', 1)")
    d.execute(
        "INSERT INTO captions (id, clip_id, version, text, labels, source, author, created_at, origin_id) "
        "VALUES (1, 1, 1, 'A pedestrian.', ?, 'model', 'model', 0, 1)",
        [json.dumps(LABELS)],
    )
    d.conn.commit()
    d.close()
    d = dbmod.connect(path)
    try:
        assert d.execute("SELECT confidence, conflicts FROM captions").fetchone() == (None, None)
        assert d.execute("SELECT confidence_min, label_conflicts FROM clips").fetchone() == (None, None)
        assert caption_confidence.confidence_of(captions.get(d, 1)) == dict.fromkeys(taxonomy.ENUMS)
        assert "idx_clips_risk" in {i.name for i in d["clips"].indexes}
    finally:
        d.close()


def test_browse_filters_clips_whose_text_and_labels_disagree(db):
    agree, disagree, bare = _clip(db), _clip(db), _clip(db)
    captions.add_machine(db, agree, job_id=None, text="A car.", labels=LABELS, provenance={})
    captions.add_machine(db, disagree, job_id=None, text="A bus at night.", labels=LABELS, provenance={})
    assert clips.page_ids(db, clips.Filter(disagrees=True)) == [disagree]
    assert clips.page_ids(db, clips.Filter(disagrees=False)) == [agree]  # checked and agreeing: not the bare clip
    assert clips.page_ids(db, clips.Filter()) == [agree, disagree, bare]
    assert clips.Filter.from_dict({"disagrees": True}) == clips.Filter(disagrees=True)
