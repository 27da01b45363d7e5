"""Release a training set: the approved captions of a filter, split into train, val and test by group so that no
drive leaks into two splits, written as the files trainers read, with a dataset card whose figures are measured.

    python -m data.release --data-dir var --out /data/releases/av-hazard-v1 --name av-hazard
    python -m data.release --data-dir var --out /tmp/rain --weather rain --group-by vehicle --seed 7

What is released (`Options.checked`): the clips of the filter (data.clips.Filter, every clip-filter flag; review
status approved unless another is asked) with a current caption. Rejected clips, clips flagged broken, clips whose
ingest failed and clips whose file is gone never are: asking for them is refused with a message. Text written by
the simulated fleet (or edited from it) is left out unless `include_simulated`, and then flagged on every record
and on the card.

How (`release`), in one consistent read of the database (a read transaction: a clip approved meanwhile is in the
next release, not half in this one):
1. Each clip's group (the sidecar's `group_by` field, else its folder) and hazard level go to a temporary table.
2. Groups are placed into splits (data.quality.splits: whole groups, stratified by hazard level), streamed from
   SQLite in placing order, their split kept in a second temporary table.
3. data.export's record builder (`export.iter_rows`: the export's records, lineage included) streams the clips
   in id order; each record is written to its split's files (data.quality.release_files) and counted for the card.
4. What changed since the release before of the same name is read from its manifest (its hash checked).
The files are written into a hidden folder beside `out`, made read-only and renamed to `out` at the end: a
failed release leaves nothing at `out`. The release is recorded in `releases` (m021): reserved before, finished
after, never changed (triggers); a folder that exists and is not empty is never written over.

Memory does not grow with the clips: the groups and splits live in SQLite's temporary tables, records stream,
parquet is written in row groups (docs/BENCHMARKS.md, "Training-set release").

Why this lives in the quality wing: a card reports the Quality figures (data.quality.report, agreement,
estimate), and nothing in data/ outside the wing imports it (tests/test_structure.py); `python -m data.release`
is a launcher beside the wing (data/release.py), as `python -m data.ingest` is beside the library wing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import hashlib
import json
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import sqlite_utils

from data import caption_history, clips, events, export, filter_args, prompts, users
from data.clips import Filter
from data.db import immediate, now
from data.errors import DataError, Forbidden
from data.quality import card, release_files, splits
from data.quality.accuracy import report
from data.quality.estimates import estimate, samples_for
from data.quality.pairs import Scope
from data.quality.reviewers import agreement

DEFAULT_GROUP_BY = "route"
DEFAULT_NAME = "release"
NEVER = ("rejected", "broken")  # review states never released
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FIELD = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,4}")
BATCH = 10_000  # group -> split rows inserted at a time


@dataclass(frozen=True)
class Options:
    """What a release holds and how it is split: the clip filter, the sidecar field that groups clips, the
    split shares (name -> share, in file order), the seed, the release's name, and whether simulated text is
    released (flagged)."""

    filter: Filter = Filter()
    group_by: str = DEFAULT_GROUP_BY
    shares: tuple[tuple[str, float], ...] = tuple(splits.parse(splits.DEFAULT).items())
    seed: int = 0
    name: str = DEFAULT_NAME
    include_simulated: bool = False

    def checked(self) -> Options:
        """These options made explicit (review status approved unless another is asked; ingest ok; a current
        caption), or a DataError saying what to ask instead."""
        f = self.filter.checked()
        status = f.review_status or "approved"
        if status in NEVER:
            raise DataError(
                f"Rejected and broken clips are never released (the filter asks for {status} ones): choose "
                "approved (the default) or unreviewed."
            )
        if f.failed:
            raise DataError("Clips whose ingest failed are never released: leave out --ingest-failed yes.")
        if f.include_missing:
            raise DataError("A release lists files a trainer reads: clips whose file is gone are never released.")
        if f.has_caption is False:
            raise DataError("A release is captions: --has-caption no would select nothing.")
        if not _FIELD.fullmatch(str(self.group_by or "")):
            raise DataError(
                "--group-by: a sidecar field, such as route, vehicle or drive_id (letters, digits, _ or -; "
                f"a.b for a nested field), not {str(self.group_by)[:40]!r}."
            )
        if not _NAME.fullmatch(str(self.name or "")):
            raise DataError(
                "--name: letters, digits, '.', '_' or '-', at most 64, starting with a letter or digit "
                f"(for example av-hazard), not {str(self.name)[:40]!r}."
            )
        shares = dict(self.shares)
        if len(shares) != len(self.shares) or abs(sum(shares.values()) - 1) > 1e-6 or not shares:
            raise DataError(f"--splits: shares that add up to 1, for example {splits.DEFAULT}.")
        try:
            seed = int(self.seed)
        except (TypeError, ValueError):
            raise DataError(f"--seed: a whole number, not {str(self.seed)[:20]!r}.") from None
        if not 0 <= seed < 2**63:
            raise DataError("--seed: a whole number of 0 or more.")
        f = dataclasses.replace(f, review_status=status, failed=False, has_caption=True)
        return dataclasses.replace(self, filter=f, seed=seed)

    def to_dict(self) -> dict:
        return {
            "filter": self.filter.to_dict(),
            "group_by": self.group_by,
            "splits": dict(self.shares),
            "seed": self.seed,
            "name": self.name,
            "include_simulated": self.include_simulated,
        }


@dataclass
class Result:
    """A release written: its row id, name and version, folder, clips per split, what changed since the release
    before (None for the first), clips left out for simulated text, and the card's text."""

    id: int
    name: str
    version: int
    path: Path
    counts: dict[str, int]
    changes: dict | None
    simulated_left_out: int
    card: str


# -- the selection, in SQL -------------------------------------------------------------------------------------

_JOINS = "FROM clips c JOIN captions k ON k.id = c.current_caption_id LEFT JOIN captions o ON o.id = k.origin_id"
_REAL = "(COALESCE(k.simulated, 0) = 0 AND COALESCE(o.simulated, 0) = 0)"  # export's `simulated` is false
# a clip's folder (its path up to the last '/'), '.' at the root
_FOLDER = "COALESCE(NULLIF(rtrim(rtrim(c.path, replace(c.path, '/', '')), '/'), ''), '.')"


def _json_path(field: str) -> str:
    return "$" + "".join(f'."{part}"' for part in field.split("."))


def _where(o: Options, *, simulated: bool) -> tuple[str, list[Any]]:
    """The WHERE of the release's clips (`simulated`: those left out for their simulated text instead)."""
    where, args = clips._where(o.filter)
    if not o.include_simulated:
        where = [*where, _REAL if not simulated else f"NOT {_REAL}"]
    elif simulated:
        where = [*where, "0"]
    return " AND ".join(where), args


def _temp_tables(db: sqlite_utils.Database) -> None:
    db.execute(
        "CREATE TEMP TABLE release_rows (clip_id INTEGER PRIMARY KEY, caption_id INTEGER NOT NULL, "
        "grp TEXT NOT NULL, by_field INTEGER NOT NULL, hazard TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX temp.release_rows_grp ON release_rows(grp, hazard)")
    db.execute("CREATE TEMP TABLE release_groups (grp TEXT PRIMARY KEY, split TEXT NOT NULL) WITHOUT ROWID")
    db.execute(
        "CREATE TEMP TABLE release_prev (clip_id INTEGER PRIMARY KEY, caption_id INTEGER NOT NULL, split TEXT NOT NULL)"
    )


def _select_rows(db: sqlite_utils.Database, o: Options) -> None:
    """Step 1: each released clip with its caption version, group and hazard level."""
    where, args = _where(o, simulated=False)
    db.execute(
        "INSERT INTO temp.release_rows (clip_id, caption_id, grp, by_field, hazard) "
        "SELECT id, cap, CASE WHEN v IS NOT NULL AND v <> '' THEN ? || '=' || v ELSE 'folder=' || folder END, "
        "v IS NOT NULL AND v <> '', hazard FROM ("
        "SELECT c.id AS id, k.id AS cap, "
        "CAST(CASE WHEN json_valid(c.sidecar) THEN json_extract(c.sidecar, ?) END AS TEXT) AS v, "
        f"{_FOLDER} AS folder, COALESCE(c.hazard_level, '') AS hazard {_JOINS} WHERE {where})",
        [o.group_by, _json_path(o.group_by), *args],
    )


def _place_groups(db: sqlite_utils.Database, o: Options) -> dict[str, int]:
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


class _Prompts:
    """The prompt version each record is trained with: its origin machine caption's (by id, else name and
    version), or the newest version of the default prompt for text written from scratch (counted in
    `fallback`)."""

    def __init__(self, db: sqlite_utils.Database):
        self.default = prompts.latest(db)  # may install a newer preset: read before the snapshot
        listed = prompts.list_prompts(db)
        self.by_id = {p["id"]: p for p in listed}
        self.by_name = {(p["name"], p["version"]): p for p in listed}
        self.fallback = 0
        self.cache: dict[tuple, tuple[str, str, str]] = {}

    def encoded(self, record: dict) -> tuple[str, str, str]:
        """The record's prompt parts as JSON text (release_files.encoded_prompt), rendered for its camera as the
        runner sends it (data.prompts.render_user), made once per prompt version and camera."""
        p = self.of(record)
        camera = prompts.camera_of(record["path"], record["sidecar"])
        key = (p["id"], camera)
        if key not in self.cache:
            user = prompts.render_user(p, camera)
            self.cache[key] = release_files.encoded_prompt(f"{p['name']} v{p['version']}", p.get("system") or "", user)
        return self.cache[key]

    def of(self, record: dict) -> dict:
        o = record["origin"] or {}
        p = self.by_id.get(o.get("prompt_id")) or self.by_name.get((o.get("prompt_name"), o.get("prompt_version")))
        if p is None:
            self.fallback += 1
            p = self.default
        return p


def _write(
    db: sqlite_utils.Database,
    o: Options,
    root: Path,
    tally: card.Tally,
    chooser: _Prompts,
    progress: Callable[[int], None] | None,
) -> tuple[str, int]:
    """Step 3: every record into its split's files and the manifest; returns (the manifest's SHA-256, clips
    grouped by the sidecar field)."""
    (root / "sft").mkdir()
    schema, to_row = release_files.arrow_schema()
    files = {name: release_files.SplitFiles(root, name, schema, to_row) for name, _ in o.shares}
    digest = hashlib.sha256()
    by_field = 0
    placed = db.execute(
        "SELECT r.clip_id, r.grp, g.split, r.by_field FROM temp.release_rows r "
        "JOIN temp.release_groups g ON g.grp = r.grp ORDER BY r.clip_id"
    )
    try:
        with open(root / "manifest.jsonl", "w", encoding="utf-8", newline="\n") as manifest:
            n = 0
            for record in export.iter_rows(db, o.filter):
                if record["simulated"] and not o.include_simulated:
                    continue
                row = placed.fetchone()
                if row is None or row[0] != record["clip_id"]:
                    raise RuntimeError(f"the release's two reads disagree at clip {record['clip_id']}")
                _, group, split, field = row
                by_field += field
                line = release_files.manifest_line(record, split, group)
                manifest.write(line)
                digest.update(line.encode("utf-8"))
                files[split].add(record, release_files.sft_json(record, chooser.encoded(record)))
                tally.add(split, record)
                n += 1
                if progress and n % 1000 == 0:
                    progress(n)
            if placed.fetchone() is not None:
                raise RuntimeError("the release's two reads disagree: a clip was selected but not written")
    finally:
        for f in files.values():
            f.close()
    return digest.hexdigest(), by_field


def _changes(db: sqlite_utils.Database, previous: dict | None) -> dict | None:
    """Step 4: what changed since `previous` (a releases row, or None): clips added and removed, captions
    re-labelled (per label) or changed in text only, clips in another split. Reads the previous manifest (its
    SHA-256 must match the one recorded) into a temporary table; compares in SQL."""
    if previous is None:
        return None
    base = {"previous_id": previous["id"], "previous_version": previous["version"]}
    path = Path(previous["path"]) / "manifest.jsonl"
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            batch = []
            for raw in fh:
                digest.update(raw)
                line = json.loads(raw)
                batch.append((line["clip_id"], line["caption_id"], line["split"]))
                if len(batch) >= BATCH:
                    db.conn.executemany("INSERT INTO temp.release_prev VALUES (?, ?, ?)", batch)
                    batch = []
            db.conn.executemany("INSERT INTO temp.release_prev VALUES (?, ?, ?)", batch)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {**base, "unreadable": f"{path}: {type(e).__name__}: {e}"[:300]}
    if digest.hexdigest() != previous["manifest_sha256"]:
        return {**base, "unreadable": f"{path} is not the manifest that was written (its SHA-256 differs)"}

    def one(sql: str) -> int:
        return db.execute(sql).fetchone()[0]

    out = {
        **base,
        "previous_clips": one("SELECT COUNT(*) FROM temp.release_prev"),
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


@contextlib.contextmanager
def _snapshot(db: sqlite_utils.Database) -> Iterator[None]:
    """One read transaction for every step (WAL: writers go on meanwhile, unseen); the temporary tables are made
    in it and go with its rollback (nothing but them is written)."""
    if db.conn.in_transaction:
        raise RuntimeError("a release reads in a transaction of its own")
    db.execute("BEGIN")
    try:
        _temp_tables(db)
        yield
    finally:
        db.execute("ROLLBACK")


def _measure(db: sqlite_utils.Database, o: Options) -> card.Measured:
    """The Quality figures for the card, over the approved clips of the release's filter (reading them may store
    pairs not stored yet: done before the snapshot, which only reads)."""
    approved = dataclasses.replace(o.filter, review_status="approved")
    r = report(db, approved, Scope(), by=("model", "prompt"))
    agree = agreement(db, approved)
    newest = samples_for(db, Scope(job_id=o.filter.job_id))
    est = estimate(db, newest[0]["id"]) if newest else None
    where, args = clips._where(approved)
    simulated = db.execute(f"SELECT COUNT(*) {_JOINS} WHERE {' AND '.join(where)} AND NOT {_REAL}", args).fetchone()[0]
    return card.Measured(r, agree, est, simulated)


def _reserve(
    db: sqlite_utils.Database, o: Options, out: Path | None, into: Path | None, actor: str
) -> tuple[int, int, dict | None, Path]:
    """The release's row (state 'writing') with the next version of its name, the release before it, and its
    folder (`out`, or NAME-vVERSION in `into`)."""
    with immediate(db):
        version = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM releases WHERE name = ?", [o.name]).fetchone()
        out = out or (into / f"{o.name}-v{version[0]}")
        previous = next(
            db.query(
                "SELECT id, version, path, manifest_sha256 FROM releases WHERE name = ? AND state = 'done' "
                "ORDER BY version DESC LIMIT 1",
                [o.name],
            ),
            None,
        )
        cur = db.execute(
            "INSERT INTO releases (name, version, path, created_by, created_at, options, previous_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [o.name, version[0], str(out), actor, now(), json.dumps(o.to_dict()), previous and previous["id"]],
        )
    return cur.lastrowid, version[0], dict(previous) if previous else None, out


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(
            f"{out} exists and is not empty: a release is never written over. Give a new folder (for example "
            f"{out.name}-2 beside it)."
        )


def _seal(staging: Path, out: Path) -> None:
    """The files read-only, the folder renamed into place, then the folders read-only too."""
    for path in staging.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    try:
        os.rename(staging, out)  # an empty folder at `out` is replaced; a non-empty one refuses
    except OSError as e:
        raise DataError(
            f"Could not put the release at {out} ({e.strerror}): was something written there meanwhile?"
        ) from None
    for d in (out / "sft", out):
        d.chmod(0o555)


def _remove(path: Path) -> None:
    if not path.exists():
        return
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(stat.S_IRWXU)
    shutil.rmtree(path)


def _check_something(db: sqlite_utils.Database, o: Options) -> None:
    """A DataError saying why, when no clip of the options would be released."""
    where, args = _where(o, simulated=False)
    if db.execute(f"SELECT EXISTS (SELECT 1 {_JOINS} WHERE {where})", args).fetchone()[0]:
        return
    where, args = _where(o, simulated=True)
    simulated = db.execute(f"SELECT COUNT(*) {_JOINS} WHERE {where}", args).fetchone()[0]
    raise DataError(
        f"Nothing to release: no clip of this filter has a current caption in review status "
        f"{o.filter.review_status}"
        + (
            f" whose text is not simulated ({simulated:,} are simulated: include simulated text to release them, "
            "flagged)."
            if simulated
            else "."
        )
    )


def release(
    db: sqlite_utils.Database,
    options: Options,
    out: str | Path | None = None,
    *,
    into: str | Path | None = None,
    actor: str,
    role: str | None,
    progress: Callable[[int], None] | None = None,
) -> Result:
    """Write a release of `options` to the folder `out` (new, or empty), or to NAME-vVERSION in the folder `into`,
    and record it; see the module docstring. Forbidden below the lead role; DataError for options that would
    release what must not be or nothing at all, or a folder that holds something. `progress(n)` is called every
    1,000 records written."""
    if not users.at_least(role, "lead"):
        raise Forbidden(f"Only a lead releases a training set; you are {role or 'not signed in'}.")
    if (out is None) == (into is None):
        raise ValueError("give the release's folder (out) or the folder to make it in (into)")
    o = options.checked()
    if out is not None:
        out = Path(out).absolute()
        _check_out(out)
    _check_something(db, o)
    measured = _measure(db, o)
    chooser = _Prompts(db)
    rel_id, version, previous, out = _reserve(db, o, out, into and Path(into).absolute(), actor)
    staging = out.parent / f".{out.name}.partial-{rel_id}"
    try:
        _check_out(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        tally = card.Tally([name for name, _ in o.shares])
        with _snapshot(db):
            _select_rows(db, o)
            groups = _place_groups(db, o)
            where, args = _where(o, simulated=True)
            left_out = db.execute(f"SELECT COUNT(*) {_JOINS} WHERE {where}", args).fetchone()[0]
            manifest_sha256, by_field = _write(db, o, staging, tally, chooser, progress)
            changes = _changes(db, previous)
        made_at = now()
        text = card.render(
            name=o.name,
            version=version,
            made_by=actor,
            made_at=made_at,
            options=o.to_dict(),
            tally=tally,
            groups=groups,
            grouped_by_field=by_field,
            simulated_left_out=left_out,
            prompt_fallback=chooser.fallback,
            default_prompt=f"{chooser.default['name']} v{chooser.default['version']}",
            measured=measured,
            changes=changes,
        )
        (staging / "README.md").write_text(text + "\n", encoding="utf-8")
        _seal(staging, out)
    except BaseException as e:
        _remove(staging)
        with immediate(db):
            db.execute(
                "UPDATE releases SET state = 'failed', finished_at = ?, error = ? WHERE id = ?",
                [now(), f"{type(e).__name__}: {e}"[:500], rel_id],
            )
        raise
    counts = {name: tally.n[name] for name, _ in o.shares}
    with immediate(db):
        db.execute(
            "UPDATE releases SET state = 'done', finished_at = ?, counts = ?, changes = ?, manifest_sha256 = ? "
            "WHERE id = ?",
            [made_at, json.dumps(counts), json.dumps(changes), manifest_sha256, rel_id],
        )
        events.record(db, actor, "release.written", name=o.name, version=version, path=str(out), clips=counts)
    return Result(rel_id, o.name, version, out, counts, changes, left_out, text)


def get(db: sqlite_utils.Database, release_id: int) -> dict | None:
    """One recorded release (options, counts and changes decoded), or None."""
    row = next(db.query("SELECT * FROM releases WHERE id = ?", [release_id]), None)
    if row is None:
        return None
    row = dict(row)
    for key in ("options", "counts", "changes"):
        row[key] = json.loads(row[key]) if row[key] else None
    return row


def summary(r: Result) -> str:
    """What a release wrote and what changed, in two sentences (the command's output, the app's message)."""
    counts = ", ".join(f"{name} {n:,}" for name, n in r.counts.items())
    out = f"Wrote {r.name} v{r.version} to {r.path}: {sum(r.counts.values()):,} clips ({counts})."
    empty = [name for name, n in r.counts.items() if not n]
    if empty:
        out += f" {' and '.join(empty)}: no clip (too few groups for these splits; see the card)."
    if r.simulated_left_out:
        out += f" {r.simulated_left_out:,} clips with simulated text left out (--include-simulated releases them)."
    c = r.changes
    if c is None:
        out += f" The first release named {r.name}."
    elif c.get("unreadable"):
        out += f" What changed since v{c['previous_version']} is not known: {c['unreadable']}."
    else:
        out += (
            f" Since v{c['previous_version']}: {c['added']:,} added, {c['removed']:,} removed, {c['relabelled']:,} "
            f"re-labelled, {c['text_only']:,} with new text only, {c['moved']:,} in another split."
        )
    return out


# -- the command line -------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from data import settings as settings_mod

    parser = argparse.ArgumentParser(
        prog="python -m data.release",
        description="Release a training set: the approved captions of a filter in train/val/test splits grouped by "
        "drive (no group in two splits, stratified by hazard level), as JSONL, Parquet and Qwen-VL SFT "
        "conversations, with a manifest and a dataset card (README.md) whose quality figures are measured. A "
        "release is never written over and never changes; the next one of the same name says what changed.",
        epilog="examples:\n"
        "  python -m data.release --data-dir var --out /data/releases/av-hazard-v1 --name av-hazard\n"
        "  python -m data.release --data-dir var --out /tmp/rain --weather rain --group-by vehicle --seed 7\n"
        "  python -m data.release --data-dir var --out /tmp/r --splits train=0.9,test=0.1\n"
        "  python -m data.release --data-dir var --out /tmp/demo --status unreviewed --include-simulated",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", help="the folder to write (new or empty; never written over); required")
    parser.add_argument(
        "--name", default=DEFAULT_NAME, help=f"the release's name; versions count up per name (default {DEFAULT_NAME})"
    )
    parser.add_argument(
        "--group-by",
        default=DEFAULT_GROUP_BY,
        help=f"the sidecar field whose clips stay in one split (default {DEFAULT_GROUP_BY}); a clip without it is "
        "grouped by its folder",
    )
    parser.add_argument(
        "--splits", default=splits.DEFAULT, help=f"split=share pairs adding up to 1 (default {splits.DEFAULT})"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="orders groups of like size; same seed, same splits (default 0)"
    )
    parser.add_argument(
        "--include-simulated",
        action="store_true",
        help="also release captions written by the simulated fleet (flagged on every record and on the card)",
    )
    parser.add_argument("--user", default=f"cli:{getpass.getuser()}", help="who the release is recorded as made by")
    settings_mod.add_arguments(parser, ["data_dir", "db"])
    filter_args.add_arguments(
        parser.add_argument_group(
            "which clips",
            "the clip filter (--status approved unless given; rejected and broken clips are never released)",
        )
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from data import settings as settings_mod
    from data.db import connect

    args = build_parser().parse_args(argv)
    if not args.out:
        print("error: --out DIR: the folder to write the release into (new or empty)", file=sys.stderr)
        return 2
    s = settings_mod.from_args(args)
    if not s.db.exists():
        print(f"error: no database at {s.db}", file=sys.stderr)
        return 2
    db = connect(s.db)
    bar = None
    try:
        options = Options(
            filter_args.from_args(args),
            args.group_by,
            tuple(splits.parse(args.splits).items()),
            args.seed,
            args.name,
            args.include_simulated,
        )
        if sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(unit="clip", desc="release", file=sys.stderr)
        r = release(
            db, options, args.out, actor=args.user, role="lead", progress=bar and (lambda n: bar.update(n - bar.n))
        )
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
        db.close()
    print(summary(r))
    print(f"The dataset card: {r.path / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
