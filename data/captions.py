"""Caption versions: the one place where a caption changes, and the rules that keep human work safe.

Rules (the project's rule "a human's work is never lost"; tested in tests/data/test_machine_never_replaces_human.py):
- Every change is a new, append-only version row; `clips.current_caption_id` points at the current one.
- A human save names the version it was based on (`base_caption_id`, None for "there was none"). If the
  clip's current version is another one, the save is refused with `Conflict` naming who changed it and when.
- A machine result becomes current only when the clip has no caption, or its current caption is a machine
  one that nobody approved. Otherwise it is stored as a *candidate* version that a human can adopt.
- A machine result of a job is written once: (job_id, clip_id) is unique, a repeat returns the first.
- A human save drops that person's draft of the clip (data.drafts): the edit is a version now.
- Review states (approved, rejected, broken) are set in data.review_states, against the same version checks.
Each function runs in one `BEGIN IMMEDIATE` transaction and records an event in it.

Lineage and history are read by data.caption_history; a machine caption's label confidence by
data.caption_confidence.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import sqlite_utils

from data import caption_confidence, consistency, drafts, events, limits, taxonomy
from data.db import immediate, now
from data.errors import Conflict, DataError, NotFound, TooFast
from data.job_params import current_names

PROVENANCE_FIELDS = (
    "model",
    "prompt_id",
    "prompt_name",
    "prompt_version",
    "params",
    "frames",
    "replica",
    "decode_backend",
    "latency_ms",
    "prompt_tokens",
    "completion_tokens",
    "finish_reason",
    "simulated",
    "confidence",  # per label, from the model's token logprobs (see the module docstring); None when not asked
)
# What a version changed compared with the one it was derived from (or an export record with its origin):
# "written" is text with nothing to compare with (written from scratch).


def _when(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clip(db: sqlite_utils.Database, clip_id: int) -> dict:
    clip_id = limits.sql_int(clip_id, "clip id")
    row = next(
        db.query(
            "SELECT id, current_caption_id, review_status, reviewed_by, reviewed_at, review_note, probe_error "
            "FROM clips WHERE id = ?",
            [clip_id],
        ),
        None,
    )
    if row is None:
        raise NotFound(f"clip {clip_id} does not exist")
    return row


def get(db: sqlite_utils.Database, caption_id: int | None) -> dict | None:
    if caption_id is None:
        return None
    row = next(db.query("SELECT * FROM captions WHERE id = ?", [caption_id]), None)
    return _decode(row) if row else None


def _decode(row: dict) -> dict:
    row = dict(row)
    row["labels"] = json.loads(row["labels"]) if row.get("labels") else {}
    for key in ("confidence", "conflicts"):
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    if row.get("params"):
        row["params"] = current_names(json.loads(row["params"]))  # rows written before one naming read the same
    return row


def history(db: sqlite_utils.Database, clip_id: int) -> list[dict]:
    """All versions of a clip's caption, newest first, each marked `current` and `candidate` (or not)."""
    clip = _clip(db, clip_id)
    rows = [_decode(r) for r in db.query("SELECT * FROM captions WHERE clip_id = ? ORDER BY version DESC", [clip_id])]
    for r in rows:
        r["current"] = r["id"] == clip["current_caption_id"]
        r["candidate"] = is_candidate(r, clip["current_caption_id"])
    return rows


def is_candidate(version: dict, current_caption_id: int | None) -> bool:
    """Whether `version` is a candidate: a machine caption that arrived after the clip's current version and
    was kept beside it (the current one is a human's or approved: `add_machine`), for a human to adopt. An
    older machine version that a later one replaced, or a human edited, is history, not a candidate."""
    return version["source"] == "model" and version["id"] > (current_caption_id or 0)


def _check_base(db: sqlite_utils.Database, clip: dict, base_caption_id: int | None) -> None:
    current_id = clip["current_caption_id"]
    if current_id == base_caption_id:
        return
    cur = get(db, current_id)
    if cur is None:
        raise Conflict(f"clip {clip['id']}: the caption you edited is no longer current; reload", current={})
    raise Conflict(
        f"This caption was changed by {cur['author']} at {_when(cur['created_at'])} (version {cur['version']}) "
        "after you opened it; nothing was saved.",
        current=cur,
    )


def _insert_version(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    text: str,
    labels: dict,
    source: str,
    author: str,
    parent_id: int | None,
    derived_from_id: int | None,
    job_id: int | None = None,
    conflicts: list[str],
    note: str | None = None,
    provenance: dict | None = None,
) -> int:
    version = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM captions WHERE clip_id = ?", [clip_id]).fetchone()[
        0
    ]
    # The id is chosen here (what SQLite would choose: we hold the write lock) so that a machine caption can
    # name itself as its origin in the same INSERT: lineage columns are never updated.
    new_id = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM captions").fetchone()[0]
    if source == "model":
        origin_id = new_id
    elif derived_from_id is not None:
        origin_id = db.execute("SELECT origin_id FROM captions WHERE id = ?", [derived_from_id]).fetchone()[0]
    else:
        origin_id = None
    row: dict[str, Any] = {
        "id": new_id,
        "clip_id": clip_id,
        "version": version,
        "parent_id": parent_id,
        "derived_from_id": derived_from_id,
        "origin_id": origin_id,
        "text": text,
        "labels": taxonomy.dumps(labels),
        "source": source,
        "author": author,
        "job_id": job_id,
        "note": note,
        "created_at": now(),
        "conflicts": json.dumps(conflicts, ensure_ascii=False),
    }
    for key in PROVENANCE_FIELDS:
        if provenance and key in provenance:
            value = limits.clip_text(provenance[key])  # fleet answers are bounded (R10)
            row[key] = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
    cols = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    return db.execute(f"INSERT INTO captions ({cols}) VALUES ({marks})", list(row.values())).lastrowid


def _make_current(
    db: sqlite_utils.Database,
    clip_id: int,
    caption_id: int,
    *,
    text: str,
    labels: dict,
    source: str,
    conflicts: list[str],
    confidence: dict | None = None,
    review_status: str | None = None,
) -> None:
    values = {
        "current_caption_id": caption_id,
        "caption_source": source,
        "caption_text": text,
        "labels_text": taxonomy.labels_text(labels),
        **taxonomy.facet_values(labels),
        "confidence_min": caption_confidence.lowest_confidence(confidence),
        "label_conflicts": len(conflicts),
        "updated_at": now(),
    }
    if review_status is not None:
        values["review_status"] = review_status
    if review_status == "unreviewed":  # no decision stands: who made the one undone is in its event
        values.update(reviewed_by=None, reviewed_at=None)
    sets = ", ".join(f"{k} = ?" for k in values)
    db.execute(f"UPDATE clips SET {sets} WHERE id = ?", [*values.values(), clip_id])


def _status_after_edit(clip: dict) -> str | None:
    """The review status a new human version leaves: an approval or a rejection judged the version the reviewer
    saw, not this one, so the clip is unreviewed until someone decides on it (approving with an edit saves, then
    approves: approved by that person). Broken judges the video and stays. None: unchanged."""
    return "unreviewed" if clip["review_status"] in ("approved", "rejected") else None


def _undecided(clip: dict) -> dict:
    """What the save's event says of a decision it undid: the status and who had decided (nothing otherwise)."""
    if _status_after_edit(clip) is None:
        return {}
    return {"review_was": clip["review_status"], "reviewed_by_was": clip["reviewed_by"]}


def save_human(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    text: str,
    labels: dict,
    author: str,
    base_caption_id: int | None,
    note: str | None = None,
    rate: limits.SaveRate | None = None,
) -> dict:
    """Save a human edit as the new current version, or raise Conflict if `base_caption_id` is stale, or
    TooFast past `rate` (limits.SAVE_RATE in the web app; None: no limit). Returns the saved version, with
    `review_was` and `reviewed_by_was` where it undid an approval or a rejection (`_status_after_edit`)."""
    # controls a reader cannot see (ESC, BEL, bidi overrides) are not stored (limits.CONTROLS)
    text = limits.check_text((limits.plain_text(text) or "").strip(), limits.MAX_CAPTION_CHARS, "The caption")
    if not text:
        raise DataError("A caption cannot be empty.")
    note = limits.check_text(limits.plain_text(note), limits.MAX_NOTE_CHARS, "The note")
    limits.check_labels(labels)
    taxonomy.validate_labels(labels)
    found = consistency.conflicts(text, labels)
    with immediate(db):
        clip = _clip(db, clip_id)
        _check_base(db, clip, base_caption_id)
        _check_rate(db, clip_id, author, rate)
        cid = _insert_version(
            db,
            clip_id,
            text=text,
            labels=labels,
            source="human",
            author=author,
            parent_id=base_caption_id,
            derived_from_id=base_caption_id,
            conflicts=found,
            note=note,
        )
        status, undone = _status_after_edit(clip), _undecided(clip)
        _make_current(db, clip_id, cid, text=text, labels=labels, source="human", conflicts=found, review_status=status)
        events.record(db, author, "caption.save", clip_id=clip_id, caption_id=cid, previous=base_caption_id, **undone)
        drafts.drop(db, author, clip_id)  # saved: the edit is a version now, not a draft
    return {**get(db, cid), **undone}


def adopt(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    caption_id: int,
    author: str,
    base_caption_id: int | None,
    rate: limits.SaveRate | None = None,
) -> dict:
    """Make an earlier or candidate version current again, as a new human version copying it (a save: `rate`
    applies, and an approval or a rejection is undone, as in save_human)."""
    with immediate(db):
        clip = _clip(db, clip_id)
        _check_base(db, clip, base_caption_id)
        _check_rate(db, clip_id, author, rate)
        src = get(db, caption_id)
        if src is None or src["clip_id"] != clip_id:
            raise NotFound(f"caption {caption_id} is not a version of clip {clip_id}")
        found, undone = consistency.conflicts(src["text"], src["labels"]), _undecided(clip)
        cid = _insert_version(
            db,
            clip_id,
            text=src["text"],
            labels=src["labels"],
            source="human",
            author=author,
            parent_id=base_caption_id,
            derived_from_id=src["id"],
            conflicts=found,
            note=f"adopted version {src['version']}",
        )
        _make_current(
            db,
            clip_id,
            cid,
            text=src["text"],
            labels=src["labels"],
            source="human",
            conflicts=found,
            review_status=_status_after_edit(clip),
        )
        events.record(
            db,
            author,
            "caption.adopt",
            clip_id=clip_id,
            caption_id=cid,
            previous=base_caption_id,
            adopted=caption_id,
            **undone,
        )
    return {**get(db, cid), **undone}


def add_machine(
    db: sqlite_utils.Database,
    clip_id: int,
    *,
    job_id: int | None,
    text: str,
    labels: dict,
    provenance: dict,
    author: str = "model",
) -> tuple[dict, bool]:
    """Store a model's caption. Returns (version row, whether it became current).

    Idempotent per (job_id, clip_id): a repeated result returns the first one and changes nothing.
    Never replaces a human or approved caption (it becomes a candidate version instead).
    """
    text = limits.check_text(limits.plain_text(text), limits.MAX_CAPTION_CHARS, "The model's caption")
    limits.check_labels(labels)
    found = consistency.conflicts(text, labels)
    confidence = provenance.get("confidence") if isinstance(provenance.get("confidence"), dict) else None
    with immediate(db):
        if job_id is not None:
            existing = next(
                db.query("SELECT id FROM captions WHERE job_id = ? AND clip_id = ?", [job_id, clip_id]), None
            )
            if existing:
                row = get(db, existing["id"])
                return row, _clip(db, clip_id)["current_caption_id"] == row["id"]
        clip = _clip(db, clip_id)
        current = get(db, clip["current_caption_id"])
        replace = current is None or (current["source"] == "model" and clip["review_status"] != "approved")
        cid = _insert_version(
            db,
            clip_id,
            text=text,
            labels=labels,
            source="model",
            author=author,
            parent_id=clip["current_caption_id"],
            derived_from_id=None,
            job_id=job_id,
            conflicts=found,
            provenance={**provenance, "confidence": confidence},
        )
        if replace:
            _make_current(
                db,
                clip_id,
                cid,
                text=text,
                labels=labels,
                source="model",
                conflicts=found,
                confidence=confidence,
                review_status="unreviewed",
            )
        events.record(
            db,
            author,
            "caption.machine" if replace else "caption.candidate",
            clip_id=clip_id,
            caption_id=cid,
            job_id=job_id,
            previous=clip["current_caption_id"],
        )
    return get(db, cid), replace


def _check_rate(db: sqlite_utils.Database, clip_id: int, author: str, rate: limits.SaveRate | None) -> None:
    """Inside the save's transaction (parallel saves cannot pass together): TooFast if `author` saved
    `rate.per_clip` versions of this clip, or `rate.per_person` in all, within the last `rate.window` s."""
    if rate is None:
        return
    since = now() - rate.window
    row = db.execute(
        "SELECT COUNT(*), SUM(clip_id = ?), MIN(created_at), MIN(CASE WHEN clip_id = ? THEN created_at END) "
        "FROM captions WHERE author = ? AND source = 'human' AND created_at > ?",
        [clip_id, clip_id, author, since],
    ).fetchone()
    total, on_clip, oldest, oldest_here = row[0], row[1] or 0, row[2], row[3]
    if on_clip >= rate.per_clip:
        wait, what = oldest_here + rate.window - now(), f"{on_clip} versions of this clip"
    elif total >= rate.per_person:
        wait, what = oldest + rate.window - now(), f"{total} caption versions"
    else:
        return
    raise TooFast(
        f"You saved {what} in the last {rate.window:.0f} s: wait {max(1, round(wait))} s and save again (your "
        f"edit is still here). Saves are limited to {rate.per_clip} per clip and {rate.per_person} in all per "
        "minute, so that a script cannot bury a clip's history."
    )
