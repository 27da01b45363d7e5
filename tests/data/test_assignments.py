"""The assignable review queue (data.assignments) against real SQLite: leads deal out work, annotators' "next"
serves their clips first, every change is audited, and only leads assign."""

from __future__ import annotations

import pytest

from data import assignments, captions, clips, events, schema, team as people, users
from data.db import immediate
from data.errors import DataError, Forbidden, NotFound
from tests.support.runner_fixtures import LABELS

PASSWORD = "correct horse battery"


@pytest.fixture
def team(db):
    """12 clips (ids 1..12, the newest is 12), each with a machine caption (the queue serves only those), clip 12
    approved; users ann, ann2 (annotators), lead."""
    with immediate(db):
        for i in range(12):
            db.execute("INSERT INTO clips (path) VALUES (?)", [f"c{i:02d}.mp4"])
    for cid in range(1, 13):
        captions.add_machine(db, cid, job_id=None, text=f"clip {cid}", labels=LABELS, provenance={"model": "m"})
    with immediate(db):
        db.execute("UPDATE clips SET review_status = 'approved' WHERE id = 12")
    for name, role in (("ann", "annotator"), ("ann2", "annotator"), ("lead", "lead")):
        users.create(db, name, role=role, password=PASSWORD)
    return db


def assigned(db) -> dict[int, str]:
    return {r["clip_id"]: r["assignee"] for r in db.query("SELECT clip_id, assignee FROM assignments")}


def test_the_migration_adds_the_assignments_table(db):
    assert hasattr(schema, "m010_assignments")
    assert set(db["assignments"].columns_dict) == {"clip_id", "assignee", "assigned_by", "assigned_at"}
    assert not schema.MIGRATIONS.pending(db)


def test_a_lead_deals_out_the_next_n_unreviewed_clips_nobody_has(team):
    first = assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead", limit=3)
    second = assignments.assign(team, clips.Filter(), "ann2", actor="lead", role="lead", limit=3)
    assert first == {"assignee": "ann", "assigned": 3, "reassigned": 0, "unchanged": 0}
    assert second["assigned"] == 3
    # the grid's order (newest first), skipping the approved clip 12 and, for ann2, ann's clips
    assert assigned(team) == {11: "ann", 10: "ann", 9: "ann", 8: "ann2", 7: "ann2", 6: "ann2"}
    log = [e for e in events.iter_all(team, "clip.assign")]
    assert len(log) == 6 and {e["actor"] for e in log} == {"lead"}
    assert '"assignee": "ann"' in next(e for e in log if e["clip_id"] == 11)["detail"]


def test_the_whole_filter_is_assigned_and_reassigned_with_the_previous_assignee_audited(team):
    assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead", limit=2)  # 11, 10
    out = assignments.assign(team, clips.Filter(review_status="unreviewed"), "ann2", actor="lead", role="lead")
    assert out == {"assignee": "ann2", "assigned": 11, "reassigned": 2, "unchanged": 0}
    assert set(assigned(team).values()) == {"ann2"} and 12 not in assigned(team)
    moved = [e for e in events.for_clip(team, 11) if e["action"] == "clip.assign"][0]  # newest first
    assert '"previous": "ann"' in moved["detail"] and '"assignee": "ann2"' in moved["detail"]
    again = assignments.assign(team, clips.Filter(review_status="unreviewed"), "ann2", actor="lead", role="lead")
    assert again["assigned"] == 0 and again["unchanged"] == 11  # nothing changed, nothing audited
    assert len(list(events.iter_all(team, "clip.assign"))) == 13


def test_unassign_gives_the_filters_clips_back_and_audits_it(team):
    assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead", limit=4)  # 11..8
    assert assignments.unassign(team, clips.Filter(assignee="ann", text=None), actor="lead", role="lead") == 4
    assert assigned(team) == {}
    log = list(events.iter_all(team, "clip.unassign"))
    assert sorted(e["clip_id"] for e in log) == [8, 9, 10, 11] and all('"previous": "ann"' in e["detail"] for e in log)
    assert assignments.unassign(team, clips.Filter(), actor="lead", role="lead") == 0


@pytest.mark.parametrize("role", ["annotator", None, "visitor"])
def test_only_leads_assign(team, role):
    with pytest.raises(Forbidden, match="Only a lead assigns clips"):
        assignments.assign(team, clips.Filter(), "ann", actor="ann", role=role, limit=2)
    assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead", limit=1)
    with pytest.raises(Forbidden):
        assignments.unassign(team, clips.Filter(), actor="ann", role=role)
    assert assigned(team) == {11: "ann"}
    assert assignments.assign(team, clips.Filter(), "ann2", actor="admin", role="admin", limit=1)["assigned"] == 1


def test_an_unknown_or_disabled_person_or_a_bad_count_is_refused_with_what_to_do(team):
    with pytest.raises(DataError, match="no user named 'bob': pick a person"):
        assignments.assign(team, clips.Filter(), "bob", actor="lead", role="lead")
    with pytest.raises(DataError, match="Pick the person"):
        assignments.assign(team, clips.Filter(), "", actor="lead", role="lead")
    people.set_disabled(team, "ann2", True)
    with pytest.raises(DataError, match="ann2 is disabled"):
        assignments.assign(team, clips.Filter(), "ann2", actor="lead", role="lead")
    for bad in (0, -3, assignments.MAX_ASSIGN + 1):
        with pytest.raises(DataError, match="How many clips"):
            assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead", limit=bad)
    assert assigned(team) == {} and not list(events.iter_all(team, "clip.assign"))


def test_one_clip_is_assigned_reassigned_and_taken_back_from_review_with_each_change_audited(team):
    assert assignments.assign_clip(team, 5, "ann", actor="lead", role="lead")["assigned"] == 1
    out = assignments.assign_clip(team, 5, "ann2", actor="lead", role="lead")
    assert out == {"assignee": "ann2", "assigned": 1, "reassigned": 1, "unchanged": 0}
    assert assignments.assign_clip(team, 5, "ann2", actor="lead", role="lead")["unchanged"] == 1  # no event
    assert assigned(team) == {5: "ann2"}
    assert assignments.unassign_clip(team, 5, actor="lead", role="lead") == "ann2"
    assert assignments.unassign_clip(team, 5, actor="lead", role="lead") is None  # nobody had it: no event
    log = [(e["action"], e["detail"]) for e in reversed(events.for_clip(team, 5)) if e["action"].startswith("clip.")]
    assert [a for a, _ in log] == ["clip.assign", "clip.assign", "clip.unassign"]
    assert '"previous": "ann"' in log[1][1] and '"previous": "ann2"' in log[2][1]
    assert assigned(team) == {}


def test_one_clip_refusals_say_what_to_do_and_change_nothing(team):
    with pytest.raises(Forbidden, match="Only a lead assigns clips"):
        assignments.assign_clip(team, 5, "ann", actor="ann", role="annotator")
    with pytest.raises(Forbidden):
        assignments.unassign_clip(team, 5, actor="ann", role="annotator")
    with pytest.raises(DataError, match="no user named 'bob'"):
        assignments.assign_clip(team, 5, "bob", actor="lead", role="lead")
    with pytest.raises(NotFound):
        assignments.assign_clip(team, 999, "ann", actor="lead", role="lead")
    with pytest.raises(DataError):
        assignments.assign_clip(team, "5; DROP TABLE clips", "ann", actor="lead", role="lead")
    assert assigned(team) == {} and not list(events.iter_all(team, "clip.assign"))


def test_a_whole_filter_over_the_bound_is_refused(team, monkeypatch):
    monkeypatch.setattr(assignments, "MAX_ASSIGN", 5)
    with pytest.raises(DataError, match="more than 5 clips: narrow it, or give how many"):
        assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead")
    assert assigned(team) == {}


def test_the_queue_serves_my_clips_first_then_unassigned_never_someone_elses(team):
    assignments.assign(team, clips.Filter(), "ann2", actor="lead", role="lead", limit=2)  # 11, 10
    with immediate(team):  # two clips deeper in the grid for ann: her queue starts there, not at the top
        team.execute(
            "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (3, 'ann', 'lead', 0), "
            "(5, 'ann', 'lead', 0)"
        )
    f = clips.Filter()
    assert assignments.next_in_queue(team, f, "ann") == 5
    assert assignments.next_in_queue(team, f, "ann", after=5) == 3
    assert assignments.next_in_queue(team, f, "ann", after=3) == 5  # wraps within her clips
    with immediate(team):
        team.execute("UPDATE clips SET review_status = 'approved' WHERE id IN (3, 5)")
    # hers are done: then clips nobody has, from the top of those (ann2's 11 and 10 are skipped) ...
    assert assignments.next_in_queue(team, f, "ann", after=3) == 9
    assert assignments.next_in_queue(team, f, "ann") == 9
    # ... and on from an unassigned clip within them
    assert assignments.next_in_queue(team, f, "ann", after=9) == 8
    assert assignments.next_in_queue(team, f, "ann", after=1) == 9  # wraps
    assert assignments.next_in_queue(team, f, "ann2") == 11
    assert assignments.next_in_queue(team, f, "ann2", after=11) == 10
    # oldest first walks the same tiers the other way
    assert assignments.next_in_queue(team, f, "ann2", after=10, order="oldest") == 11
    # a filter naming an assignee is the queue as asked (a lead checking ann2's work)
    assert assignments.next_in_queue(team, clips.Filter(assignee="ann2"), "lead") == 11
    assert assignments.next_in_queue(team, clips.Filter(unassigned=True), "ann2") == 9
    with immediate(team):
        team.execute("UPDATE clips SET review_status = 'approved'")
    assert assignments.next_in_queue(team, f, "ann") is None


def test_the_queue_serves_only_clips_with_a_caption_and_counts_those_awaiting_one(team):
    """After an ingest and before any job, n served uncaptioned clips, newest first: nothing to review there.
    They are left out, and an empty queue can say how many wait for a caption (per tier: yours, then nobody's)."""
    with immediate(team):
        for i in range(5):  # five new clips, the newest of the library, no caption yet
            team.execute("INSERT INTO clips (path) VALUES (?)", [f"new{i}.mp4"])
        team.execute(
            "INSERT INTO assignments (clip_id, assignee, assigned_by, assigned_at) VALUES (13, 'ann2', 'l', 0)"
        )
    f = clips.Filter()
    assert assignments.next_in_queue(team, f, "ann") == 11  # not 17..13
    assert assignments.next_in_queue(team, clips.Filter(has_caption=False), "ann") is None
    assert assignments.awaiting_caption(team, f, "ann") == (4, True)  # ann2's clip 13 is not in ann's queue
    assert assignments.awaiting_caption(team, f, "ann2") == (5, True)
    with immediate(team):
        team.execute("UPDATE clips SET review_status = 'approved' WHERE id <= 11")
    assert assignments.next_in_queue(team, f, "ann") is None
    captions.add_machine(team, 14, job_id=None, text="now captioned", labels=LABELS, provenance={"model": "m"})
    assert assignments.next_in_queue(team, f, "ann") == 14


def test_the_queue_seeks_past_clips_without_a_caption(team):
    """After an ingest the newest clips have no caption: the walk in the newest order must not pass each of them
    (272 ms a press at 50,000 of 200,000 before m024's partial index; docs/BENCHMARKS.md)."""
    from data import order as orders

    for tier in assignments.queue_tiers(clips.Filter(), "ann"):
        [(sql, args)] = clips._page_sql(tier, orders.get("newest"), None, 2)
        plan = " | ".join(r[3] for r in team.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert "idx_clips_captioned_review" in plan or "idx_assignments_assignee" in plan, plan


def test_browse_filters_and_shows_the_assignee(team):
    assignments.assign(team, clips.Filter(), "ann", actor="lead", role="lead", limit=2)  # 11, 10
    assert [r["id"] for r in clips.page(team, clips.Filter(assignee="ann"), order="newest").rows] == [11, 10]
    assert clips.count(team, clips.Filter(unassigned=True)) == 10
    assert clips.count_capped(team, clips.Filter(assignee="ann2")) == (0, True)
    rows = {r["id"]: r for r in clips.page(team, clips.Filter()).rows}
    assert rows[11]["assignee"] == "ann" and rows[1]["assignee"] is None
    clip = clips.get(team, 10)
    assert (clip["assignee"], clip["assigned_by"]) == ("ann", "lead")
    assert clips.get(team, 1)["assignee"] is None
    assert assignments.workload(team) == {"ann": {"assigned": 2, "open": 2}}
    # the filter round-trips through a URL / browser state, and a wrong type is a message, not a 500
    assert clips.Filter.from_dict({"assignee": "ann", "unassigned": True}).to_dict() == {
        "assignee": "ann",
        "unassigned": True,
    }
    with pytest.raises(DataError, match="unassigned must be true or false"):
        clips.Filter.from_dict({"unassigned": "yes"})
