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


# the newest machine caption of a prompt version on clip c (parameters: prompt name, version): looked up through
# captions' (clip_id, version) index per ground-truth clip, so the cost follows the clips compared, not the table
_NEWEST = (
    "(SELECT MAX(k.id) FROM captions k WHERE k.clip_id = c.id AND k.source = 'model' "
    "AND k.prompt_name = ? AND k.prompt_version = ?)"
)


def _clip_set(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter) -> tuple[str, list[Any], dict, dict]:
    """The SQL of the compared clips (clip_id, truth_id, a_id, b_id), its parameters, and the two versions."""
    va, vb = _version(db, a), _version(db, b)
    if va["id"] == vb["id"]:
        raise DataError("Pick two different prompt versions to compare.")
    columns = f"c.id AS clip_id, c.current_caption_id AS truth_id, {_NEWEST} AS a_id, {_NEWEST} AS b_id"
    sql, args = clips.id_query(ground_truth(f), columns=columns)
    inner = f"SELECT * FROM ({sql}) WHERE a_id IS NOT NULL AND b_id IS NOT NULL"
    return inner, [va["name"], va["version"], vb["name"], vb["version"], *args], va, vb


def _version(db: sqlite_utils.Database, prompt_id: int) -> dict:
    p = prompts.get(db, prompt_id)
    return {"id": p["id"], "name": p["name"], "version": p["version"]}


def pairs(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter = clips.Filter()) -> Iterator[dict]:
    """For each approved clip of `f` with a machine caption of both prompt versions `a` and `b` (prompt ids), in
    clip order: `clip_id`, `truth_id`/`truth` (the approved caption and its labels), `a_id`/`a` and `b_id`/`b`
    (each version's newest caption of the clip and its labels). Streamed."""
    inner, args, _, _ = _clip_set(db, a, b, f)
    sql = (
        f"SELECT p.clip_id, p.truth_id, t.labels AS truth, p.a_id, ka.labels AS a_labels, p.b_id, "
        f"kb.labels AS b_labels FROM ({inner}) p JOIN captions t ON t.id = p.truth_id "
        "JOIN captions ka ON ka.id = p.a_id JOIN captions kb ON kb.id = p.b_id ORDER BY p.clip_id"
    )
    for r in db.query(sql, args):
        yield {
            "clip_id": r["clip_id"],
            "truth_id": r["truth_id"],
            "truth": json.loads(r["truth"]),
            "a_id": r["a_id"],
            "a": json.loads(r["a_labels"]),
            "b_id": r["b_id"],
            "b": json.loads(r["b_labels"]),
        }


def _set_key(labels: str, name: str) -> str:
    """A multi-choice label of a labels column as one comparable text: its distinct values, sorted."""
    return (
        f"(SELECT group_concat(value, char(31)) FROM (SELECT DISTINCT value FROM json_each({labels}, '$.{name}') "
        "ORDER BY value))"
    )


def _count(labels: str, name: str) -> str:
    return f"(SELECT COUNT(DISTINCT value) FROM json_each({labels}, '$.{name}'))"


def _jaccard(side: str, name: str) -> str:
    """|side and truth| / |side or truth| of a multi-choice label (`side`: a labels column), 1 when both are empty."""
    both = (
        f"(SELECT COUNT(DISTINCT x.value) FROM json_each({side}, '$.{name}') x "
        f"WHERE x.value IN (SELECT value FROM json_each(tl, '$.{name}')))"
    )
    either = f"({_count(side, name)} + {_count('tl', name)} - {both})"
    return f"CASE WHEN {either} = 0 THEN 1.0 ELSE 1.0 * {both} / {either} END"


SINGLE = [name for name in taxonomy.ENUMS if name not in taxonomy.MULTI]


def _compare_sql(inner: str) -> str:
    """One statement: per single-choice label (each caption's labels parsed once, by json_each) and per
    multi-choice label (sets and Jaccard) the clips each version got right. Rows: label, clips, a right, b right,
    a Jaccard sum, b Jaccard sum. Parameters: the clip set's, then SINGLE."""
    multi = [
        f"SELECT '{name}', COUNT(*), TOTAL({_set_key('al', name)} IS {_set_key('tl', name)}), "
        f"TOTAL({_set_key('bl', name)} IS {_set_key('tl', name)}), TOTAL({_jaccard('al', name)}), "
        f"TOTAL({_jaccard('bl', name)}) FROM j"
        for name in taxonomy.MULTI
    ]
    return (
        f"WITH j AS MATERIALIZED (SELECT t.labels AS tl, ka.labels AS al, kb.labels AS bl FROM ({inner}) p "
        "JOIN captions t ON t.id = p.truth_id JOIN captions ka ON ka.id = p.a_id JOIN captions kb ON kb.id = p.b_id) "
        "SELECT x.key, COUNT(*), TOTAL(a.value IS x.value), TOTAL(b.value IS x.value), 0, 0 FROM j "
        "JOIN json_each(j.tl) x LEFT JOIN json_each(j.al) a ON a.key = x.key LEFT JOIN json_each(j.bl) b "
        f"ON b.key = x.key WHERE x.key IN ({','.join('?' * len(SINGLE))}) GROUP BY x.key UNION ALL "
        + " UNION ALL ".join(multi)
        + " UNION ALL SELECT '', COUNT(*), 0, 0, 0, 0 FROM j"
    )


def compare(db: sqlite_utils.Database, a: int, b: int, f: clips.Filter = clips.Filter()) -> dict:
    """Versions `a` and `b` side by side on the clips of `pairs`: `a` and `b` (id, name, version), `clips` (how
    many), and per label of the taxonomy `a_correct`, `b_correct`, `a_accuracy`, `b_accuracy` (None on no clip);
    a multi-choice label also has `a_jaccard` and `b_jaccard` (means). Counted in one SQL statement (SQLite's JSON
    functions), no caption reaches Python. Labels are complete (every schema requires all of them)."""
    inner, args, va, vb = _clip_set(db, a, b, f)
    rows = {r[0]: r[1:] for r in db.execute(_compare_sql(inner), [*args, *SINGLE])}
    n = rows[""][0]
    labels = {}
    for name in taxonomy.ENUMS:
        _, a_ok, b_ok, a_jac, b_jac = rows.get(name, (0, 0, 0, 0, 0))
        out = {"a_correct": int(a_ok), "b_correct": int(b_ok)}
        out.update({"a_accuracy": a_ok / n if n else None, "b_accuracy": b_ok / n if n else None})
        if name in taxonomy.MULTI:
            out.update({"a_jaccard": a_jac / n if n else None, "b_jaccard": b_jac / n if n else None})
        labels[name] = out
    return {"a": va, "b": vb, "clips": n, "labels": labels}
