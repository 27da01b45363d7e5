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
from data.jobs.selection import Selection


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
    fleet: str | None = None,
) -> tuple[int, bool]:
    """(job id, created): one job of prompt version `prompt_id` over the approved clips of `f` (data.jobs'
    `create_once`: a repeated click within its window is the same job), for the fleet `fleet` (data.jobs.fleet_of;
    None: any runner's). Its captions arrive as candidates."""
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
        fleet=fleet,
    )


# the newest machine caption of a prompt version on clip c (parameters: prompt name, version): looked up through
# captions' (clip_id, version) index per ground-truth clip, so the cost follows the clips compared, not the table
_NEWEST = (
    "(SELECT MAX(k.id) FROM captions k WHERE k.clip_id = c.id AND k.source = 'model' "
    "AND k.prompt_name = ? AND k.prompt_version = ?)"
)


def _version(db: sqlite_utils.Database, prompt_id: int) -> dict:
    p = prompts.get(db, prompt_id)
    return {"id": p["id"], "name": p["name"], "version": p["version"]}


def _clip_set(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter) -> tuple[str, list[Any], dict, dict]:
    """The SQL of the compared clips joined to their three captions' labels (clip_id, truth_id, truth, a_id, a,
    b_id, b; in clip order), its parameters, and the two versions."""
    va, vb = _version(db, a), _version(db, b)
    if va["id"] == vb["id"]:
        raise DataError("Pick two different prompt versions to compare.")
    columns = f"c.id AS clip_id, c.current_caption_id AS truth_id, {_NEWEST} AS a_id, {_NEWEST} AS b_id"
    ids, args = clips.id_query(ground_truth(f), columns=columns)
    # MATERIALIZED: flattened into the joins, each newest-caption lookup runs twice per clip (measured: 1.5x slower)
    sql = (
        f"WITH s AS MATERIALIZED ({ids}) SELECT s.clip_id, s.truth_id, t.labels, s.a_id, ka.labels, s.b_id, "
        "kb.labels FROM s JOIN captions t ON t.id = s.truth_id JOIN captions ka ON ka.id = s.a_id "
        "JOIN captions kb ON kb.id = s.b_id ORDER BY s.clip_id"
    )
    return sql, [va["name"], va["version"], vb["name"], vb["version"], *args], va, vb


def pairs(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter = clips.Filter()) -> Iterator[dict]:
    """For each approved clip of `f` with a machine caption of both prompt versions `a` and `b` (prompt ids), in
    clip order: `clip_id`, `truth_id`/`truth` (the approved caption and its labels), `a_id`/`a` and `b_id`/`b`
    (each version's newest caption of the clip and its labels). Streamed."""
    sql, args, _, _ = _clip_set(db, a, b, f)
    for clip_id, truth_id, truth, a_id, a_labels, b_id, b_labels in db.execute(sql, args):
        yield {
            "clip_id": clip_id,
            "truth_id": truth_id,
            "truth": json.loads(truth),
            "a_id": a_id,
            "a": json.loads(a_labels),
            "b_id": b_id,
            "b": json.loads(b_labels),
        }


SINGLE = tuple(name for name in taxonomy.ENUMS if name not in taxonomy.MULTI)


def compare(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter = clips.Filter()) -> dict:
    """Versions `a` and `b` side by side on the clips of `pairs`: `a` and `b` (id, name, version), `clips` (how
    many), and per label of the taxonomy `a_correct`, `b_correct`, `a_accuracy`, `b_accuracy` (None on no clip);
    a multi-choice label also has `a_jaccard` and `b_jaccard` (means). One streaming pass; counting in Python
    measured twice as fast as SQLite's JSON functions (benchmarks/bench_samples.py)."""
    sql, args, va, vb = _clip_set(db, a, b, f)
    right = {name: [0, 0] for name in taxonomy.ENUMS}
    jaccard = {name: [0.0, 0.0] for name in taxonomy.MULTI}
    n = 0
    loads = json.loads
    for _, _, truth, _, a_labels, _, b_labels in db.execute(sql, args):
        n += 1
        t = loads(truth)
        for side, labels in enumerate((loads(a_labels), loads(b_labels))):
            for name in SINGLE:
                right[name][side] += labels.get(name) == t.get(name)
            for name in taxonomy.MULTI:
                got, want = set(labels.get(name) or ()), set(t.get(name) or ())
                right[name][side] += got == want
                union = len(got | want)
                jaccard[name][side] += len(got & want) / union if union else 1.0
    out = {}
    for name in taxonomy.ENUMS:
        (a_ok, b_ok) = right[name]
        row = {"a_correct": a_ok, "b_correct": b_ok}
        row.update({"a_accuracy": a_ok / n if n else None, "b_accuracy": b_ok / n if n else None})
        if name in taxonomy.MULTI:
            a_j, b_j = jaccard[name]
            row.update({"a_jaccard": a_j / n if n else None, "b_jaccard": b_j / n if n else None})
        out[name] = row
    return {"a": va, "b": vb, "clips": n, "labels": out}
