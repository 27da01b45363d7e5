"""Drafts and conflicts in a real Chromium (issue 18, points 6 and 7).

- An unsaved edit survives a sign-out in another tab, a reload and a closed tab: each time the person comes back
  to the clip it is offered back, and nothing is written as a caption version until they save. The ended session
  is said in plain words with a link to log in again (no red "Error" on the fields), and what the page could no
  longer send is kept in the browser and pushed after the login.
- Two people edit one clip: the second sees theirs beside theirs with a word diff, and "keep mine", "take theirs"
  and "edit merged" each do what they say; a reload in the middle of a conflict loses nothing.
Every page is watched for uncaught JavaScript errors (browser_fixtures)."""

from __future__ import annotations

import time

import pytest

from data import clips as clipsmod, db as dbmod, drafts
from tests.support.browser_fixtures import SCREENSHOTS
from tests.support.webapp_fixtures import PASSWORD

pytestmark = pytest.mark.browser


def db_of(server):
    return dbmod.connect(server.settings.db)


def versions(server, cid: int) -> int:
    d = db_of(server)
    try:
        return d.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ?", [cid]).fetchone()[0]
    finally:
        d.close()


def draft_of(server, user: str, cid: int) -> dict | None:
    d = db_of(server)
    try:
        return drafts.get(d, user, cid)
    finally:
        d.close()


def current(server, cid: int) -> dict:
    d = db_of(server)
    try:
        return clipsmod.get(d, cid)["caption"]
    finally:
        d.close()


def sign_in(page, user: str) -> None:
    """Fill the login form the page shows (the app sent us there) and wait for the app."""
    page.wait_for_selector("#username")
    page.fill("#username", user)
    page.fill("#password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_selector("#whoami", timeout=60_000)


def open_page(context, url: str):
    """A new tab on `url`. "Leave the page?" is answered yes, as the person would: the edit is kept as a draft.
    (Uncaught page errors are collected by the browser fixture.)"""
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())
    page.goto(url)
    return page


def open_clip(page, server, cid: int) -> None:
    page.goto(f"{server.url}/?clip={cid}")
    page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'", timeout=45_000)


def offered(page) -> str:
    page.wait_for_selector("#draft-note", state="visible", timeout=45_000)
    return page.inner_text("#draft-note")


def set_weather(page, value: str) -> None:
    page.locator("body").click(position={"x": 3, "y": 3})
    page.keyboard.press("5")
    page.keyboard.type(value)
    page.keyboard.press("Enter")
    page.wait_for_function(f"window.cwPicker.value('weather') === '{value}'")


def test_an_unsaved_edit_survives_sign_out_reload_and_a_closed_tab(browser, server, library):
    cid = library.clip_ids[11]
    before = versions(server, cid)
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page = open_page(ctx, server.url + "/")
        sign_in(page, "ann")
        open_clip(page, server, cid)
        page.fill("#caption-text textarea", "A cyclist brakes hard behind the bus")
        set_weather(page, "fog")
        # written as a draft as she types (never a version)
        deadline = time.monotonic() + 30
        while (draft_of(server, "ann", cid) or {}).get("labels", {}).get("weather") != "fog":
            assert time.monotonic() < deadline, "the edit never reached the server as a draft"
            time.sleep(0.2)
        assert versions(server, cid) == before

        # 1. signed out in another tab; she goes on typing in this one
        other = open_page(ctx, server.url + "/logout")  # the sign-out page: its button POSTs
        other.click("#logout")
        other.wait_for_selector("#username")
        other.close()
        page.fill("#caption-text textarea", "A cyclist brakes hard behind the bus, in the snow")
        page.wait_for_selector("#session-ended", state="visible", timeout=30_000)
        said = page.inner_text("#session-ended")
        assert "Your session has ended" in said and "kept in this browser" in said
        assert page.get_attribute("#session-login", "href").startswith("/login?next=")
        time.sleep(1.0)
        assert page.locator(".toast-body").count() == 0  # no Gradio error toast...
        assert page.input_value("#caption-text textarea").endswith("in the snow")  # ...and the field is hers
        page.screenshot(path=str(SCREENSHOTS / "session-ended.png"))
        assert draft_of(server, "ann", cid)["text"] == "A cyclist brakes hard behind the bus"  # the rest: browser

        # 2. reload: the app sends her to the login, then back to the clip, which offers the edit (all of it)
        page.reload()
        sign_in(page, "ann")
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'")
        assert "Your unsaved edit from" in offered(page)
        assert "caption" in page.inner_text("#draft-note") and "weather" in page.inner_text("#draft-note")
        deadline = time.monotonic() + 30
        while not (draft_of(server, "ann", cid) or {}).get("text", "").endswith("in the snow"):
            assert time.monotonic() < deadline, "what the browser kept was not pushed after the login"
            time.sleep(0.2)
        page.screenshot(path=str(SCREENSHOTS / "review-draft-offer.png"))
        assert versions(server, cid) == before

        # 3. another reload, not restoring: still offered
        page.reload()
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'")
        assert "Your unsaved edit from" in offered(page)

        # 4. the tab closed, a new one opened on the clip: offered again
        page.close()
        page = open_page(ctx, f"{server.url}/?clip={cid}")
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'")
        assert "Your unsaved edit from" in offered(page)
        assert versions(server, cid) == before

        # restore: the form holds the edit, still not a version; save: one version, the draft is gone
        page.click("#btn-draft-restore")
        page.wait_for_function(
            "document.querySelector('#caption-text textarea').value.endsWith('in the snow') && "
            "window.cwPicker.value('weather') === 'fog'"
        )
        assert page.evaluate("window.cwUnsaved()") is True  # leaving would ask first
        assert versions(server, cid) == before
        page.locator("#caption-text textarea").press("Control+s")
        page.wait_for_selector("#review-msg .cw-msg-ok")
        assert versions(server, cid) == before + 1
        cap = current(server, cid)
        assert (cap["text"], cap["labels"]["weather"], cap["author"]) == (
            "A cyclist brakes hard behind the bus, in the snow",
            "fog",
            "ann",
        )
        assert draft_of(server, "ann", cid) is None
        assert page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('cw-draft:'))") == []
    finally:
        ctx.close()


def test_discarding_an_offered_edit_drops_it_and_writes_nothing(browser, server, library):
    cid = library.clip_ids[12]
    before = versions(server, cid)
    ctx = browser.new_context()
    try:
        page = open_page(ctx, server.url + "/")
        sign_in(page, "ann2")
        open_clip(page, server, cid)
        page.fill("#caption-text textarea", "Words she will throw away.")
        deadline = time.monotonic() + 30
        while draft_of(server, "ann2", cid) is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        page.reload()
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'")
        offered(page)
        page.click("#btn-draft-discard")
        page.wait_for_function("document.querySelector('#review-msg').innerText.includes('Discarded')")
        assert draft_of(server, "ann2", cid) is None and versions(server, cid) == before
        page.reload()
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'")
        time.sleep(1.5)
        assert not page.locator("#draft-note").is_visible()
    finally:
        ctx.close()


def _two_editors(browser, server, cid: int, theirs: str, mine: str):
    """ann saves `theirs` after ann2 opened the clip; ann2's save of `mine` meets the conflict view."""
    ca, cb = browser.new_context(), browser.new_context(viewport={"width": 1366, "height": 900})
    a = open_page(ca, server.url + "/")
    sign_in(a, "ann")
    b = open_page(cb, server.url + "/")
    sign_in(b, "ann2")
    for p in (a, b):
        open_clip(p, server, cid)
    a.fill("#caption-text textarea", theirs)
    a.click("#btn-save")
    a.wait_for_selector("#review-msg .cw-msg-ok")
    b.fill("#caption-text textarea", mine)
    b.click("#btn-save")
    b.wait_for_selector("#conflict-view", state="visible")
    assert "changed by ann" in b.inner_text("#review-msg")
    return ca, cb, a, b


def test_a_conflict_shows_both_and_each_way_out_does_what_it_says(browser, server, library):
    c1, c2, c3 = library.clip_ids[13], library.clip_ids[14], library.clip_ids[15]
    opened = []
    try:
        # keep mine: a new version with ann2's text, on top of ann's
        ca, cb, a, b = _two_editors(browser, server, c1, "A bus turns left at the lights.", "A van turns left.")
        opened += [ca, cb]
        assert b.inner_text("#conflict-theirs").startswith("A bus turns left")
        assert b.locator("#conflict-theirs del").all_inner_texts() == ["bus", "left at the lights."]
        assert b.locator("#conflict-mine ins").all_inner_texts() == ["van", "left."]
        b.screenshot(path=str(SCREENSHOTS / "review-conflict.png"))
        theirs = current(server, c1)
        b.click("#btn-keep-mine")
        b.wait_for_function("document.querySelector('#review-msg').innerText.includes('Kept yours')")
        cap = current(server, c1)
        assert (cap["text"], cap["author"], cap["parent_id"]) == ("A van turns left.", "ann2", theirs["id"])
        assert not b.locator("#conflict-view").is_visible()

        # take theirs: the form shows ann's version, nothing of ann2's is written, her draft is gone
        ca, cb, a, b = _two_editors(browser, server, c2, "Two pedestrians wait.", "Three pedestrians wait.")
        opened += [ca, cb]
        n = versions(server, c2)
        b.click("#btn-take-theirs")
        b.wait_for_function("document.querySelector('#caption-text textarea').value === 'Two pedestrians wait.'")
        assert versions(server, c2) == n and current(server, c2)["text"] == "Two pedestrians wait."
        assert draft_of(server, "ann2", c2) is None

        # edit merged, after a reload in the middle of the conflict (the text survives it)
        ca, cb, a, b = _two_editors(browser, server, c3, "Fog on the highway.", "Dense fog, a truck ahead.")
        opened += [ca, cb]
        theirs = current(server, c3)
        deadline = time.monotonic() + 30
        while draft_of(server, "ann2", c3) is None:  # written as she typed, on the version she started from
            assert time.monotonic() < deadline
            time.sleep(0.2)
        b.reload()
        b.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{c3}'")
        assert "ann saved version" in offered(b)  # the edit is offered, and says someone saved since
        b.click("#btn-draft-restore")
        b.wait_for_selector("#conflict-view", state="visible")
        assert b.input_value("#caption-text textarea") == "Dense fog, a truck ahead."
        b.click("#btn-edit-merged")
        b.wait_for_function("document.querySelector('#review-msg').innerText.includes('Your text stays in the box')")
        assert b.input_value("#caption-text textarea") == "Dense fog, a truck ahead."
        assert not b.locator("#conflict-view").is_visible()
        n = versions(server, c3)
        assert n == theirs["version"]  # nothing written by the choice itself
        b.fill("#caption-text textarea", "Fog on the highway: dense, a truck ahead.")
        b.click("#btn-save")  # an ordinary save now: their version is the base
        b.wait_for_selector("#review-msg .cw-msg-ok")
        cap = current(server, c3)
        assert (cap["text"], cap["author"], cap["parent_id"]) == (
            "Fog on the highway: dense, a truck ahead.",
            "ann2",
            theirs["id"],
        )
        assert versions(server, c3) == n + 1 and draft_of(server, "ann2", c3) is None
    finally:
        for c in opened:
            c.close()


def test_versions_are_only_written_by_saves(server, library):
    """The drafts route as a script would call it: many writes, no version; a bad draft is refused with a reason."""
    cid = library.clip_ids[16]
    before = versions(server, cid)
    c = server.client("ann")
    try:
        for i in range(5):
            r = c.put(f"/drafts/{cid}", json={"base": None, "text": f"draft {i}", "labels": {"weather": "fog"}})
            assert r.status_code == 200 and "saved_at" in r.json(), r.text
        r = c.put(f"/drafts/{cid}", json={"base": None, "text": "x", "labels": {"weather": "sunny"}})
        assert r.status_code == 400 and "not one of its options" in r.json()["detail"]
        r = c.put(f"/drafts/{cid}", content=b"[" * 10_000)
        assert r.status_code == 400
        r = c.put(f"/drafts/{cid}", json={"text": "w" * 20_001})
        assert r.status_code == 413 and "the limit is 20,000" in r.json()["detail"]
        assert c.post(f"/leases/{cid}").json() == {"holder": None}  # she is not on it: a ping takes nothing
    finally:
        c.close()
    anon = server.client()
    try:
        assert anon.put(f"/drafts/{cid}", json={"text": "x"}).status_code == 401
    finally:
        anon.close()
    assert versions(server, cid) == before
    d = db_of(server)
    try:
        assert drafts.get(d, "ann", cid)["text"] == "draft 4"
    finally:
        d.close()
