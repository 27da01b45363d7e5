"""Random review samples and blind second reviews (data.quality.samples, second_review) on real SQLite: the allocation
over hazard strata (hand-worked cases), a seeded draw that is reproducible, uniform and recorded with N_h and n_h,
members marked and assigned in one action, only unreviewed machine captions drawn; second reviews that show the footage
alone (no caption, none of the model's labels, nothing of the first review), and that change nothing of the clip."""

from __future__ import annotations

import collections
import json
import sqlite3

import pytest

from data import assignments, captions, clips, events, review_states, schema, users
from data.db import immediate
from data.errors import DataError, Forbidden, NotFound
from data.quality import samples, second_review
from tests.support.webapp_fixtures import LABELS, machine_provenance

PASSWORD = "correct horse battery"
# hazard level -> clips with an unreviewed machine caption of that level (N_h); 60 in all
LEVELS = {"critical": 3, "high": 7, "medium": 10, "low": 15, "none": 25}


def machine(db, clip_id: int, **labels) -> dict:
    cap, _ = captions.add_machine(
        db,
        clip_id,
        job_id=None,
        text=f"machine caption of clip {clip_id}",
        labels={**LABELS, **labels},
        provenance=machine_provenance(),
    )
    return cap


@pytest.fixture
def lib(db):
    """60 clips with an unreviewed machine caption (LEVELS), and clips a sample must never take: one approved,
    one whose current caption a person wrote, one without a caption, one that failed ingest."""
    with immediate(db):
        for i in range(64):
            db.execute(
                "INSERT INTO clips (path, probe_error) VALUES (?, ?)", [f"c{i:02d}.mp4", "bad" if i == 63 else None]
            )
    cid = 1
    by_level: dict[str, list[int]] = {}
    for level, n in LEVELS.items():
        for _ in range(n):
            machine(db, cid, hazard_level=level)
            by_level.setdefault(level, []).append(cid)
            cid += 1
    approved = machine(db, 61, hazard_level="high")
    review_states.set_review(db, 61, status="approved", user="lee", base_caption_id=approved["id"])
    human = machine(db, 62, hazard_level="critical")
    captions.save_human(db, 62, text="a person's words", labels=LABELS, author="ann", base_caption_id=human["id"])
    # clip 63 failed ingest; clip 64 has no caption
    for name, role in (("ann", "annotator"), ("ann2", "annotator"), ("ann3", "annotator"), ("lead", "lead")):
        users.create(db, name, role=role, password=PASSWORD)
    db.by_level = by_level
    return db


def draw(db, size=12, people=("ann", "ann2"), **kw):
    kw.setdefault("seed", 7)
    return samples.draw(db, clips.Filter(), size, list(people), actor="lead", role="lead", **kw)


def test_the_migration_adds_the_sample_tables(db):
    assert hasattr(schema, "m017_samples") and not schema.MIGRATIONS.pending(db)
    for table in ("samples", "sample_strata", "sample_members", "second_reviews"):
        assert db[table].exists()


def test_allocation_proportional_and_equal_hand_worked():
    sizes = {"critical": 3, "high": 7, "medium": 10, "low": 15, "none": 25}  # N = 60
    # 12 * N_h / 60 = 0.6, 1.4, 2, 3, 5: floors 0, 1, 2, 3, 5 (11), the one left to the largest fraction (0.6)
    assert samples.allocate(12, sizes, "proportional") == {"critical": 1, "high": 1, "medium": 2, "low": 3, "none": 5}
    # 7 * N_h / 60 = 0.35, 0.82, 1.17, 1.75, 2.92: floors 0, 0, 1, 1, 2 (4); 3 left to .92, .82, .75
    assert samples.allocate(7, sizes, "proportional") == {"critical": 0, "high": 1, "medium": 1, "low": 2, "none": 3}
    # equal: 2 each, the 2 left to the most hazardous strata
    assert samples.allocate(12, sizes, "equal") == {"critical": 3, "high": 3, "medium": 2, "low": 2, "none": 2}
    # equal: 4 each but critical has 3; the one left over goes to high
    assert samples.allocate(20, sizes, "equal") == {"critical": 3, "high": 5, "medium": 4, "low": 4, "none": 4}
    # asking for more than there is takes everything, in every mode
    assert samples.allocate(99, sizes, "proportional") == sizes == samples.allocate(99, sizes, "equal")
    assert samples.allocate(99, sizes, "none") == {"all": 60}
    with pytest.raises(DataError, match="Stratify"):
        samples.allocate(5, sizes, "random")


@pytest.mark.parametrize("stratify", ["proportional", "equal"])
def test_a_stratified_draw_takes_n_h_clips_from_each_stratum_and_records_n_h_and_big_n_h(lib, stratify):
    s = draw(lib, 12, stratify=stratify)
    want = samples.allocate(12, LEVELS, stratify)
    assert s["population"] == 60 and s["size"] == 12 and s["drawn"] == 12 and s["stratify"] == stratify
    assert {r["stratum"]: (r["population"], r["drawn"]) for r in s["strata"]} == {
        h: (LEVELS[h], want[h]) for h in LEVELS
    }
    got = collections.Counter()
    for m in samples.members(lib, s["id"]):
        level = next(h for h, ids in lib.by_level.items() if m["clip_id"] in ids)
        assert m["stratum"] == level  # each member is in the stratum of its caption's hazard level
        got[level] += 1
    assert dict(got) == {h: n for h, n in want.items() if n}


def test_the_draw_is_reproducible_from_its_seed_and_the_seed_is_stored(lib):
    first = draw(lib, 10, stratify="proportional", seed=2024)
    again = draw(lib, 10, stratify="proportional", seed=2024)
    other = draw(lib, 10, stratify="proportional", seed=2025)

    def ids(s):
        return [m["clip_id"] for m in samples.members(lib, s["id"])]

    assert first["seed"] == again["seed"] == 2024
    assert ids(first) == ids(again)  # same seed, same population: same clips in the same order
    assert ids(other) != ids(first)
    fresh = draw(lib, 10, seed=None)
    assert isinstance(fresh["seed"], int) and samples.get(lib, fresh["id"])["seed"] == fresh["seed"]
    redo = draw(lib, 10, seed=fresh["seed"])
    assert ids(redo) == ids(fresh)  # a seed the draw chose reproduces it too


def test_every_clip_of_the_population_has_the_same_chance(lib):
    """300 seeded draws of 12 of the 60 clips without strata: each clip's count is Binomial(300, 0.2), mean 60,
    sd 6.9. Fixed seeds make the outcome fixed; the bound (+-30, over 4 sd) is wide enough for any seeds."""
    counts = collections.Counter()
    for seed in range(300):
        s = draw(lib, 12, people=["ann"], seed=seed)
        counts.update(m["clip_id"] for m in samples.members(lib, s["id"]))
    assert set(counts) == set(range(1, 61))  # nothing outside the population, every clip of it reachable
    assert all(30 <= counts[c] <= 90 for c in counts), sorted(counts.values())
    assert sum(counts.values()) == 300 * 12


def test_members_are_marked_assigned_round_robin_and_audited_in_one_action(lib):
    assignments.assign_clip(lib, 5, "ann3", actor="lead", role="lead")  # someone else had clip 5
    s = draw(lib, 60, people=["ann", "ann2"], seed=1)  # the whole population
    ms = samples.members(lib, s["id"])
    assert [m["draw_order"] for m in ms] == list(range(60))
    # dealt round-robin, except clip 5: ann3 holds it, and a draw takes nobody's clip (issue 45)
    assert [m["assignee"] for m in ms if m["clip_id"] != 5] == ["ann", "ann2"] * 29 + ["ann"]
    assert next(m["assignee"] for m in ms if m["clip_id"] == 5) == "ann3"
    for m in ms:
        assert assignments.assignee_of(lib, m["clip_id"]) == m["assignee"]
        assert m["caption_id"] == clips.get(lib, m["clip_id"])["current_caption_id"]  # what the sample measures
        assert samples.of_clip(lib, m["clip_id"]) == [s["id"]]
    assert s["assigned"] == {"ann": 30, "ann2": 29} and s["kept"] == {"ann3": 1} and s["also_in"] == {}
    assert s["created_by"] == "lead" and s["source"]["review_status"] == "unreviewed"
    (ev,) = events.iter_all(lib, "sample.draw")
    assert ev["actor"] == "lead" and f'"sample_id": {s["id"]}' in ev["detail"] and '"seed": 1' in ev["detail"]
    assert len(list(events.iter_all(lib, "clip.assign"))) == 60  # clip 5 to ann3, then the 59 nobody held
    # clips reviewed because someone chose them are no sample members
    assert samples.of_clip(lib, 61) == [] and samples.of_clip(lib, 62) == []


def test_only_machine_captions_nobody_reviewed_are_drawn(lib):
    s = draw(lib, samples.MAX_SAMPLE)
    drawn = {m["clip_id"] for m in samples.members(lib, s["id"])}
    assert drawn == set(range(1, 61)) and s["drawn"] == s["population"] == 60 and s["size"] == samples.MAX_SAMPLE
    job = draw(lib, 5, people=["ann"], stratify="equal")  # a narrower filter narrows the population
    assert job["population"] == 60
    high = samples.draw(
        lib, clips.Filter(hazard_level="high"), 3, ["ann"], actor="lead", role="lead", stratify="proportional"
    )
    assert high["population"] == 7 and [r["stratum"] for r in high["strata"]] == ["high"]
    assert all(m["clip_id"] in lib.by_level["high"] for m in samples.members(lib, high["id"]))


def test_refusals_say_what_to_do_and_write_nothing(lib):
    before = lib.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    with pytest.raises(Forbidden, match="Only a lead"):
        samples.draw(lib, clips.Filter(), 5, ["ann"], actor="ann", role="annotator")
    for size in (0, -3, "many", samples.MAX_SAMPLE + 1, 2.5):
        with pytest.raises(DataError, match="sample size"):
            draw(lib, size)
    with pytest.raises(DataError, match="Review is approved"):
        samples.draw(lib, clips.Filter(review_status="approved"), 5, ["ann"], actor="lead", role="lead")
    with pytest.raises(DataError, match="caption source is human"):
        samples.draw(lib, clips.Filter(caption_source="human"), 5, ["ann"], actor="lead", role="lead")
    with pytest.raises(DataError, match="No clip of this filter"):
        samples.draw(lib, clips.Filter(weather="snow"), 5, ["ann"], actor="lead", role="lead")
    with pytest.raises(DataError, match="no user named 'nobody'"):
        draw(lib, 5, people=["ann", "nobody"])  # the second person is checked after the first one's share
    with pytest.raises(DataError, match="Pick the people"):
        draw(lib, 5, people=[" "])
    with pytest.raises(DataError, match="seed"):
        draw(lib, 5, seed=-1)
    with pytest.raises(DataError, match="Stratify"):
        draw(lib, 5, stratify="by_weather")
    assert lib.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0
    assert lib.execute("SELECT COUNT(*) FROM assignments").fetchone()[0] == 0
    assert lib.execute("SELECT COUNT(*) FROM events").fetchone()[0] == before


def test_a_drawn_sample_is_never_changed(lib):
    s = draw(lib, 4)
    for sql in (
        "UPDATE samples SET seed = 1",
        "DELETE FROM samples",
        "UPDATE sample_members SET stratum = 'x'",
        "DELETE FROM sample_members",
        "UPDATE sample_strata SET drawn = 0",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="never changed"):
            lib.execute(sql)
    assert len(samples.members(lib, s["id"])) == 4
    with pytest.raises(NotFound):
        samples.get(lib, 999)


# -- second reviews ------------------------------------------------------------------------------------------------


@pytest.fixture
def reviewed(lib):
    """A sample of 6 (ann has 3, ann2 has 3); ann reviews her first clip: fixes a label and the text, approves."""
    s = draw(lib, 6, people=["ann", "ann2"], seed=3)
    ms = samples.members(lib, s["id"])
    first = ms[0]
    clip = clips.get(lib, first["clip_id"])
    fixed = dict(clip["caption"]["labels"], weather="snow", hazard_level="critical")
    cap = captions.save_human(
        lib,
        clip["id"],
        text="ann's own careful words",
        labels=fixed,
        author="ann",
        base_caption_id=clip["caption"]["id"],
    )
    review_states.set_review(lib, clip["id"], status="approved", user="ann", base_caption_id=cap["id"])
    lib.sample, lib.members, lib.first = s, ms, first
    return lib


def test_sending_skips_the_first_reviewer_and_unreviewed_clips_when_asked(reviewed):
    db, s = reviewed, reviewed.sample
    only = second_review.send_to_second(db, s["id"], "ann2", actor="lead", role="lead", reviewed_only=True)
    assert only["sent"] == 1 and only["unreviewed"] == 5 and only["own"] == 0  # ann's approved clip
    out = second_review.send_to_second(db, s["id"], "ann2", actor="lead", role="lead")
    # ann2 was given 3 of the 6 to review first: those are not second opinions
    assert out == {**out, "sent": 2, "unchanged": 1, "own": 3, "answered": 0, "moved": 0}
    moved = second_review.send_to_second(db, s["id"], "ann3", actor="lead", role="lead")
    assert moved["moved"] == 3 and moved["sent"] == 3 and second_review.pending_count(db, "ann2") == 0
    assert second_review.pending_count(db, "ann3") == 6
    log = list(events.iter_all(db, "second_review.request"))
    assert len(log) == 1 + 2 + 6 and all(e["actor"] == "lead" for e in log)
    with pytest.raises(Forbidden):
        second_review.send_to_second(db, s["id"], "ann3", actor="ann", role="annotator")
    with pytest.raises(DataError, match="no user named"):
        second_review.send_to_second(db, s["id"], "ghost", actor="lead", role="lead")
    with pytest.raises(NotFound):
        second_review.send_to_second(db, 999, "ann3", actor="lead", role="lead")


def test_a_person_given_a_member_since_the_draw_is_not_its_second_reviewer(reviewed):
    db = reviewed
    moved = next(m for m in reviewed.members if m["assignee"] == "ann2")
    assignments.assign_clip(db, moved["clip_id"], "ann3", actor="lead", role="lead")
    out = second_review.send_to_second(db, reviewed.sample["id"], "ann3", actor="lead", role="lead")
    assert (out["own"], out["sent"]) == (1, 5)
    assert not second_review.is_blind(db, moved["clip_id"], "ann3")


def test_the_second_reviewer_gets_the_footage_alone_no_caption_no_labels_no_first_review(reviewed):
    db, clip_id = reviewed, reviewed.first["clip_id"]
    second_review.send_to_second(db, reviewed.sample["id"], "ann3", actor="lead", role="lead", reviewed_only=True)
    t = second_review.next_task(db, "ann3")
    origin = captions.get(db, reviewed.first["caption_id"])  # the machine caption ann started from
    assert t["clip_id"] == clip_id and set(t) == {"id", "sample_id", "clip_id", "clip"}
    assert set(t["clip"]) == set(second_review.BLIND_CLIP_FIELDS)
    (pending,) = [r for r in second_review.second_reviews(db, answered_only=False) if r["id"] == t["id"]]
    assert pending["origin_caption_id"] == origin["id"]  # recorded, not shown
    flat = repr(t)
    # the model's text and labels, her text, her labels, her decision, her name
    for leak in (origin["text"], json.dumps(origin["labels"])[:40], "labels", "caption", "model"):
        assert leak not in flat, leak
    for leak in ("ann's own careful words", "snow", "critical", "approved", "'ann'", "review_status", "reviewed_by"):
        assert leak not in flat, leak
    assert second_review.is_blind(db, clip_id, "ann3") and not second_review.is_blind(db, clip_id, "ann2")
    assert second_review.blind_clip_ids(db, "ann3", range(1, 70)) == {clip_id}
    with pytest.raises(Forbidden, match="ann3's"):
        second_review.task(db, t["id"], "ann2")


def test_an_answer_is_stored_apart_and_changes_nothing_of_the_clip(reviewed):
    db, clip_id = reviewed, reviewed.first["clip_id"]
    second_review.send_to_second(db, reviewed.sample["id"], "ann3", actor="lead", role="lead", reviewed_only=True)
    before = clips.get(db, clip_id)
    versions = len(captions.history(db, clip_id))
    t = second_review.next_task(db, "ann3")
    mine = dict(captions.get(db, reviewed.first["caption_id"])["labels"], weather="rain")
    with pytest.raises(DataError, match="approves or rejects"):
        second_review.answer(db, t["id"], "ann3", labels=mine, decision="maybe")
    with pytest.raises(DataError, match="weather"):
        second_review.answer(db, t["id"], "ann3", labels=dict(mine, weather="hail"), decision="approved")
    done = second_review.answer(db, t["id"], "ann3", labels=mine, decision="approved")
    assert done["state"] == "done" and done["labels"] == mine and done["decision"] == "approved"
    after = clips.get(db, clip_id)
    for key in ("current_caption_id", "review_status", "reviewed_by", "reviewed_at", "weather", "hazard_level"):
        assert after[key] == before[key], key
    assert len(captions.history(db, clip_id)) == versions
    assert not second_review.is_blind(db, clip_id, "ann3") and second_review.next_task(db, "ann3") is None
    with pytest.raises(DataError, match="answered already"):
        second_review.answer(db, t["id"], "ann3", labels=mine, decision="rejected")
    with pytest.raises(sqlite3.IntegrityError, match="never changed"):
        db.execute("UPDATE second_reviews SET decision = 'rejected'")
    (ev,) = events.iter_all(db, "second_review.answer")
    assert ev["actor"] == "ann3" and ev["clip_id"] == clip_id
    (pair,) = second_review.second_reviews(db, sample_id=reviewed.sample["id"])
    assert pair["labels"] == mine and pair["decision"] == "approved" and pair["reviewer"] == "ann3"
    assert pair["first_reviewer"] == "ann" and pair["first_decision"] == "approved"
    assert pair["first_labels"]["weather"] == "snow" and pair["origin_caption_id"] == reviewed.first["caption_id"]
    assert second_review.second_reviews(db, sample_id=999) == []


def test_nobody_second_reviews_a_clip_they_reviewed_first(reviewed):
    db, s = reviewed, reviewed.sample
    second_review.send_to_second(db, s["id"], "ann3", actor="lead", role="lead")
    # ann3 reviews one of ann2's clips through the ordinary queue while its second review waits for her
    victim = next(m for m in reviewed.members if m["assignee"] == "ann2")
    review = next(r for r in second_review.second_reviews(db, answered_only=False) if r["clip_id"] == victim["clip_id"])
    review_states.set_review(
        db, victim["clip_id"], status="approved", user="ann3", base_caption_id=victim["caption_id"]
    )
    with pytest.raises(DataError, match="reviewed clip .* yourself"):
        second_review.answer(db, review["id"], "ann3", labels=dict(LABELS), decision="approved")
    assert all(r["state"] == "pending" for r in second_review.second_reviews(db, answered_only=False))


def test_next_task_walks_the_pending_reviews_in_order_and_wraps(reviewed):
    db, s = reviewed, reviewed.sample
    second_review.send_to_second(db, s["id"], "ann3", actor="lead", role="lead")
    ids = [r["id"] for r in second_review.second_reviews(db, answered_only=False)]
    assert second_review.next_task(db, "ann3")["id"] == ids[0]
    assert second_review.next_task(db, "ann3", after=ids[2])["id"] == ids[3]
    assert second_review.next_task(db, "ann3", after=ids[-1])["id"] == ids[0]
    assert second_review.next_task(db, "ann") is None
    assert "origin" not in second_review.next_task(db, "ann3")
