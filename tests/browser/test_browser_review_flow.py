"""Issue 10 in a real Chromium: no edit is ever lost, few keys per clip, the URL carries filter and clip, review
decisions are optimistic, the layout fits 1366x768, jobs are true and clickable, the fleet view is readable.

Every page of the module is watched for uncaught JavaScript errors (browser_fixtures.WatchedBrowser).

Over 500 lines on purpose: every test here drives one shared, module-scoped browser and app (starting Chromium and
the app costs ~20 s on the CI machine), and each acceptance point of issue 10 is one test function; splitting the
file would start them twice for no gain in reading it."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import quote

import httpx
import pytest

from data import clips as clipsmod, db as dbmod, jobs, taxonomy
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from tests.support.browser_fixtures import SCREENSHOTS, login, set_knobs
from tests.support.webapp_fixtures import AppServer, Library, add_users, build_library

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def library(web_settings) -> Library:
    """40 clips, 37 with a caption: the queue serves only captioned clips, and the module's tests approve about 25
    of them one after another (20 in the keys-per-clip test alone), so each test still finds unreviewed ones."""
    lib = build_library(web_settings, n=40)
    add_users(web_settings)
    return lib


@pytest.fixture(scope="module")
def server(web_settings, library, simfleet):
    # the fleet is named by URL (no --fleet-mode sim): the banner must still be in the first paint
    with AppServer(web_settings.replace(fleet_mode="auto"), fleet_urls=simfleet) as s:
        yield s


def db_of(server):
    return dbmod.connect(server.settings.db)


def clip_row(server, cid: int) -> dict:
    d = db_of(server)
    try:
        return clipsmod.get(d, cid)
    finally:
        d.close()


def shown(page) -> int | None:
    v = page.evaluate("document.querySelector('#clip-header')?.dataset.clip")
    return int(v) if v else None


def wait_clip_change(page, old: int | None, timeout=45_000) -> int:
    page.wait_for_function(
        f"(document.querySelector('#clip-header')?.dataset.clip || '') !== '{old or ''}'", timeout=timeout
    )
    return shown(page)


def goto_clip(page, server, cid: int, f: dict | None = None) -> None:
    q = (f"f={quote(json.dumps(f))}&" if f else "") + f"clip={cid}"
    page.goto(f"{server.url}/?{q}")
    page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'", timeout=45_000)


def set_weather(page, value: str) -> None:
    """Pick a label with the keyboard: 5 = weather, type the value, Enter (which takes it at once and leaves the
    field, webapp/static/picker.js)."""
    page.keyboard.press("5")
    page.wait_for_function("document.activeElement?.closest('#label-weather') !== null")
    page.keyboard.type(value)
    page.keyboard.press("Enter")
    taken = f"window.cwPicker.value('weather') === '{value}' && !document.activeElement?.closest('#label-weather')"
    page.wait_for_function(taken)
    assert page.input_value("#label-weather input") == value


def edit(page, text: str, weather: str) -> None:
    page.locator("body").click(position={"x": 3, "y": 3})
    page.keyboard.press("c")
    page.keyboard.press("Control+a")
    page.keyboard.type(text)
    page.keyboard.press("Escape")
    set_weather(page, weather)
    assert page.input_value("#caption-text textarea") == text


def test_the_simulated_banner_is_in_the_first_paint(browser, server):
    ctx = browser.new_context()
    try:
        page, _ = login(ctx, server.url, "ann")
        assert page.locator("#sim-banner").is_visible()  # no wait: login() returns at the first paint
    finally:
        ctx.close()


def test_twenty_clip_review_keys_per_clip(browser, server, library):
    """Approve without edits: 1 key ('a' approves and opens the next unreviewed clip). Fix one label, approve
    and move on: 4 keys (5, f, Enter, a: Enter takes fog and leaves the field). Timed over 20 clips of a filter;
    the keys of every option of every label are in tests/browser/test_browser_picker.py (docs/keys-per-clip.txt)."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page, _ = login(ctx, server.url, "ann")
        page.goto(f"{server.url}/?f={quote(json.dumps({'has_caption': True}))}")
        page.wait_for_selector(".cw-tile")
        assert (
            page.input_value("#f-has-caption input:checked") == "yes"
            if page.locator("#f-has-caption input:checked").count()
            else True
        )
        page.locator("#tab-review-button").click()
        keys = 0
        page.locator("body").click(position={"x": 3, "y": 3})
        page.keyboard.press("n")  # the queue: first unreviewed clip of the filter
        keys += 1
        cur = wait_clip_change(page, None)
        reviewed, fixed = [], []
        t0 = time.monotonic()
        for i in range(20):
            before = cur
            if i % 4 == 3:  # every 4th clip needs one label fixed
                for key in ("5", "f", "Enter"):
                    page.keyboard.press(key)
                keys += 3
                fixed.append(cur)
            page.keyboard.press("a")
            keys += 1
            reviewed.append(cur)
            if i < 19:
                cur = wait_clip_change(page, before)
            else:
                page.wait_for_function(
                    f"document.querySelector('#review-msg').innerText.includes('clip {before} approved')"
                )
        seconds = time.monotonic() - t0
        assert len(set(reviewed)) == 20
        for cid in reviewed:
            assert clip_row(server, cid)["review_status"] == "approved", cid
        for cid in fixed:
            assert clip_row(server, cid)["caption"]["labels"]["weather"] == "fog", cid
        per_clip = keys / 20
        # every clip was done with the keys counted above: 1 for approve-and-next (<= 2), 4 for fix one label +
        # approve-and-next (<= 5); the page never needed a mouse or Tab
        assert keys == 1 + 15 * 1 + 5 * 4
        print(
            f"20-clip review at 1366x768: {keys} keys = {per_clip:.2f} keys per clip (15 approved as they were, "
            f"5 with one label fixed, +1 'n' to start), {seconds:.1f} s = {seconds / 20:.2f} s per clip"
        )
    finally:
        ctx.close()


def test_zero_lost_edits(browser, server, library):
    """Edit the caption and a label, then leave by j, k, approve, another tab, a Browse click, browser Back:
    every time the edit is saved (or still in the form, for a tab switch)."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page, watch = login(ctx, server.url, "ann2")
        ids = sorted(library.clip_ids, reverse=True)
        start = ids[12]
        goto_clip(page, server, start)

        def saved(cid, text, weather):
            cap = clip_row(server, cid)["caption"]
            assert (cap["text"], cap["labels"]["weather"], cap["author"]) == (text, weather, "ann2"), cid

        # j
        a = shown(page)
        edit(page, "Left by j.", "rain")
        page.keyboard.press("j")
        b = wait_clip_change(page, a)
        saved(a, "Left by j.", "rain")
        # k
        edit(page, "Left by k.", "snow")
        page.keyboard.press("k")
        c = wait_clip_change(page, b)
        assert c == a
        saved(b, "Left by k.", "snow")
        # approve (approve-and-next): the edit is saved first, and the saved version is the one approved
        edit(page, "Left by approve.", "fog")
        page.keyboard.press("a")
        d = wait_clip_change(page, c)
        saved(c, "Left by approve.", "fog")
        assert clip_row(server, c)["review_status"] == "approved"
        # (the queue may land on a clip without any caption, where an edit of the caption and one label is
        # refused until every label is chosen -- the app says so and keeps the edit; step to a captioned one)
        while clip_row(server, d)["caption"] is None:
            page.keyboard.press("j")
            d = wait_clip_change(page, d)
        # another tab and back: the edit is still in the form
        edit(page, "Kept across tabs.", "clear")
        page.locator("#tab-jobs-button").click()
        page.locator("#tab-review-button").click()
        assert page.input_value("#caption-text textarea") == "Kept across tabs."
        # a Browse click: saved before the other clip opens
        page.locator("#tab-browse-button").click()
        page.wait_for_selector(".cw-tile")
        # showing Browse re-reads the page (fresh tiles): click once that has landed, as a person would
        page.wait_for_function(f"document.querySelector('#tile-{c} .cw-badge')?.innerText === 'approved'")
        other = next(x for x in ids[:6] if x != d)
        page.locator(f"#tile-{other}").click()
        try:
            wait_clip_change(page, d)
        except Exception:
            raise AssertionError("the tile did not open; review says: " + page.inner_text("#review-msg")) from None
        assert shown(page) == other
        saved(d, "Kept across tabs.", "clear")
        # browser Back: goes to the previous clip (through the server, which saves first)
        edit(page, "Left by Back.", "rain")
        page.go_back()
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{d}'", timeout=45_000)
        saved(other, "Left by Back.", "rain")
        assert f"clip={d}" in page.url
        # Forward works too, and the URL is a deep link to the clip
        page.go_forward()
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{other}'")
        # leaving the page with an unsaved edit asks first: the page's beforeunload handler cancels the unload
        # (headless Chromium under Playwright did not surface the native prompt on close, so the handler is
        # driven directly with the event the browser would send)
        guard = (
            "() => { const e = new Event('beforeunload', {cancelable: true}); window.dispatchEvent(e); "
            "return e.defaultPrevented; }"
        )
        assert page.evaluate(guard) is False  # nothing unsaved after Forward
        edit(page, "Unsaved when leaving.", "snow")
        assert page.evaluate("window.cwUnsaved()") is True
        assert page.evaluate(guard) is True
    finally:
        ctx.close()


def test_deep_link_carries_the_filter(browser, server, library):
    ctx = browser.new_context()
    try:
        page, _ = login(ctx, server.url, "ann")
        d = db_of(server)
        cid = d.execute("SELECT id FROM clips WHERE weather = 'rain' ORDER BY id LIMIT 1").fetchone()[0]
        d.close()
        goto_clip(page, server, cid, {"weather": "rain"})
        page.locator("#tab-browse-button").click()
        page.wait_for_function("document.querySelector('#browse-state')?.dataset.filter.includes('rain')")
        tiles = page.eval_on_selector_all(".cw-tile", "els => els.map(e => +e.dataset.clip)")
        assert cid in tiles and len(tiles) < len(library.clip_ids)
        assert "weather" in page.url and f"clip={cid}" in page.url
    finally:
        ctx.close()


def test_browse_tiles_are_fresh_after_a_review(browser, server, library):
    ctx = browser.new_context()
    try:
        page, _ = login(ctx, server.url, "ann")
        page.wait_for_selector(".cw-tile")
        cid = library.clip_ids[21]
        goto_clip(page, server, cid)
        page.locator("#btn-reject").click()
        page.wait_for_function(f"document.querySelector('#review-msg').innerText.includes('clip {cid} rejected')")
        page.locator("#tab-browse-button").click()
        page.wait_for_function(f"document.querySelector('#tile-{cid} .cw-badge')?.innerText === 'rejected'")
    finally:
        ctx.close()


def test_approve_after_someone_elses_reject_is_a_conflict(browser, server, library):
    cid = library.clip_ids[22]
    ctx_a, ctx_b = browser.new_context(), browser.new_context()
    try:
        a, _ = login(ctx_a, server.url, "ann")
        b, _ = login(ctx_b, server.url, "ann2")
        for p in (a, b):
            goto_clip(p, server, cid)
        b.locator("#btn-reject").click()
        b.wait_for_function(f"document.querySelector('#review-msg').innerText.includes('clip {cid} rejected')")
        a.locator("#btn-approve").click()
        a.wait_for_selector("#review-msg .cw-msg-conflict")
        assert "rejected by ann2" in a.inner_text("#review-msg")
        assert shown(a) == cid  # did not move on
        row = clip_row(server, cid)
        assert (row["review_status"], row["reviewed_by"]) == ("rejected", "ann2")  # nothing overwritten
    finally:
        ctx_a.close()
        ctx_b.close()


def test_review_fits_1366x768(browser, server, library):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page, _ = login(ctx, server.url, "ann")
        goto_clip(page, server, library.clip_ids[15])
        page.wait_for_function("document.querySelector('#cw-video')?.readyState >= 1", timeout=45_000)
        assert page.evaluate("window.scrollY") == 0
        for sel in ("#cw-video", "#caption-text textarea", "#btn-save", "#btn-approve", "#btn-reject"):
            box = page.locator(sel).bounding_box()
            assert box and box["y"] >= 0 and box["y"] + box["height"] <= 768 and box["x"] + box["width"] <= 1366, (
                sel,
                box,
            )
        # every label's value is readable in full (issue 10: "pedestrian_cr…" at 1366x768): the value shown does not
        # overflow its box, nor would the longest value of each label (measured in the box's own font); a chosen
        # road user is one unbroken word
        longest = {name: max(values, key=len) for name, values in taxonomy.ENUMS.items()}
        fit = page.evaluate(LABELS_FIT, longest)
        assert fit["single"] and all(f["shown"] <= f["room"] and f["longest"] <= f["room"] for f in fit["single"]), fit
        assert fit["tokens"] and all(t["lines"] == 1 and t["sw"] <= t["cw"] for t in fit["tokens"]), fit
        assert page.input_value("#label-scenario_category input") == "pedestrian_crossing"
        # the filmstrip is big enough to click, and a click seeks the player to that frame
        frame = page.locator(".cw-frame").nth(8)
        fb = frame.bounding_box()
        assert fb["height"] >= 30 and fb["width"] >= 40
        t = float(frame.get_attribute("data-t"))
        frame.click()
        page.wait_for_function(f"Math.abs(document.querySelector('#cw-video').currentTime - {t}) < 0.06")
        # player keys: Right = one frame (10 fps), Shift+Right = one second, Space plays
        page.locator("body").click(position={"x": 3, "y": 3})
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"Math.abs(document.querySelector('#cw-video').currentTime - {t + 0.1}) < 0.06")
        page.keyboard.press("Shift+ArrowLeft")
        page.wait_for_function(f"Math.abs(document.querySelector('#cw-video').currentTime - {max(0, t - 0.9)}) < 0.06")
        page.keyboard.press(" ")
        page.wait_for_function("!document.querySelector('#cw-video').paused")
        page.keyboard.press(" ")
        page.wait_for_function("document.querySelector('#cw-video').paused")
        page.screenshot(path=str(SCREENSHOTS / "review-1366x768.png"))
    finally:
        ctx.close()


LABELS_FIT = """(longest) => {
  const ctx = document.createElement('canvas').getContext('2d');
  const single = [], tokens = [];
  for (const box of document.querySelectorAll('.cw-labels [id^="label-"]')) {
    const name = box.id.slice('label-'.length);
    const input = box.querySelector('input');
    const cs = getComputedStyle(input);
    ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    if (box.querySelector('.token') || name === 'road_users') {
      for (const t of box.querySelectorAll('.token > span')) {
        const lh = parseFloat(getComputedStyle(t).lineHeight) || 20;
        tokens.push({name, text: t.textContent, sw: t.scrollWidth, cw: t.clientWidth,
                     lines: Math.round(t.getBoundingClientRect().height / lh)});
      }
      continue;
    }
    const room = input.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    single.push({name, value: input.value, room, shown: input.scrollWidth - parseFloat(cs.paddingLeft)
                 - parseFloat(cs.paddingRight), longest: ctx.measureText(longest[name]).width});
  }
  return {single, tokens};
}"""


def api_call(client: httpx.Client, name: str, data: list) -> tuple[str, str]:
    """Call a Gradio endpoint the way a script would: a join of the queue and its data stream, as the page does
    (Gradio's REST `call/` route is closed). Returns ("complete" or "error", what it answered)."""
    from tests.support.reliability_fixtures import GradioError, GradioSession, dependencies

    url, cookie = str(client.base_url).rstrip("/"), client.cookies["cw_session"]
    session = GradioSession(url, cookie, dependencies(url, cookie))
    try:
        return "complete", json.dumps(session.call(name, data))
    except GradioError as e:
        return "error", str(e)
    finally:
        session.close()


def test_job_limits_hold_through_the_api(server):
    before = len(job_queries.list_jobs(db_of(server)))
    c = server.client("lead")
    try:
        # name, clips, prompt, frames, max tokens, pixels per clip (the Browse filter is session state)
        kind, body = api_call(c, "start_job", ["api job", "everything uncaptioned", None, 16, 64, None])
        assert "cannot hold a complete answer" in body, body
        kind, body = api_call(c, "start_job", ["api job", "everything uncaptioned", None, 500, 320, None])
        assert "Frames must be 1-128" in body, body
        kind, body = api_call(c, "start_job", ["api job", "everything uncaptioned", None, 16, 640, 99_000_000])
        assert "Pixels per clip must be 65,536-9,437,184" in body, body
    finally:
        c.close()
    assert len(job_queries.list_jobs(db_of(server))) == before


def test_an_over_long_caption_is_refused_through_the_api(server):
    """The caption bound (data.limits) holds for a script driving Gradio's queue like a tab does (open a clip,
    then save), not just for the form."""
    from data import limits
    from tests.support.reliability_fixtures import GradioError, GradioSession, dependencies, login_cookie

    d = db_of(server)
    try:
        clip_id = next(d.query("SELECT id FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))["id"]
        versions = d.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ?", [clip_id]).fetchone()[0]
    finally:
        d.close()
    cookie = login_cookie(server.url, "ann")
    session = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    labels = ["other", "none", ["car"], "stopped", "clear", "daylight", "urban"]
    try:
        session.call("open_clip", event_data={"clip": clip_id})
        try:
            out = " ".join(
                str(v)
                for v in session.call("save_caption", [None, None, None, "w" * (limits.MAX_CAPTION_CHARS + 1), *labels])
            )
        except GradioError as e:
            out = str(e)
    finally:
        session.close()
    assert f"the limit is {limits.MAX_CAPTION_CHARS:,}" in out, out[-500:]
    d = db_of(server)
    try:
        assert d.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ?", [clip_id]).fetchone()[0] == versions
    finally:
        d.close()


def test_lead_jobs_tab_preview_one_job_per_triple_click_rows_and_pause_resume(
    browser,
    server,
    library,
    runner,
):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page, _ = login(ctx, server.url, "lead")
        page.wait_for_selector(".cw-tile")
        page.click("#tab-jobs-button")
        page.locator("#job-source").get_by_text("everything uncaptioned", exact=True).click()
        page.wait_for_selector("#job-preview-count")
        n = int(page.get_attribute("#job-preview-count", "data-n"))
        assert n >= 1 and f"caption {n:,} clips" in page.inner_text("#job-preview")
        page.fill("#job-max-tokens input", "64")
        page.click("#btn-start-job")
        page.wait_for_selector("#jobs-msg .cw-msg-error")
        assert "cannot hold a complete answer" in page.inner_text("#jobs-msg")
        page.fill("#job-max-tokens input", "320")
        page.fill("#job-name textarea, #job-name input", "triple click")
        before = len(job_queries.list_jobs(db_of(server)))
        btn = page.locator("#btn-start-job")
        btn.click(click_count=1, no_wait_after=True)
        page.evaluate(
            "document.querySelector('#btn-start-job').click(); document.querySelector('#btn-start-job').click()"
        )
        page.wait_for_selector("#jobs-msg .cw-msg-ok, #jobs-msg .cw-msg-info", timeout=30_000)
        time.sleep(1.5)
        assert len(job_queries.list_jobs(db_of(server))) == before + 1
        job_id = job_queries.list_jobs(db_of(server))[0]["id"]
        page.wait_for_function("document.querySelector('#job-progress')?.dataset.state === 'done'", timeout=60_000)
        assert page.locator("#job-plot-svg rect").count() >= 1
        # a click on a row shows that job, and the panel stays there when a newer job appears
        older = (
            next(j["id"] for j in job_queries.list_jobs(db_of(server)) if j["id"] != job_id)
            if len(job_queries.list_jobs(db_of(server))) > 1
            else job_id
        )
        # the table is re-rendered on every tick, so click the cell from the page in one step
        page.wait_for_function("""() => { const c = [...document.querySelectorAll('#jobs-table .cell-wrap')]
            .find(e => e.offsetParent !== null && e.textContent.trim() === 'triple click');
            if (c) c.click(); return !!c; }""")
        page.wait_for_function(f"document.querySelector('#job-progress')?.innerText.includes('Job {job_id} ')")
        d = db_of(server)
        jobs.create(
            d,
            name="newer",
            created_by="lead",
            selection=Selection.of_clips([library.clip_ids[0]]),
            prompt_id=None,
            params=JobParams(),
        )
        d.close()
        time.sleep(4.5)  # two timer ticks
        assert f"Job {job_id} " in page.inner_text("#job-progress")
        page.screenshot(path=str(SCREENSHOTS / "jobs.png"))
        assert older
    finally:
        ctx.close()


def test_fleet_tab_is_readable_at_once(browser, server):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page, _ = login(ctx, server.url, "lead")
        page.click("#tab-fleet-button")
        page.wait_for_function("document.querySelector('#fleet-summary')?.innerText.includes('healthy')", timeout=5_000)
        text = page.inner_text("#fleet-table")
        assert "{" not in text and "'" not in text
        assert not re.search(r"\d\.\d{4,}", text)  # no long decimals
        page.screenshot(path=str(SCREENSHOTS / "fleet.png"))
    finally:
        ctx.close()


# records every distinct top of the Pause button, frame by frame, in window.__buttonTops
BUTTON_TOPS_JS = """() => { window.__buttonTops = [];
    const f = () => { const t = Math.round(document.querySelector('#btn-pause').getBoundingClientRect().top
                                       + document.scrollingElement.scrollTop);
        if (window.__buttonTops[window.__buttonTops.length - 1] !== t) window.__buttonTops.push(t);
        requestAnimationFrame(f); };
    f(); }"""


def test_lead_pauses_resumes_and_cancels_from_the_jobs_tab(browser, server, library, simfleet, runner):
    """At the simulated fleet's realistic speed (~1.2 s a caption): Pause shows paused with the true count and
    nothing lands while paused; Resume ends as done with every clip counted; Cancel stops new captions
    within 2 s."""
    for url in simfleet:
        # realistic latency, and 2 at a time per replica so that 21 clips take ~13 s, not ~2.5 s: long enough
        # for a pause or a cancel to land in the middle of the job
        set_knobs(url, speed=1.0, capacity=2).raise_for_status()
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    d = db_of(server)
    try:
        page, _ = login(ctx, server.url, "lead")
        page.click("#tab-jobs-button")
        ok_ids = [c for c in library.clip_ids if not clip_row(server, c)["probe_error"]]

        def make(name):
            job_id = jobs.create(
                d,
                name=name,
                created_by="lead",
                selection=Selection.of_clips(ok_ids),
                prompt_id=None,
                params=JobParams(frames=16, max_tokens=320),
            )
            page.fill("#job-id input", str(job_id))
            page.press("#job-id input", "Enter")
            page.wait_for_function(f"document.querySelector('#job-progress')?.innerText.includes('Job {job_id} ')")
            return job_id

        def n_captions(job_id, after=0.0):
            return d.execute(
                "SELECT COUNT(*) FROM captions WHERE job_id = ? AND created_at > ?", [job_id, after]
            ).fetchone()[0]

        job_id = make("pause me")
        # from here on the job's buttons must stay where they are while the list grows and redraws, and
        # messages come and go: a button that moves on its way to the pointer takes a click meant for it
        page.evaluate(BUTTON_TOPS_JS)
        deadline = time.monotonic() + 30
        while job_queries.counts(d, job_id)["leased"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        page.click("#btn-pause")
        try:
            page.wait_for_function("document.querySelector('#jobs-msg')?.innerText.includes('is now paused')")
            page.wait_for_function("document.querySelector('#job-progress')?.dataset.state === 'paused'")
        except Exception as e:  # once in CI (not seen here in 3 runs): say what the page and the database held
            seen = page.evaluate(
                """() => ({msg: document.querySelector('#jobs-msg')?.innerText,
                           shown: document.querySelector('#job-progress')?.dataset.state,
                           toasts: [...document.querySelectorAll('.toast-body')].map(t => t.innerText),
                           tops: window.__buttonTops})"""
            )
            state = job_queries.get(d, job_id)["state"]
            raise AssertionError(
                f"after Pause: the page {seen}; job {job_id} {state}: {job_queries.counts(d, job_id)}"
            ) from e
        t_pause = time.time()
        time.sleep(3)  # longer than a caption takes
        assert n_captions(job_id, t_pause) == 0
        shown_done = int(re.search(r"done (\d+)", page.inner_text("#job-progress")).group(1))
        assert shown_done == job_queries.counts(d, job_id)["done"] < len(ok_ids)
        page.click("#btn-resume")
        page.wait_for_function("document.querySelector('#job-progress')?.dataset.state === 'done'", timeout=90_000)
        assert f"done {len(ok_ids)} " in page.inner_text("#job-progress") + " "
        assert n_captions(job_id) == len(ok_ids)

        job_id = make("cancel me")
        deadline = time.monotonic() + 30
        while job_queries.counts(d, job_id)["leased"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        page.click("#btn-cancel")
        page.wait_for_function("document.querySelector('#job-progress')?.dataset.state === 'cancelled'")
        t_cancel = job_queries.get(d, job_id)["finished_at"]
        time.sleep(3)
        assert n_captions(job_id, t_cancel + 2.0) == 0
        assert job_queries.counts(d, job_id)["leased"] == 0
        assert page.evaluate("window.__buttonTops") == [page.evaluate("window.__buttonTops")[0]], (
            "the job buttons moved while the job was shown (px from the top, in order)"
        )
        page.screenshot(path=str(SCREENSHOTS / "jobs-cancelled.png"))
    finally:
        for url in simfleet:
            set_knobs(url, speed=0.05, capacity=6)
        d.close()
        ctx.close()


def test_typing_a_chosen_label_again_keeps_it(browser, server, library):
    ctx = browser.new_context()
    try:
        page, _ = login(ctx, server.url, "ann")
        # a clip whose road users hold "car" now (the module's jobs re-caption some clips with other labels)
        cid = next(
            c
            for c in library.clip_ids
            if "car" in ((clip_row(server, c)["caption"] or {}).get("labels") or {}).get("road_users", [])
        )
        goto_clip(page, server, cid)
        tokens = "[...document.querySelectorAll('#label-road_users .token > span')].map(e => e.textContent.trim())"
        before = page.evaluate(tokens)
        assert "car" in before
        page.locator("body").click(position={"x": 3, "y": 3})
        page.keyboard.press("3")
        page.keyboard.type("car")
        page.keyboard.press("Enter")
        page.wait_for_function(
            "document.querySelector('#label-road_users .cw-pick-msg').textContent.includes('car is already chosen')"
        )
        assert page.evaluate(tokens) == before and page.evaluate("window.cwPicker.value('road_users')") == before
    finally:
        ctx.close()
