"""What the reliability suites check in the database after a load (R1, R4, R9):

- `check_oracle(db, answers)`: every acknowledged save of an AnnotatorLoad (tests/support/reliability_fixtures)
  is a caption version, whose parent is the version the user's form was loaded from: nothing lost, nothing
  silently overwritten;
- `assert_audit_complete(db)`: R9, every caption change has its history (who, what, when, previous) and its
  lineage (`lineage_problems`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.support.reliability_fixtures import Answer


def check_oracle(db, answers: list[Answer]) -> dict:
    """R1's oracle, against the database:
    - every acknowledged save is exactly one human caption row with that text, by that user, on that clip,
      whose parent is the version the user's form was loaded from (0 lost, 0 silent overwrites);
    - every answer that was a conflict left no row with its text (the stale save was not applied);
    - per clip, every version that became current was based on the one current before it (events chain).
    Returns counts; raises AssertionError with the first few offenders."""
    by_text: dict[str, list[dict]] = {}
    for r in db.query("SELECT id, clip_id, text, author, source, parent_id FROM captions WHERE source = 'human'"):
        by_text.setdefault(r["text"], []).append(dict(r))
    ver = {(r["clip_id"], r["version"]): r["id"] for r in db.query("SELECT id, clip_id, version FROM captions")}
    lost, wrong_parent, applied_conflicts, dup = [], [], [], []
    for a in answers:
        rows = by_text.get(a.text, [])
        if a.kind == "saved":
            if not rows:
                lost.append(a)
                continue
            if len(rows) != 1:
                dup.append(a)
            row = rows[0]
            want_parent = ver.get((a.clip_id, a.seen_version)) if a.seen_version is not None else None
            if (row["clip_id"], row["author"], row["parent_id"]) != (a.clip_id, a.user, want_parent):
                wrong_parent.append((a, row, want_parent))
        elif a.kind == "conflict" and rows:
            applied_conflicts.append(a)
    chain_breaks = check_current_chain(db)
    assert not lost, f"{len(lost)} acknowledged saves lost, e.g. {lost[:3]}"
    assert not dup, f"{len(dup)} saves stored twice, e.g. {dup[:3]}"
    assert not wrong_parent, f"{len(wrong_parent)} saves with another parent than the version seen: {wrong_parent[:3]}"
    assert not applied_conflicts, f"{len(applied_conflicts)} refused saves were applied: {applied_conflicts[:3]}"
    assert not chain_breaks, f"{len(chain_breaks)} silent overwrites in the current-version chain: {chain_breaks[:3]}"
    return {
        "acknowledged": sum(a.kind == "saved" for a in answers),
        "lost": 0,
        "silent_overwrites": 0,
        "conflicts": sum(a.kind == "conflict" for a in answers),
    }


CURRENT_ACTIONS = ("caption.save", "caption.machine", "caption.adopt")


def check_current_chain(db) -> list[tuple]:
    """For each clip, the events that made a version current, in order: each one's `previous` must be the
    version the event before it made current, and the last must be the clip's current caption."""
    last: dict[int, int | None] = {}
    breaks = []
    for e in db.query(
        "SELECT id, clip_id, caption_id, action, detail FROM events WHERE action IN (?, ?, ?) ORDER BY id",
        list(CURRENT_ACTIONS),
    ):
        prev = json.loads(e["detail"] or "{}").get("previous")
        expect = last.get(e["clip_id"])
        if e["clip_id"] in last and prev != expect:
            breaks.append((e["clip_id"], e["id"], e["action"], prev, expect))
        last[e["clip_id"]] = e["caption_id"]
    for cid, cur in db.execute("SELECT id, current_caption_id FROM clips WHERE current_caption_id IS NOT NULL"):
        if cid in last and last[cid] != cur:
            breaks.append((cid, "current pointer", cur, last[cid]))
    return breaks


# ---- R9: the audit trail --------------------------------------------------------------------------------------
CAPTION_ACTIONS = ("caption.save", "caption.machine", "caption.candidate", "caption.adopt")


def assert_audit_complete(db) -> dict:
    """Every caption change (a version row) has its history: who (author), what (text, labels, source), when
    (created_at) and the previous version (parent_id, which must be an earlier version of the same clip),
    plus exactly one audit event naming the same actor, caption and previous version, written with it.
    Review changes are checked against the clips' review columns. Returns counts."""
    caps = {
        r["id"]: dict(r)
        for r in db.query(
            "SELECT id, clip_id, version, parent_id, text, labels, source, author, created_at FROM captions"
        )
    }
    evs: dict[int, list[dict]] = {}
    for e in db.query(
        "SELECT id, at, actor, action, clip_id, caption_id, detail FROM events WHERE action IN (?, ?, ?, ?)",
        list(CAPTION_ACTIONS),
    ):
        evs.setdefault(e["caption_id"], []).append(dict(e))
    problems = []
    for cid, c in caps.items():
        if not c["author"] or not c["source"] or c["created_at"] is None or c["text"] is None:
            problems.append((cid, "missing who/what/when", c))
        if c["parent_id"] is not None:
            p = caps.get(c["parent_id"])
            if p is None or p["clip_id"] != c["clip_id"] or p["version"] >= c["version"]:
                problems.append((cid, "parent is not an earlier version of the same clip", c["parent_id"]))
        got = evs.get(cid, [])
        if len(got) != 1:
            problems.append((cid, f"{len(got)} audit events", got))
            continue
        e = got[0]
        detail = json.loads(e["detail"] or "{}")
        if (
            e["actor"] != c["author"]
            or e["clip_id"] != c["clip_id"]
            or detail.get("previous") != c["parent_id"]
            or abs(e["at"] - c["created_at"]) > 5
        ):
            problems.append((cid, "event does not match the version", e, c))
        if c["source"] == "human" and e["action"] not in ("caption.save", "caption.adopt"):
            problems.append((cid, "human version logged as " + e["action"]))
    problems += lineage_problems(db, evs)
    orphans = [e for k, es in evs.items() if k not in caps for e in es]
    problems += [(e["caption_id"], "event for a caption that does not exist", e) for e in orphans]
    reviewed = db.execute("SELECT COUNT(*) FROM clips WHERE reviewed_by IS NOT NULL").fetchone()[0]
    review_clips = db.execute("SELECT COUNT(DISTINCT clip_id) FROM events WHERE action LIKE 'review.%'").fetchone()[0]
    if review_clips < reviewed:
        problems.append(("review", f"{reviewed} reviewed clips but review events on {review_clips}"))
    assert not problems, f"{len(problems)} audit gaps, e.g. {problems[:3]}"
    return {"versions": len(caps), "events": sum(len(v) for v in evs.values()), "reviewed_clips": reviewed}


def lineage_problems(db, events_by_caption: dict[int, list[dict]] | None = None) -> list[tuple]:
    """Every caption version's lineage (data.captions) against what happened to it:
    - a machine caption derives from nothing and is its own origin;
    - a human save derives from the version it was based on (its parent), an adopt from the version its event
      names, and either one from an earlier version of the same clip;
    - a version's origin is its chain's root: the origin of what it derives from (none for text from scratch).
    Returns (caption id, problem, ...) tuples; [] when every version is right."""
    caps = {
        r["id"]: dict(r)
        for r in db.query("SELECT id, clip_id, version, source, parent_id, derived_from_id, origin_id FROM captions")
    }
    if events_by_caption is None:
        events_by_caption = {}
        for e in db.query(
            "SELECT caption_id, action, detail FROM events WHERE action IN ('caption.save', 'caption.adopt')"
        ):
            events_by_caption.setdefault(e["caption_id"], []).append(dict(e))
    problems = []
    for cid, c in sorted(caps.items()):
        derived = c["derived_from_id"]
        if c["source"] == "model":
            if derived is not None or c["origin_id"] != cid:
                problems.append((cid, "a machine caption is not its own origin", derived, c["origin_id"]))
            continue
        action = [e for e in events_by_caption.get(cid, []) if e["action"] in ("caption.save", "caption.adopt")]
        if action and action[0]["action"] == "caption.adopt":
            want = json.loads(action[0]["detail"] or "{}").get("adopted")
        else:
            want = c["parent_id"]
        if derived != want:
            problems.append((cid, "derived from another version than the edit's", derived, want))
        base = caps.get(derived) if derived is not None else None
        if derived is not None and (base is None or base["clip_id"] != c["clip_id"] or base["version"] >= c["version"]):
            problems.append((cid, "derived from no earlier version of its clip", derived))
            continue
        if c["origin_id"] != (base["origin_id"] if base else None):
            problems.append((cid, "origin is not its chain's root", c["origin_id"]))
    return problems
