"""Where a library's clips are: the clip root recorded in the database at ingest.

A library has one clip root. Ingest records the folder it scanned (`record_root`); everything that turns a
clip's relative path into a file -- the job runner's `file://` URLs, the web app's media route, the launcher's
`--allowed-local-media-path` -- starts from `settings_for(db, settings)`, which puts the recorded root in the
settings. Nothing finds a clip from the current directory or a default once a root is recorded.

The same call applies the library's recorded deployment (data.deployment: a head's media base, so that every
runner sends signed URLs there).

A second, different root is refused with a message (one library, one root: relative paths must stay unique);
a root that was moved is named in a clear error, and `python -m data.library move-root NEW` re-points the
library after checking that NEW holds the same files.

    python -m data.library show --data-dir var
    python -m data.library move-root /mnt/new/clips --data-dir var
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import sqlite_utils

from data import events, settings as settings_mod
from data.db import connect, immediate, now
from data.errors import DataError, RootMismatch, RootMissing
from data.library import deployment

# Folders that hold the system or other people's files: never a clip root (the replicas are allowed to read
# everything under the clip root, --allowed-local-media-path), not even with --force.
SYSTEM_FOLDERS = frozenset(
    Path(p)
    for p in (
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/mnt",
        "/media",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
    )
)
SYSTEM_TREES = tuple(
    Path(p) for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/sbin", "/sys", "/usr")
)


def _database_file(db: sqlite_utils.Database) -> Path | None:
    row = next(db.query("PRAGMA database_list"), None)
    return Path(row["file"]).resolve() if row and row.get("file") else None


def root_refusal(root: str | Path, db: sqlite_utils.Database) -> str | None:
    """Why `root` cannot be a clip root whatever its files, or None: a system folder or a home folder itself,
    a folder inside the system's trees, or one that holds this library's database (the replicas read anything
    under the clip root: the database has the sessions and password hashes)."""
    root = Path(root).resolve()
    if root in SYSTEM_FOLDERS or root == Path.home().resolve() or root.parent == Path("/home"):
        return f"{root} is a system or home folder, not a folder of clips"
    if any(root == t or t in root.parents for t in SYSTEM_TREES):
        return f"{root} is inside the system's folders, not a folder of clips"
    database = _database_file(db)
    if database is not None and root in database.parents:
        return (
            f"{root} holds this library's database ({database}): the replicas may read everything under the "
            "clip root. Keep the clips in a folder of their own"
        )
    return None


def recorded_root(db: sqlite_utils.Database) -> Path | None:
    """The library's clip root, or None if nothing was ingested since roots were recorded."""
    row = next(db.query("SELECT path FROM clip_roots ORDER BY id LIMIT 1"), None)
    return Path(row["path"]) if row else None


def record_root(db: sqlite_utils.Database, root: str | Path, *, actor: str = "ingest") -> Path:
    """Record `root` as the library's clip root at ingest; the same root again is a no-op. A different one
    raises RootMismatch saying what to do instead, unless the library has no clips yet (then it is the root)."""
    root = Path(root).resolve()
    refusal = root_refusal(root, db)
    with immediate(db):
        have = replaced = recorded_root(db)
        if have is not None and have != root and next(db.query("SELECT 1 FROM clips LIMIT 1"), None) is None:
            # a library without clips has no relative paths to keep: its root is simply the new one (move-root
            # has nothing to check there and refuses)
            db.execute("DELETE FROM clip_roots")
            have = None
        if have is None:
            if refusal:
                raise DataError(f"refused as the clip root: {refusal}.")
            db.execute("INSERT INTO clip_roots (path, added_at) VALUES (?, ?)", [str(root), now()])
            was = {"replaced": str(replaced)} if replaced else {}
            events.record(db, actor, "library.root", root=str(root), **was)
            return root
    if have != root:
        raise RootMismatch(
            f"this library's clips live under {have}, and {root} is another folder. Put the new clips under "
            f"{have} and ingest that folder, give the other folder its own library (another --data-dir), or, if "
            f"the clips moved, run: python -m data.library move-root {root} --db <this database>"
        )
    return root


def settings_for(db: sqlite_utils.Database, settings: settings_mod.Settings) -> settings_mod.Settings:
    """`settings` with clip_root set to the library's recorded root (unchanged if none is recorded yet), and the
    recorded deployment's role, media base and TTL (data.deployment). Raises RootMissing if the recorded root is
    gone, DeploymentMismatch if a setting contradicts the recorded deployment."""
    settings = deployment.settings_for(db, settings)
    root = recorded_root(db)
    if root is None:
        return settings
    if not root.is_dir():
        raise RootMissing(
            f"the clip root {root} recorded at ingest is not a folder any more. If the clips moved, run: "
            f"python -m data.library move-root NEW_FOLDER --db {settings.db}"
        )
    return dataclasses.replace(settings, clip_root=root)


def settings_for_path(settings: settings_mod.Settings) -> settings_mod.Settings:
    """`settings_for` with a connection of its own to `settings.db` (for start-up: runner, CLI, app, launcher).
    A database that does not exist yet has no recorded root (and is not created here)."""
    if not Path(settings.db).exists():
        return settings
    db = connect(settings.db)
    try:
        return settings_for(db, settings)
    finally:
        db.close()


def move_root(
    db: sqlite_utils.Database, new_root: str | Path, *, actor: str = "admin", sample: int = 50, force: bool = False
) -> dict:
    """Re-point the library at `new_root` after checking that it holds the library's files: of up to `sample`
    clips (present ones first: those marked missing are the ones that moved, and count too), at least one must
    exist there with its recorded size, `force` or not (the replicas may read everything under the clip root),
    and none may have another size (unless `force`). A folder that can never be a clip root (`root_refusal`: a
    system or home folder, one holding the database) is refused, `force` or not; so is any move of a library
    without clips (there is nothing to check: ingest records the root)."""
    new = Path(new_root).resolve()
    if not new.is_dir():
        raise DataError(f"{new} is not a folder")
    refusal = root_refusal(new, db)
    if refusal:
        raise DataError(f"refused as the clip root, even with --force: {refusal}.")
    old = recorded_root(db)
    rows = list(
        db.query(
            "SELECT path, size FROM clips WHERE size IS NOT NULL ORDER BY missing, id LIMIT ?",
            [sample],
        )
    )
    if not rows:  # nothing could show that the folder holds this library's clips
        raise DataError(
            "this library has no clips yet: there is nothing to move. Ingest the folder that holds the clips "
            "(python -m data.library.ingest ROOT): it records the root."
        )
    found = [r for r in rows if (new / r["path"]).is_file()]
    wrong = [r["path"] for r in found if os.path.getsize(new / r["path"]) != r["size"]]
    if len(wrong) == len(found):
        # even with --force: the replicas may read everything under the clip root, so it must be the library's
        # own folder (~/.ssh or /var/lib hold none of its clips)
        why = (
            f"none of {len(rows)} sampled clips is there"
            if not found
            else f"the {len(found)} sampled clips found there all have another size (e.g. {wrong[0]})"
        )
        raise DataError(
            f"{new} is not this library's clip root: {why}. The clip root must hold the library's clips, even "
            "with --force; check the folder."
        )
    if wrong and not force:
        raise DataError(
            f"{new} does not look like this library's clip root: {len(wrong)} sampled clips have another size "
            f"there (e.g. {wrong[0]}). Check the folder, or pass --force to move anyway."
        )
    with immediate(db):
        db.execute("DELETE FROM clip_roots")
        db.execute(
            "INSERT INTO clip_roots (path, added_at, moved_from) VALUES (?, ?, ?)",
            [str(new), now(), str(old) if old else None],
        )
        events.record(
            db,
            actor,
            "library.move_root",
            root=str(new),
            moved_from=str(old) if old else None,
            checked=len(rows),
            found=len(found),
        )
    return {"root": str(new), "moved_from": str(old) if old else None, "checked": len(rows), "found": len(found)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data.library",
        description="Show or move the clip root the library recorded at ingest.",
        epilog="examples:\n"
        "  python -m data.library show --data-dir var\n"
        "  python -m data.library move-root /mnt/new/clips --data-dir var",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print the recorded clip root")
    move = sub.add_parser("move-root", help="re-point the library at the folder its clips moved to")
    move.add_argument("new_root", help="the folder that now holds the clips (same relative paths)")
    move.add_argument(
        "--force",
        action="store_true",
        help="move even if some sampled clips have another size there (the folder must still hold the library's clips)",
    )
    settings_mod.add_command_arguments(parser, (show, move), ["data_dir", "db"])
    args = parser.parse_args(argv)
    s = settings_mod.from_args(args)
    db = connect(s.db)
    try:
        if args.cmd == "show":
            root = recorded_root(db)
            print(root if root else "no clip root recorded yet (ingest a folder first)")
            return 0
        out = move_root(db, args.new_root, force=args.force)
        print(
            f"clip root is now {out['root']} (was {out['moved_from']}; {out['found']} of {out['checked']} "
            "sampled clips found there)"
        )
        return 0
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()


if __name__ == "__main__":
    sys.exit(main())
