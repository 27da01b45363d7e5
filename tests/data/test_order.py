"""Sort orders and their cursors (data.order) against real SQLite: a cursor comes back as it went or is refused
with a message, and an order on any key -- ties broken by id, NULLs where the order puts them, either
direction -- pages, finds neighbours and walks the review queue exactly as a Python sort says it should.

The orders tested here are registered for the test only (as the risk order of the quality work will be, for
good): a rank computed from the hazard level, a text column and a real column, each with NULLs and ties."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from data import assignments, clips, order as orders
from data.clips import Filter
from data.db import immediate
from data.errors import BadCursor, DataError, NotFound
from data.order import Cursor, Order
from tests.support.examples import examples

HAZARD_RANK = (
    "CASE c.hazard_level WHEN 'none' THEN 0 WHEN 'low' THEN 1 WHEN 'medium' THEN 2 WHEN 'high' THEN 3 "
    "WHEN 'critical' THEN 4 END"
)
RANK = {"none": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
# key name -> (SQL over clips c, the same value computed in Python from a generated clip)
KEYS = {
    "hazard_rank": (HAZARD_RANK, lambda c: RANK.get(c["hazard_level"])),
    "weather": ("c.weather", lambda c: c["weather"]),
    "duration": ("c.duration", lambda c: c["duration"]),
}
USERS = ("ann", "bob")


def test_orders_registry_names_the_defaults_and_refuses_unknown_names():
    assert orders.get(None).name == orders.DEFAULT == "newest"
    assert orders.get("oldest") is orders.OLDEST and orders.get(orders.NEWEST) is orders.NEWEST
    assert ("newest", "newest") in orders.choices() and ("oldest", "oldest") in orders.choices()
    with pytest.raises(DataError, match="Unknown sort order 'sideways': use one of newest, oldest"):
        orders.get("sideways")
    assert orders.name_or_default("sideways") == orders.name_or_default(["x"]) == "newest"
    assert orders.name_or_default("oldest") == "oldest"
    with pytest.raises(ValueError):
        orders.register(Order("newest"))  # a name is taken once


@pytest.mark.parametrize("value", [None, 0, -3, 2**62, 1.25, -0.5, "", "rain", "ünïcode ✓", "x" * 2000])
def test_a_cursor_comes_back_as_it_went(value):
    o = Order("t_roundtrip", key="c.weather", descending=True)
    token = o.encode(Cursor(value, 42))
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")  # URL-safe
    assert o.decode(token) == Cursor(value, 42)
    assert o.reversed().decode(token) == Cursor(value, 42)  # a place in an order is a place in its mirror
    assert o.decode(None) is None and o.decode("") is None


def _token(parts) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        "not a cursor!",
        "%%%",
        "a",  # not base64 of anything
        orders.NEWEST.encode(Cursor(5, 5))[:-3],  # truncated
        _token(["newest", 5]),  # too short
        _token({"o": "newest", "k": 5, "id": 5}),  # not our shape
        _token(["newest", 5, 5, 5]),
        _token(["newest", 5, True]),  # a bool is not an id
        _token(["newest", 5, "5"]),
        _token(["newest", 2**70, 2**70]),  # out of SQLite's range
        _token(["newest", 5, 6]),  # an id order's value is its id
        _token(["oldest", 5, 5]),  # another order's cursor
        _token(["newest", [[[5]]], 5]),
        base64.urlsafe_b64encode(b'["newest", NaN, 5]').decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        "A" * (orders.MAX_CURSOR_CHARS + 1),
    ],
)
def test_a_tampered_cursor_is_a_message_not_a_500(db, token):
    with pytest.raises(BadCursor, match="start again from the first page"):
        orders.NEWEST.decode(token)
    with pytest.raises(DataError):
        clips.page(db, Filter(), order="newest", after=token)
    with pytest.raises(DataError):
        clips.page_ids(db, Filter(text="car"), order="newest", after=token)


def test_a_non_id_cursor_checks_its_value_type():
    o = Order("t_types", key="c.duration")
    with pytest.raises(BadCursor, match="its sort value is not one SQLite can compare"):
        o.decode(_token(["t_types", True, 3]))
    for nested in ([1], {"a": 1}):
        with pytest.raises(BadCursor, match="damaged"):
            o.decode(_token(["t_types", nested, 3]))
    assert o.decode(_token(["t_types", 2.5, 3])) == Cursor(2.5, 3)


def test_cursor_at_a_clip_that_does_not_exist_is_not_found(db):
    with pytest.raises(NotFound):
        clips.cursor_at(db, "newest", 12345)
    with pytest.raises(NotFound):
        clips.neighbours(db, Filter(), 10**30)


# -- the oracle: any registered order pages, neighbours and queues as a Python sort says --------------------

clip_st = st.fixed_dictionaries(
    {
        "hazard_level": st.sampled_from([None, "none", "low", "medium", "high", "critical"]),
        "weather": st.sampled_from([None, "clear", "rain", "fog"]),
        "duration": st.sampled_from([None, 1.5, 2.0, 3.25]),
        "review_status": st.sampled_from(["unreviewed", "unreviewed", "approved"]),
        "word": st.sampled_from(["car", "bus", None]),
        "assignee": st.sampled_from([None, None, "ann", "bob"]),
        "captioned": st.sampled_from([True, True, False]),
    }
)
order_st = st.builds(
    lambda key, descending, nulls_first: Order(
        f"t_{key}_{'desc' if descending else 'asc'}_{'nf' if nulls_first else 'nl'}",
        key=KEYS[key][0],
        descending=descending,
        nulls_first=nulls_first,
    ),
    st.sampled_from(sorted(KEYS)),
    st.booleans(),
    st.booleans(),
)
FILTERS = [
    Filter(),
    Filter(weather="rain"),
    Filter(review_status="unreviewed"),
    Filter(text="car"),  # the FTS-driven loop
    Filter(assignee="ann"),  # the assignee-driven walk
    Filter(unassigned=True),
]


def _load(db, rows: list[dict]) -> list[dict]:
    """Replace the library with `rows`; returns them with their ids."""
    with immediate(db):
        db.execute("DELETE FROM assignments")
        db.execute("DELETE FROM clips")
        for i, r in enumerate(rows):
            r["id"] = db.execute(
                "INSERT INTO clips (path, hazard_level, weather, duration, review_status, caption_text, "
                "current_caption_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [f"clip{i:03d}.mp4", r["hazard_level"], r["weather"], r["duration"], r["review_status"], r["word"]]
                + [i + 1 if r.get("captioned", True) else None],
            ).lastrowid
            if r["assignee"]:
                db.execute(
                    "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (?, ?, 'lead', 0)",
                    [r["id"], r["assignee"]],
                )
    return rows


def _matches(c: dict, f: Filter) -> bool:
    return (
        (f.weather is None or c["weather"] == f.weather)
        and (f.review_status is None or c["review_status"] == f.review_status)
        and (f.text is None or c["word"] == f.text)
        and (f.assignee is None or c["assignee"] == f.assignee)
        and (not f.unassigned or c["assignee"] is None)
    )


def _sorted(rows: list[dict], o: Order) -> list[dict]:
    """The order, in Python: non-NULL keys by (key, id) and NULL keys by id, each in the order's direction,
    the NULL run first or last as the order says."""
    key = next(fn for sql, fn in KEYS.values() if sql == o.key)
    valued = sorted((r for r in rows if key(r) is not None), key=lambda r: (key(r), r["id"]), reverse=o.descending)
    nulls = sorted((r for r in rows if key(r) is None), key=lambda r: r["id"], reverse=o.descending)
    return nulls + valued if o.nulls_first else valued + nulls


def _ids(rows) -> list[int]:
    return [r["id"] for r in rows]


@pytest.fixture
def registered(monkeypatch):
    """Register an order for one test, by name, as the app would find it."""

    def register(o: Order) -> str:
        monkeypatch.setitem(orders.ORDERS, o.name, o)
        return o.name

    return register


SETTINGS = hsettings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(rows=st.lists(clip_st, max_size=24), o=order_st, limit=st.integers(1, 5), f=st.sampled_from(FILTERS))
def test_keyset_pages_of_any_order_walk_every_match_once_in_order(db, registered, rows, o, limit, f):
    rows = _load(db, rows)
    name = registered(o)
    want = _ids(_sorted([r for r in rows if _matches(r, f)], o))
    seen, after = [], None
    for _ in range(len(rows) + 2):
        page = clips.page(db, f, order=name, after=after, limit=limit)
        assert len(page.rows) <= limit
        seen += _ids(page.rows)
        if page.next is None:
            break
        assert len(page.rows) == limit  # a page that says "more" is full
        after = page.next
    assert seen == want
    assert clips.page_ids(db, f, order=name, limit=limit) == want[:limit]
    assert clips.count_capped(db, f) == (len(want), True)


@SETTINGS
@given(rows=st.lists(clip_st, min_size=1, max_size=24), o=order_st, f=st.sampled_from(FILTERS))
def test_neighbours_of_any_clip_in_any_order(db, registered, rows, o, f):
    rows = _load(db, rows)
    name = registered(o)
    everything = _sorted(rows, o)
    for at, clip in enumerate(everything):  # also clips outside the filter: their place in the order counts
        before = [r for r in everything[:at] if _matches(r, f)]
        after = [r for r in everything[at + 1 :] if _matches(r, f)]
        want = (before[-1]["id"] if before else None, after[0]["id"] if after else None)
        assert clips.neighbours(db, f, clip["id"], order=name) == want, clip


def _queue_oracle(rows: list[dict], f: Filter, user: str, after: int | None, o: Order) -> int | None:
    """data.assignments' queue, in Python: the user's unreviewed clips of the filter, then unassigned ones;
    from `after` within its own tier (wrapping around), from the top of any other; only clips with a caption."""
    base = [
        r
        for r in _sorted(rows, o)
        if _matches(r, f) and r["review_status"] == "unreviewed" and r.get("captioned", True)
    ]
    if f.assignee or f.unassigned:
        tiers = [(base, True)]
    else:
        holder = next((r["assignee"] for r in rows if r["id"] == after), None)
        tiers = [
            ([r for r in base if r["assignee"] == user], holder == user),
            ([r for r in base if r["assignee"] is None], holder is None),
        ]
    everything = _ids(_sorted(rows, o))
    for tier, own in tiers:
        ids = [i for i in _ids(tier) if i != after]
        if not ids:
            continue
        if after is not None and own:
            place = everything.index(after)
            later = [i for i in ids if everything.index(i) > place]
            return (later or ids)[0]
        return ids[0]
    return None


@SETTINGS
@given(
    rows=st.lists(clip_st, min_size=1, max_size=24),
    o=order_st,
    f=st.sampled_from([Filter(), Filter(weather="rain"), Filter(text="car"), Filter(assignee="bob")]),
    user=st.sampled_from(USERS),
)
def test_the_review_queue_walks_any_order(db, registered, rows, o, f, user):
    rows = _load(db, rows)
    name = registered(o)
    for after in [None, *_ids(rows)]:
        want = _queue_oracle(rows, f, user, after, o)
        assert assignments.next_in_queue(db, f, user, after=after, order=name) == want, after


def test_ties_and_nulls_in_a_hand_worked_case(db, registered):
    """Five clips, hazard rank descending, NULLs last: high(2) > high(4) by id descending, then low, then the
    two without a hazard level by id descending."""
    levels = ["low", "high", None, "high", None]
    rows = _load(
        db,
        [
            {"hazard_level": h, "weather": None, "duration": None, "review_status": "unreviewed", "word": None}
            | {"assignee": None}
            for h in levels
        ],
    )
    ids = _ids(rows)
    name = registered(Order("t_risk", key=HAZARD_RANK, descending=True))
    walk = []
    after = None
    while True:
        page = clips.page(db, Filter(), order=name, after=after, limit=2)
        walk += _ids(page.rows)
        if page.next is None:
            break
        after = page.next
    assert walk == [ids[3], ids[1], ids[0], ids[4], ids[2]]
    assert clips.neighbours(db, Filter(), ids[0], order=name) == (ids[1], ids[4])
    assert assignments.next_in_queue(db, Filter(), "ann", after=ids[2], order=name) == ids[3]  # wraps around
    first = Order("t_risk_nf", key=HAZARD_RANK, descending=True, nulls_first=True)
    assert clips.page_ids(db, Filter(), order=registered(first)) == [ids[4], ids[2], ids[3], ids[1], ids[0]]


def test_with_an_index_on_key_and_id_every_stretch_of_a_deep_page_is_a_seek(db):
    """A non-id order splits a page into the cursor's tie, the later keys and the NULL run, so that with an index
    on (key, id) each is an index seek, not a scan from the start of the index plus a sort."""
    _load(
        db,
        [
            {"hazard_level": h, "weather": w, "duration": None, "review_status": "unreviewed", "word": None}
            | {"assignee": None}
            for h in ("none", "low", "medium", "high", "critical", None)
            for w in ("clear", "rain", "fog")
            for _ in range(40)
        ],
    )
    db.execute(f"CREATE INDEX t_rank ON clips(({HAZARD_RANK.replace('c.', '')}), id)")
    db.execute("ANALYZE")
    o = Order("t_rank", key=HAZARD_RANK, descending=True)
    for place in (Cursor(2, 400), Cursor(None, 400)):
        samples = clips.explain_samples(Filter(), place, (o,))
        deep = {k: v for k, v in samples.items() if k.startswith("deep facet page")}
        assert deep
        for name, (sql, args) in deep.items():
            plan = " | ".join(r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))
            assert "SEARCH c USING INDEX t_rank" in plan and "TEMP B-TREE" not in plan, (name, plan)
