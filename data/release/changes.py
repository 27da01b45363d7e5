"""The release before of the same name, read from its manifest (its hash checked): the record of where each of its
clips was placed (`read`, which data.release.placement keeps groups by) and, as step 4 of a release
(data.release.make), what changed since, compared in SQL with the clips of this one (`changes`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sqlite_utils

from data import caption_history
from data.release.placement import BATCH


def read(previous: dict, into: sqlite_utils.Database | None = None) -> str | None:
    """Read the manifest of `previous` (a releases row), checking it is the one written (its SHA-256 as
    recorded); with `into`, load it into temp.release_prev as it streams by. Returns why it cannot be trusted
    (moved, removed, unreadable, changed), or None."""
    path = Path(previous["path"]) / "manifest.jsonl"
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            batch = []
            for raw in fh:
                digest.update(raw)
                if into is None:
                    continue
                line = json.loads(raw)
                batch.append((line["clip_id"], line["caption_id"], line["split"], line["group"]))
                if len(batch) >= BATCH:
                    into.conn.executemany("INSERT INTO temp.release_prev VALUES (?, ?, ?, ?)", batch)
                    batch = []
            if into is not None:
                into.conn.executemany("INSERT INTO temp.release_prev VALUES (?, ?, ?, ?)", batch)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{path}: {type(e).__name__}: {e}"[:300]
    if digest.hexdigest() != previous["manifest_sha256"]:
        return f"{path} is not the manifest that was written (its SHA-256 differs)"
    return None


def changes(db: sqlite_utils.Database, previous: dict | None, unreadable: str | None) -> dict | None:
    """Step 4: what changed since `previous` (a releases row, or None), whose manifest `read` loaded into
    temp.release_prev (or could not: `unreadable` says why): clips added and removed, captions re-labelled (per
    label) or changed in text only, clips in another split. Compared in SQL."""
    if previous is None:
        return None
    base = {"previous_id": previous["id"], "previous_version": previous["version"]}
    if unreadable:
        return {**base, "unreadable": unreadable}

    def one(sql: str) -> int:
        return db.execute(sql).fetchone()[0]

    out = {
        **base,
        "previous_clips": one("SELECT COUNT(*) FROM temp.release_prev"),
        "kept_clips": one("SELECT COUNT(*) FROM temp.release_prev p JOIN temp.release_rows r ON r.clip_id = p.clip_id"),
        "added": one(
            "SELECT COUNT(*) FROM temp.release_rows r WHERE NOT EXISTS "
            "(SELECT 1 FROM temp.release_prev p WHERE p.clip_id = r.clip_id)"
        ),
        "removed": one(
            "SELECT COUNT(*) FROM temp.release_prev p WHERE NOT EXISTS "
            "(SELECT 1 FROM temp.release_rows r WHERE r.clip_id = p.clip_id)"
        ),
        "moved": one(
            "SELECT COUNT(*) FROM temp.release_prev p JOIN temp.release_rows r ON r.clip_id = p.clip_id "
            "JOIN temp.release_groups g ON g.grp = r.grp WHERE g.split <> p.split"
        ),
    }
    relabelled, text_only, per_label = 0, 0, {}
    rows = db.execute(
        "SELECT a.text, a.labels, b.text, b.labels FROM temp.release_prev p "
        "JOIN temp.release_rows r ON r.clip_id = p.clip_id AND r.caption_id <> p.caption_id "
        "JOIN captions a ON a.id = p.caption_id JOIN captions b ON b.id = r.caption_id"
    )
    for a_text, a_labels, b_text, b_labels in rows:
        before = {"text": a_text, "labels": json.loads(a_labels or "{}")}
        after = {"text": b_text, "labels": json.loads(b_labels or "{}")}
        changed = caption_history.labels_changed(before["labels"], after["labels"])
        if changed:
            relabelled += 1
            for label in changed:
                per_label[label] = per_label.get(label, 0) + 1
        elif caption_history.change_kind(before, after) != "unchanged":
            text_only += 1
    return {**out, "relabelled": relabelled, "relabelled_by_label": per_label, "text_only": text_only}


def moved_words(c: dict) -> str:
    """The message's sentence on earlier clips that changed split: "0 of N earlier clips changed split"."""
    said = f"{c['moved']:,} of {c['kept_clips']:,} earlier clips changed split"
    if c.get("reshuffled"):
        return f"{said} (--reshuffle placed every group anew)."
    if c["moved"]:
        return f"{said}: their groups were joined or their split is no longer asked for (the card says which)."
    return f"{said} (each group kept where v{c['previous_version']} placed it)."
