"""The Browse tab's pieces: what it says with no caption yet, its form against every filter it can express, pages by
cursor, search with its hints. In a real browser: tests/browser/test_browser_webapp.py."""

from __future__ import annotations

import pytest

from data.errors import DataError
from tests.support.built_app import built_app
from webapp import render


@pytest.fixture
def built(settings):
    """The app built in-process (tests/support/built_app.py): its workbench and its Blocks."""
    with built_app(settings) as b:
        yield b


@pytest.fixture
def workbench(built):
    return built[0]


def test_browse_says_what_to_do_while_no_clip_has_a_caption():
    """A first launch showed "0 captioned" and nothing said that a job had to be started."""
    empty = render.counts({"clips": 9, "captioned": 0, "failed": 3}, 9)
    assert 'id="no-captions"' in empty and "0 captioned" in empty and "Jobs tab" in empty
    assert "no-captions" not in render.counts({"clips": 9, "captioned": 1, "failed": 3}, 9)
    assert "no-captions" not in render.counts({"clips": 3, "captioned": 0, "failed": 3}, 3)  # nothing to caption


def test_the_browse_form_shows_every_filter_it_can_express_and_reads_it_back():
    """Filter dict -> form values -> Filter, for a value of every field the form has (generated from
    FORM_FIELDS and the Filter field types: a new input gets its cases without touching this test)."""
    from data import clips
    from webapp.browse import tab as browse_tab

    cases = [{}, {"unassigned": True}, {"assignee": "me-user"}]
    for name in browse_tab.FORM_FIELDS:
        kind = clips.FIELD_TYPES[name]
        if name in browse_tab.CHOICES:
            cases += [{name: v} for v in browse_tab.CHOICES[name]]
        elif kind is bool:
            cases += [{name: True}, {name: False}]
        elif kind is int:
            cases.append({name: 7})
        else:
            cases.append({name: "pedestrian night"} if name == "text" else {name: "ann"})
    for fdict in cases:
        form = browse_tab.form_from_filter(fdict)
        assert browse_tab.read_form(browse_tab.form_values({**form, browse_tab.SORT: "oldest"})) == {
            **form,
            "sort": "oldest",
        }
        assert browse_tab.filter_from_form(form, me="me-user").to_dict() == fdict, (fdict, form)
    # a script that sends fewer values than the form has: the rest are "not sent", not shifted
    assert browse_tab.read_form(["approved"]) == {
        **{n: None for n in browse_tab.FORM_FIELDS},
        "review_status": "approved",
    } | {"sort": None}
    assert browse_tab.filter_from_form(browse_tab.read_form(["approved"])).to_dict() == {"review_status": "approved"}
    with pytest.raises(DataError, match="job id must be a whole number"):
        browse_tab.filter_from_form({"job_id": "1.5"})


def test_browse_pages_by_cursor_and_refuses_a_bad_order_or_cursor_with_a_message(workbench):
    import gradio as gr

    from webapp.browse import tab as browse_tab

    b = workbench.browse
    first = b.apply(None, *browse_tab.form_values({browse_tab.SORT: "oldest"}))
    assert first[b.anchors] == [None] and first[b.next_cursor] and 'data-sort="oldest"' in first[b.counts]
    second = b.page({}, [None, first[b.next_cursor]], "oldest", None)
    assert "Page 2 · clips #61–#70" in second[b.page_label] and second[b.next_cursor] is None
    newest = b.apply(None, *browse_tab.form_values({browse_tab.SORT: "newest"}))
    assert "clips #70–#11" in newest[b.page_label] and 'data-sort=""' in newest[b.counts]  # the default: no ?sort
    with pytest.raises(gr.Error, match="Unknown sort order"):
        b.apply(None, *browse_tab.form_values({browse_tab.SORT: "sideways"}))
    with pytest.raises(gr.Error, match="start again from the first page"):
        b.page({}, [None, "tampered"], "oldest", None)
    with pytest.raises(gr.Error, match="start again from the first page"):  # a cursor of another order
        b.page({}, [None, first[b.next_cursor]], "newest", None)


def _browse(session, text: str) -> str:
    """The Browse search event as the page sends it; returns the grid and counts HTML it answered with."""
    out = session.call("browse_search", ["any"] * 7 + [None, text, "any", "newest"])
    return " ".join(v for v in out if isinstance(v, str))


def test_browse_search_unions_or_and_hints_when_it_cannot_or_does_not_find(server, library):
    """Issue 18: `a OR b` found 0 (OR was searched as a word) and a broken query was a silent 0."""
    import re

    from tests.support.reliability_fixtures import GradioSession, dependencies, login_cookie

    cookie = login_cookie(server.url, "ann")
    s = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    try:

        def matches(html: str) -> set[int]:
            return {int(x) for x in re.findall(r'data-clip="(\d+)"', html)}

        cyclist, bus = _browse(s, "cyclist"), _browse(s, "bus")
        either = _browse(s, "cyclist OR bus")
        assert matches(cyclist) and matches(bus) and matches(either) == matches(cyclist) | matches(bus)
        assert f"<b>{len(matches(either))}</b> match" in either
        assert matches(_browse(s, '"while a cyclist passes"')) == matches(cyclist)
        assert matches(_browse(s, "cycl*")) == matches(cyclist)
        none = _browse(s, "cyclist bus")  # no clip has both: the grid says why, and what to write
        assert not matches(none) and 'id="search-hint"' in none and "cyclist OR bus" in none
        broken = _browse(s, '"cyclist OR')
        assert 'id="search-hint"' in broken and "The search was not run" in broken and "quote" in broken
        assert not matches(broken)
        dangling = _browse(s, "cyclist OR")
        assert "OR needs a word on each side" in dangling
    finally:
        s.close()
