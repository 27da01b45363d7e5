"""The review queue by risk (data.order.RISK): hazard level first, then captions whose text and labels disagree,
then the model's doubt; clips without a caption last. It pages, finds neighbours and walks the queue (your
assigned clips first, then unassigned ones) exactly as a Python sort of the same rule says, its pages are index
seeks on its index (idx_clips_risk), and captions stored through data.captions land where
the rule puts them."""

from __future__ import annotations

import math
import random

import pytest

from data import assignments, captions, clips, order as orders
from data.clips import Filter
from data.db import immediate

RANK = {"none": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}


def risk(c: dict) -> int | None:
    """The rule, in Python (SQLite's ROUND rounds half away from zero)."""
    if c["hazard_level"] not in RANK:
        return None
    sure = 0.5 if c["confidence_min"] is None else c["confidence_min"]
    disagree = 2000 if (c["label_conflicts"] or 0) > 0 else 0
    return RANK[c["hazard_level"]] * 10000 + disagree + math.floor((1.0 - sure) * 1000 + 0.5)


def oracle(rows: list[dict]) -> list[dict]:
    """Riskiest first, ties by id descending, then the clips without a key by id descending."""
    valued = sorted((r for r in rows if risk(r) is not None), key=lambda r: (risk(r), r["id"]), reverse=True)
    return valued + sorted((r for r in rows if risk(r) is None), key=lambda r: r["id"], reverse=True)


def generated(seed: int, n: int = 48) -> list[dict]:
    """Clips with every kind of value, ties and NULLs among them."""
    rng = random.Random(seed)
    return [
        {
            "hazard_level": rng.choice([None, "none", "low", "medium", "high", "critical"]),
            "confidence_min": rng.choice([None, 0.0, 0.12, 0.5, 0.73, 0.9, 0.999, 1.0]),
            "label_conflicts": rng.choice([None, 0, 0, 1, 3]),
            "review_status": rng.choice(["unreviewed", "unreviewed", "approved"]),
            "word": rng.choice(["car", "bus", None]),
            "assignee": rng.choice([None, None, "ann", "bob"]),
            "captioned": rng.choice([True, True, True, False]),
        }
        for _ in range(n)
    ]


def load(db, rows: list[dict]) -> list[dict]:
    with immediate(db):
        db.execute("DELETE FROM assignments")
        db.execute("DELETE FROM clips")
        for i, r in enumerate(rows):
            r["id"] = db.execute(
                "INSERT INTO clips (path, hazard_level, confidence_min, label_conflicts, review_status, caption_text,"
                " current_caption_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [f"c{i:03d}.mp4", r["hazard_level"], r["confidence_min"], r["label_conflicts"], r["review_status"]]
                + [r["word"], i + 1 if r.get("captioned", True) else None],
            ).lastrowid
            if r["assignee"]:
                db.execute(
                    "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (?, ?, 'lead', 0)",
                    [r["id"], r["assignee"]],
                )
    return rows


def matches(c: dict, f: Filter) -> bool:
    return (
        (f.review_status is None or c["review_status"] == f.review_status)
        and (f.text is None or c["word"] == f.text)
        and (f.assignee is None or c["assignee"] == f.assignee)
        and (not f.unassigned or c["assignee"] is None)
    )


def ids(rows) -> list[int]:
    return [r["id"] for r in rows]


FILTERS = [
    Filter(),
    Filter(review_status="unreviewed"),
    Filter(text="car"),
    Filter(assignee="ann"),
    Filter(unassigned=True),
]


def test_risk_is_one_registered_order_that_the_ui_lists():
    assert orders.get("risk") is orders.RISK and orders.RISK.descending and not orders.RISK.nulls_first
    assert ("risk", "risk") in orders.choices() and orders.name_or_default("risk") == "risk"


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("f", FILTERS)
def test_pages_walk_every_match_once_in_the_rule_s_order(db, seed, f):
    rows = load(db, generated(seed))
    want = ids(oracle([r for r in rows if matches(r, f)]))
    for limit in (1, 4, 7):
        seen, after = [], None
        while True:
            page = clips.page(db, f, order="risk", after=after, limit=limit)
            seen += ids(page.rows)
            if page.next is None:
                break
            assert len(page.rows) == limit
            after = page.next
        assert seen == want, limit
    assert clips.page_ids(db, f, order="risk", limit=5) == want[:5]


@pytest.mark.parametrize("f", FILTERS)
def test_neighbours_in_the_risk_order(db, f):
    rows = load(db, generated(7))
    everything = oracle(rows)
    for at, clip in enumerate(everything):
        before = [r for r in everything[:at] if matches(r, f)]
        after = [r for r in everything[at + 1 :] if matches(r, f)]
        want = (before[-1]["id"] if before else None, after[0]["id"] if after else None)
        assert clips.neighbours(db, f, clip["id"], order="risk") == want, clip


def queue_oracle(rows: list[dict], f: Filter, user: str, after: int | None) -> int | None:
    """The review queue in Python: the user's unreviewed clips of the filter with a caption, by risk, then
    unassigned ones; from `after` within its own tier (wrapping round), from the top of any other."""
    base = [
        r for r in oracle(rows) if matches(r, f) and r["review_status"] == "unreviewed" and r.get("captioned", True)
    ]
    if f.assignee or f.unassigned:
        tiers = [(base, True)]
    else:
        holder = next((r["assignee"] for r in rows if r["id"] == after), None)
        tiers = [
            ([r for r in base if r["assignee"] == user], holder == user),
            ([r for r in base if r["assignee"] is None], holder is None),
        ]
    everything = ids(oracle(rows))
    for tier, own in tiers:
        left = [i for i in ids(tier) if i != after]
        if not left:
            continue
        if after is not None and own:
            later = [i for i in left if everything.index(i) > everything.index(after)]
            return (later or left)[0]
        return left[0]
    return None


@pytest.mark.parametrize("f", [Filter(), Filter(text="car"), Filter(assignee="bob")])
@pytest.mark.parametrize("user", ["ann", "bob"])
def test_the_queue_serves_assigned_clips_first_then_by_risk(db, f, user):
    rows = load(db, generated(11))
    for after in [None, *ids(rows)]:
        want = queue_oracle(rows, f, user, after)
        assert assignments.next_in_queue(db, f, user, after=after, order="risk") == want, after


def test_an_assigned_low_risk_clip_comes_before_an_unassigned_critical_one(db):
    rows = load(
        db,
        [
            {"hazard_level": "critical", "confidence_min": 0.1, "label_conflicts": 2, "assignee": None}
            | {"review_status": "unreviewed", "word": None},
            {"hazard_level": "none", "confidence_min": 1.0, "label_conflicts": 0, "assignee": "ann"}
            | {"review_status": "unreviewed", "word": None},
        ],
    )
    critical, mine = ids(rows)
    assert assignments.next_in_queue(db, Filter(), "ann", order="risk") == mine
    assert assignments.next_in_queue(db, Filter(), "ann", after=mine, order="risk") == critical
    assert assignments.next_in_queue(db, Filter(), "bob", order="risk") == critical


def test_deep_pages_of_the_risk_order_are_index_seeks(db):
    load(db, [r | {"assignee": None} for seed in range(10) for r in generated(seed)])
    db.execute("ANALYZE")
    place = orders.Cursor(risk({"hazard_level": "high", "confidence_min": 0.73, "label_conflicts": 0}), 200)
    for where in (place, orders.Cursor(None, 200)):
        deep = {k: v for k, v in clips.explain_samples(Filter(), where, (orders.RISK,)).items() if "deep facet" in k}
        assert deep
        for name, (sql, args) in deep.items():
            plan = " | ".join(r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))
            assert "USING INDEX idx_clips_risk" in plan and "TEMP B-TREE" not in plan, (name, plan)


def test_captions_stored_by_data_captions_land_where_the_rule_puts_them(db):
    """A hand-worked case through the real write path (the clip's mirrors kept by data.captions)."""

    def labels(hazard: str) -> dict:
        return {
            "scenario_category": "normal_driving",
            "hazard_level": hazard,
            "road_users": ["car"],
            "ego_maneuver": "going_straight",
            "weather": "clear",
            "lighting": "daylight",
            "road_type": "urban",
        }

    def conf(p: float) -> dict:
        return {"labels": {"hazard_level": p, "weather": 0.99}, "items": {}, "end": {}}

    made = {}
    with immediate(db):
        for name in "ABCDEF":
            made[name] = db.execute("INSERT INTO clips (path) VALUES (?)", [f"{name}.mp4"]).lastrowid
    calm = "A car drives along."
    cases = {  # name: (hazard, text, confidence)
        "A": ("critical", calm, 0.95),  # 40,000 + 50
        "B": ("high", "A pedestrian crosses.", 0.4),  # 30,000 + 2,000 (disagrees) + 600
        "C": ("high", calm, 0.99),  # 30,000 + 10
        "E": ("none", "A cyclist and a car.", 0.2),  # 2,000 + 800
    }
    for name, (hazard, text, p) in cases.items():
        captions.add_machine(
            db, made[name], job_id=None, text=text, labels=labels(hazard), provenance={"confidence": conf(p)}
        )
    # D: a person's caption, no model confidence: counted half sure, 30,000 + 500
    captions.save_human(db, made["D"], text=calm, labels=labels("high"), author="ann", base_caption_id=None)
    # F: no caption at all: last
    assert clips.page_ids(db, Filter(), order="risk") == [made[n] for n in "ABDCEF"]
