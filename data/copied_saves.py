"""Saves whose text is another clip's: the audit of a library for what the review form wrote onto the wrong clip.

Until 2026-12-03 (webapp.form_echo), `n` then `a` typed back to back sent clip A's text with clip B's state: the
approve saved A's caption onto B as the annotator's edit and approved B. Such a version is a person's save whose
text is word for word a caption another clip had before it, and which the version it was made from did not have.
A person may also have pasted a stock sentence on purpose, so the audit lists, it does not judge:

    python -m data.copied_saves --data-dir var            # lists them, the decided ones first, and what --reset does
    python -m data.copied_saves --data-dir var --reset    # those still decided on that version: unreviewed again
    python -m data.copied_saves --data-dir var --reset --except-clip 12,40 --except-text "No hazards, dry road."

`--reset` sets each clip whose current version is such a save and which is approved or rejected back to
unreviewed, with a `review.reset` event that names the other clip and the decision it undid. An export and a
release then no longer take the copied caption as approved; a reviewer sees the clip in the queue again. The
listing says, line by line, which clips `--reset` resets ("will be reset") and which it leaves: a stock sentence
typed on purpose is excepted by its text (`--except-text`, as many as needed, or `--except-file` with one text a
line; compared with runs of spaces as one), a clip by its id (`--except-clip`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import sqlite_utils

from data import events
from data.db import immediate, now

FIXED_ON = "2026-12-03"  # the day webapp.form_echo stopped the review form saving onto the wrong clip
MIN_CHARS = 40  # shorter texts ("No hazards.") are typed alike on many clips on purpose


@dataclass(frozen=True)
class CopiedSave:
    caption_id: int
    clip_id: int
    version: int
    author: str
    created_at: float
    same_as_clip: int  # the clip whose caption it repeats, the earliest one that had it
    same_as_caption: int
    labels_too: bool  # the labels are that version's too (what the wrong-clip save wrote)
    current: bool  # still the clip's current version
    review_status: str  # of the clip now


def find(db: sqlite_utils.Database, *, min_chars: int = MIN_CHARS) -> list[CopiedSave]:
    """Every person's save whose text (at least `min_chars` long) another clip had before it and the version it
    was made from did not have, oldest first. One pass over the captions grouped by text."""
    rows = db.execute(
        """
        WITH shared AS (
            SELECT text FROM captions WHERE length(text) >= ?
            GROUP BY text HAVING COUNT(DISTINCT clip_id) > 1 AND SUM(source = 'human') > 0
        )
        SELECT c.id, c.clip_id, c.version, c.source, c.author, c.created_at, c.text, c.labels,
               d.text IS c.text AS kept, k.current_caption_id = c.id AS current, k.review_status
        FROM captions c JOIN shared s ON s.text = c.text
        LEFT JOIN captions d ON d.id = c.derived_from_id
        JOIN clips k ON k.id = c.clip_id
        ORDER BY c.text, c.created_at, c.id
        """,
        [min_chars],
    ).fetchall()
    found: list[CopiedSave] = []
    # the first two clips that had this text, in the order they got it (caption id, clip id, labels): the
    # earliest other clip of any row is the first of them not its own (one pass, however many clips share it)
    firsts: list[tuple] = []
    text = None
    for cid, clip_id, version, source, author, created_at, t, labels, kept, current, status in rows:
        if t != text:
            text, firsts = t, []
        other = next((f for f in firsts if f[1] != clip_id), None)
        if source == "human" and not kept and other is not None:
            found.append(
                CopiedSave(
                    cid,
                    clip_id,
                    version,
                    author,
                    created_at,
                    other[1],
                    other[0],
                    other[2] == labels,
                    bool(current),
                    status or "unreviewed",
                )
            )
        if len(firsts) < 2 and all(f[1] != clip_id for f in firsts):
            firsts.append((cid, clip_id, labels))
    return sorted(found, key=lambda f: (f.created_at, f.caption_id))


def _words(text: str) -> str:
    return " ".join(text.split())


def excepted(found: list[CopiedSave], db: sqlite_utils.Database, *, clips=(), texts=()) -> dict[int, str]:
    """{caption id: why it is excepted} for the saves of `found` on one of `clips` or whose text is one of `texts`
    (runs of spaces counted as one): what a person says was typed on purpose."""
    clip_ids = {int(c) for c in clips}
    wanted = {_words(t) for t in texts if _words(t)}
    out: dict[int, str] = {}
    for f in found:
        if f.clip_id in clip_ids:
            out[f.caption_id] = f"clip {f.clip_id} excepted"
        elif wanted:
            row = db.execute("SELECT text FROM captions WHERE id = ?", [f.caption_id]).fetchone()
            if row and _words(row[0]) in wanted:
                out[f.caption_id] = "its text excepted"
    return out


def reset(db: sqlite_utils.Database, found: list[CopiedSave], *, actor: str) -> list[int]:
    """Set each clip whose current version is one of `found` and which is approved or rejected back to
    unreviewed, each with a `review.reset` event naming the other clip and the decision undone. Read again in
    the transaction, so a clip saved or decided since `find` is left as it is. Returns the clips reset."""
    done = []
    with immediate(db):
        for f in found:
            clip = db.execute(
                "SELECT review_status, reviewed_by, reviewed_at, current_caption_id FROM clips WHERE id = ?",
                [f.clip_id],
            ).fetchone()
            if not clip or clip[3] != f.caption_id or clip[0] not in ("approved", "rejected"):
                continue
            db.execute(
                "UPDATE clips SET review_status = 'unreviewed', reviewed_by = NULL, reviewed_at = NULL, "
                "updated_at = ? WHERE id = ?",
                [now(), f.clip_id],
            )
            events.record(
                db,
                actor,
                "review.reset",
                clip_id=f.clip_id,
                caption_id=f.caption_id,
                review_was=clip[0],
                reviewed_by_was=clip[1],
                reviewed_at_was=clip[2],
                why=f"version {f.version}'s text is clip {f.same_as_clip}'s (caption {f.same_as_caption}), word for "
                "word: saved onto the wrong clip, or pasted",
            )
            done.append(f.clip_id)
    return done


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def main(argv: list[str] | None = None) -> int:
    from data import settings as settings_mod
    from data.db import connect

    parser = argparse.ArgumentParser(
        prog="python -m data.copied_saves",
        description="List the people's saves whose text is another clip's caption word for word (until "
        f"{FIXED_ON} the review form could save one clip's text onto the next clip); --reset puts the decided ones "
        "back in the review queue.",
    )
    settings_mod.add_arguments(parser, ["data_dir", "db"])
    parser.add_argument(
        "--min-chars", type=int, default=MIN_CHARS, help=f"shortest text to compare (default {MIN_CHARS})"
    )
    parser.add_argument("--reset", action="store_true", help="set the clips still decided on such a save unreviewed")
    parser.add_argument(
        "--except-clip",
        action="append",
        default=[],
        metavar="IDS",
        help="leave these clips as they are (ids, comma-separated; the option may repeat)",
    )
    parser.add_argument(
        "--except-text",
        action="append",
        default=[],
        metavar="TEXT",
        help="leave saves of this exact text as they are (a stock sentence typed on purpose; may repeat)",
    )
    parser.add_argument("--except-file", type=Path, help="texts to leave as they are, one a line")
    parser.add_argument("--actor", default="audit", help="who the review.reset events name (default audit)")
    parser.add_argument("--json", action="store_true", help="one JSON object per save instead of the table")
    args = parser.parse_args(argv)
    s = settings_mod.from_args(args)
    if not s.db.exists():
        print(f"error: no database at {s.db}", file=sys.stderr)
        return 2
    if args.min_chars < 1:
        print("error: --min-chars must be at least 1", file=sys.stderr)
        return 2
    try:
        clips = [int(c) for arg in args.except_clip for c in arg.split(",") if c.strip()]
    except ValueError:
        print("error: --except-clip takes clip ids, e.g. --except-clip 12,40", file=sys.stderr)
        return 2
    texts = list(args.except_text)
    if args.except_file is not None:
        try:
            texts += args.except_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: cannot read --except-file {args.except_file}: {e}", file=sys.stderr)
            return 2
    db = connect(s.db)
    try:
        found = find(db, min_chars=args.min_chars)
        kept = excepted(found, db, clips=clips, texts=texts)
        decided = [f for f in found if f.current and f.review_status in ("approved", "rejected")]
        to_reset = [f for f in decided if f.caption_id not in kept]
        for f in sorted(found, key=lambda f: (f not in decided, f.created_at)):
            plan = (
                "left: " + kept[f.caption_id]
                if f.caption_id in kept
                else ("will be reset" if f in to_reset else "nothing to reset")
            )
            if args.json:
                print(json.dumps({**asdict(f), "reset": f in to_reset, "plan": plan}))
            else:
                print(
                    f"clip {f.clip_id} v{f.version} by {f.author} at {_utc(f.created_at)}: the text of clip "
                    f"{f.same_as_clip}{', labels too' if f.labels_too else ''}; "
                    f"{'current, ' + f.review_status if f.current else 'since replaced'} -- {plan}"
                )
        done = reset(db, to_reset, actor=args.actor) if args.reset else []
    finally:
        db.close()
    print(
        f"{len(found)} save(s) repeat another clip's caption; {len(decided)} still decided on it"
        + (f", {len(decided) - len(to_reset)} of them excepted" if len(to_reset) < len(decided) else "")
        + (f"; {len(done)} set back to unreviewed" if args.reset else "")
        + (
            f": `--reset` puts the {len(to_reset)} marked 'will be reset' back in the review queue (--except-clip, "
            "--except-text leave others as they are)"
            if to_reset and not args.reset
            else ". Look at each: a stock sentence typed on purpose is fine, a caption of another video is not."
            if found
            else ""
        ),
        file=sys.stderr,
    )
    return 0


__all__ = ["CopiedSave", "excepted", "find", "FIXED_ON", "main", "MIN_CHARS", "reset"]

if __name__ == "__main__":
    sys.exit(main())
