"""Release a training set: the approved captions of a filter, split into train, val and test by group so that no
drive leaks into two splits, written as the files trainers read, with a dataset card whose figures are measured.

    python -m data.release --data-dir var --out /data/releases/av-hazard-v1 --name av-hazard
    python -m data.release --data-dir var --out /tmp/rain --weather rain --group-by vehicle --seed 7

What is released (`Options.checked`, data.release.options): the clips of the filter (data.clips.Filter,
every clip-filter flag; review status approved unless another is asked) with a current caption. Rejected clips,
clips flagged broken, clips whose ingest failed and clips whose file is gone never are: asking for them is refused
with a message. Text written by the simulated fleet (or edited from it) is left out unless `include_simulated`, and
then flagged on every record and on the card.

Before anything is recorded (so that a refusal uses no version number): the folder (data.release.out:
one that holds something, or cannot be written, is refused with a sentence), something to release, a group field
some clip carries, and the newest earlier release of the name, whose manifest must be the one written (its
SHA-256) unless `reshuffle`; then the staging folder is made.

How (`release`), in one consistent read of the database (a read transaction: a clip approved meanwhile is in the
next release, not half in this one):
1. Each clip's group (the sidecar's `group_by` field, else the value its folder's clips agree on, else its
   folder) and hazard level go to a temporary table (data.release.placement).
2. The earlier release's manifest is loaded (data.release.changes); its groups keep their splits and the
   others are placed (data.release.stratify: whole groups, stratified by hazard level, sized by a search where a few
   heavy groups decide; streamed from SQLite in placing order), their split kept in a second temporary table.
3. data.export's record builder (`export.iter_rows`: the export's records, lineage included) streams the clips
   in id order; each record is written to its split's files (data.release.files: JSONL, Parquet, Qwen's
   SFT, the messages format) and counted for the card (data.release.records); with `media` copy or link
   the clips go under the release (data.release.media).
4. What changed since the release before is compared in SQL (data.release.changes); the batches the clips
   come from, with their Quality decisions, and the random samples they are in are read
   (data.release.batches).
The files are written into a hidden staging folder beside `out` with an unpredictable name, made read-only and
renamed to `out` at the end: a failed release leaves nothing at `out` and removes only what it made. README.md
is the card (data.release.card) under a Hugging Face header, beside LLaMA-Factory's dataset_info.json
(data.release.meta). The release is recorded in `releases` (m021): reserved before, finished after, never
changed (triggers). The card reports the Quality figures measured here (`_measure`) over the clips it releases.

Memory does not grow with the clips: the groups and splits live in SQLite's temporary tables, records stream,
parquet is written in row groups (docs/BENCHMARKS.md, "Training-set release").

The release wing (data/release/) reads the quality wing (a card reports the Quality figures: data.quality's
report, agreement and estimate), and nothing in data/ outside the wing imports it (tests/test_structure.py);
`python -m data.release` runs this module's `main` (data/release/__main__.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import sqlite_utils

from data import clips, copied_saves, events, filter_args, users
from data.db import immediate, now
from data.errors import DataError, Forbidden
from data.quality.accuracy import report
from data.quality.estimates import estimate, samples_for
from data.quality.pairs import Scope
from data.quality.reviewers import agreement
from data.release import (
    batches as release_batches,
    card,
    changes as release_changes,
    media as release_media,
    meta as release_meta,
    out as release_out,
    placement,
    records as release_records,
    stratify,
)
from data.release.options import DEFAULT_GROUP_BY, DEFAULT_LICENSE, DEFAULT_NAME, MEDIA, Options
from data.release.placement import FOLDER


@dataclass
class Result:
    """A release written: its row id, name and version, folder, clips per split, what changed since the release
    before (None for the first), clips left out for simulated text, the card's text, and the released clips whose
    caption repeats another clip's, word for word, as a person saved it."""

    id: int
    name: str
    version: int
    path: Path
    counts: dict[str, int]
    changes: dict | None
    simulated_left_out: int
    card: str
    copied: int = 0  # released clips whose caption is a person's save of another clip's text (data.copied_saves)
    batches: release_batches.Batches | None = None  # the batches the clips come from, with their decisions


@contextlib.contextmanager
def _snapshot(db: sqlite_utils.Database) -> Iterator[None]:
    """One read transaction for every step (WAL: writers go on meanwhile, unseen); the temporary tables are made
    in it and go with its rollback (nothing but them is written)."""
    if db.conn.in_transaction:
        raise RuntimeError("a release reads in a transaction of its own")
    db.execute("BEGIN")
    try:
        placement.temp_tables(db)
        yield
    finally:
        db.execute("ROLLBACK")


def _measure(db: sqlite_utils.Database, o: Options) -> card.Measured:
    """The Quality figures for the card, over the approved clips of the release's filter that it releases (those
    with simulated text only when it releases them); reading them may store pairs not stored yet: done before the
    snapshot, which only reads."""
    approved = dataclasses.replace(o.filter, review_status="approved")
    real_only = not o.include_simulated
    r = report(db, approved, Scope(), by=("model", "prompt"), real_only=real_only)
    agree = agreement(db, approved, real_only=real_only)
    newest = samples_for(db, Scope(job_id=o.filter.job_id))
    est = estimate(db, newest[0]["id"]) if newest else None
    where, args = clips._where(approved)
    simulated = db.execute(
        f"SELECT COUNT(*) {placement.JOINS} WHERE {' AND '.join(where)} AND NOT {placement.REAL}", args
    ).fetchone()[0]
    return card.Measured(r, agree, est, simulated)


def _previous(db: sqlite_utils.Database, name: str) -> dict | None:
    row = next(
        db.query(
            "SELECT id, version, path, manifest_sha256 FROM releases WHERE name = ? AND state = 'done' "
            "ORDER BY version DESC LIMIT 1",
            [name],
        ),
        None,
    )
    return dict(row) if row else None


def _reserve(
    db: sqlite_utils.Database, o: Options, out: Path | None, into: Path | None, actor: str
) -> tuple[int, int, dict | None, Path]:
    """The release's row (state 'writing') with the next version of its name, the release before it, and its
    folder (`out`, or NAME-vVERSION in `into`)."""
    with immediate(db):
        version = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM releases WHERE name = ?", [o.name]).fetchone()
        out = out or (into / f"{o.name}-v{version[0]}")
        previous = _previous(db, o.name)
        cur = db.execute(
            "INSERT INTO releases (name, version, path, created_by, created_at, options, previous_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [o.name, version[0], str(out), actor, now(), json.dumps(o.to_dict()), previous and previous["id"]],
        )
    return cur.lastrowid, version[0], previous, out


def _kept_refusal(previous: dict, why: str) -> DataError:
    return DataError(
        f"The release before (v{previous['version']}, {previous['path']}) is the record of where each group was "
        f"placed, and it cannot be trusted: {why}. Put it back as it was written, or release with --reshuffle to "
        "place every group anew (the card then counts the clips that change split)."
    )


def _check_something(db: sqlite_utils.Database, o: Options) -> None:
    """A DataError saying why, when no clip of the options would be released."""
    where, args = placement.where_of(o, simulated=False)
    if db.execute(f"SELECT EXISTS (SELECT 1 {placement.JOINS} WHERE {where})", args).fetchone()[0]:
        return
    where, args = placement.where_of(o, simulated=True)
    simulated = db.execute(f"SELECT COUNT(*) {placement.JOINS} WHERE {where}", args).fetchone()[0]
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
    clip_root: str | Path | None = None,
) -> Result:
    """Write a release of `options` to the folder `out` (new, or empty), or to NAME-vVERSION in the folder `into`,
    and record it; see the module docstring. Forbidden below the lead role; DataError for options that would
    release what must not be or nothing at all, a folder that holds something or cannot be written, or a release
    before whose manifest cannot be trusted (unless reshuffling). `progress(n)` is called every 1,000 records
    written. `clip_root`: where the clips are, for --media copy or link (default: the library's recorded root)."""
    if not users.at_least(role, "lead"):
        raise Forbidden(f"Only a lead releases a training set; you are {role or 'not signed in'}.")
    if (out is None) == (into is None):
        raise ValueError("give the release's folder (out) or the folder to make it in (into)")
    o = options.checked()
    if out is not None:
        out = Path(out).absolute()
        release_out.check_out(out)
    _check_something(db, o)
    refusal = placement.field_refusal(db, o)
    if refusal:
        raise DataError(refusal)
    previous = _previous(db, o.name)
    if previous and not o.reshuffle and (why := release_changes.read(previous)):
        raise _kept_refusal(previous, why)
    root = release_media.clip_root(db, o.media, clip_root)
    measured = _measure(db, o)
    chooser = release_records.Prompts(db)
    into = into and Path(into).absolute()
    staging = release_out.Staging.make(out.parent if out else into, out.name if out else o.name, out or into)
    rel_id = None
    try:
        rel_id, version, previous, out = _reserve(db, o, out, into, actor)
        release_out.check_out(out)
        tally = card.Tally([name for name, _ in o.shares])
        with _snapshot(db):
            placement.select_rows(db, o)
            unreadable = release_changes.read(previous, into=db) if previous else None
            if unreadable and not o.reshuffle:
                raise _kept_refusal(previous, unreadable)
            groups = placement.place_groups(db, o, keep=bool(previous) and not unreadable and not o.reshuffle)
            cases = placement.cases(db)
            where, args = placement.where_of(o, simulated=True)
            left_out = db.execute(f"SELECT COUNT(*) {placement.JOINS} WHERE {where}", args).fetchone()[0]
            copied = _copied(db)
            batches = release_batches.read(db, o.filter.review_status == "approved")
            manifest_sha256, nbytes = release_records.write(db, o, staging.path, tally, chooser, progress)
            if root is not None:
                release_media.place(db, o.media, root, staging.path)
            changes = release_changes.changes(db, previous, unreadable)
        if changes is not None:
            changes["reshuffled"] = o.reshuffle
        if o.filter.review_status == "approved":
            measured.sampling = release_batches.sampling_words(batches)
        made_at = now()
        text = card.render(
            name=o.name,
            version=version,
            made_by=actor,
            made_at=made_at,
            options=o.to_dict(),
            tally=tally,
            groups=groups,
            cases=cases,
            simulated_left_out=left_out,
            prompt_fallback=chooser.fallback,
            default_prompt=f"{chooser.default['name']} v{chooser.default['version']}",
            measured=measured,
            changes=changes,
            batches=batches,
            placeholders=sorted(chooser.placeholders),
        )
        release_meta.write(staging.path, o, version, tally)
        (staging.path / "README.md").write_text(
            release_meta.header(o, version, tally, nbytes) + text + "\n", encoding="utf-8", newline="\n"
        )
        staging.seal(out)
    except BaseException as e:
        staging.remove()
        if rel_id is not None:
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
    return Result(rel_id, o.name, version, out, counts, changes, left_out, text, copied, batches)


def _copied(db: sqlite_utils.Database) -> int:
    """Released clips (temp.release_rows) whose caption version is a person's save of another clip's text: what
    the review form could save onto the wrong clip until 2026-12-03, or a pasted sentence."""
    ids = sorted({f.caption_id for f in copied_saves.find(db)})
    return sum(
        db.execute(
            f"SELECT COUNT(*) FROM temp.release_rows WHERE caption_id IN ({', '.join('?' * len(part))})", part
        ).fetchone()[0]
        for part in (ids[i : i + 500] for i in range(0, len(ids), 500))
    )


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
    """What a release wrote, what changed and what the Quality decisions say, in a few sentences (the command's
    output, the app's message)."""
    counts = ", ".join(f"{name} {n:,}" for name, n in r.counts.items())
    out = f"Wrote {r.name} v{r.version} to {r.path}: {sum(r.counts.values()):,} clips ({counts})."
    empty = [name for name, n in r.counts.items() if not n]
    if empty:
        out += f" {' and '.join(empty)}: no clip (too few groups for these splits; see the card)."
    if r.simulated_left_out:
        out += f" {r.simulated_left_out:,} clips with simulated text left out (--include-simulated releases them)."
    if r.copied:
        out += (
            f" {r.copied:,} released {'clip carries' if r.copied == 1 else 'clips carry'} a person's save of another "
            "clip's caption, word for word: "
            "`python -m data.copied_saves` lists them (a stock sentence is fine, another video's caption is not)."
        )
    c = r.changes
    if c is None:
        out += f" The first release named {r.name}."
    elif c.get("unreadable"):
        out += f" What changed since v{c['previous_version']} is not known: {c['unreadable']}."
    else:
        out += (
            f" Since v{c['previous_version']}: {c['added']:,} added, {c['removed']:,} removed, {c['relabelled']:,} "
            f"re-labelled, {c['text_only']:,} with new text only. {release_changes.moved_words(c)}"
        )
    if r.batches is not None:
        out += " " + release_batches.words(r.batches)
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
        "  python -m data.release --data-dir var --out /data/av-v2 --name av-hazard --media copy --license cc-by-4.0\n"
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
        help=f"the sidecar field whose clips stay in one split (default {DEFAULT_GROUP_BY}); a clip without it "
        "joins the value its folder's clips agree on, else its folder. A field no clip carries is refused with "
        f"those that exist; --group-by {FOLDER} groups every clip by its folder",
    )
    parser.add_argument(
        "--splits", default=stratify.DEFAULT, help=f"split=share pairs adding up to 1 (default {stratify.DEFAULT})"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="orders groups of like size; same seed, same splits (default 0)"
    )
    parser.add_argument(
        "--include-simulated",
        action="store_true",
        help="also release captions written by the simulated fleet (flagged on every record and on the card)",
    )
    parser.add_argument(
        "--reshuffle",
        action="store_true",
        help="place every group anew; without it each group stays in the split the newest earlier release of this "
        "name put it in (its manifest is the record) and only new groups are placed. The card counts the clips "
        "that change split",
    )
    parser.add_argument(
        "--license",
        help=f"the licence the card's Hugging Face header names (cc-by-4.0, apache-2.0, ...; default "
        f"{DEFAULT_LICENSE}: the team's own terms, said on the card)",
    )
    parser.add_argument(
        "--media",
        choices=MEDIA,
        default="none",
        help="none: paths point into the clip root (default); copy: the clips are copied under media/ and checked "
        "against their sha256; link: symbolic links to them under media/. With copy or link every path in every "
        "file is relative to the release",
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
            tuple(stratify.parse(args.splits).items()),
            args.seed,
            args.name,
            args.include_simulated,
            args.reshuffle,
            args.license,
            args.media,
        )
        if sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(unit="clip", desc="release", file=sys.stderr)
        r = release(
            db,
            options,
            args.out,
            actor=args.user,
            role="lead",
            progress=bar and (lambda n: bar.update(n - bar.n)),
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
