"""The assignable review queue in a real Chromium (issue 10): a lead assigns a clip of a filter to an annotator,
whose "n" then lands on it (not on the top of the grid), whose Browse can show "assigned to me", and who cannot
assign through Gradio's API. A lead also assigns the one clip open in Review. Every page is watched for uncaught
JavaScript errors (browser_fixtures)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from data import db as dbmod, events
from tests.support.browser_fixtures import SCREENSHOTS, login

pytestmark = pytest.mark.browser


def shown(page) -> int | None:
    v = page.evaluate("document.querySelector('#clip-header')?.dataset.clip")
    return int(v) if v else None


def assignments_of(server) -> dict[int, str]:
    d = dbmod.connect(server.settings.db)
    try:
        return {r["clip_id"]: r["assignee"] for r in d.query("SELECT clip_id, assignee FROM assignments")}
    finally:
        d.close()


def pick(page, elem_id: str, value: str) -> None:
    """Choose `value` in a Gradio dropdown with the keyboard, as a person would."""
    page.locator(f"#{elem_id} input").click()
    page.keyboard.press("Control+a")  # the current choice is typed over
    page.keyboard.type(value)
    page.locator("[role=listbox] li", has_text=value).first.wait_for()
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('#{elem_id} input').value === '{value}'")
    page.keyboard.press("Escape")


def test_a_lead_assigns_and_the_annotators_next_lands_on_it(browser, server, library):
    ids = library.clip_ids
    target = ids[3]  # the oldest snow clip: deep in the default (newest first) grid, never the queue's first pick
    lead_ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ann_ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        lead, _ = login(lead_ctx, server.url, "lead")
        lead.goto(f"{server.url}/?f={quote(json.dumps({'weather': 'snow'}))}&sort=oldest")
        lead.wait_for_selector(f"#tile-{target}")
        assert lead.locator("#assign-panel").is_visible()
        pick(lead, "assign-to", "ann2")
        lead.fill("#assign-count input", "1")
        lead.click("#btn-assign")
        lead.wait_for_function("document.querySelector('#assign-msg').innerText.includes('Assigned 1 clip to ann2')")
        assert assignments_of(server) == {target: "ann2"}
        lead.wait_for_function(f"document.querySelector('#tile-{target} .cw-assignee')?.innerText === '→ ann2'")
        lead.screenshot(path=str(SCREENSHOTS / "browse-assign.png"))

        ann, _ = login(ann_ctx, server.url, "ann2")
        ann.wait_for_selector(".cw-tile")
        assert not ann.locator("#assign-panel").is_visible()  # leads only
        ann.locator("#tab-review-button").click()
        ann.locator("body").click(position={"x": 3, "y": 3})
        ann.keyboard.press("n")
        ann.wait_for_function("!!document.querySelector('#clip-header')?.dataset.clip", timeout=45_000)
        assert shown(ann) == target  # her clip first, not the newest unreviewed clip (the top of the grid)
        assert "→ ann2" in ann.inner_text("#review-assignee")
        # approve-and-next: nothing else is hers, so the next is the first unassigned clip of the queue
        ann.keyboard.press("a")
        ann.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip !== '{target}'")
        assert shown(ann) == max(ids)

        # Browse: "assigned to me" shows just her clip
        ann.locator("#tab-browse-button").click()
        pick(ann, "f-assignee", "me")
        ann.wait_for_function("document.querySelector('#browse-counts').innerText.includes('1 match')")
        tiles = ann.eval_on_selector_all(".cw-tile", "els => els.map(e => +e.dataset.clip)")
        assert tiles == [target]

        # the lead takes it back: unassigned, and both changes are in the audit trail
        lead.click("#btn-unassign")
        lead.wait_for_function("document.querySelector('#assign-msg').innerText.includes('Unassigned 1 clip')")
        assert assignments_of(server) == {}
        d = dbmod.connect(server.settings.db)
        try:
            log = [(e["action"], e["actor"]) for e in events.for_clip(d, target) if e["action"].startswith("clip.")]
        finally:
            d.close()
        assert log == [("clip.unassign", "lead"), ("clip.assign", "lead")]
    finally:
        lead_ctx.close()
        ann_ctx.close()


def test_an_annotator_cannot_assign_through_the_api(server, library):
    from tests.support.reliability_fixtures import GradioError, GradioSession, dependencies, login_cookie

    cookie = login_cookie(server.url, "ann")
    session = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    try:
        for name, data in (
            ("assign_clips", [None, None, "ann", None, None]),
            ("unassign_clips", []),
            ("assign_clip", [None, None, None, "ann"]),
            ("unassign_clip", [None, None, None]),
        ):
            with pytest.raises(GradioError, match="needs the lead role"):
                session.call(name, data)
    finally:
        session.close()
    assert assignments_of(server) == {}


def test_a_lead_assigns_the_clip_open_in_review_and_an_unsaved_edit_stays_unsaved(browser, server, library):
    target = library.clip_ids[5]
    lead_ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ann_ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        lead, _ = login(lead_ctx, server.url, "lead")
        lead.goto(f"{server.url}/?clip={target}")
        lead.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{target}'")
        assert lead.locator("#review-assign").is_visible()
        loaded = lead.evaluate("document.querySelector('#clip-header').dataset.loaded")
        lead.fill("#caption-text textarea", "An edit the lead has not saved.")
        pick(lead, "review-assign-to", "ann")
        lead.click("#btn-assign-clip")
        lead.wait_for_function(
            f"document.querySelector('#review-msg').innerText.includes('Clip {target} assigned to ann')"
        )
        assert assignments_of(server) == {target: "ann"}
        assert "→ ann" in lead.inner_text("#review-assignee")  # the header says so at once
        # the form is untouched and still counts as edited (the leave-page guard compares data-loaded)
        assert lead.input_value("#caption-text textarea") == "An edit the lead has not saved."
        assert lead.evaluate("document.querySelector('#clip-header').dataset.loaded") == loaded

        ann, _ = login(ann_ctx, server.url, "ann")
        ann.goto(f"{server.url}/?clip={target}")
        ann.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{target}'")
        assert "→ ann" in ann.inner_text("#review-assignee")
        assert not ann.locator("#review-assign").is_visible()  # leads only

        lead.click("#btn-unassign-clip")
        lead.wait_for_function("document.querySelector('#review-msg').innerText.includes('taken back from ann')")
        assert assignments_of(server) == {}
        assert lead.locator("#review-assignee").count() == 0
    finally:
        lead_ctx.close()
        ann_ctx.close()
