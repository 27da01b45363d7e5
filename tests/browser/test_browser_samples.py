"""A random review sample and a blind second review in a real Chromium (issue 19): a lead draws a seeded sample of
the Browse filter and assigns it in one click, then sends it to a second reviewer; the second reviewer's tab shows
the video alone, with an empty form (no machine caption or labels, nothing of the first review); they set every
label and approve; the answer is stored as a second review and the clip's caption and review stay as the first
reviewer left them."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from data import captions, clips, db as dbmod, review_states, taxonomy
from data.quality import samples, second_review
from tests.support.blind_form import fill_labels, form_is_empty
from tests.support.browser_fixtures import SCREENSHOTS, choose, login

pytestmark = pytest.mark.browser
FIRST_TEXT = "The first reviewer's own words: a cyclist, not a bus."


def test_a_lead_draws_a_sample_and_a_second_reviewer_answers_it_blind(browser, server, library):
    lead_ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ann2_ctx = browser.new_context(viewport={"width": 1366, "height": 900})
    db = dbmod.connect(server.settings.db)
    try:
        lead, _ = login(lead_ctx, server.url, "lead")
        lead.wait_for_selector(".cw-tile")
        lead.get_by_text("Random review sample").click()
        lead.fill("#sample-size input", "3")
        choose(lead, "sample-people", "ann")
        lead.fill("#sample-seed input", "42")
        lead.click("#btn-draw-sample")
        lead.wait_for_selector("#sample-result")
        sample_id = int(lead.get_attribute("#sample-result", "data-sample"))
        s = samples.get(db, sample_id)
        assert (s["drawn"], s["seed"], s["assignees"]) == (3, 42, ["ann"])
        assert "seed 42" in lead.inner_text("#sample-result")
        members = samples.members(db, sample_id)
        for m in members:  # the tiles show the new assignee at once
            lead.wait_for_function(
                f"document.querySelector('#tile-{m['clip_id']} .cw-assignee')?.innerText === '→ ann'"
            )
        lead.screenshot(path=str(SCREENSHOTS / "browse-sample.png"))

        # ann's first review of one member: a label and the text changed, approved
        target = members[0]["clip_id"]
        origin = clips.get(db, target)["caption"]
        first = dict(
            origin["labels"], hazard_level="critical" if origin["labels"]["hazard_level"] != "critical" else "low"
        )
        saved = captions.save_human(
            db, target, text=FIRST_TEXT, labels=first, author="ann", base_caption_id=origin["id"]
        )
        review_states.set_review(db, target, status="approved", user="ann", base_caption_id=saved["id"])

        assert lead.input_value("#second-sample input") == str(sample_id)  # the draw filled it in
        choose(lead, "second-reviewer", "ann2")
        lead.check("#second-reviewed-only input")
        lead.click("#btn-send-second")
        lead.wait_for_function("document.querySelector('#second-msg').innerText.includes('Sent 1 clip of sample')")

        ann2, _ = login(ann2_ctx, server.url, "ann2")
        ann2.locator("#tab-second-button").click()
        ann2.wait_for_function(f"document.querySelector('#second-clip')?.dataset.clip === '{target}'")
        assert "1 blind second review waits for you" in ann2.inner_text("#second-status")
        # the video alone: no caption, and an empty form (neither the model's labels nor ann's)
        assert form_is_empty(ann2) and ann2.locator("#second-text").count() == 0
        body = ann2.inner_text("#tab-second")
        assert FIRST_TEXT not in body and origin["text"] not in body and "approved" not in body
        assert "from the video alone" in body
        weather = next(w for w in taxonomy.WEATHER if w != origin["labels"]["weather"])
        fill_labels(ann2, dict(origin["labels"], weather=weather))
        ann2.evaluate("window.scrollTo(0, 0)")
        ann2.screenshot(path=str(SCREENSHOTS / "second-review.png"))
        ann2.click("#btn-second-approve")
        ann2.wait_for_function("document.querySelector('#second-status').innerText.includes('is saved (approved)')")
        assert "No blind second review waits for you" in ann2.inner_text("#second-status")

        (pair,) = second_review.second_reviews(db, sample_id=sample_id)
        assert pair["reviewer"] == "ann2" and pair["decision"] == "approved"
        assert pair["labels"] == dict(origin["labels"], weather=weather)
        after = clips.get(db, target)
        assert after["current_caption_id"] == saved["id"] and after["review_status"] == "approved"
        assert after["caption"]["labels"] == first and after["reviewed_by"] == "ann"
    finally:
        db.close()
        lead_ctx.close()
        ann2_ctx.close()


# every field whose label promises what empty means, with the placeholder that says it (gr.Number showed 0 there)
EMPTY_FIELDS = {
    "sample-size": "1 to 5,000",
    "sample-seed": "empty: a new one",
    "second-sample": "its number (a draw fills it in)",
    "assign-count": "the whole filter",
    "f-job": "any",
}


def draw_and_wait(page, last: int | None) -> int:
    """Click Draw and return the new sample's id once its summary is shown."""
    page.click("#btn-draw-sample")
    page.wait_for_function(
        f"(document.querySelector('#sample-result')?.dataset.sample ?? '{last}') !== '{last}'", timeout=60_000
    )
    return int(page.get_attribute("#sample-result", "data-sample"))


def test_empty_fields_start_empty_and_an_empty_seed_draws_a_new_sample_each_time(browser, server, library):
    """Issue 26: "Seed (empty: a new one)" showed 0 and every draw used seed 0, so two draws were one sample. Every
    field whose label gives empty a meaning starts empty; two draws without touching the seed take two new seeds
    (recorded and shown) and two different samples; typing a shown seed draws its clips again; an empty "How
    many" assigns the whole filter; an empty "Job shown" is no job 0."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    db = dbmod.connect(server.settings.db)
    try:
        lead, _ = login(ctx, server.url, "lead")
        lead.wait_for_selector(".cw-tile")
        lead.get_by_text("Random review sample").click()
        for elem, empty in EMPTY_FIELDS.items():
            box = f"#{elem} input"
            assert lead.input_value(box) == "" and lead.get_attribute(box, "placeholder") == empty, elem

        lead.fill("#sample-size input", "8")
        choose(lead, "sample-stratify", "no strata")
        choose(lead, "sample-people", "ann2")
        first = draw_and_wait(lead, None)
        said = lead.inner_text("#sample-result")
        second = draw_and_wait(lead, first)
        s1, s2 = samples.get(db, first), samples.get(db, second)
        m1 = [m["clip_id"] for m in samples.members(db, first)]
        m2 = [m["clip_id"] for m in samples.members(db, second)]
        assert s1["seed"] != s2["seed"] and m1 != m2 and len(m1) == len(m2) == 8
        assert f"seed {s1['seed']}, a new one" in said and f"seed {s2['seed']}, a new one" in lead.inner_text(
            "#sample-result"
        )
        assert lead.input_value("#sample-seed input") == ""  # the next draw is new too
        # the shown seed, typed in, draws the same clips from the same population
        lead.fill("#sample-seed input", str(s1["seed"]))
        third = draw_and_wait(lead, second)
        assert [m["clip_id"] for m in samples.members(db, third)] == m1
        assert "a new one" not in lead.inner_text("#sample-result")
        # "Sample" now holds the last draw's number, which its field was empty for
        assert lead.input_value("#second-sample input") == str(third)

        # "How many (empty: the whole filter)": assigns every clip of the filter
        lead.goto(f"{server.url}/?f={quote(json.dumps({'weather': 'fog'}))}")
        lead.wait_for_selector(".cw-tile")
        fog = list(clips.iter_ids(db, clips.Filter(weather="fog")))
        choose(lead, "assign-to", "admin")
        assert lead.input_value("#assign-count input") == ""
        lead.click("#btn-assign")
        lead.wait_for_function(
            f"document.querySelector('#assign-msg').innerText.includes('Assigned {len(fog)} clips to admin')"
        )
        got = dict(db.execute("SELECT clip_id, assignee FROM assignments WHERE assignee = 'admin'").fetchall())
        assert sorted(got) == sorted(fog) and len(fog) > 1

        # "Job shown" with no job yet: empty, not job 0
        lead.locator("#tab-jobs-button").click()
        lead.wait_for_selector("#job-id input")
        assert lead.input_value("#job-id input") == "" and lead.get_attribute("#job-id input", "placeholder")
    finally:
        db.close()
        ctx.close()
