"""The web app in a real Chromium: browse, filter, search, play and seek, edit and save, conflicts between two
annotators, keyboard shortcuts, a lead's job on the simulated fleet; screenshots of every page at the end."""

from __future__ import annotations

import re

import pytest

from tests.support.browser_fixtures import SCREENSHOTS, login
from tests.support.webapp_fixtures import AppServer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(web_settings, library, simfleet):
    with AppServer(web_settings, fleet_urls=simfleet) as s:
        yield s


@pytest.fixture(scope="module")
def ann(browser, server):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page, watch = login(ctx, server.url, "ann")
    yield page, watch
    ctx.close()


def tiles(page) -> list[int]:
    return [int(x) for x in page.eval_on_selector_all(".cw-tile", "els => els.map(e => e.dataset.clip)")]


def current_clip(page) -> int:
    return int(re.search(r"#(\d+)", page.inner_text("#review-header")).group(1))


def open_clip(page, clip_id: int) -> None:
    page.locator("#tab-browse-button").click() if page.locator("#tab-browse-button").count() else None
    page.locator(f"#tile-{clip_id}").click()
    page.wait_for_function(f"document.querySelector('#review-header')?.innerText.includes('#{clip_id} ')")


def test_login_page_and_browse_grid(ann, server, library):
    page, watch = ann
    page.wait_for_selector(".cw-tile")
    assert tiles(page)[:3] == sorted(library.clip_ids, reverse=True)[:3]  # newest first
    assert "24 match" in page.inner_text("#browse-counts")
    assert page.locator("#sim-banner").is_visible()
    assert not watch.errors


def test_filter_and_search(ann, library):
    page, _ = ann
    page.locator("#f-has-caption").get_by_text("no", exact=True).click()
    page.wait_for_function("document.querySelector('#browse-counts').innerText.includes('3 match')")
    assert sorted(tiles(page)) == library.clip_ids[7:10]
    page.locator("#f-has-caption").get_by_text("any", exact=True).click()
    page.wait_for_function("document.querySelector('#browse-counts').innerText.includes('24 match')")
    page.fill("#search textarea, #search input", "cyclist")
    page.press("#search textarea, #search input", "Enter")
    page.wait_for_function("!document.querySelector('#browse-counts').innerText.includes('24 match')")
    found = tiles(page)
    assert found and all(library.clip_ids.index(c) % 3 == 0 for c in found)
    # a query that cannot be read: the grid says so and what to write (issue 18: it was a silent 0)
    page.fill("#search textarea, #search input", "cyclist OR")
    page.press("#search textarea, #search input", "Enter")
    page.wait_for_selector("#search-hint")
    assert "OR needs a word on each side" in page.inner_text("#gallery") and tiles(page) == []
    # OR is the union: cyclist clips and bus clips are every captioned clip of the library
    page.fill("#search textarea, #search input", "cyclist OR bus")
    page.press("#search textarea, #search input", "Enter")
    page.wait_for_function("document.querySelector('#browse-counts')?.innerText.includes('21 match')")
    assert set(found) < set(tiles(page)) and not page.locator("#search-hint").count()
    page.fill("#search textarea, #search input", "")
    page.press("#search textarea, #search input", "Enter")
    page.wait_for_function("document.querySelector('#browse-counts').innerText.includes('24 match')")


def test_open_clip_video_plays_and_seeks(ann, library):
    page, watch = ann
    cid = library.clip_ids[2]
    open_clip(page, cid)
    page.wait_for_function("document.querySelector('#cw-video')?.readyState >= 1", timeout=45_000)
    t = page.evaluate("""() => new Promise((ok, fail) => { const v = document.querySelector('#cw-video');
        v.addEventListener('seeked', () => ok(v.currentTime), {once: true}); v.currentTime = 1.3;
        setTimeout(() => fail('no seeked event'), 10000); })""")
    assert abs(t - 1.3) < 0.2
    assert page.locator("#cw-filmstrip").is_visible()
    assert "SIMULATED" in page.inner_text("#provenance")
    assert not watch.errors


def test_hevc_clip_gets_a_notice(ann, library):
    page, _ = ann
    page.goto(page.url.split("?")[0] + f"?clip={library.clip_ids[5]}")
    page.wait_for_selector("#hevc-notice", timeout=45_000)
    assert page.locator("#cw-video").count() == 0
    assert page.locator("#cw-filmstrip").is_visible()


def test_hevc_clip_with_a_preview_plays_the_preview(ann, library):
    page, _ = ann
    cid = library.clip_ids[6]
    page.goto(page.url.split("?")[0] + f"?clip={cid}")
    page.wait_for_selector("#hevc-notice", timeout=45_000)
    assert page.get_attribute("#cw-video", "src") == f"/preview/{cid}"
    page.wait_for_function("document.querySelector('#cw-video').readyState >= 1", timeout=45_000)


def test_edit_save_reload_shows_edit(ann, server, library):
    page, _ = ann
    cid = library.clip_ids[3]
    page.goto(f"{server.url}/?clip={cid}")
    page.wait_for_function(f"document.querySelector('#review-header')?.innerText.includes('#{cid} ')")
    page.wait_for_selector("video")
    page.evaluate("document.querySelector('video').dataset.mark = 'before-save'")
    page.fill("#caption-text textarea", "Edited by ann: a cyclist swerves around a parked van.")
    page.click("#btn-save")
    page.wait_for_selector("#review-msg .cw-msg-ok")
    # saving must not replace (and so reload) the video the annotator is watching
    assert page.evaluate("document.querySelector('video')?.dataset.mark") == "before-save"
    page.reload()
    page.wait_for_function(f"document.querySelector('#review-header')?.innerText.includes('#{cid} ')")
    assert page.input_value("#caption-text textarea") == "Edited by ann: a cyclist swerves around a parked van."
    assert "edited by ann" in page.inner_text("#provenance")


def test_two_annotators_get_a_conflict(browser, server, library):
    cid = library.clip_ids[4]
    ctx_a = browser.new_context()
    ctx_b = browser.new_context()
    try:
        a, _ = login(ctx_a, server.url, "ann")
        b, _ = login(ctx_b, server.url, "ann2")
        for p in (a, b):
            p.goto(f"{server.url}/?clip={cid}")
            p.wait_for_function(f"document.querySelector('#review-header')?.innerText.includes('#{cid} ')")
        a.fill("#caption-text textarea", "Version from A.")
        a.click("#btn-save")
        a.wait_for_selector("#review-msg .cw-msg-ok")
        b.fill("#caption-text textarea", "Version from B.")
        b.click("#btn-save")
        b.wait_for_selector("#review-msg .cw-msg-conflict")
        assert "changed by ann at" in b.inner_text("#review-msg")
        assert b.input_value("#caption-text textarea") == "Version from B."  # B's edit is still there
        b.click("#btn-take-theirs")
        b.wait_for_function("document.querySelector('#caption-text textarea').value === 'Version from A.'")
    finally:
        ctx_a.close()
        ctx_b.close()


def test_keyboard_shortcuts(ann, server, library):
    page, _ = ann
    ids = sorted(library.clip_ids, reverse=True)
    start = ids[10]
    page.goto(f"{server.url}/?clip={start}")
    page.wait_for_function(f"document.querySelector('#review-header')?.innerText.includes('#{start} ')")
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("j")
    page.wait_for_function(f"document.querySelector('#review-header').innerText.includes('#{ids[11]} ')")
    page.keyboard.press("k")
    page.wait_for_function(f"document.querySelector('#review-header').innerText.includes('#{start} ')")
    # typed into the caption box, j/a/r are text, not shortcuts
    box = page.locator("#caption-text textarea")
    box.fill("")
    box.type("jar")
    page.wait_for_timeout(600)
    assert current_clip(page) == start and box.input_value() == "jar"
    assert page.inner_text("#review-status") == "unreviewed"
    # ctrl+s inside the box saves
    box.fill("Saved with the keyboard.")
    box.press("Control+s")
    page.wait_for_selector("#review-msg .cw-msg-ok")
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("a")  # approve and move on to the next unreviewed clip
    page.wait_for_function(f"document.querySelector('#review-msg').innerText.includes('clip {start} approved')")
    assert current_clip(page) != start
    page.keyboard.press("?")
    assert page.locator("#shortcut-help").is_visible()
    page.screenshot(path=str(SCREENSHOTS / "review.png"))
    page.keyboard.press("?")
    assert not page.locator("#shortcut-help").is_visible()
    page.keyboard.press("/")
    page.wait_for_function("document.activeElement?.closest('#search') !== null")


def test_lead_starts_job_and_watches_it_finish(browser, server, library, runner):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    try:
        page, watch = login(ctx, server.url, "lead")
        page.wait_for_selector(".cw-tile")
        page.screenshot(path=str(SCREENSHOTS / "browse.png"))
        page.click("#tab-jobs-button")
        page.locator("#job-source").get_by_text("everything uncaptioned", exact=True).click()
        page.fill("#job-name textarea, #job-name input", "uncaptioned from the browser test")
        # the work per clip is the lead's choice: half the recipe's pixels, chosen as a person would
        page.locator("#job-max-pixels input").click()
        page.locator("[role=listbox] li", has_text="(half)").first.click()
        page.wait_for_function("document.querySelector('#job-max-pixels input').value.includes('(half)')")
        page.click("#btn-start-job")
        page.wait_for_selector("#jobs-msg .cw-msg-ok", timeout=30_000)
        assert "over 2 clips" in page.inner_text("#jobs-msg")
        job_id = int(re.search(r"Started job (\d+)", page.inner_text("#jobs-msg")).group(1))
        from data import db as dbmod
        from data.jobs import queries as job_queries

        d = dbmod.connect(server.settings.db)
        try:
            assert job_queries.get(d, job_id)["params"].max_pixels == 4_718_592  # what the requests will ask
        finally:
            d.close()
        page.wait_for_function("document.querySelector('#job-progress')?.dataset.pct === '100'", timeout=60_000)
        assert "done 2" in page.inner_text("#job-progress")
        page.wait_for_selector("#runner-status.cw-ok", timeout=30_000)
        page.screenshot(path=str(SCREENSHOTS / "jobs.png"))
        # the team table: annotators' saves and reviews from the audit trail (ann saved earlier in this module)
        page.click("#team-accordion button")
        page.locator("#team-window").get_by_text("all time", exact=True).click()
        page.wait_for_function("document.querySelector('#team-table')?.innerText.includes('ann')", timeout=30_000)
        page.click("#tab-fleet-button")
        page.click("#btn-fleet-refresh")
        page.wait_for_timeout(1500)
        page.screenshot(path=str(SCREENSHOTS / "fleet.png"))
        assert not watch.errors
    finally:
        ctx.close()


def test_login_screenshot(browser, server):
    ctx = browser.new_context(viewport={"width": 1000, "height": 700})
    page = ctx.new_page()
    page.goto(server.url + "/")
    assert page.url.startswith(server.url + "/login")
    page.fill("#username", "ann")
    page.fill("#password", "wrong password")
    page.click("#login-submit")
    page.wait_for_selector("text=Wrong user name or password")
    page.screenshot(path=str(SCREENSHOTS / "login.png"))
    ctx.close()
