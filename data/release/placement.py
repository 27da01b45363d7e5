"""Steps 1 and 2 of a release (data.release.make), in SQLite: the release's clips selected with each one's group
and hazard level into a temporary table, then every group placed into a split (data.release.stratify: whole groups,
stratified by hazard level), its split kept in a second temporary table.

A clip's group (`select_rows`), one per drive:
- its sidecar's `group_by` field, when it has one (`route=R012`);
- else the value its folder's other clips agree on: a clip that lost its route joins the route of its folder
  (every clip of the library in that folder that names a value names the same one);
- else its folder (`folder=drive7`): a folder whose clips name several values (which one the clip belongs to is
  not known), or none.
So no value and no agreeing folder is in two stratify. `HOW` names the four cases; the card counts each.
`--group-by folder` groups every clip by its folder (`FOLDER`: the one field name that is not read from
sidecars).

Placing (`place_groups`): a group that the release before of the same name placed (data.release.changes
loads its manifest) stays in that split; the others are placed as data.release.stratify says, the kept ones
counted first, so the new groups correct the drift. A group whose earlier clips sat in several splits (the
grouping joined them) goes where most of them were. Memory does not grow with the clips: the groups and splits
live in SQLite's temporary tables, and groups stream from SQLite in placing order (at most IN_MEMORY of them, or
the heavy ones, are held to search over).
"""

from __future__ import annotations

from typing import Any, Iterator

import sqlite_utils

from data import clips
from data.release import size_search, stratify
from data.release.options import Options

BATCH = 10_000  # group -> split rows inserted at a time
FOLDER = "folder"  # --group-by folder: every clip by its folder
# how a clip got its group (temp.release_rows.how)
HOW = ("the sidecar field", "its folder's value", "folder: its clips name several values", "folder: none named")

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
    """The snapshot's temporary tables: the clips (step 1), their folders' values, their groups' splits (step 2)
    and the release before's manifest (data.release.changes)."""
    db.execute(
        "CREATE TEMP TABLE release_rows (clip_id INTEGER PRIMARY KEY, caption_id INTEGER NOT NULL, "
        "grp TEXT NOT NULL, how INTEGER NOT NULL, hazard TEXT NOT NULL, folder TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX temp.release_rows_grp ON release_rows(grp, hazard)")
    db.execute(
        "CREATE TEMP TABLE release_folders (folder TEXT PRIMARY KEY, value TEXT NOT NULL, n INTEGER NOT NULL) "
        "WITHOUT ROWID"
    )
    db.execute("CREATE TEMP TABLE release_groups (grp TEXT PRIMARY KEY, split TEXT NOT NULL) WITHOUT ROWID")
    db.execute(
        "CREATE TEMP TABLE release_prev (clip_id INTEGER PRIMARY KEY, caption_id INTEGER NOT NULL, "
        "split TEXT NOT NULL, grp TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX temp.release_prev_grp ON release_prev(grp)")
    db.execute("CREATE TEMP TABLE release_kept (grp TEXT PRIMARY KEY, split TEXT NOT NULL) WITHOUT ROWID")


def _value(field: str) -> str:
    """A clip's value of the sidecar field, as text (NULL without one; a nested object as compact JSON)."""
    return f"CAST(CASE WHEN json_valid(c.sidecar) THEN json_extract(c.sidecar, '{_json_path(field)}') END AS TEXT)"


def select_rows(db: sqlite_utils.Database, o: Options) -> None:
    """Step 1: each released clip with its caption version, group (the module docstring) and hazard level."""
    where, args = where_of(o, simulated=False)
    if o.group_by == FOLDER:
        db.execute(
            "INSERT INTO temp.release_rows (clip_id, caption_id, grp, how, hazard, folder) "
            f"SELECT c.id, k.id, 'folder=' || {_FOLDER}, 3, COALESCE(c.hazard_level, ''), {_FOLDER} {JOINS} "
            f"WHERE {where}",
            args,
        )
        return
    db.execute(
        "INSERT INTO temp.release_rows (clip_id, caption_id, grp, how, hazard, folder) "
        "SELECT x.id, x.cap, CASE WHEN x.v IS NOT NULL AND x.v <> '' THEN ? || '=' || x.v "
        "ELSE 'folder=' || x.folder END, CASE WHEN x.v IS NOT NULL AND x.v <> '' THEN 0 ELSE 3 END, x.hazard, "
        f"x.folder FROM (SELECT c.id AS id, k.id AS cap, {_value(o.group_by)} AS v, {_FOLDER} AS folder, "
        f"COALESCE(c.hazard_level, '') AS hazard {JOINS} WHERE {where}) x",
        [o.group_by, *args],
    )
    # the folders of clips without the field: every clip of the library there votes for its value (an unreleased
    # clip's sidecar says which drive the folder is too); read by a range of the path index per folder
    db.execute(
        "INSERT INTO temp.release_folders (folder, value, n) SELECT folder, MIN(v), COUNT(DISTINCT v) FROM ("
        f"SELECT f.folder AS folder, {_value(o.group_by)} AS v FROM "
        "(SELECT DISTINCT folder FROM temp.release_rows WHERE how = 3 AND folder <> '.') f JOIN clips c "
        f"ON c.path >= f.folder || '/' AND c.path < f.folder || '0' AND {_FOLDER} = f.folder "
        f"UNION ALL SELECT '.', {_value(o.group_by)} FROM clips c WHERE instr(c.path, '/') = 0 "
        "AND EXISTS (SELECT 1 FROM temp.release_rows WHERE how = 3 AND folder = '.')"
        ") WHERE v IS NOT NULL AND v <> '' GROUP BY folder"
    )
    db.execute(
        "UPDATE temp.release_rows SET grp = CASE WHEN f.n = 1 THEN ? || '=' || f.value ELSE grp END, "
        "how = CASE WHEN f.n = 1 THEN 1 ELSE 2 END FROM temp.release_folders f "
        "WHERE release_rows.how = 3 AND release_rows.folder = f.folder",
        [o.group_by],
    )


def field_refusal(db: sqlite_utils.Database, o: Options) -> str | None:
    """Why `o.group_by` cannot group this release (no clip of it carries the field, so every clip would be
    grouped by its folder), with the fields its clips do carry and how many carry each; None when some do."""
    if o.group_by == FOLDER:
        return None
    where, args = where_of(o, simulated=False)
    value = _value(o.group_by)
    if db.execute(
        f"SELECT EXISTS (SELECT 1 {JOINS} WHERE {where} AND {value} IS NOT NULL AND {value} <> '')", args
    ).fetchone()[0]:
        return None
    rows = db.execute(
        f"SELECT j.key, COUNT(*) {JOINS}, json_each(CASE WHEN json_valid(c.sidecar) AND "
        f"json_type(c.sidecar) = 'object' THEN c.sidecar END) j WHERE {where} "
        "GROUP BY j.key ORDER BY COUNT(*) DESC, j.key LIMIT 12",
        args,
    ).fetchall()
    n = db.execute(f"SELECT COUNT(*) {JOINS} WHERE {where}", args).fetchone()[0]
    carried = ", ".join(f"{str(k)[:40]} ({c:,} of {n:,} clips)" for k, c in rows)
    return (
        f"--group-by {o.group_by}: no clip of this release carries that field in its sidecar, so every clip would "
        "be grouped by its folder. "
        + (f"The fields its clips carry: {carried}. Give one of them, or" if rows else "Its clips carry none: give")
        + f" --group-by {FOLDER} to group every clip by its folder."
    )


def place_groups(db: sqlite_utils.Database, o: Options, keep: bool) -> dict[str, int]:
    """Step 2: every group's split (temp.release_groups): kept where the release before placed it (`keep`, from
    temp.release_prev), the others as data.release.stratify says. Returns groups per split."""
    shares = dict(o.shares)
    totals = dict(db.execute("SELECT hazard, COUNT(*) FROM temp.release_rows GROUP BY hazard").fetchall())
    placer = stratify.Placer(shares, totals)
    db.conn.create_function("cw_release_rank", 1, lambda key: stratify.rank(o.seed, key), deterministic=True)
    db.conn.create_function("cw_release_band", 1, stratify.band, deterministic=True)
    if keep:
        _kept(db, list(shares))
    per_split = {name: 0 for name in shares}
    pending: list[tuple[str, str]] = []

    def record(placed: dict[str, str]) -> None:
        for group, split in placed.items():
            per_split[split] += 1
            pending.append((group, split))
            if len(pending) >= BATCH:
                flush()

    def flush() -> None:
        db.conn.executemany("INSERT INTO temp.release_groups (grp, split) VALUES (?, ?)", pending)
        pending.clear()

    kept_rows = db.execute(
        "SELECT r.grp, r.hazard, COUNT(*), k.split FROM temp.release_rows r JOIN temp.release_kept k ON k.grp = r.grp "
        "GROUP BY r.grp, r.hazard ORDER BY r.grp, r.hazard"
    )
    for grp, hist, split in _groups(kept_rows):
        record({grp: placer.put(split, hist)})
    new = "FROM temp.release_rows r WHERE NOT EXISTS (SELECT 1 FROM temp.release_kept k WHERE k.grp = r.grp)"
    count = db.execute(f"SELECT COUNT(DISTINCT r.grp) {new}").fetchone()[0]
    ordered = (
        "SELECT r.grp, r.hazard, COUNT(*) FROM temp.release_rows r "
        "JOIN (SELECT grp, COUNT(*) AS size FROM temp.release_rows GROUP BY grp) s ON s.grp = r.grp "
        "WHERE NOT EXISTS (SELECT 1 FROM temp.release_kept k WHERE k.grp = r.grp) "
        "GROUP BY r.grp, r.hazard ORDER BY cw_release_band(s.size) DESC, cw_release_rank(r.grp), r.grp, r.hazard"
    )
    if count <= stratify.IN_MEMORY:
        record(stratify.place_all(placer, [(g, h) for g, h, _ in _groups(db.execute(ordered))], shares))
    else:
        total = sum(totals.values())
        heavy_rows = db.execute(
            "SELECT r.grp, r.hazard, COUNT(*) FROM temp.release_rows r JOIN (SELECT grp, COUNT(*) AS size "
            f"{new} GROUP BY grp ORDER BY size DESC, cw_release_rank(grp), grp LIMIT ?) s ON s.grp = r.grp "
            "GROUP BY r.grp, r.hazard ORDER BY s.size DESC, cw_release_rank(r.grp), r.grp, r.hazard",
            [size_search.SEARCHED],
        )
        heavy = [(g, h) for g, h, _ in _groups(heavy_rows) if stratify.heavy(sum(h.values()), shares, total)]
        rest = db.execute(f"SELECT COUNT(*) {new}").fetchone()[0] - sum(sum(h.values()) for _, h in heavy)
        record(stratify.place_heavy(placer, heavy, rest, shares))
        searched = {g for g, _ in heavy}
        for grp, hist, _ in _groups(db.execute(ordered)):
            if grp not in searched:
                record({grp: placer.place(hist)})
    flush()
    return per_split


def _groups(cursor) -> Iterator[tuple[str, dict[str, int], Any]]:
    """(group, level -> clips, the row's fourth column if any) from rows of one group that are consecutive."""
    group, hist, extra = None, {}, None
    for row in cursor:
        grp, hazard, n = row[:3]
        if grp != group:
            if group is not None:
                yield group, hist, extra
            group, hist = grp, {}
            extra = row[3] if len(row) > 3 else None
        hist[hazard] = n
    if group is not None:
        yield group, hist, extra


def _kept(db: sqlite_utils.Database, names: list[str]) -> None:
    """temp.release_kept: each group of this release that the release before placed, with the split most of its
    earlier clips sat in (its clips then, by clip, and clips then of the same group name that are not released
    now; ties: the split named first). A split not asked for now keeps nothing."""
    rank = " ".join(f"WHEN ? THEN {i}" for i in range(len(names)))
    db.execute(
        "INSERT INTO temp.release_kept (grp, split) SELECT grp, split FROM ("
        f"SELECT grp, split, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY COUNT(*) DESC, CASE split {rank} END) AS i "
        "FROM (SELECT r.grp AS grp, p.split AS split FROM temp.release_prev p "
        "JOIN temp.release_rows r ON r.clip_id = p.clip_id "
        "UNION ALL SELECT p.grp, p.split FROM temp.release_prev p "
        "WHERE NOT EXISTS (SELECT 1 FROM temp.release_rows r WHERE r.clip_id = p.clip_id) "
        "AND EXISTS (SELECT 1 FROM temp.release_rows r WHERE r.grp = p.grp)) "
        f"WHERE split IN ({', '.join('?' * len(names))}) GROUP BY grp, split) WHERE i = 1",
        [*names, *names],
    )


def cases(db: sqlite_utils.Database) -> list[tuple[int, int]]:
    """(clips, groups) for each way a clip got its group (HOW, in order)."""
    found = {
        h: (n, g)
        for h, n, g in db.execute("SELECT how, COUNT(*), COUNT(DISTINCT grp) FROM temp.release_rows GROUP BY how")
    }
    return [found.get(h, (0, 0)) for h in range(len(HOW))]
