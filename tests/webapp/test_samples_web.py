"""Samples and blind second reviews through the app's own endpoints (Gradio events over HTTP, as a browser sends
them): a lead draws and assigns a sample in one call and sends it to a second reviewer; what the second reviewer
receives -- the Second review tab, the clip opened in Review, its Browse tile -- holds nothing of the first
review, and the Second review tab nothing of the model either (an empty form); their answer changes nothing of
the clip; and the prompt editor refuses a schema xgrammar refuses."""

from __future__ import annotations

import json
import re

import pytest

from data import captions, clips, db as dbmod, prompts, review_states, taxonomy
from data.quality import samples, second_review
from tests.support.reliability_fixtures import GradioError, GradioSession, dependencies, login_cookie

FIRST_TEXT = "FIRST-REVIEWER-WORDS: ann rewrote this caption"


@pytest.fixture(scope="module")
def sessions(server, library):
    out = {}
    for name in ("ann", "ann2", "lead"):
        cookie = login_cookie(server.url, name)
        out[name] = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    yield out
    for s in out.values():
        s.close()


def connect(server):
    return dbmod.connect(server.settings.db)


def flat(outputs) -> str:
    """Every output value as one text (HTML unescaped by JSON: a string as the browser gets it)."""
    return "\n".join(v if isinstance(v, str) else json.dumps(v, default=str) for v in outputs)


def tile(grid: str, clip_id: int) -> str:
    start = grid.index(f'id="tile-{clip_id}"')
    return grid[start : grid.index("</a>", start)]


@pytest.fixture(scope="module")
def sent(server, sessions):
    """The lead draws 4 clips for ann (seed 11) through the app; ann reviews the first one (a label and the text
    changed, approved); the lead sends the sample's reviewed part to ann2."""
    lead = sessions["lead"]
    out = lead.call("draw_sample", [{}, "newest", 4, "none", ["ann"], 11, [None]])
    assert "Drew sample" in flat(out)
    db = connect(server)
    try:
        (s,) = samples.list_samples(db)
        assert (s["drawn"], s["seed"], s["assignees"], s["created_by"]) == (4, 11, ["ann"], "lead")
        member = samples.members(db, s["id"])[0]
        clip = clips.get(db, member["clip_id"])
        origin = clip["caption"]
        mine = dict(origin["labels"])
        mine["hazard_level"] = next(h for h in taxonomy.HAZARD_LEVELS if h != mine["hazard_level"])
        saved = captions.save_human(
            db, clip["id"], text=FIRST_TEXT, labels=mine, author="ann", base_caption_id=origin["id"]
        )
        review_states.set_review(db, clip["id"], status="approved", user="ann", base_caption_id=saved["id"])
    finally:
        db.close()
    said = flat(lead.call("send_second", [s["id"], "ann2", True]))
    assert "Sent 1 clip of sample" in said and "3 skipped: not reviewed yet" in said
    return {"sample": s, "clip_id": clip["id"], "origin": origin, "first": mine}


def test_an_annotator_can_neither_draw_nor_send(sessions, sent):
    for name, data in (
        ("draw_sample", [{}, "newest", 2, "none", ["ann2"], 1, [None]]),
        ("send_second", [1, "ann", False]),
    ):
        with pytest.raises(GradioError, match="needs the lead role"):
            sessions["ann"].call(name, data)


def test_the_second_reviewer_receives_the_footage_alone_and_an_empty_form(sessions, sent):
    out = sessions["ann2"].call("second_next", [])
    text = flat(out)
    origin = sent["origin"]
    assert f'data-clip="{sent["clip_id"]}"' in text and "from the video alone" in text
    assert origin["text"] not in text  # no machine caption
    assert FIRST_TEXT not in text and "approved" not in text and not re.search(r"\bann\b", text)
    # every label field starts empty: neither the model's value nor ann's
    for value in [*origin["labels"].values(), *sent["first"].values()]:
        if isinstance(value, str):
            assert value not in out, value
    assert sum(o is None or o == [] for o in out) >= len(taxonomy.ENUMS)


def test_review_and_browse_hide_the_first_review_from_its_blind_reviewer(sessions, sent):
    cid = sent["clip_id"]
    review = sessions["ann2"].call("open_clip", [], event_data={"clip": cid})
    text = flat(review)
    assert 'id="review-blind"' in text and FIRST_TEXT not in text and "approved" not in text
    assert sent["first"]["hazard_level"] not in review  # no label field holds ann's value
    grid = next(
        v
        for v in sessions["ann2"].call("browse_search", ["any"] * 7 + [None, "", "any", "newest"])
        if isinstance(v, str) and "cw-grid" in v
    )
    mine = tile(grid, cid)
    assert "approved" not in mine and "hidden" in mine.lower() and "ann" not in mine.replace("ann2", "")
    # anyone else sees the clip as it is
    other = flat(sessions["lead"].call("open_clip", [], event_data={"clip": cid}))
    assert FIRST_TEXT in other and "approved" in other


def test_the_answer_is_stored_apart_and_changes_nothing_of_the_clip(server, sessions, sent):
    db = connect(server)
    try:
        before = clips.get(db, sent["clip_id"])
    finally:
        db.close()
    ann2 = sessions["ann2"]
    ann2.call("second_next", [])
    labels = dict(sent["origin"]["labels"], weather="fog")
    out = ann2.call("second_reject", [None, *[labels[n] for n in taxonomy.ENUMS]])
    assert "is saved (rejected)" in flat(out)
    db = connect(server)
    try:
        (pair,) = second_review.second_reviews(db, sample_id=sent["sample"]["id"])
        after = clips.get(db, sent["clip_id"])
    finally:
        db.close()
    assert pair["reviewer"] == "ann2" and pair["labels"] == labels and pair["decision"] == "rejected"
    assert pair["first_labels"] == sent["first"] and pair["first_decision"] == "approved"
    for key in ("current_caption_id", "review_status", "reviewed_by", "hazard_level", "weather"):
        assert after[key] == before[key], key
    # no longer blind: Review shows the clip as it is
    assert FIRST_TEXT in flat(ann2.call("open_clip", [], event_data={"clip": sent["clip_id"]}))


def test_the_prompt_editor_refuses_what_xgrammar_refuses_and_saves_a_valid_version(server, sessions):
    lead = sessions["lead"]
    db = connect(server)
    try:
        base = prompts.latest(db)
    finally:
        db.close()
    args = [base["name"], "", base["system"], base["user"]]
    refused = flat(lead.call("prompt_save", [*args, json.dumps(taxonomy.CAPTION_SCHEMA)]))
    assert "uniqueItems" in refused and "not supported by xgrammar" in refused
    saved = flat(lead.call("prompt_save", [*args, json.dumps(base["schema"])]))
    assert f"Saved {base['name']} v{base['version'] + 1}" in saved
    with pytest.raises(GradioError, match="needs the lead role"):
        sessions["ann"].call("prompt_save", [*args, json.dumps(base["schema"])])
