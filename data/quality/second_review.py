"""Blind second reviews of a random review sample's clips (data.quality.samples draws the samples).

A lead sends a sample's members (or those already reviewed) to a second reviewer, blind to the
first review and to the model: the second reviewer is given the footage alone (`task`), never a caption, the
model's labels, the first reviewer's edits, decision or name. Were they shown the model's labels, both reviewers
would start from the same answer, and their agreement would measure how often people keep it rather than how
often they agree. (`origin_caption_id` still records the machine caption the first reviewer started from.)
Their answer (`answer`: labels and approve/reject) is stored in `second_reviews` and changes nothing of the
clip: not its caption, not its review status. Nobody second-reviews a clip they reviewed (or were given to
review) first. While a second review is pending, `is_blind` / `blind_clip_ids` tell the web app which clips to
show that person without their first review (Review and Browse). `second_reviews` returns the answered pairs
(first review = the clip's current caption and review status) for Cohen's kappa.

Only leads send second reviews: the role is checked here, not only in the UI.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import sqlite_utils

from data import events, limits, taxonomy, users
from data.db import immediate, now
from data.errors import DataError, Forbidden, NotFound
from data.quality import samples

DECISIONS = ("approved", "rejected")
# the clip fields a second reviewer is given: the footage, nothing that mirrors the current caption or its review
BLIND_CLIP_FIELDS = (
    "id",
    "path",
    "duration",
    "fps",
    "frames",
    "width",
    "height",
    "codec",
    "probe_error",
    "preview",
    "filmstrip",
    "filmstrip_indices",
)


def send_to_second(
    db: sqlite_utils.Database,
    sample_id: int,
    reviewer: str,
    *,
    actor: str,
    role: str,
    reviewed_only: bool = False,
) -> dict:
    """Send the members of sample `sample_id` (with `reviewed_only`, those whose first review is done) to
    `reviewer` for a blind second review. A member `reviewer` reviewed first, or was given to review (by the draw
    or since), is skipped (`own`), as is one already answered (`answered`); a pending one of someone else moves to
    `reviewer` (`moved`). Returns those counts with `sent` (new), `unchanged` and `unreviewed` (skipped by
    `reviewed_only`). One audit event per clip sent or moved."""
    samples.check_lead(role, "sends clips to a second reviewer")
    with immediate(db):
        sample = samples.get(db, sample_id)
        reviewer = users.enabled_name(db, reviewer, ask="Pick the second reviewer.")
        rows = list(
            db.query(
                "SELECT m.clip_id, m.assignee, a.assignee AS assignee_now, m.caption_id, c.review_status, "
                "c.reviewed_by, k.origin_id, r.id AS review_id, r.state, r.reviewer FROM sample_members m "
                "JOIN clips c ON c.id = m.clip_id LEFT JOIN assignments a ON a.clip_id = m.clip_id "
                "LEFT JOIN captions k ON k.id = c.current_caption_id "
                "LEFT JOIN second_reviews r ON r.sample_id = m.sample_id AND r.clip_id = m.clip_id "
                "WHERE m.sample_id = ? ORDER BY m.draw_order",
                [sample["id"]],
            )
        )
        counts = {"sent": 0, "moved": 0, "unchanged": 0, "answered": 0, "own": 0, "unreviewed": 0}
        new, moved, audit = [], [], []
        t = now()
        for r in rows:
            first_done = r["review_status"] != "unreviewed"
            if reviewed_only and not first_done:
                counts["unreviewed"] += 1
                continue
            if reviewer in (r["assignee"], r["assignee_now"], r["reviewed_by"]):
                counts["own"] += 1
                continue
            if r["state"] == "done":
                counts["answered"] += 1
            elif r["state"] == "pending":
                if r["reviewer"] == reviewer:
                    counts["unchanged"] += 1
                else:
                    moved.append((reviewer, actor, t, r["review_id"]))
                    audit.append(
                        (r["clip_id"], {"sample_id": sample["id"], "reviewer": reviewer, "previous": r["reviewer"]})
                    )
            else:
                origin = r["origin_id"] if r["origin_id"] is not None else r["caption_id"]
                new.append((sample["id"], r["clip_id"], reviewer, actor, t, origin))
                audit.append((r["clip_id"], {"sample_id": sample["id"], "reviewer": reviewer, "previous": None}))
        db.conn.executemany(
            "INSERT INTO second_reviews (sample_id, clip_id, reviewer, requested_by, requested_at, origin_caption_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            new,
        )
        db.conn.executemany(
            "UPDATE second_reviews SET reviewer = ?, requested_by = ?, requested_at = ? WHERE id = ?", moved
        )
        events.record_many(db, actor, "second_review.request", audit)
        counts["sent"], counts["moved"] = len(new), len(moved)
    return {"reviewer": reviewer, "sample_id": sample["id"], **counts}


def pending_count(db: sqlite_utils.Database, reviewer: str) -> int:
    """How many second reviews wait for `reviewer`."""
    return db.execute(
        "SELECT COUNT(*) FROM second_reviews WHERE reviewer = ? AND state = 'pending'", [reviewer]
    ).fetchone()[0]


def next_task(db: sqlite_utils.Database, reviewer: str, *, after: int | None = None) -> dict | None:
    """`reviewer`'s next pending second review after review `after` (in the order they were sent, wrapping
    around), as `task` gives it; None when none is left."""
    for start in ((after or 0), 0) if after else (0,):
        row = db.execute(
            "SELECT id FROM second_reviews WHERE reviewer = ? AND state = 'pending' AND id > ? ORDER BY id LIMIT 1",
            [reviewer, start],
        ).fetchone()
        if row:
            return task(db, row[0], reviewer)
    return None


def task(db: sqlite_utils.Database, review_id: int, reviewer: str) -> dict:
    """What the second reviewer of review `review_id` is given, and nothing more: `id`, `sample_id`, `clip_id`
    and `clip` (BLIND_CLIP_FIELDS: the footage; no caption, no labels, not the clip's review). NotFound for no
    such review, Forbidden for someone else's, DataError for one answered."""
    row = _review(db, review_id)
    if row["reviewer"] != reviewer:
        raise Forbidden(f"Second review {row['id']} is {row['reviewer']}'s, not yours.")
    if row["state"] != "pending":
        raise DataError(f"Second review {row['id']} is answered already: an answer is never changed.")
    cols = ", ".join(BLIND_CLIP_FIELDS)
    clip = dict(
        zip(BLIND_CLIP_FIELDS, db.execute(f"SELECT {cols} FROM clips WHERE id = ?", [row["clip_id"]]).fetchone())
    )
    return {"id": row["id"], "sample_id": row["sample_id"], "clip_id": row["clip_id"], "clip": clip}


def _review(db: sqlite_utils.Database, review_id: int) -> dict:
    try:
        review_id = limits.sql_int(review_id, "second review id")
    except DataError:
        raise NotFound(f"There is no second review {str(review_id)[:24]}.") from None
    row = next(db.query("SELECT * FROM second_reviews WHERE id = ?", [review_id]), None)
    if row is None:
        raise NotFound(f"There is no second review {review_id}.")
    return dict(row)


def answer(db: sqlite_utils.Database, review_id: int, reviewer: str, *, labels: dict, decision: str) -> dict:
    """Store `reviewer`'s answer to second review `review_id`: `labels` (the whole taxonomy, checked) and
    `decision` (approved | rejected). The clip's caption and review status are not touched. Refused (with what
    to do) when the review is someone else's or answered, or when `reviewer` has meanwhile reviewed the clip
    first. Returns the stored row (labels decoded)."""
    if decision not in DECISIONS:
        raise DataError(f"A second review approves or rejects (got {str(decision)[:20]!r}).")
    limits.check_labels(labels)
    taxonomy.validate_labels(labels)
    with immediate(db):
        row = _review(db, review_id)
        if row["reviewer"] != reviewer:
            raise Forbidden(f"Second review {row['id']} is {row['reviewer']}'s, not yours.")
        if row["state"] != "pending":
            raise DataError(f"Second review {row['id']} is answered already: an answer is never changed.")
        first = db.execute("SELECT reviewed_by, review_status FROM clips WHERE id = ?", [row["clip_id"]]).fetchone()
        if first and first[1] != "unreviewed" and first[0] == reviewer:
            raise DataError(
                f"You reviewed clip {row['clip_id']} yourself, so your answer would not be a second opinion. "
                "Ask the lead to send it to someone else."
            )
        db.execute(
            "UPDATE second_reviews SET state = 'done', labels = ?, decision = ?, answered_at = ? WHERE id = ?",
            [taxonomy.dumps(labels), decision, now(), row["id"]],
        )
        events.record(
            db,
            reviewer,
            "second_review.answer",
            clip_id=row["clip_id"],
            sample_id=row["sample_id"],
            review_id=row["id"],
            decision=decision,
        )
    done = _review(db, row["id"])
    done["labels"] = json.loads(done["labels"])
    return done


def is_blind(db: sqlite_utils.Database, clip_id: int, reviewer: str) -> bool:
    """Whether `reviewer` has a pending second review of clip `clip_id` (so must not see its first review)."""
    return bool(
        db.execute(
            "SELECT 1 FROM second_reviews WHERE clip_id = ? AND reviewer = ? AND state = 'pending' LIMIT 1",
            [clip_id, reviewer],
        ).fetchone()
    )


def blind_clip_ids(db: sqlite_utils.Database, reviewer: str, clip_ids: Iterable[int]) -> set[int]:
    """The clips of `clip_ids` (a page of Browse) that `reviewer` has a pending second review of."""
    ids = list(clip_ids)
    out: set[int] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        out.update(
            r[0]
            for r in db.execute(
                f"SELECT clip_id FROM second_reviews WHERE reviewer = ? AND state = 'pending' "
                f"AND clip_id IN ({','.join('?' * len(chunk))})",
                [reviewer, *chunk],
            )
        )
    return out


def second_reviews(
    db: sqlite_utils.Database, *, sample_id: int | None = None, answered_only: bool = True
) -> list[dict]:
    """Second reviews (of one sample, or all), oldest first, each beside the first review as it stands now:
    `reviewer`, `labels`, `decision`, `answered_at`, `origin_caption_id` (the machine caption the first reviewer
    started from; the second saw none); `first_reviewer`,
    `first_decision` (the clip's review status: a pair exists only when it is not "unreviewed"),
    `first_caption_id` and `first_labels` (the clip's current caption: the first reviewer's labels when they
    approved). With `answered_only=False`, pending ones too (`labels` and `decision` None)."""
    where = ["1 = 1"]
    args: list[Any] = []
    if sample_id is not None:
        where.append("r.sample_id = ?")
        args.append(limits.sql_int(sample_id, "sample id"))
    if answered_only:
        where.append("r.state = 'done'")
    out = []
    for r in db.query(
        "SELECT r.id, r.sample_id, r.clip_id, r.reviewer, r.requested_by, r.requested_at, r.origin_caption_id, "
        "r.state, r.labels, r.decision, r.answered_at, c.reviewed_by AS first_reviewer, "
        "c.review_status AS first_decision, c.current_caption_id AS first_caption_id, k.labels AS first_labels "
        "FROM second_reviews r JOIN clips c ON c.id = r.clip_id LEFT JOIN captions k ON k.id = c.current_caption_id "
        f"WHERE {' AND '.join(where)} ORDER BY r.id",
        args,
    ):
        r = dict(r)
        r["labels"] = json.loads(r["labels"]) if r["labels"] else None
        r["first_labels"] = json.loads(r["first_labels"]) if r["first_labels"] else None
        out.append(r)
    return out
