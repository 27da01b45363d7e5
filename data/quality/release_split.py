"""Steps 1 and 2 of a release (data.quality.release), in SQLite: the release's clips selected with each one's group
(the sidecar's `group_by` field, else its folder) and hazard level into a temporary table, then every group placed
into a split (data.quality.splits: whole groups, stratified by hazard level), streamed from SQLite in placing
order, its split kept in a second temporary table. Memory does not grow with the clips: the groups and splits
live in SQLite's temporary tables.
"""

from __future__ import annotations

from typing import Any

import sqlite_utils

from data import clips
from data.quality import splits
from data.quality.release_options import Options

BATCH = 10_000  # group -> split rows inserted at a time

JOINS = "FROM clips c JOIN captions k ON k.id = c.current_caption_id LEFT JOIN captions o ON o.id = k.origin_id"
REAL = "(COALESCE(k.simulated, 0) = 0 AND COALESCE(o.simulated, 0) = 0)"  # export's `simulated` is false
# a clip's folder (its path up to the last '/'), '.' at the root
_FOLDER = "COALESCE(NULLIF(rtrim(rtrim(c.path, replace(c.path, '/', '')), '/'), ''), '.')"


def _json_path(field: str) -> str:
    return "$" + "".join(f'."{part}"' for part in field.split("."))


def where_of(o: Options, *, simulated: bool) -> tuple[str, list[Any]]:
    """The WHERE of the release's clips (`simulated`: those left out for their simulated text instead)."""
    where, args = clips._where(o.filter)
    if not o.include_simulated:
        where = [*where, REAL if not simulated else f"NOT {REAL}"]
    elif simulated:
        where = [*where, "0"]
    return " AND ".join(where), args


def temp_tables(db: sqlite_utils.Database) -> None:
    """The snapshot's temporary tables: the clips (step 1), their groups' splits (step 2) and the release before's
    manifest (data.quality.release_changes)."""
    db.execute(
        "CREATE TEMP TABLE release_rows (clip_id INTEGER PRIMARY KEY, caption_id INTEGER NOT NULL, "
        "grp TEXT NOT NULL, by_field INTEGER NOT NULL, hazard TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX temp.release_rows_grp ON release_rows(grp, hazard)")
    db.execute("CREATE TEMP TABLE release_groups (grp TEXT PRIMARY KEY, split TEXT NOT NULL) WITHOUT ROWID")
    db.execute(
        "CREATE TEMP TABLE release_prev (clip_id INTEGER PRIMARY KEY, caption_id INTEGER NOT NULL, split TEXT NOT NULL)"
    )


def select_rows(db: sqlite_utils.Database, o: Options) -> None:
    """Step 1: each released clip with its caption version, group and hazard level."""
    where, args = where_of(o, simulated=False)
    db.execute(
        "INSERT INTO temp.release_rows (clip_id, caption_id, grp, by_field, hazard) "
        "SELECT id, cap, CASE WHEN v IS NOT NULL AND v <> '' THEN ? || '=' || v ELSE 'folder=' || folder END, "
        "v IS NOT NULL AND v <> '', hazard FROM ("
        "SELECT c.id AS id, k.id AS cap, "
        "CAST(CASE WHEN json_valid(c.sidecar) THEN json_extract(c.sidecar, ?) END AS TEXT) AS v, "
        f"{_FOLDER} AS folder, COALESCE(c.hazard_level, '') AS hazard {JOINS} WHERE {where})",
        [o.group_by, _json_path(o.group_by), *args],
    )


def place_groups(db: sqlite_utils.Database, o: Options) -> dict[str, int]:
    """Step 2: every group's split (temp.release_groups), placed as data.quality.splits says. Returns groups per
    split."""
    totals = dict(db.execute("SELECT hazard, COUNT(*) FROM temp.release_rows GROUP BY hazard").fetchall())
    placer = splits.Placer(dict(o.shares), totals)
    db.conn.create_function("cw_release_rank", 1, lambda key: splits.rank(o.seed, key), deterministic=True)
    db.conn.create_function("cw_release_band", 1, splits.band, deterministic=True)
    cursor = db.execute(
        "SELECT r.grp, r.hazard, COUNT(*) FROM temp.release_rows r "
        "JOIN (SELECT grp, COUNT(*) AS size FROM temp.release_rows GROUP BY grp) s ON s.grp = r.grp "
        "GROUP BY r.grp, r.hazard ORDER BY cw_release_band(s.size) DESC, cw_release_rank(r.grp), r.grp, r.hazard"
    )
    per_split = {name: 0 for name, _ in o.shares}
    pending: list[tuple[str, str]] = []
    group, hist = None, {}

    def place() -> None:
        split = placer.place(hist)
        per_split[split] += 1
        pending.append((group, split))
        if len(pending) >= BATCH:
            flush()

    def flush() -> None:
        db.conn.executemany("INSERT INTO temp.release_groups (grp, split) VALUES (?, ?)", pending)
        pending.clear()

    for grp, hazard, n in cursor:  # rows of one group are consecutive
        if grp != group:
            if group is not None:
                place()
            group, hist = grp, {}
        hist[hazard] = n
    if group is not None:
        place()
    flush()
    return per_split
