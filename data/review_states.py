"""A clip's review state: approve or reject its caption, flag its video broken, clear the flag.

Review states: approved and rejected judge the caption; broken (`flag_broken`, cleared by a lead) says the
video cannot be reviewed, and is counted apart. A clip that failed at ingest or is flagged broken cannot be
approved or rejected. A decision names the caption version and the review state the reviewer saw
(`review_token`): a stale one is refused with `Conflict`, like a stale save (data.captions, whose version
checks these share). Each function runs in one `BEGIN IMMEDIATE` transaction and records an event in it.
"""

from __future__ import annotations

import sqlite_utils

from data import events, limits, users
from data.captions import _check_base, _clip, _when
from data.db import immediate, now
from data.errors import Conflict, DataError, Forbidden

REVIEW_STATES = ("unreviewed", "approved", "rejected", "broken")


DECISIONS = ("unreviewed", "approved", "rejected")  # what set_review records; 'broken' is flag_broken's


def review_token(clip: dict) -> str:
    """The review state a reviewer saw ("status@reviewed_at"): `set_review` refuses a decision based on a
    stale one, so an approve cannot silently overwrite someone else's reject (and vice versa)."""
    return f"{clip.get('review_status') or 'unreviewed'}@{clip.get('reviewed_at') or 0}"


def review_token_status(token: str) -> str:
    """The review status a `review_token` names."""
    return str(token).split("@", 1)[0]


def set_review(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    status: str,
    user: str,
    base_caption_id: int | None,
    base_review: str | None = None,
) -> dict:
    """Approve or reject the caption the reviewer saw (Conflict if it, or its review, changed meanwhile).
    `base_review` is `review_token` of the clip as the reviewer loaded it (None skips that check). A clip that
    failed at ingest or is flagged broken is refused with what to do instead (`_check_reviewable`)."""
    if status not in DECISIONS:
        raise DataError(f"unknown review decision {status!r}; expected one of {', '.join(DECISIONS)}")
    with immediate(db):
        clip = _clip(db, clip_id)
        _check_base(db, clip, base_caption_id)
        _check_review_base(clip, base_review)
        _check_reviewable(clip, status)
        if status == "approved" and clip["current_caption_id"] is None:
            raise DataError("There is no caption to approve yet: write one or caption the clip first.")
        db.execute(
            "UPDATE clips SET review_status = ?, reviewed_by = ?, reviewed_at = ?, updated_at = ? WHERE id = ?",
            [status, user, now(), now(), clip_id],
        )
        events.record(
            db,
            user,
            f"review.{status}",
            clip_id=clip_id,
            caption_id=clip["current_caption_id"],
            previous=clip["review_status"],
        )
    return {**clip, "review_status": status, "reviewed_by": user}


def _check_review_base(clip: dict, base_review: str | None) -> None:
    if base_review is not None and review_token(clip) != base_review:
        raise Conflict(
            f"This clip was marked {clip['review_status']} by {clip['reviewed_by'] or 'someone'} at "
            f"{_when(clip['reviewed_at'])} after you opened it; nothing was changed. Reload to see it, "
            "then decide again.",
            current={"review_status": clip["review_status"], "reviewed_by": clip["reviewed_by"]},
        )


def _check_reviewable(clip: dict, status: str) -> None:
    """A clip nobody can watch gets no approval or rejection: it is counted as what it is (ingest failed, or
    flagged broken), never as a rejection of its caption. The message says what to do instead."""
    verb = {"approved": "approve", "rejected": "reject"}.get(status, "decide on")
    if clip.get("probe_error"):
        raise DataError(
            f"Nothing to {verb}: this clip failed at ingest ({str(clip['probe_error'])[:200]}), so it is counted as "
            "ingest failed, not reviewed, and the queue does not serve it. Press n for the next clip; a lead can "
            "replace the file and ingest it again."
        )
    if clip["review_status"] == "broken":
        raise DataError(
            f"Nothing to {verb}: {clip['reviewed_by'] or 'someone'} flagged this clip as broken "
            f"({clip.get('review_note') or 'no reason given'}), which is counted apart from rejections. Press n for "
            "the next clip; if the video plays fine, a lead can clear the flag."
        )


def flag_broken(
    db: sqlite_utils.Database, clip_id: int, *, user: str, reason: str, base_review: str | None = None
) -> dict:
    """Flag a clip whose video cannot be reviewed although ingest passed (it does not play, shows nothing, is
    other footage): review status 'broken', the reason kept and audited. Counted apart from rejections; the queue
    skips it. `base_review` (data.captions.review_token) makes it optimistic like a decision."""
    reason = (limits.plain_text(reason) or "").strip()
    limits.check_text(reason, limits.MAX_NOTE_CHARS, "The reason")
    if not reason:
        raise DataError("Say why the video is broken (e.g. 'black frames only', 'does not play'), then flag it.")
    with immediate(db):
        clip = _clip(db, clip_id)
        _check_review_base(clip, base_review)
        if clip.get("probe_error"):
            raise DataError("This clip failed at ingest: it is counted as ingest failed already, nothing to flag.")
        if clip["review_status"] == "broken":
            raise DataError(
                f"{clip['reviewed_by'] or 'Someone'} flagged this clip as broken already "
                f"({clip.get('review_note') or 'no reason given'})."
            )
        t = now()
        db.execute(
            "UPDATE clips SET review_status = 'broken', reviewed_by = ?, reviewed_at = ?, review_note = ?, "
            "updated_at = ? WHERE id = ?",
            [user, t, reason, t, clip["id"]],
        )
        events.record(
            db,
            user,
            "review.broken",
            clip_id=clip["id"],
            caption_id=clip["current_caption_id"],
            previous=clip["review_status"],
            reason=reason,
        )
    return {**clip, "review_status": "broken", "reviewed_by": user, "review_note": reason}


def clear_broken(db: sqlite_utils.Database, clip_id: int, *, user: str, role: str | None) -> dict:
    """A lead clears a broken flag (the video plays after all, or the file was replaced): the clip is unreviewed
    again and back in the queue. Audited with the reason it had."""
    if not users.at_least(role, "lead"):
        raise Forbidden(f"Only a lead clears a broken flag; you are {role or 'not signed in'}.")
    with immediate(db):
        clip = _clip(db, clip_id)
        if clip["review_status"] != "broken":
            raise DataError(f"Clip {clip['id']} is not flagged as broken (it is {clip['review_status']}).")
        t = now()
        db.execute(
            "UPDATE clips SET review_status = 'unreviewed', reviewed_by = NULL, reviewed_at = NULL, "
            "review_note = NULL, updated_at = ? WHERE id = ?",
            [t, clip["id"]],
        )
        events.record(
            db,
            user,
            "review.unbroken",
            clip_id=clip["id"],
            caption_id=clip["current_caption_id"],
            previous="broken",
            reason=clip.get("review_note"),
            flagged_by=clip["reviewed_by"],
        )
    return {**clip, "review_status": "unreviewed", "reviewed_by": None, "review_note": None}
