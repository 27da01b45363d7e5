"""Prompt versions compared on exactly the same clips, against what the reviewers approved.

The ground truth is each approved clip's current caption (review status approved): what a person accepted.
`start_on_ground_truth` runs a prompt version over those clips as one job. Its machine captions never replace an
approved caption: data.captions stores them beside it as candidates, so the truth stays what it was while
versions are added, and nobody's review is undone.

`pairs(db, a, b, f)` yields, for every approved clip of filter `f` that has a machine caption of both prompt
versions `a` and `b` (prompt ids; on a clip captioned several times by one version, its newest caption), the truth
and the two versions' captions. `compare` counts them per label: how many of those clips each version got
right, on exactly the same clips ("hazard_level 0.71 -> 0.78 on 212 clips"). A multi-choice label (road users)
is right when its set equals the truth's; its mean Jaccard index (|A and T| / |A or T|, 1 when both are empty)
is given beside. A version's caption is matched by the prompt name and version its provenance records.

A version whose caption the reviewer started from has an edge over one they never saw (they may have left a
doubtful label as it was): the comparison counts the clips, it does not remove that bias. For an unbiased
comparison, compare two versions that both ran after the review (or the new one against the truth alone).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator

import sqlite_utils

from data import clips, jobs, prompts, taxonomy
from data.errors import DataError
from data.job_params import JobParams
from data.job_selection import Selection


def ground_truth(f: clips.Filter = clips.Filter()) -> clips.Filter:
    """The approved clips of `f` (DataError if `f` asks for another review status)."""
    if f.review_status not in (None, "approved"):
        raise DataError(
            f"The ground truth is the approved clips; this filter asks for {f.review_status} ones. Set Review to "
            "approved or any."
        )
    return dataclasses.replace(f, review_status="approved", has_caption=True, failed=False)


def start_on_ground_truth(
    db: sqlite_utils.Database,
    prompt_id: int,
    *,
    created_by: str,
    params: JobParams,
    f: clips.Filter = clips.Filter(),
) -> tuple[int, bool]:
    """(job id, created): one job of prompt version `prompt_id` over the approved clips of `f` (data.jobs'
    `create_once`: a repeated click within its window is the same job). Its captions arrive as candidates."""
    prompt = prompts.get(db, prompt_id)
    gt = ground_truth(f)
    if not clips.count_capped(db, gt, cap=1)[0]:
        raise DataError("No approved clip matches: approve some captions first, or widen the filter.")
    return jobs.create_once(
        db,
        name=f"{prompt['name']} v{prompt['version']} on approved clips",
        created_by=created_by,
        selection=Selection(filter=gt, origin="ground truth: approved clips"),
        prompt_id=prompt["id"],
        params=params,
    )


_PAIRS_SQL = """
WITH va AS (SELECT clip_id, MAX(id) AS id FROM captions
            WHERE source = 'model' AND prompt_name = ? AND prompt_version = ? GROUP BY clip_id),
     vb AS (SELECT clip_id, MAX(id) AS id FROM captions
            WHERE source = 'model' AND prompt_name = ? AND prompt_version = ? GROUP BY clip_id)
SELECT c.id AS clip_id, t.id AS truth_id, t.labels AS truth, ka.id AS a_id, ka.labels AS a_labels,
       kb.id AS b_id, kb.labels AS b_labels
FROM va JOIN vb ON vb.clip_id = va.clip_id
JOIN clips c ON c.id = va.clip_id
JOIN captions t ON t.id = c.current_caption_id
JOIN captions ka ON ka.id = va.id
JOIN captions kb ON kb.id = vb.id
WHERE c.review_status = 'approved' AND c.id IN ({ids})
ORDER BY c.id
"""


def _version(db: sqlite_utils.Database, prompt_id: int) -> dict:
    p = prompts.get(db, prompt_id)
    return {"id": p["id"], "name": p["name"], "version": p["version"]}


def pairs(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter = clips.Filter()) -> Iterator[dict]:
    """For each approved clip of `f` with a machine caption of both prompt versions `a` and `b` (prompt ids), in
    clip order: `clip_id`, `truth_id`/`truth` (the approved caption and its labels), `a_id`/`a` and `b_id`/`b`
    (each version's newest caption of the clip and its labels). Streamed."""
    va, vb = _version(db, a), _version(db, b)
    if va["id"] == vb["id"]:
        raise DataError("Pick two different prompt versions to compare.")
    ids, args = clips.id_query(ground_truth(f))
    sql = _PAIRS_SQL.format(ids=ids)
    for r in db.query(sql, [va["name"], va["version"], vb["name"], vb["version"], *args]):
        yield {
            "clip_id": r["clip_id"],
            "truth_id": r["truth_id"],
            "truth": json.loads(r["truth"]),
            "a_id": r["a_id"],
            "a": json.loads(r["a_labels"]),
            "b_id": r["b_id"],
            "b": json.loads(r["b_labels"]),
        }


def _same(name: str, x: Any, y: Any) -> bool:
    if name in taxonomy.MULTI:
        return set(x or []) == set(y or [])
    return x == y


def _jaccard(x: Any, y: Any) -> float:
    x, y = set(x or []), set(y or [])
    return 1.0 if not (x | y) else len(x & y) / len(x | y)


def compare(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter = clips.Filter()) -> dict:
    """Versions `a` and `b` side by side on the clips of `pairs`: `a` and `b` (id, name, version), `clips` (how
    many), and per label of the taxonomy `a_correct`, `b_correct`, `a_accuracy`, `b_accuracy` (None on no clip);
    a multi-choice label also has `a_jaccard` and `b_jaccard` (means)."""
    counts = {name: {"a_correct": 0, "b_correct": 0, "a_jaccard": 0.0, "b_jaccard": 0.0} for name in taxonomy.ENUMS}
    n = 0
    for p in pairs(db, a, b, f):
        n += 1
        for name, c in counts.items():
            truth = p["truth"].get(name)
            for side in ("a", "b"):
                got = p[side].get(name)
                c[f"{side}_correct"] += _same(name, got, truth)
                if name in taxonomy.MULTI:
                    c[f"{side}_jaccard"] += _jaccard(got, truth)
    labels = {}
    for name, c in counts.items():
        row = {
            "a_correct": c["a_correct"],
            "b_correct": c["b_correct"],
            "a_accuracy": c["a_correct"] / n if n else None,
            "b_accuracy": c["b_correct"] / n if n else None,
        }
        if name in taxonomy.MULTI:
            row["a_jaccard"] = c["a_jaccard"] / n if n else None
            row["b_jaccard"] = c["b_jaccard"] / n if n else None
        labels[name] = row
    return {"a": _version(db, a), "b": _version(db, b), "clips": n, "labels": labels}
