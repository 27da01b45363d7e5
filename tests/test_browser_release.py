"""A lead releases a training set from Browse in a real Chromium (issue 30): the panel sits beside the export links
for leads only; a release of the filter's approved clips leaves simulated text out and says so, shows its dataset
card, and its files are on disk; asked to include simulated text, the next version says what changed and the card
says the simulated records are flagged. An annotator never sees the panel."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from data import captions, clips, db as dbmod, review_states
from tests.support.browser_fixtures import SCREENSHOTS, login
from tests.support.webapp_fixtures import LABELS

pytestmark = pytest.mark.browser


def test_a_lead_releases_the_filter_and_reads_its_card(browser, server, library):
    db = dbmod.connect(server.settings.db)
    lead_ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ann_ctx = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        ids = library.clip_ids
        for cid in ids[:6]:  # machine captions of the simulated fleet, approved
            cap = clips.get(db, cid)["caption"]
            review_states.set_review(db, cid, status="approved", user="lead", base_caption_id=cap["id"])
        for cid in ids[8:10]:  # uncaptioned: a person writes from scratch (no simulated text), approved
            cap = captions.save_human(
                db,
                cid,
                text="A person's own caption of a calm drive.",
                labels=LABELS,
                author="ann",
                base_caption_id=None,
            )
            review_states.set_review(db, cid, status="approved", user="lead", base_caption_id=cap["id"])

        lead, _ = login(lead_ctx, server.url, "lead")
        lead.wait_for_selector(".cw-tile")
        lead.get_by_text("Release a training set").click()
        lead.fill("#release-name textarea", "browser-set")
        lead.click("#btn-release")
        lead.wait_for_selector("#release-result")
        said = lead.inner_text("#release-result")
        assert "Wrote browser-set v1" in said and ": 2 clips" in said
        assert "6 clips with simulated text left out" in said
        lead.wait_for_function("document.querySelector('#release-card').innerText.includes('browser-set v1')")
        card_text = lead.inner_text("#release-card")
        assert "Simulated text is left out: 6 clips" in card_text and "no group is in two splits" in card_text
        first = int(lead.get_attribute("#release-result", "data-release"))
        path = server.settings.data_dir / "releases" / "browser-set-v1"
        assert [json.loads(x)["clip_id"] for x in (path / "manifest.jsonl").read_text().splitlines()] == ids[8:10]

        lead.check("#release-simulated input")
        lead.click("#btn-release")
        lead.wait_for_function(f"document.querySelector('#release-result')?.dataset.release === '{first + 1}'")
        said = lead.inner_text("#release-result")
        assert "Wrote browser-set v2" in said and ": 8 clips" in said and "Since v1: 6 added, 0 removed" in said
        lead.wait_for_function("document.querySelector('#release-card').innerText.includes('browser-set v2')")
        card_text = lead.inner_text("#release-card")
        assert "Simulated text is included" in card_text and "6 records are flagged" in card_text
        path = server.settings.data_dir / "releases" / "browser-set-v2"
        frames = [pd.read_parquet(path / f"{s}.parquet") for s in ("train", "val", "test")]
        assert sum(len(f) for f in frames) == 8 and sum(int(f["simulated"].sum()) for f in frames) == 6
        lead.locator("#release-panel").scroll_into_view_if_needed()
        lead.screenshot(path=str(SCREENSHOTS / "browse-release.png"))

        ann, _ = login(ann_ctx, server.url, "ann")
        ann.wait_for_selector(".cw-tile")
        assert not ann.locator("#release-panel").is_visible()  # leads only
    finally:
        db.close()
        lead_ctx.close()
        ann_ctx.close()
