"""Caption versions: the one place where a caption changes, and the rules that keep human work safe.

Rules (the project's rule "a human's work is never lost"; tested in tests/test_machine_never_replaces_human.py):
- Every change is a new, append-only version row; `clips.current_caption_id` points at the current one.
- A human save names the version it was based on (`base_caption_id`, None for "there was none"). If the
  clip's current version is another one, the save is refused with `Conflict` naming who changed it and when.
- A machine result becomes current only when the clip has no caption, or its current caption is a machine
  one that nobody approved. Otherwise it is stored as a *candidate* version that a human can adopt.
- A machine result of a job is written once: (job_id, clip_id) is unique, a repeat returns the first.
- A human save drops that person's draft of the clip (data.drafts): the edit is a version now.
- Review states: approved and rejected judge the caption; broken (`flag_broken`, cleared by a lead) says the
  video cannot be reviewed, and is counted apart. A clip that failed at ingest or is flagged broken cannot be
  approved or rejected.
Each function runs in one `BEGIN IMMEDIATE` transaction and records an event in it.

Lineage (what a training pipeline needs to know about where a text came from, kept through any number of edits):
- `derived_from_id`: the version this one was made from. A human save: the version it was based on. An adopt:
  the version adopted. A machine caption: none, it is an origin.
- `origin_id`: the machine caption at the root of the `derived_from_id` chain (a machine caption's own id), or
  none for text a human wrote from scratch. Its provenance (model, prompt, job, simulated) is the text's.
- `parent_id` is something else: the version that was current when this one was written (the version a save
  or an adopt replaced), which the history view diffs against.
`lineage` walks a chain back to its origin: who edited the text, when, and what each edit changed.

What the model thought of its labels, and whether the text agrees with them (issue 19, migration m014):
- `confidence` (a machine caption's provenance, JSON; NULL on human versions, on versions written before m014
  and when the job asked for no logprobs): `{"labels": {label: p or null}, "items": {list label: {value: p}},
  "end": {list label: p}}`. `labels[name]` is the model's probability of the value it generated for that label
  (for a list label: of exactly that list), read from vLLM's token logprobs by serving.logprobs; `items` the
  probability of each list item, `end` that the list ended where it did; `note` says why, when the logprobs
  could not be read (then every label is null). `confidence_of(row)` reads it as {label: p or None}.
- `conflicts` (every version, JSON list of sentences; [] when none): where the text and the labels disagree,
  found by data.consistency when the version is written.
The clip mirrors its current caption's lowest label confidence (`clips.confidence_min`) and its number of
conflicts (`clips.label_conflicts`), kept in step here like the facet columns: the risk order reads them.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import sqlite_utils

from data import consistency, drafts, events, limits, taxonomy, users
from data.db import immediate, now
from data.errors import Conflict, DataError, Forbidden, NotFound, TooFast
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
REVIEW_STATES = ("unreviewed", "approved", "rejected", "broken")
DECISIONS = ("unreviewed", "approved", "rejected")  # what set_review records; 'broken' is flag_broken's
# What a version changed compared with the one it was derived from (or an export record with its origin):
# "written" is text with nothing to compare with (written from scratch).
CHANGE_KINDS = ("unchanged", "text", "labels", "both", "written")
EDITS_MAX = 50  # human versions `lineage` walks back through, newest first (a bounded lookup per clip)


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
        "confidence_min": lowest_confidence(confidence),
        "label_conflicts": len(conflicts),
        "updated_at": now(),
    }
    if review_status is not None:
        values["review_status"] = review_status
    sets = ", ".join(f"{k} = ?" for k in values)
    db.execute(f"UPDATE clips SET {sets} WHERE id = ?", [*values.values(), clip_id])


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
    TooFast past `rate` (limits.SAVE_RATE in the web app; None: no limit)."""
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
        status = "unreviewed" if clip["review_status"] == "rejected" else None
        _make_current(db, clip_id, cid, text=text, labels=labels, source="human", conflicts=found, review_status=status)
        events.record(db, author, "caption.save", clip_id=clip_id, caption_id=cid, previous=base_caption_id)
        drafts.drop(db, author, clip_id)  # saved: the edit is a version now, not a draft
    return get(db, cid)


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
    applies as in save_human)."""
    with immediate(db):
        clip = _clip(db, clip_id)
        _check_base(db, clip, base_caption_id)
        _check_rate(db, clip_id, author, rate)
        src = get(db, caption_id)
        if src is None or src["clip_id"] != clip_id:
            raise NotFound(f"caption {caption_id} is not a version of clip {clip_id}")
        found = consistency.conflicts(src["text"], src["labels"])
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
        _make_current(db, clip_id, cid, text=src["text"], labels=src["labels"], source="human", conflicts=found)
        events.record(
            db, author, "caption.adopt", clip_id=clip_id, caption_id=cid, previous=base_caption_id, adopted=caption_id
        )
    return get(db, cid)


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


def confidence_of(row: dict | None) -> dict[str, float | None]:
    """{label: the model's probability of its value} for a caption row (of `get`, or raw with `confidence` as
    stored): every taxonomy label, None where nothing is known (a human version, a caption written before
    confidence was recorded, a label whose logprobs could not be read)."""
    conf = (row or {}).get("confidence")
    if isinstance(conf, str):
        conf = json.loads(conf)
    labels = conf.get("labels") if isinstance(conf, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    return {name: _probability(labels.get(name)) for name in taxonomy.ENUMS}


def lowest_confidence(confidence: dict | None) -> float | None:
    """The lowest label probability of a stored confidence (what `clips.confidence_min` mirrors), None when no
    label has one."""
    found = [p for p in confidence_of({"confidence": confidence}).values() if p is not None]
    return min(found) if found else None


def _probability(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    return float(value) if ok else None


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


def _words(text: str | None) -> list[str]:
    return (text or "").split()


def _label_value(labels: dict, name: str) -> Any:
    v = labels.get(name)
    return sorted(v) if isinstance(v, list) else v  # a multi-choice label is a set: order is no change


def labels_changed(before: dict | None, after: dict | None) -> list[str]:
    """Names of the labels whose value differs between two label sets (taxonomy order, then any others)."""
    before, after = before or {}, after or {}
    names = [*taxonomy.ENUMS, *sorted((set(before) | set(after)) - set(taxonomy.ENUMS))]
    return [n for n in names if _label_value(before, n) != _label_value(after, n)]


def change_kind(before: dict | None, after: dict) -> str:
    """What `after` changed compared with `before` (rows with decoded `text` and `labels`): one of CHANGE_KINDS.
    Text is compared word by word (whitespace is no change); `before` None is text written from scratch."""
    if before is None:
        return "written"
    text = _words(before.get("text")) != _words(after.get("text"))
    labels = bool(labels_changed(before.get("labels"), after.get("labels")))
    return "both" if text and labels else "text" if text else "labels" if labels else "unchanged"


# A version and the versions it derives from, newest first, at most limit + 1 (parameters: id, limit). Each step
# looks its link up in a scalar subquery: written as a join, SQLite 3.38+ puts a Bloom filter on `captions` in
# the recursive step and builds it by scanning the whole table at every step (0.3 s a step on 100k versions,
# against 0.1 ms a whole chain this way).
CHAIN_SQL = (
    "WITH RECURSIVE chain(n, id) AS (SELECT 0, ? UNION ALL "
    "SELECT chain.n + 1, (SELECT d.derived_from_id FROM captions d WHERE d.id = chain.id) FROM chain "
    "WHERE chain.id IS NOT NULL AND chain.n < ?) "
    "SELECT k.id, k.version, k.source, k.author, k.created_at, k.text, k.labels, k.derived_from_id "
    "FROM chain CROSS JOIN captions k ON k.id = chain.id ORDER BY chain.n"
)


def edits(db: sqlite_utils.Database, caption_id: int, limit: int = EDITS_MAX) -> tuple[list[dict], bool]:
    """The human versions on the chain from `caption_id` back to its origin, oldest first, each with `changed`
    (CHANGE_KINDS, against the version it was derived from); and whether the chain was longer than `limit`
    human versions (then only the newest `limit` are listed). One indexed query, at most limit + 1 rows."""
    cursor = db.execute(CHAIN_SQL, [caption_id, limit])  # a plain cursor: an export asks once per human caption
    names = [d[0] for d in cursor.description]
    rows = [_decode(dict(zip(names, r))) for r in cursor]
    out = []
    for i, r in enumerate(rows[:limit]):
        if r["source"] != "human":
            break  # the origin: the chain's end
        before = rows[i + 1] if i + 1 < len(rows) else None
        out.append(
            {
                "caption_id": r["id"],
                "version": r["version"],
                "author": r["author"],
                "created_at": r["created_at"],
                "changed": change_kind(before, r),
            }
        )
    truncated = len(rows) > limit and rows[limit]["source"] == "human"
    return out[::-1], truncated


def lineage(db: sqlite_utils.Database, cap: dict | None) -> dict:
    """Where the version `cap` (a row of `get`) came from: `origin` (the machine caption at its root, decoded,
    or None), `derived_from` (the version it was made from, or None), `edits` and `edits_truncated` (see
    `edits`), `changed` (CHANGE_KINDS, against the origin) with `labels_changed` (None without an origin),
    and `simulated` (the text, or the text it was derived from, was written by the simulated fleet)."""
    if cap is None:
        return {
            "origin": None,
            "derived_from": None,
            "edits": [],
            "edits_truncated": False,
            "changed": None,
            "labels_changed": None,
            "simulated": False,
        }
    origin = cap if cap.get("origin_id") == cap["id"] else get(db, cap.get("origin_id"))
    made_from = get(db, cap.get("derived_from_id"))
    human, truncated = edits(db, cap["id"]) if cap["source"] == "human" else ([], False)
    return {
        "origin": origin,
        "derived_from": made_from,
        "edits": human,
        "edits_truncated": truncated,
        "changed": change_kind(origin, cap),
        "labels_changed": labels_changed(origin["labels"], cap["labels"]) if origin else None,
        "simulated": bool(cap.get("simulated") or (origin or {}).get("simulated")),
    }


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


def history_page(
    db: sqlite_utils.Database, clip_id: int, *, before: int | None = None, limit: int = limits.HISTORY_PAGE
) -> dict:
    """One page of a clip's versions, newest first: those older than version `before` (None: the newest),
    at most `limit`. Returns {versions (each marked `current` and `candidate`), bases (rows the page's diffs
    need that are not on it, by id), total, older (versions after this page), newer (versions before it),
    current_id}.
    What one open ships is bounded by the page, not by the history, which can hold hundreds of versions
    (issue 21, class 4)."""
    clip = _clip(db, clip_id)
    limit = max(1, min(int(limit), 200))
    cond, args = ("AND version < ?", [limits.sql_int(before, "version")]) if before is not None else ("", [])
    rows = [
        _decode(r)
        for r in db.query(
            f"SELECT * FROM captions WHERE clip_id = ? {cond} ORDER BY version DESC LIMIT ?", [clip_id, *args, limit]
        )
    ]
    for r in rows:
        r["current"] = r["id"] == clip["current_caption_id"]
        r["candidate"] = is_candidate(r, clip["current_caption_id"])
    total = db.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ?", [clip_id]).fetchone()[0]
    oldest = rows[-1]["version"] if rows else (before or 1)
    older = db.execute("SELECT COUNT(*) FROM captions WHERE clip_id = ? AND version < ?", [clip_id, oldest]).fetchone()[
        0
    ]
    on_page = {r["id"] for r in rows}
    wanted = {r["parent_id"] for r in rows if r.get("parent_id") and r["parent_id"] not in on_page}
    if rows and older:  # the diff base of the oldest version shown, when it has no parent: the version before
        prev = next(
            db.query(
                "SELECT * FROM captions WHERE clip_id = ? AND version < ? ORDER BY version DESC LIMIT 1",
                [clip_id, oldest],
            ),
            None,
        )
        if prev is not None:
            rows[-1]["_previous_id"] = prev["id"]
            wanted.add(prev["id"])
    bases = {}
    for cid in wanted:
        row = get(db, cid)
        if row is not None:
            bases[cid] = row
    return {
        "versions": rows,
        "bases": bases,
        "total": total,
        "older": older,
        "newer": total - older - len(rows),
        "current_id": clip["current_caption_id"],
    }


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
