"""The shared review queue in a real Chromium (issue 18, points 4 and 5): annotators pressing n and approve-and-next
at the same time on one queue of 50 clips never get the same clip, every clip is reviewed exactly once, a clip
whose holder's browser died comes back when its lease runs out, signing out gives it back at once, and clips nobody
can review (ingest failed, flagged broken) are never served. One Chromium; each annotator is a context of it.
Every page is watched for uncaught JavaScript errors (browser_fixtures)."""

from __future__ import annotations

import collections
import json
import time
from urllib.parse import quote

import pytest

from data import captions, clips as clipsmod, db as dbmod, jobs, review_queue, review_states, users
from data.job_params import JobParams
from data.jobs.selection import Selection
from tests.support.browser_fixtures import SCREENSHOTS, login
from tests.support.webapp_fixtures import LABELS, PASSWORD, AppServer, build_library, machine_provenance

pytestmark = pytest.mark.browser

CLIPS = 50
PEOPLE = ["ann", "ann2", "ann3", "ann4", "ann5"]
BROKEN_AT = 10  # the clip (by position) flagged broken before the queue starts
VIEW = {"width": 1100, "height": 700}


@pytest.fixture(scope="module")
def queue(web_settings):
    """52 clips: 50 to review, one that failed at ingest (build_library's 8th) and one flagged broken."""
    lib = build_library(web_settings, n=CLIPS + 2)
    db = dbmod.connect(web_settings.db)
    try:
        for k in (8, 9):  # build_library leaves these uncaptioned: give them a caption, to be reviewable
            captions.add_machine(
                db, lib.clip_ids[k], job_id=None, text=f"clip {k}", labels=LABELS, provenance=machine_provenance()
            )
        review_states.flag_broken(db, lib.clip_ids[BROKEN_AT], user="lead", reason="green frames only")
        for name in [*PEOPLE, "lead"]:
            users.create(db, name, role="lead" if name == "lead" else "annotator", password=PASSWORD)
    finally:
        db.close()
    return lib


@pytest.fixture(scope="module")
def server(web_settings, queue):
    with AppServer(web_settings, fleet_urls=[]) as s:
        yield s


def reviewable(lib) -> list[int]:
    return [c for i, c in enumerate(lib.clip_ids) if i not in (7, BROKEN_AT)]


def reset(server, lib) -> float:
    """Every reviewable clip unreviewed again, no leases: a fresh queue. Returns the time it was reset."""
    d = dbmod.connect(server.settings.db)
    try:
        with d.conn:
            marks = ",".join("?" * len(reviewable(lib)))
            d.execute(
                f"UPDATE clips SET review_status = 'unreviewed', reviewed_by = NULL, reviewed_at = NULL "
                f"WHERE id IN ({marks})",
                reviewable(lib),
            )
            d.execute("DELETE FROM review_leases")
    finally:
        d.close()
    return time.time()


def shown(page) -> int | None:
    v = page.evaluate("document.querySelector('#clip-header')?.dataset.clip")
    return int(v) if v else None


def to_review(page) -> None:
    page.locator("#tab-review-button").click()
    page.locator("body").click(position={"x": 3, "y": 3})


def approvals_since(server, t: float) -> collections.Counter:
    d = dbmod.connect(server.settings.db)
    try:
        rows = d.execute("SELECT clip_id FROM events WHERE action = 'review.approved' AND at >= ?", [t]).fetchall()
    finally:
        d.close()
    return collections.Counter(r[0] for r in rows)


@pytest.mark.parametrize("people", [2, 5])
def test_annotators_pressing_n_at_once_never_share_a_clip(browser, server, queue, people):
    t0 = reset(server, queue)
    contexts = [browser.new_context(viewport=VIEW) for _ in range(people)]
    try:
        pages = [login(ctx, server.url, name)[0] for ctx, name in zip(contexts, PEOPLE)]
        for page in pages:
            to_review(page)
        # everyone presses n in the same instant (each press is sent without waiting for the others' answers)
        for page in pages:
            page.keyboard.press("n")
        served: dict[str, list[int]] = {name: [] for name in PEOPLE[:people]}
        waiting = {name: None for name in served}  # name -> the clip they approved and wait to move on from
        done: set[str] = set()
        deadline = time.monotonic() + 240
        started = time.monotonic()
        while len(done) < people and time.monotonic() < deadline:
            for page, name in zip(pages, served):
                if name in done:
                    continue
                cur = shown(page)
                msg = page.inner_text("#review-msg")
                assert "cw-msg-conflict" not in page.inner_html("#review-msg"), (name, msg)
                if waiting[name] is None:
                    if cur is None:
                        if "No unreviewed clips" in msg:
                            done.add(name)  # the queue was empty before they got one
                        continue
                    if not served[name] or served[name][-1] != cur:
                        served[name].append(cur)
                    page.keyboard.press("a")  # approve and next: the queue again, at once with the others
                    waiting[name] = cur
                elif f"clip {waiting[name]} approved" in msg:
                    if cur != waiting[name]:
                        waiting[name] = None  # a new clip: recorded and approved on the next round
                    elif "No unreviewed clips" in msg:
                        done.add(name)
            time.sleep(0.05)
        seconds = time.monotonic() - started
        assert len(done) == people, f"not finished in time: {served}"
        every = [c for clips in served.values() for c in clips]
        shared = [c for c, n in collections.Counter(every).items() if n > 1]
        assert not shared, f"clips served to two people: {shared}"
        assert sorted(every) == sorted(reviewable(queue)), "every reviewable clip is served, and nothing else"
        approved = approvals_since(server, t0)
        assert sorted(approved) == sorted(reviewable(queue)) and set(approved.values()) == {1}, approved
        print(
            f"{people} annotators, one queue of {CLIPS} clips: {len(every)} served, 0 to two people, each approved "
            f"once, in {seconds:.1f} s; clips per person {sorted(len(v) for v in served.values())}"
        )
    finally:
        for ctx in contexts:
            ctx.close()


def test_who_is_on_a_clip_is_shown_and_signing_out_gives_it_back(browser, server, queue):
    reset(server, queue)
    ca, cb = browser.new_context(viewport=VIEW), browser.new_context(viewport=VIEW)
    try:
        a, _ = login(ca, server.url, "ann")
        b, _ = login(cb, server.url, "ann2")
        to_review(a)
        a.keyboard.press("n")
        a.wait_for_function("!!document.querySelector('#clip-header')?.dataset.clip")
        x = shown(a)
        b.goto(f"{server.url}/?clip={x}")  # b opens ann's clip from a link: he may look, and is told
        b.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{x}'")
        assert b.inner_text("#review-lease") == "ann is on this clip"
        b.locator("body").click(position={"x": 3, "y": 3})
        b.keyboard.press("n")  # his next skips it
        b.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip !== '{x}'")
        assert a.locator("#review-lease").count() == 0  # ann sees no one else on hers
        a.click("#logout")
        a.wait_for_selector("#username")
        d = dbmod.connect(server.settings.db)
        try:
            assert review_queue.holder(d, x) is None  # at once, not when the lease runs out
        finally:
            d.close()
        b.goto(f"{server.url}/?clip={x}")
        b.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{x}'")
        assert b.locator("#review-lease").count() == 0
    finally:
        ca.close()
        cb.close()


def test_a_killed_browsers_clip_comes_back_when_its_lease_runs_out(browser, web_settings, server, queue):
    """A second app on the same library with a 10 s lease, and a queue of two clips (a job's). ann's browser is
    closed without a word to the server (no sign-out: what a crashed browser or a dead laptop does): ann2's n
    passes her clip over while the lease lives, and gets it once the lease has run out."""
    ttl = 10.0
    reset(server, queue)
    d = dbmod.connect(server.settings.db)
    try:
        pair = [queue.clip_ids[20], queue.clip_ids[21]]
        job = jobs.create(
            d,
            name="two clips",
            created_by="lead",
            selection=Selection.of_clips(pair),
            prompt_id=None,
            params=JobParams(),
        )
    finally:
        d.close()
    f = quote(json.dumps({"job_id": job}))
    with AppServer(web_settings.replace(review_lease_seconds=ttl), fleet_urls=[]) as short:
        ca, cb = browser.new_context(viewport=VIEW), browser.new_context(viewport=VIEW)
        try:
            a, _ = login(ca, short.url, "ann")
            b, _ = login(cb, short.url, "ann2")
            for page in (a, b):
                page.goto(f"{short.url}/?f={f}")
                to_review(page)
            a.keyboard.press("n")
            a.wait_for_function("!!document.querySelector('#clip-header')?.dataset.clip")
            x = shown(a)
            d = dbmod.connect(short.settings.db)
            try:
                expires = next(d.query("SELECT expires_at FROM review_leases WHERE clip_id = ?", [x]))["expires_at"]
            finally:
                d.close()
            ca.close()  # killed: the server hears nothing
            b.keyboard.press("n")
            b.wait_for_function("!!document.querySelector('#clip-header')?.dataset.clip")
            y = shown(b)
            assert y != x and {x, y} == set(pair), "n served a clip someone is on"
            b.keyboard.press("n")  # nothing else in this queue while her lease lives
            b.wait_for_function("document.querySelector('#review-msg')?.innerText.includes('No unreviewed clips')")
            asked = time.time()
            assert shown(b) == y
            time.sleep(max(0.0, expires - time.time()) + 0.3)
            b.keyboard.press("n")
            b.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{x}'")
            back = time.time() - (expires - ttl)
            assert back >= ttl  # not before the lease ran out
            print(
                f"a killed browser's clip came back {back:.1f} s after its holder's last activity (lease {ttl:.0f} s); "
                f"passed over {expires - asked:.1f} s before that"
            )
        finally:
            ca.close()
            cb.close()


def test_clips_nobody_can_review_are_flagged_counted_apart_and_never_served(browser, server, queue):
    reset(server, queue)
    failed, broken = queue.clip_ids[7], queue.clip_ids[BROKEN_AT]
    ctx, lead_ctx = browser.new_context(viewport={"width": 1366, "height": 768}), browser.new_context()
    try:
        page, _ = login(ctx, server.url, "ann3")
        # an ingest failure: approve and reject say what to do instead, and nothing is recorded
        page.goto(f"{server.url}/?clip={failed}")
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{failed}'")
        page.locator("body").click(position={"x": 3, "y": 3})
        page.keyboard.press("r")
        page.wait_for_function("document.querySelector('#review-msg').innerText.includes('failed at ingest')")
        assert "Press n for the next clip" in page.inner_text("#review-msg")
        assert shown(page) == failed
        # flag a clip broken from the keyboard: b, the reason, Enter; the next clip opens
        target = queue.clip_ids[30]
        page.goto(f"{server.url}/?clip={target}")
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{target}'")
        page.locator("body").click(position={"x": 3, "y": 3})
        page.keyboard.press("b")
        page.keyboard.type("the picture freezes after one second")
        page.keyboard.press("Enter")
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip !== '{target}'")
        assert f"Flagged clip {target} as broken" in page.inner_text("#review-msg")
        assert shown(page) not in (failed, broken, target)
        d = dbmod.connect(server.settings.db)
        try:
            row = clipsmod.get(d, target)
            assert (row["review_status"], row["review_note"], row["reviewed_by"]) == (
                "broken",
                "the picture freezes after one second",
                "ann3",
            )
        finally:
            d.close()
        # approve on it says why not
        page.goto(f"{server.url}/?clip={target}")
        page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{target}'")
        assert "the picture freezes" in page.inner_text("#review-header")
        page.locator("body").click(position={"x": 3, "y": 3})
        page.keyboard.press("a")
        page.wait_for_function(
            "document.querySelector('#review-msg').innerText.includes('flagged this clip as broken')"
        )
        # Browse counts broken apart from rejections
        page.locator("#tab-browse-button").click()
        page.wait_for_function("document.querySelector('#browse-counts')?.innerText.includes('2 broken')")
        assert "0 rejected" in page.inner_text("#browse-counts")
        page.screenshot(path=str(SCREENSHOTS / "browse-broken-counted.png"))
        # n walks the whole queue and never lands on them
        to_review(page)
        seen = set()
        for _ in range(len(reviewable(queue)) + 2):
            before = shown(page)
            page.keyboard.press("n")
            page.wait_for_function(f"(document.querySelector('#clip-header')?.dataset.clip || '') !== '{before or ''}'")
            seen.add(shown(page))
        assert not seen & {failed, broken, target}
        # a lead clears the flag: the clip is back in the queue
        lead, _ = login(lead_ctx, server.url, "lead")
        lead.goto(f"{server.url}/?clip={target}")
        lead.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{target}'")
        lead.click("#btn-clear-broken")
        lead.wait_for_function("document.querySelector('#review-msg').innerText.includes('back in the queue')")
        assert lead.inner_text("#review-status") == "unreviewed"
    finally:
        ctx.close()
        lead_ctx.close()
