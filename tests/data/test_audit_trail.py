"""R9: every caption change is auditable, and the team's figures read from the audit events count people.
`assert_audit_complete(db)` (tests/support/audit_checks.py) checks that every caption version has who/what/when and
a previous version that is an earlier version of the same clip, and exactly one audit event with the same actor,
clip and previous version. It runs after R1 and R4 (tests/load/test_concurrent_annotators.py, test_app_kill.py),
after a runner kill loop (below), and after every kind of human change."""

from __future__ import annotations

import time

import pytest

from data import captions, review_states
from tests.support.audit_checks import assert_audit_complete
from tests.support.reliability_fixtures import LABELS
from tests.support.reliability_runs import kill_loop
from tests.support.rows import LABELS, add_clip
from tests.support.runner_fixtures import add_clips


def test_audit_after_runner_kills(settings, db, tmp_path):
    out = kill_loop(settings, db, tmp_path, kills=5, clips=20, seed=9)
    audit = assert_audit_complete(db)
    print("R9 after runner kills:", out, audit)
    assert audit["versions"] == out["items"]


def test_audit_after_every_kind_of_change(db):
    a, b = add_clips(db, 2, prefix="r9")
    m, _ = captions.add_machine(db, a, job_id=None, text="machine v1", labels=LABELS, provenance={"model": "x"})
    h = captions.save_human(db, a, text="human v2", labels=LABELS, author="ann", base_caption_id=m["id"])
    review_states.set_review(db, a, status="approved", user="lead", base_caption_id=h["id"])
    c, replaced = captions.add_machine(db, a, job_id=None, text="candidate", labels=LABELS, provenance={"model": "x"})
    assert not replaced
    adopted = captions.adopt(db, a, caption_id=c["id"], author="lead", base_caption_id=h["id"])
    assert adopted["review_was"] == "approved"  # the approval was of the version before: decided again below
    review_states.set_review(db, a, status="approved", user="lead", base_caption_id=adopted["id"])
    captions.save_human(db, b, text="first by hand", labels=LABELS, author="ann2", base_caption_id=None)
    audit = assert_audit_complete(db)
    assert audit == {"versions": 5, "events": 5, "reviewed_clips": 1}


def test_the_check_catches_a_change_without_history(db):
    (a,) = add_clips(db, 1, prefix="r9x")
    captions.save_human(db, a, text="logged", labels=LABELS, author="ann", base_caption_id=None)
    assert_audit_complete(db)
    db.execute(
        "INSERT INTO captions (clip_id, version, text, labels, source, author, created_at) "
        "VALUES (?, 2, 'sneaked in', '{}', 'human', 'ghost', 0)",
        [a],
    )
    with pytest.raises(AssertionError, match="audit gaps"):
        assert_audit_complete(db)


def test_team_stats_count_people_not_machines_within_the_window(db):
    from data import events

    a, b = add_clip(db, "t1.mp4"), add_clip(db, "t2.mp4")
    m, _ = captions.add_machine(db, a, job_id=None, text="machine", labels=LABELS, provenance={"model": "m"})
    h = captions.save_human(db, b, text="human", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, a, status="approved", user="ann", base_caption_id=m["id"])
    review_states.set_review(db, b, status="rejected", user="ann", base_caption_id=h["id"])
    review_states.set_review(db, a, status="rejected", user="bob", base_caption_id=m["id"])
    stats = {r["actor"]: r for r in events.team_stats(db, since=0)}
    assert set(stats) == {"ann", "bob"}  # the model's caption is not a person's work
    assert (stats["ann"]["edits"], stats["ann"]["approved"], stats["ann"]["rejected"]) == (1, 1, 1)
    assert stats["ann"]["approval_rate"] == 0.5 and stats["bob"]["approval_rate"] == 0.0
    assert events.team_stats(db, since=time.time() + 60) == []
