"""Issue 21, class 4: history that grows without bound. Open and save ship one bounded page of a clip's
versions (older ones on demand, a page at a time), and saves are limited per person with a clear message.
The figure (bytes per open at 1,000 versions, before and after) is benchmarks/bench_history.py's.

The full run builds a history of 1,000 versions and walks every page of it; the quick run (tests/support/examples.py)
a quarter of it (250 versions, 13 pages): the same paths, a quarter of the saves to build and of the pages to walk,
and still past the 1 MiB bound for the old open (every version and its diff: 18.7 MB at 806 versions, ~23 KB each)."""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from data import caption_history, captions, db as dbmod, errors, limits
from tests.support.examples import examples
from tests.support.reliability_fixtures import GradioSession, dependencies
from tests.support.webapp_fixtures import LABELS, AppServer, add_users, build_library
from webapp import render

VERSIONS = examples(1_000)  # 250 in the quick run


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(["car", "lane", "pedestrian", "slows", "the", "cyclist"]) for _ in range(n_words))


@pytest.fixture(scope="module")
def long_history(tmp_path_factory):
    """An app whose clip 1 has VERSIONS (1,000; 250 in the quick run) human versions of ~1,500 characters."""
    from data.settings import Settings

    d = tmp_path_factory.mktemp("history")
    s = Settings.load({"data_dir": str(d / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=3)
    add_users(s)
    db = dbmod.connect(s.db)
    rng = random.Random(7)
    cid = 1
    base = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [cid]).fetchone()[0])
    base_id = base["id"]
    for _ in range(VERSIONS - 1):  # the machine caption is version 1
        base_id = captions.save_human(
            db, cid, text=_text(rng, 250), labels=LABELS, author="ann", base_caption_id=base_id
        )["id"]
    db.close()
    with AppServer(s, fleet_urls=[]) as srv:
        yield srv, cid


def _tab(srv, user="ann") -> GradioSession:
    cookie = srv.client(user).cookies["cw_session"]
    return GradioSession(srv.url, cookie, dependencies(srv.url, cookie))


def test_opening_a_clip_with_a_long_history_ships_one_bounded_page(long_history):
    srv, cid = long_history
    tab = _tab(srv)
    try:
        t = time.perf_counter()
        out = tab.call("open_clip", event_data={"clip": cid})
        took = time.perf_counter() - t
    finally:
        tab.close()
    size = len(json.dumps(out).encode())
    print(f"open of a clip with {VERSIONS:,} versions: {size / 1024:.0f} KiB, {took * 1000:.0f} ms")
    assert size < 1 << 20  # before: every version and its diff (18.7 MB at 806 versions)
    page = " ".join(v for v in out if isinstance(v, str) and "cw-history" in v)
    assert f"of {VERSIONS:,}" in page and page.count('class="cw-version"') == limits.HISTORY_PAGE


def test_older_versions_come_a_page_at_a_time_and_every_version_is_reachable(long_history):
    srv, cid = long_history
    tab = _tab(srv)
    seen: list[int] = []
    try:
        out = tab.call("open_clip", event_data={"clip": cid})
        for _ in range(VERSIONS):  # a bound on the loop: one page holds at least one version
            html = next(v for v in out if isinstance(v, str) and "cw-history" in v)
            seen += [int(v) for v in re.findall(r'cw-version-head">v(\d+) ', html)]
            if " older: " not in html:
                break
            out = tab.call("history_older")
            assert len(json.dumps(out).encode()) < 1 << 20
        out = tab.call("history_newest")
        assert f">v{VERSIONS} " in json.dumps(out)
    finally:
        tab.close()
    assert seen == list(range(VERSIONS, 0, -1))  # each version once, newest first, none skipped


def test_a_page_of_versions_at_the_caption_limit_stays_within_its_budget(db):
    cid = db["clips"].insert({"path": "a.mp4", "size": 1, "ingested_at": 0}).last_pk
    rng = random.Random(1)
    base = None
    for _ in range(limits.HISTORY_PAGE + 5):
        text = _text(rng, 4000)[: limits.MAX_CAPTION_CHARS]
        base = captions.save_human(db, cid, text=text, labels=LABELS, author="ann", base_caption_id=base)["id"]
    html, shown = render.history_page(caption_history.history_page(db, cid))
    print(f"a page of versions at the caption limit: {len(html) / 1024:.0f} KiB, {len(shown)} versions")
    assert len(html) <= limits.HISTORY_PAGE_CHARS + 2_000 and 1 <= len(shown) <= limits.HISTORY_PAGE
    nxt = caption_history.history_page(db, cid, before=shown[-1]["version"])
    assert nxt["versions"][0]["version"] == shown[-1]["version"] - 1  # the rest is the next page


def test_saves_past_the_rate_are_refused_with_how_long_to_wait(db):
    cid = db["clips"].insert({"path": "a.mp4", "size": 1, "ingested_at": 0}).last_pk
    other = db["clips"].insert({"path": "b.mp4", "size": 1, "ingested_at": 0}).last_pk
    rate = limits.SaveRate(per_clip=5, per_person=8, window=60)
    base = None
    for i in range(5):
        base = captions.save_human(db, cid, text=f"e{i}", labels=LABELS, author="ann", base_caption_id=base, rate=rate)
        base = base["id"]
    with pytest.raises(errors.TooFast, match=r"5 versions of this clip in the last 60 s: wait \d+ s"):
        captions.save_human(db, cid, text="one more", labels=LABELS, author="ann", base_caption_id=base, rate=rate)
    with pytest.raises(errors.TooFast):
        captions.adopt(db, cid, caption_id=base, author="ann", base_caption_id=base, rate=rate)
    # another person, and the same person on another clip (up to the per-person bound), are not held back
    captions.save_human(db, cid, text="lead's", labels=LABELS, author="lead", base_caption_id=base, rate=rate)
    b2 = None
    for i in range(3):
        b2 = captions.save_human(db, other, text=f"o{i}", labels=LABELS, author="ann", base_caption_id=b2, rate=rate)
        b2 = b2["id"]
    with pytest.raises(errors.TooFast, match="8 caption versions"):
        captions.save_human(db, other, text="over", labels=LABELS, author="ann", base_caption_id=b2, rate=rate)
    assert db.execute("SELECT COUNT(*) FROM captions WHERE author = 'ann'").fetchone()[0] == 8
    time.sleep(0.3)  # the window has passed (a window of 0.2 s stands for the minute)
    short = limits.SaveRate(per_clip=5, per_person=8, window=0.2)
    captions.save_human(db, other, text="later", labels=LABELS, author="ann", base_caption_id=b2, rate=short)


def test_the_review_tab_applies_the_rate_and_keeps_the_edit(long_history):
    srv, _ = long_history
    tab = _tab(srv, "ann2")
    try:
        tab.call("open_clip", event_data={"clip": 2})
        msgs = []
        for i in range(limits.SAVE_RATE.per_clip + 1):
            out = tab.call("save_caption", [None, None, None, f"edit {i}", *[LABELS[k] for k in LABELS]])
            msgs.append(" ".join(v for v in out if isinstance(v, str) and "cw-msg" in v))
    finally:
        tab.close()
    assert all("Saved as version" in m for m in msgs[:-1])
    assert "wait" in msgs[-1] and "still here" in msgs[-1]  # before: a 31st version, and a 32nd, ...
