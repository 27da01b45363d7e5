"""What disabling a person does (data.team.set_disabled): their assigned clips go back to the queue with an event (the
migration does it for people disabled before it), and the clip they were reviewing goes to the others at once."""

from __future__ import annotations

import pytest

from data import (
    assignments,
    captions,
    clips,
    events,
    review_queue,
    schema,
    team as people,
    users,
)
from data.db import immediate
from tests.support.webapp_fixtures import (
    LABELS,
    PASSWORD,
    machine_provenance,
)


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
