"""Drafts (data.drafts) against a real SQLite file: an unsaved edit is kept per person and clip, bounded like a
caption, never written as a caption version, dropped by the person's save and kept through a conflict."""

from __future__ import annotations

import pytest

from data import captions, drafts, limits
from data.errors import Conflict, DataError, NotFound, TooLarge
from tests.support.runner_fixtures import LABELS


@pytest.fixture
def clip(db):
    cid = db.execute("INSERT INTO clips (path) VALUES ('d/0.mp4')").lastrowid
    db.conn.commit()
    cap, _ = captions.add_machine(db, cid, job_id=None, text="A bus passes.", labels=LABELS, provenance={})
    return cid, cap["id"]


def versions(db, cid) -> int:
    return db.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ?", [cid]).fetchone()[0]


def test_a_draft_is_kept_per_person_and_clip_and_is_never_a_version(db, clip):
    cid, base = clip
    partial = {"weather": "fog", "road_users": ["bus"]}  # mid-edit: the other labels not touched yet
    d = drafts.put(db, "ann", cid, base_caption_id=base, text="A bus passes in fog.", labels=partial)
    drafts.put(db, "bob", cid, base_caption_id=base, text="Bob's words.", labels=LABELS)
    got = drafts.get(db, "ann", cid)
    assert (got["text"], got["base_caption_id"], got["labels"]["weather"], got["labels"]["hazard_level"]) == (
        "A bus passes in fog.",
        base,
        "fog",
        None,
    )
    assert got["saved_at"] == d["saved_at"] and drafts.get(db, "bob", cid)["text"] == "Bob's words."
    drafts.put(db, "ann", cid, base_caption_id=base, text="A bus passes in thick fog.", labels=partial)
    assert drafts.get(db, "ann", cid)["text"] == "A bus passes in thick fog."  # replaced, not added
    assert versions(db, cid) == 1
    assert drafts.discard(db, "ann", cid) is True and drafts.get(db, "ann", cid) is None
    assert drafts.get(db, "bob", cid) is not None


def test_a_draft_that_says_what_the_caption_says_is_no_draft(db, clip):
    cid, base = clip
    drafts.put(db, "ann", cid, base_caption_id=base, text="edited", labels=LABELS)
    assert drafts.put(db, "ann", cid, base_caption_id=base, text=" A bus passes. ", labels=LABELS) is None
    assert drafts.get(db, "ann", cid) is None


def test_the_persons_save_drops_their_draft_and_a_conflict_keeps_it(db, clip):
    cid, base = clip
    drafts.put(db, "ann", cid, base_caption_id=base, text="Ann's edit.", labels=LABELS)
    drafts.put(db, "bob", cid, base_caption_id=base, text="Bob's edit.", labels=LABELS)
    saved = captions.save_human(db, cid, text="Bob's edit.", labels=LABELS, author="bob", base_caption_id=base)
    assert drafts.get(db, "bob", cid) is None
    with pytest.raises(Conflict):
        captions.save_human(db, cid, text="Ann's edit.", labels=LABELS, author="ann", base_caption_id=base)
    kept = drafts.get(db, "ann", cid)
    assert kept["text"] == "Ann's edit." and kept["base_caption_id"] == base  # her base: offered as a conflict
    assert versions(db, cid) == 2 and saved["version"] == 2


def test_a_late_autosave_after_the_save_leaves_no_draft(db, clip):
    cid, base = clip
    captions.save_human(db, cid, text="Saved words.", labels=LABELS, author="ann", base_caption_id=base)
    # the page's debounced write of the same text, with the base it had before the save, arrives afterwards
    assert drafts.put(db, "ann", cid, base_caption_id=base, text="Saved words.", labels=LABELS) is None
    assert drafts.get(db, "ann", cid) is None


def test_drafts_are_bounded_like_captions_and_hold_only_taxonomy_values(db, clip):
    cid, base = clip
    with pytest.raises(TooLarge, match=f"the limit is {limits.MAX_CAPTION_CHARS:,}"):
        drafts.put(db, "ann", cid, base_caption_id=base, text="w" * (limits.MAX_CAPTION_CHARS + 1), labels={})
    drafts.put(db, "ann", cid, base_caption_id=base, text="w" * limits.MAX_CAPTION_CHARS, labels={})
    for bad, why in (
        ({"weather": "sunny"}, "not one of its options"),
        ({"colour": "red"}, "Unknown label"),
        ({"road_users": "car"}, "a draft holds a list"),
        ({"road_users": ["car", "tank"]}, "a draft holds a list"),
        ([1, 2], "must be an object"),
    ):
        with pytest.raises(DataError, match=why):
            drafts.put(db, "ann", cid, base_caption_id=base, text="x", labels=bad)
    with pytest.raises(DataError, match="NUL"):
        drafts.put(db, "ann", cid, base_caption_id=base, text="a\x00b", labels={})
    with pytest.raises(NotFound):
        drafts.put(db, "ann", 99999, base_caption_id=None, text="x", labels={})
    assert drafts.get(db, "ann", cid)["text"] == "w" * limits.MAX_CAPTION_CHARS


def test_a_drafts_base_must_be_a_version_of_the_same_clip(db, clip):
    """Issue 27: a draft named another clip's caption as the version it started from."""
    cid, base = clip
    other = db.execute("INSERT INTO clips (path) VALUES ('d/1.mp4')").lastrowid
    db.conn.commit()
    theirs, _ = captions.add_machine(db, other, job_id=None, text="A tram.", labels=LABELS, provenance={})
    for bad in (theirs["id"], 10**9):
        with pytest.raises(DataError, match=f"not a version of clip {cid}"):
            drafts.put(db, "ann", cid, base_caption_id=bad, text="my edit", labels={})
    assert drafts.get(db, "ann", cid) is None
    assert drafts.put(db, "ann", cid, base_caption_id=base, text="my edit", labels={})["base_caption_id"] == base


def test_a_person_keeps_at_most_k_drafts_the_oldest_dropped(db):
    """Issue 27: nothing bounded a person's drafts (clips x 20 KB)."""
    ids = [db.execute("INSERT INTO clips (path) VALUES (?)", [f"k/{i}.mp4"]).lastrowid for i in range(8)]
    db.conn.commit()
    for cid in ids:
        drafts.put(db, "ann", cid, base_caption_id=None, text=f"edit of {cid}", labels={}, keep=5)
        drafts.put(db, "bob", cid, base_caption_id=None, text="bob's", labels={}, keep=5)
    mine = [r["clip_id"] for r in db.query("SELECT clip_id FROM drafts WHERE user = 'ann' ORDER BY clip_id")]
    assert mine == ids[-5:]  # the newest five; the three oldest dropped
    drafts.put(db, "ann", ids[3], base_caption_id=None, text="touched again", labels={}, keep=5)
    assert drafts.get(db, "ann", ids[3])["text"] == "touched again"
    assert db.execute("SELECT COUNT(*) FROM drafts WHERE user = 'bob'").fetchone()[0] == 5  # each their own


def test_a_person_keeps_at_most_k_sessions_the_oldest_ended(db):
    """Issue 27: a script signing in in a loop grew the sessions table for 12 hours."""
    from data import sessions

    tokens = [sessions.create(db, "ann", keep=3) for _ in range(6)]
    other = sessions.create(db, "bob", keep=3)
    alive = [sessions.lookup(db, t, idle=3600, absolute=3600) for t in tokens]
    assert alive == [None, None, None, "ann", "ann", "ann"]
    assert sessions.lookup(db, other, idle=3600, absolute=3600) == "bob"
