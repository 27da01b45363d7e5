"""What a release draws from (data.release.make), read in its snapshot: the batches (captioning jobs) its clips'
machine captions came from, each with the Quality decision on it (data.quality.decision, from the newest random
sample of the job, in the Quality tab's words), and how many of its clips were drawn into a random review sample
(the only clips whose review measures the unreviewed rest; the others were reviewed because people chose them).

The message and the card both say each batch's decision, so a release of a batch the Quality tab says to fix does
not go ahead without a word.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlite_utils

from data.errors import DataError
from data.quality import tables
from data.quality.decision import decide

SHOWN = 20  # batches named one by one; the rest are counted


@dataclass
class Batch:
    """One job the released clips' machine captions came from: `clips` released, its newest random sample and
    the decision on it (`verdict`: accept, fix, review or "no target"; None without a sample), in words."""

    job_id: int
    clips: int
    sample_id: int | None = None
    verdict: str | None = None
    fix: list[str] = field(default_factory=list)
    text: str = ""


@dataclass
class Batches:
    """The batches of a release (the SHOWN largest; `others` jobs and `other_clips` clips beyond them), the clips
    from no job (written by a person, or captioned before jobs), and the clips drawn into random samples."""

    batches: list[Batch]
    others: int
    other_clips: int
    no_job: int
    drawn: int
    samples: list[int]
    total: int
    approved: bool = True  # the released clips are approved ones (each checked by a reviewer)


def read(db: sqlite_utils.Database, approved: bool = True) -> Batches:
    """The batches of the release's clips (temp.release_rows) with their decisions; `approved`: the release holds
    approved clips."""
    rows = db.execute(
        "SELECT COALESCE(o.job_id, k.job_id) AS job, COUNT(*) FROM temp.release_rows r "
        "JOIN captions k ON k.id = r.caption_id LEFT JOIN captions o ON o.id = k.origin_id "
        "GROUP BY job ORDER BY COUNT(*) DESC, job"
    ).fetchall()
    no_job = sum(n for job, n in rows if job is None)
    jobs = [(job, n) for job, n in rows if job is not None]
    out = []
    for job, n in jobs[:SHOWN]:
        b = Batch(int(job), n)
        sample = db.execute("SELECT id FROM samples WHERE job_id = ? ORDER BY id DESC LIMIT 1", [job]).fetchone()
        if sample is None:
            b.text = "No random sample of this batch was drawn, so the Quality tab has no decision on it."
        else:
            b.sample_id = sample[0]
            try:
                d = decide(db, sample[0])
            except DataError as e:
                b.text = f"No decision: {e}"
            else:
                b.verdict, b.fix, b.text = d.verdict, list(d.fix), tables.decision_text(d)
        out.append(b)
    drawn = db.execute(
        "SELECT COUNT(*) FROM temp.release_rows r "
        "WHERE EXISTS (SELECT 1 FROM sample_members m WHERE m.clip_id = r.clip_id)"
    ).fetchone()[0]
    samples = [
        r[0]
        for r in db.execute(
            "SELECT DISTINCT m.sample_id FROM sample_members m JOIN temp.release_rows r ON r.clip_id = m.clip_id "
            "ORDER BY m.sample_id LIMIT ?",
            [SHOWN],
        )
    ]
    total = db.execute("SELECT COUNT(*) FROM temp.release_rows").fetchone()[0]
    rest = jobs[SHOWN:]
    return Batches(out, len(rest), sum(n for _, n in rest), no_job, drawn, samples, total, approved)


def verdict_words(b: Batch) -> str:
    """A batch's decision in a few words."""
    if b.verdict is None:
        return "no random sample, not decided"
    if b.verdict == "fix":
        return "FIX the batch (" + ", ".join(x.replace("_", " ") for x in b.fix) + " below target)"
    if b.verdict == "accept":
        return "accept"
    if b.verdict == "review":
        return "not decided yet (review more of its sample)"
    return "no target set, not decided"


def words(b: Batches) -> str:
    """The release message's sentence on the batches and their decisions."""
    if not b.batches:
        return "No released clip comes from a captioning job, so no Quality decision applies."
    named = "; ".join(f"job {x.job_id} ({x.clips:,} clips): {verdict_words(x)}" for x in b.batches)
    out = f"Quality decisions on the batches these clips come from: {named}"
    if b.others:
        out += f"; {b.others:,} more jobs ({b.other_clips:,} clips): see the card"
    out += "."
    if any(x.verdict == "fix" for x in b.batches):
        out += (
            " The Quality tab says to fix a batch this release draws from: its machine captions miss their target. "
            + (
                "The clips released here were each approved by a reviewer; the batch's unreviewed captions are not fit "
                "to train on."
                if b.approved
                else "These clips were not reviewed: do not train on them before the batch is fixed."
            )
        )
    return out


def sampling_words(b: Batches) -> str:
    """How the released clips were chosen for review, from the random samples they are in."""
    if b.drawn == 0:
        return (
            "None of these clips was drawn into a random review sample: they were reviewed because people chose "
            "them (the queue's order, a search), not drawn at random."
        )
    samples = ", ".join(str(s) for s in b.samples)
    if b.drawn == b.total:
        return (
            f"All {b.total:,} of these clips were drawn at random into review samples ({samples}): a random sample of "
            "their batches."
        )
    return (
        f"{b.drawn:,} of these {b.total:,} clips were drawn at random into review samples ({samples}); the other "
        f"{b.total - b.drawn:,} were reviewed because people chose them, not drawn at random."
    )
