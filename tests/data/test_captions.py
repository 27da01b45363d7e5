"""Saving caption versions (data.captions, data.review_states): a stale save is refused with who and when, and a
new version of a decided clip is unreviewed again (the migration that undid older approvals too)."""

from __future__ import annotations

import json

import pytest

from data import captions, clips, review_states, schema
from data.db import immediate
from data.errors import Conflict
from tests.support.rows import LABELS, add_clip


def test_stale_save_is_refused_with_who_and_when(db):
    cid = add_clip(db)
    first = captions.save_human(db, cid, text="v1", labels=LABELS, author="alice", base_caption_id=None)
    captions.save_human(db, cid, text="v2 by bob", labels=LABELS, author="bob", base_caption_id=first["id"])
    with pytest.raises(Conflict) as e:
        captions.save_human(
            db, cid, text="alice's stale edit", labels=LABELS, author="alice", base_caption_id=first["id"]
        )
    assert "bob" in str(e.value) and "UTC" in str(e.value)
    assert clips.get(db, cid)["caption"]["text"] == "v2 by bob"


def test_a_new_version_of_a_decided_clip_is_unreviewed_and_its_event_says_what_was_undone(db):
    """An approval or a rejection judged the version the reviewer saw: a save or an adopt leaves the clip
    unreviewed (an export or a release of approved clips would otherwise take text nobody approved). Broken
    judges the video and stays."""
    cid = add_clip(db)
    v1 = captions.save_human(db, cid, text="v1", labels=LABELS, author="ann", base_caption_id=None)
    assert "review_was" not in v1
    review_states.set_review(db, cid, status="approved", user="rev", base_caption_id=v1["id"])
    v2 = captions.save_human(db, cid, text="v2", labels=LABELS, author="ann", base_caption_id=v1["id"])
    assert (v2["review_was"], v2["reviewed_by_was"]) == ("approved", "rev")
    now = clips.get(db, cid)
    assert (now["review_status"], now["reviewed_by"], now["reviewed_at"]) == ("unreviewed", None, None)
    detail = db.execute(
        "SELECT detail FROM events WHERE action = 'caption.save' AND caption_id = ?", [v2["id"]]
    ).fetchone()[0]
    assert '"review_was": "approved"' in detail and '"reviewed_by_was": "rev"' in detail
    # approving with an edit: the save undoes the old approval, the decision that follows is the approver's
    review_states.set_review(db, cid, status="approved", user="rev2", base_caption_id=v2["id"])
    adopted = captions.adopt(db, cid, caption_id=v1["id"], author="ann", base_caption_id=v2["id"])
    assert adopted["review_was"] == "approved" and clips.get(db, cid)["review_status"] == "unreviewed"
    review_states.set_review(db, cid, status="rejected", user="rev", base_caption_id=adopted["id"])
    v4 = captions.save_human(db, cid, text="v4", labels=LABELS, author="ann", base_caption_id=adopted["id"])
    assert v4["review_was"] == "rejected" and clips.get(db, cid)["review_status"] == "unreviewed"
    review_states.flag_broken(db, cid, user="ann", reason="black frames")
    v5 = captions.save_human(db, cid, text="v5", labels=LABELS, author="ann", base_caption_id=v4["id"])
    assert "review_was" not in v5 and clips.get(db, cid)["review_status"] == "broken"


def test_the_migration_undoes_approvals_older_than_the_clips_current_version(db):
    """A database written before the fix: a clip approved, then edited (the save kept 'approved'). m027 sets it
    unreviewed with an event saying whose approval it undid; a clip approved with its edit (saved, then
    approved) keeps its approval; running it again changes nothing."""
    edited, approved_with_edit = add_clip(db, "e.mp4"), add_clip(db, "w.mp4")
    v1 = captions.save_human(db, edited, text="v1", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, edited, status="approved", user="rev", base_caption_id=v1["id"])
    approved_at = clips.get(db, edited)["reviewed_at"]
    captions.save_human(db, edited, text="v2", labels=LABELS, author="bob", base_caption_id=v1["id"])
    with immediate(db):  # as the old save left it: the decision untouched
        db.execute(
            "UPDATE clips SET review_status = 'approved', reviewed_by = 'rev', reviewed_at = ? WHERE id = ?",
            [approved_at, edited],
        )
    w1 = captions.save_human(db, approved_with_edit, text="w1", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, approved_with_edit, status="approved", user="rev", base_caption_id=w1["id"])
    with immediate(db):
        schema.m027_decisions_on_later_versions(db)
    now = clips.get(db, edited)
    assert (now["review_status"], now["reviewed_by"], now["reviewed_at"]) == ("unreviewed", None, None)
    assert clips.get(db, approved_with_edit)["review_status"] == "approved"
    (event,) = db.execute(
        "SELECT actor, caption_id, detail FROM events WHERE action = 'review.reset' AND clip_id = ?", [edited]
    ).fetchall()
    detail = json.loads(event[2])
    assert event[0] == "migration" and event[1] == clips.get(db, edited)["current_caption_id"]
    assert (detail["review_was"], detail["reviewed_by_was"], detail["reviewed_at_was"]) == (
        "approved",
        "rev",
        approved_at,
    )
    assert detail["why"] == "version 2 was saved after the decision"
    with immediate(db):
        schema.m027_decisions_on_later_versions(db)
    assert db.execute("SELECT COUNT(*) FROM events WHERE action = 'review.reset'").fetchone()[0] == 1
