"""The blind second review on the stack `./launch.sh` starts, in a real Chromium at 1366x768 (issue 45, point 1):
it is Review's form without the model, and it stores exactly what was typed.

Before, its seven labels were mouse dropdowns that took the first option *containing* the typed text (`collision`
and Enter stored near_collision): two reviewers who gave the same answers read as agreeing 0.938 on the scenario,
and the release card repeated it; Approve sat at y = 1,046; with nothing waiting it still showed seven fields and
an enabled Approve.

The library: the launch's own demo clips, captioned by the simulated fleet on first launch. A lead draws all of
them as a random sample for ann and sends it to ann2 for a blind second review. Both answer every clip through
the page with the same answers, which between them name every option of every label by its exact name (20 clips:
the scenario's 16 options are the most any label has), ann on Review, ann2 on the Second review tab:
- with nothing waiting, ann2's tab shows the count alone: no field, no button, and the keys do nothing;
- every label and Approve are in view at 1366x768, the form opens empty, and text naming no option, or several,
  says so and stores nothing;
- each answer stores exactly the options typed (all 63, the road users several at a time);
- the last clips are typed with the fewest keys (the start of a name no other option shares, or its number):
  the keys per clip are Review's for the same answers (docs/keys-per-clip-blind.txt), at most Review's + 1;
- the lead's Quality tab reads agreement 1.000 on every label for the 20 clips reviewed twice.
Every page is watched for uncaught JavaScript errors.
"""

from __future__ import annotations

import pytest

from data import clips as clipsmod, taxonomy
from data.clips import Filter
from data.quality import samples, second_review
from tests.support.blind_form import KEY, LABELS, fill_labels, form_is_empty, to_page, typed_for, values
from tests.support.browser_fixtures import SCREENSHOTS, login
from tests.support.launched_stack import LaunchedStack

pytestmark = pytest.mark.browser

CLIPS = 20  # the demo library's clips (its 3 broken files are not captioned): more than any label's options
BY_NAME = 16  # clips whose answers are typed by exact names: every option of every label among them
VIEW = {"width": 1366, "height": 768}
KEYS_REPORT = SCREENSHOTS.parent / "keys-per-clip-blind.txt"
WAIT = 60_000


def answers() -> list[dict]:
    """One answer per clip; together they name every option of every label, road users two at a time on some."""
    out = []
    for i in range(CLIPS):
        a = {n: opts[i % len(opts)] for n, opts in taxonomy.ENUMS.items() if n not in taxonomy.MULTI}
        users = list(taxonomy.ENUMS["road_users"])
        a["road_users"] = [users[i % len(users)]] + ([users[(i + 4) % len(users)]] if i % 3 == 2 else [])
        out.append(a)
    return out


def same(a: dict, b: dict) -> bool:
    return all((sorted(a[n]) == sorted(b[n])) if n in taxonomy.MULTI else a[n] == b[n] for n in taxonomy.ENUMS)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LaunchedStack(tmp_path_factory.mktemp("launched") / "var", demo_count=CLIPS) as s:
        s.wait_jobs_done()
        yield s


def review_keys(answer: dict) -> int:
    """Review's keys for `answer` on a clip whose every label differs (docs/keys-per-clip.txt: the label's key, the
    fewest characters that name the option, Enter; road users: each item so; then a)."""
    items = [(n, v) for n in LABELS for v in (answer[n] if n in taxonomy.MULTI else [answer[n]])]
    return sum(2 + len(typed_for(n, v, "fewest")) for n, v in items) + 1


def set_on_review(page, stack, cid: int, answer: dict) -> None:
    """ann's first review on Review, with the keyboard: every label to `answer` (a road user not in it removed
    with its name and Delete), then a."""
    page.goto(f"{stack.url}/?clip={cid}")
    page.wait_for_function(f"document.querySelector('#clip-header')?.dataset.clip === '{cid}'", timeout=WAIT)
    page.wait_for_function(f"document.querySelectorAll('#tab-review .cw-pick-field').length === {len(LABELS)}")
    to_page(page)
    for name in LABELS:
        have = page.evaluate("(n) => window.cwPicker.value(n)", name)
        if name in taxonomy.MULTI:
            for v in [v for v in have if v not in answer[name]]:
                for k in [KEY[name], *v, "Delete", "Escape"]:
                    page.keyboard.press(k)
            for v in [v for v in answer[name] if v not in have]:
                page.keyboard.press(KEY[name])
                page.keyboard.type(v)
                page.keyboard.press("Enter")
        elif have != answer[name]:
            page.keyboard.press(KEY[name])
            page.keyboard.type(answer[name])
            page.keyboard.press("Enter")
    shown = page.evaluate("window.cwPicker.values()")
    assert same(shown, answer), (cid, shown, answer)
    page.keyboard.press("a")


def nothing_actionable(page) -> None:
    """The Second review tab with nothing waiting: the count alone; no field or button on show; keys do nothing."""
    page.wait_for_function(
        "document.querySelector('#second-status')?.innerText.includes('No blind second review waits for you')",
        timeout=WAIT,
    )
    shown = page.evaluate(
        """() => [...document.querySelectorAll('#tab-second button, #tab-second input, #tab-second textarea')]
            .filter((e) => e.offsetParent !== null && e.getClientRects().length).map((e) => e.id || e.outerHTML)"""
    )
    assert shown == [], shown
    to_page(page)
    for k in ("1", "a", "r", "n"):
        page.keyboard.press(k)
    assert page.evaluate("document.activeElement === document.body || document.activeElement === null")
    assert page.evaluate("document.querySelector('#tab-second .cw-pick-open')") is None


def test_the_blind_second_review_stores_what_was_typed_and_identical_answers_agree(browser, stack):
    want = answers()
    d = stack.db()
    try:
        ids = [
            r[0]
            for r in d.execute(
                "SELECT id FROM clips WHERE current_caption_id IS NOT NULL AND probe_error IS NULL ORDER BY id"
            )
        ]
        assert len(ids) == CLIPS
    finally:
        d.close()
    ann_ctx = browser.new_context(viewport=VIEW)
    ann2_ctx = browser.new_context(viewport=VIEW)
    lead_ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        ann2, watch2 = login(ann2_ctx, stack.url, "ann2")
        ann2.locator("#tab-second-button").click()
        nothing_actionable(ann2)  # before anything is sent

        d = stack.db()
        try:
            s = samples.draw(d, Filter(), CLIPS, ["ann"], actor="lead", role="lead", seed=45)
            order = [m["clip_id"] for m in samples.members(d, s["id"])]
            assert sorted(order) == ids
            sent = second_review.send_to_second(d, s["id"], "ann2", actor="lead", role="lead")
            assert sent["sent"] == CLIPS
        finally:
            d.close()
        answer_of = dict(zip(order, want))  # second reviews come in draw order: the i-th gets answers()[i]

        # ann, the first reviewer, on Review
        ann, watch = login(ann_ctx, stack.url, "ann")
        for cid in order:
            set_on_review(ann, stack, cid, answer_of[cid])
            ann.wait_for_function(
                f"document.querySelector('#clip-header')?.dataset.clip !== '{cid}' || "
                "document.querySelector('#review-msg')?.innerText.includes('approved')",
                timeout=WAIT,
            )
        d = stack.db()
        try:
            for cid in order:
                c = clipsmod.get(d, cid)
                assert c["review_status"] == "approved" and same(c["caption"]["labels"], answer_of[cid]), cid
        finally:
            d.close()
        assert not watch.errors

        # ann2, blind, on the Second review tab
        ann2.reload()
        ann2.wait_for_selector("#whoami", timeout=WAIT)
        ann2.locator("#tab-second-button").click()
        report = []
        for i, cid in enumerate(order):
            ann2.wait_for_function(f"document.querySelector('#second-clip')?.dataset.clip === '{cid}'", timeout=WAIT)
            ann2.wait_for_function(f"document.querySelectorAll('#tab-second .cw-pick-field').length === {len(LABELS)}")
            assert form_is_empty(ann2), (cid, values(ann2))  # nothing of the model's labels, nothing of ann's
            if i == 0:
                # at 1366x768, every label and Approve on screen, the page not scrolled
                boxes = ann2.evaluate(
                    """(ids) => ids.map((id) => { const r = document.getElementById(id).getBoundingClientRect();
                        return [id, r.top, r.bottom, r.width]; })""",
                    [f"second-label-{n}" for n in LABELS] + ["btn-second-approve"],
                )
                assert ann2.evaluate("window.scrollY") == 0
                for elem, top, bottom, width in boxes:
                    assert 0 <= top and bottom <= VIEW["height"] and width > 0, (elem, top, bottom)
                ann2.screenshot(path=str(SCREENSHOTS / "second-review-1366.png"))
                # text naming no option, or several, says so and stores nothing (as on Review)
                msg = "#second-label-scenario_category .cw-pick-msg"
                for text, said in (("qzx", "No scenario category option starts with “qzx”"), ("c", "fits 3")):
                    to_page(ann2)
                    for k in ["1", *text, "Enter"]:
                        ann2.keyboard.press(k)
                    assert said in ann2.inner_text(msg), ann2.inner_text(msg)
                    ann2.keyboard.press("Escape")
                    assert values(ann2)["scenario_category"] is None
            how = "name" if i < BY_NAME else "fewest"
            pressed = fill_labels(ann2, answer_of[cid], how) + 1  # and a
            shown = values(ann2)
            assert same(shown, answer_of[cid]), (cid, shown, answer_of[cid])
            ann2.keyboard.press("a")
            if how == "fewest":
                report.append((cid, pressed, review_keys(answer_of[cid])))
            d = stack.db()
            try:
                ann2.wait_for_function(
                    f"document.querySelector('#second-clip')?.dataset.clip !== '{cid}'", timeout=WAIT
                )
                (done,) = [r for r in second_review.second_reviews(d, sample_id=s["id"]) if r["clip_id"] == cid]
                assert done["decision"] == "approved" and same(done["labels"], answer_of[cid]), (cid, done)
            finally:
                d.close()
        nothing_actionable(ann2)  # after the last one
        assert not watch2.errors

        # every option of every label was typed by its exact name and stored as it
        typed = {n: set() for n in LABELS}
        for a in want[:BY_NAME]:
            for n in LABELS:
                typed[n].update(a[n] if n in taxonomy.MULTI else [a[n]])
        assert typed == {n: set(opts) for n, opts in taxonomy.ENUMS.items()}
        # the fewest keys: Review's for the same answers, at most Review's + 1
        for cid, pressed, on_review in report:
            assert pressed <= on_review + 1, (cid, pressed, on_review)
        lines = [
            "Keys per clip on the blind second review (issue 45; tests/browser/test_browser_launched_second_review.py,",
            "1366x768, Chromium, the stack ./launch.sh starts): every label set on an empty form, each with its key,",
            "the fewest characters that name the option (the start of its name no other option shares, or its",
            "number), Enter (road users: each item so), then a. Beside it, Review's keys for the same answers on a",
            "clip whose every label differs from the model's (the rule of docs/keys-per-clip.txt). The goal: at most",
            "Review's + 1.",
            "",
            f"{'clip':>5}  {'blind form':>10}  {'Review':>6}  answers",
        ]
        for cid, pressed, on_review in report:
            a = answer_of[cid]
            lines.append(
                f"{cid:>5}  {pressed:>10}  {on_review:>6}  "
                + ", ".join(f"{n}={'+'.join(a[n]) if n in taxonomy.MULTI else a[n]}" for n in LABELS)
            )
        KEYS_REPORT.write_text("\n".join(lines) + "\n")

        # the lead reads the reviewers' agreement on Quality: identical answers agree 1.000 on every label
        lead, watch3 = login(lead_ctx, stack.url, "lead")
        lead.locator("#tab-quality-button").click()
        agree = lead.evaluate(
            """() => new Promise((done) => { const t0 = Date.now(); const look = () => {
                const rows = {};
                for (const row of document.querySelectorAll('#quality-labels [role=row]')) {
                    const c = [...row.querySelectorAll('[role=gridcell]')].map((x) => x.textContent.trim());
                    if (c.length >= 6) rows[c[0]] = [c[3], c[5]];
                }
                if (Object.keys(rows).length >= 7 || Date.now() - t0 > 60000) done(rows); else setTimeout(look, 200);
            }; look(); })"""
        )
        assert agree == {n: ["1.000", str(CLIPS)] for n in LABELS}, agree
        assert not watch3.errors
    finally:
        for ctx in (ann_ctx, ann2_ctx, lead_ctx):
            ctx.close()
