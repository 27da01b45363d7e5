"""Drafts: an edit a person has not saved yet, kept per person and clip until they save or discard it.

The review page writes the form here as the person types (debounced), so that an edit survives a reload, a closed
tab and an ended session, and is offered back when they return to the clip. A draft is never a caption version:
versions are written only when the person saves (data.captions.save_human, which drops the draft in the same
transaction).

- `put(db, user, clip_id, base_caption_id=..., text=..., labels=...)` stores (replaces) the draft. It is
  bounded like a caption (data.limits), its labels may be incomplete (a person mid-edit) but every value must
  be one of the taxonomy's. A draft that says what the clip's current caption says is no edit: it is dropped
  (a late autosave after a save, a person who typed the text back).
- `get` / `discard` read and drop one; `drop` is for data.captions, inside its save.
- `base_caption_id` is the version the edit started from: when someone saved another version since, the draft
  is offered as a conflict (theirs beside yours), never applied over their version silently. It must be a
  version of the same clip (a draft naming another clip's caption is refused).
- What a person can make the server keep is bounded (issue 27): `keep` drafts per person (the web app passes
  its `drafts_per_person` setting); past it their oldest draft is dropped. The rate of writes is the web app's
  write budget (webapp.budget).
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from data import limits, taxonomy
from data.db import immediate, now
from data.errors import DataError, NotFound


def check_labels(labels: Any) -> dict[str, Any]:
    """Labels as a form holds them mid-edit: each known label once, a value of its options, or empty (None, or
    [] for a multi-choice label). Returns them complete (an absent label is empty); DataError names the first
    problem."""
    if labels is None:
        labels = {}
    if not isinstance(labels, dict):
        raise DataError("Draft labels must be an object of label names.")
    limits.check_labels(labels)
    unknown = sorted(str(k)[:40] for k in labels if k not in taxonomy.ENUMS)
    if unknown:
        raise DataError(f"Unknown label(s) in the draft: {', '.join(unknown)}.")
    out: dict[str, Any] = {}
    for name, options in taxonomy.ENUMS.items():
        value = labels.get(name)
        if name in taxonomy.MULTI:
            value = [] if value in (None, "") else value
            if not isinstance(value, list) or any(v not in options for v in value):
                raise DataError(f"{name.replace('_', ' ')}: a draft holds a list of {', '.join(options)}.")
            out[name] = list(dict.fromkeys(value))
        else:
            value = None if value in (None, "") else value
            if value is not None and value not in options:
                raise DataError(f"{name.replace('_', ' ')}: {str(value)[:40]!r} is not one of its options.")
            out[name] = value
    return out


def same_as(draft: dict, cap: dict | None) -> bool:
    """Does `draft` (as `get` returns it) say what caption version `cap` says? (Then there is nothing to offer.)"""
    return _same(draft["text"], draft["labels"], cap)


def _same(text: str, labels: dict[str, Any], cap: dict | None) -> bool:
    """Does the draft say what caption version `cap` says (the form unchanged)?"""
    if cap is None:
        return not text.strip() and not any(labels.values())
    if text.strip() != (cap["text"] or "").strip():
        return False
    stored = _complete(cap.get("labels"))
    return all(
        sorted(labels[k]) == sorted(stored[k]) if k in taxonomy.MULTI else labels[k] == stored[k] for k in labels
    )


def _complete(labels: Any) -> dict[str, Any]:
    """Stored labels (valid already) in the draft's complete form."""
    labels = labels or {}
    return {k: list(labels.get(k) or []) if k in taxonomy.MULTI else labels.get(k) for k in taxonomy.ENUMS}


def put(
    db: sqlite_utils.Database,
    user: str,
    clip_id: int,
    *,
    base_caption_id: int | None,
    text: str | None,
    labels: Any,
    keep: int | None = None,
) -> dict | None:
    """Store `user`'s unsaved edit of `clip_id` (replacing their previous one), keeping at most `keep` drafts of
    theirs (the oldest dropped; None: no bound). Returns the draft, or None when it says what the current caption
    says (then there is no draft any more). TooLarge/DataError for an edit over the bounds, labels outside the
    taxonomy or a base that is not a version of this clip; NotFound for a clip that does not exist."""
    clip_id = limits.sql_int(clip_id, "clip id")
    text = limits.check_text(text or "", limits.MAX_CAPTION_CHARS, "The caption")
    if base_caption_id is not None:
        base_caption_id = limits.sql_int(base_caption_id, "caption version")
    labels = check_labels(labels)
    with immediate(db):
        clip = next(db.query("SELECT current_caption_id FROM clips WHERE id = ?", [clip_id]), None)
        if clip is None:
            raise NotFound(f"clip {clip_id} does not exist")
        if base_caption_id is not None:
            base = next(db.query("SELECT clip_id FROM captions WHERE id = ?", [base_caption_id]), None)
            if base is None or base["clip_id"] != clip_id:
                raise DataError(
                    f"The draft names caption {base_caption_id} as the version it started from, which is not a "
                    f"version of clip {clip_id}: open the clip again and edit it there."
                )
        current = _version(db, clip["current_caption_id"])
        if _same(text, labels, current):
            drop(db, user, clip_id)
            return None
        t = now()
        db.execute(
            "INSERT INTO drafts (user, clip_id, base_caption_id, text, labels, saved_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(user, clip_id) DO UPDATE SET base_caption_id = excluded.base_caption_id, "
            "text = excluded.text, labels = excluded.labels, saved_at = excluded.saved_at",
            [user, clip_id, base_caption_id, text, json.dumps(labels, sort_keys=True), t],
        )
        if keep is not None:  # the person's drafts past `keep`, oldest first (at most keep + 1 rows read)
            db.execute(
                "DELETE FROM drafts WHERE user = ? AND clip_id NOT IN (SELECT clip_id FROM drafts WHERE user = ? "
                "ORDER BY saved_at DESC, clip_id DESC LIMIT ?)",
                [user, user, max(1, int(keep))],
            )
    return {
        "user": user,
        "clip_id": clip_id,
        "base_caption_id": base_caption_id,
        "text": text,
        "labels": labels,
        "saved_at": t,
    }


def _version(db: sqlite_utils.Database, caption_id: int | None) -> dict | None:
    if caption_id is None:
        return None
    row = next(db.query("SELECT text, labels FROM captions WHERE id = ?", [caption_id]), None)
    return {"text": row["text"], "labels": json.loads(row["labels"])} if row else None


def get(db: sqlite_utils.Database, user: str, clip_id: int) -> dict | None:
    """`user`'s draft of `clip_id` (text, labels complete, base_caption_id, saved_at), or None."""
    row = next(db.query("SELECT * FROM drafts WHERE user = ? AND clip_id = ?", [user, int(clip_id)]), None)
    if row is None:
        return None
    return {**row, "labels": _complete(json.loads(row["labels"]))}


def discard(db: sqlite_utils.Database, user: str, clip_id: int) -> bool:
    """Drop `user`'s draft of `clip_id` (they chose to); True if there was one."""
    with immediate(db):
        return drop(db, user, clip_id)


def drop(db: sqlite_utils.Database, user: str, clip_id: int) -> bool:
    """Inside the caller's transaction (a save): `user`'s draft of `clip_id` is gone. True if there was one."""
    return db.execute("DELETE FROM drafts WHERE user = ? AND clip_id = ?", [user, int(clip_id)]).rowcount > 0
