"""Random review samples: drawn, recorded and read.

What an unreviewed batch is worth can only be estimated from clips drawn from it at random: clips reviewed because
someone chose them (the queue's order, a search, a hunch) are not a sample. So a sample is drawn here, recorded,
and its clips are marked as its members; only members count as a random sample (data.quality reads them).

Drawing (`draw`): a lead draws `size` clips from a filter (a job's clips: `Filter(job_id=J)`) and assigns them to
one or more people, in one write transaction (the population is read just before it, in one consistent SELECT).
- The population is the filter's clips whose current caption is a machine caption nobody has reviewed yet
  (unreviewed, ingest ok): what "the unreviewed rest" means. A filter that asks for something else (approved
  clips, human captions) is refused with what to change.
- Stratified by the hazard level of each clip's caption at the draw, or not. `allocate` spreads `size` over the
  strata: `proportional` gives each stratum its share of the population (n_h = n * N_h / N, the remainder to the
  largest fractions: every clip has the same chance, and the stratified estimate's weights are N_h / N);
  `equal` gives each stratum the same number (capped at its size, the rest shared among the others: rare
  strata, critical and high hazards, are measured as well as common ones, at the price of unequal chances).
  Ties and leftover clips go to the most hazardous strata first. A stratum may get no clip when `size` is
  smaller than the number of strata: it then has no estimate of its own.
- Reproducible: a seed (given, or drawn and stored) and the population in clip-id order decide the members;
  the same seed over the same population draws the same clips. Each stratum's clips are drawn with
  `random.Random(seed).sample`, then the members are shuffled and dealt round-robin to the assignees (`deal`),
  except those someone holds already: a draw never takes a clip from a person (another sample's reviewer, a
  lead's assignment). Such a member stays theirs, and their review of it counts for every sample it is in.
- Recorded: the sample (who, when, the filter and job, N, n, the allocation, the seed), N_h and n_h per stratum,
  per member its stratum, place in the draw, assignee and the caption version it had (what is measured), and the
  population itself (data.quality.population), from which further rounds draw more of the same batch
  (data.quality.rounds: a sample's `drawn` counts every round). Rows are written once (triggers); the
  assignment is audited per clip like any other (data.assignments).

Second reviews of a sample's clips, blind to the first review, are data.quality.second_review's.

Only leads draw samples: the role is checked here, not only in the UI.
"""

from __future__ import annotations

import array
import dataclasses
import json
import random
import secrets
from typing import Any, Iterable

import sqlite_utils

from data import assignments, clips, events, limits, taxonomy, users
from data.db import immediate, now
from data.errors import DataError, Forbidden, NotFound
from data.quality import population

STRATIFY = ("none", "proportional", "equal")
ALL = "all"  # the one stratum of a sample drawn without strata
NO_LEVEL = ""  # the stratum of a caption without a hazard level
# strata in the order leftover clips are given out: the most hazardous first
STRATA = (*reversed(taxonomy.HAZARD_LEVELS), NO_LEVEL)
MAX_SAMPLE = 5_000  # members of one sample: a bound on its write transaction (one assignment event each)
MAX_ASSIGNEES = 50


def check_lead(role: str | None, what: str) -> None:
    if not users.at_least(role, "lead"):
        raise Forbidden(f"Only a lead {what}; you are {role or 'not signed in'}.")


def population_filter(f: clips.Filter) -> clips.Filter:
    """The clips of `f` a sample can take: a machine caption nobody has reviewed, ingest ok. DataError for a
    filter that asks for other clips (it would make the sample something else than it says)."""
    clashes = []
    if f.review_status not in (None, "unreviewed"):
        clashes.append(f"Review is {f.review_status}")
    if f.caption_source not in (None, "model"):
        clashes.append(f"caption source is {f.caption_source}")
    if f.has_caption is False:
        clashes.append("Has caption is no")
    if f.failed is True:
        clashes.append("Ingest failed is yes")
    if clashes:
        raise DataError(
            "A review sample is drawn from clips whose machine caption nobody has reviewed yet; this filter asks "
            f"for other clips ({'; '.join(clashes)}). Set those filters to any and draw again."
        )
    return dataclasses.replace(f, review_status="unreviewed", caption_source="model", has_caption=True, failed=False)


def allocate(size: int, sizes: dict[str, int], stratify: str) -> dict[str, int]:
    """How many clips each stratum gives (n_h) for a sample of `size` from strata of `sizes` (N_h, in the order
    leftovers are given out); see the module docstring. At most N_h each, and min(size, N) in all."""
    if stratify not in STRATIFY:
        raise DataError(f"Stratify: one of {', '.join(STRATIFY)} (got {str(stratify)[:20]!r}).")
    total = sum(sizes.values())
    n = min(size, total)
    if stratify == "none":
        return {ALL: n}
    order = list(sizes)
    if stratify == "proportional":
        got = {h: n * sizes[h] // total for h in order} if total else {h: 0 for h in order}
        left = n - sum(got.values())
        # the largest remainders first (exact: integer numerators), ties to the earlier (more hazardous) stratum
        for h in sorted(order, key=lambda h: (-(n * sizes[h] % total), order.index(h)))[:left]:
            got[h] += 1
        return got
    got = {h: 0 for h in order}
    left = n
    room = [h for h in order if sizes[h] > 0]
    while left and room:
        share = left // len(room)
        if share == 0:
            for h in room[:left]:
                got[h] += 1
            break
        for h in room:
            take = min(share, sizes[h] - got[h])
            got[h] += take
            left -= take
        room = [h for h in room if got[h] < sizes[h]]
    return got


def checked_size(size: Any) -> int:
    """A sample's (or a round's) size from user input: a whole number from 1 to MAX_SAMPLE, or DataError."""
    try:
        n = limits.sql_int(size, "The sample size")
    except DataError:
        raise DataError(f"The sample size: a whole number from 1 to {MAX_SAMPLE:,}.") from None
    if not 1 <= n <= MAX_SAMPLE:
        raise DataError(f"The sample size: a whole number from 1 to {MAX_SAMPLE:,} (got {n:,}).")
    return n


def checked_seed(seed: Any) -> int:
    """A seed from user input; empty (None, "", blanks) is a new random one, which the caller records."""
    if isinstance(seed, str):
        seed = seed.strip()
    if seed in (None, ""):
        return secrets.randbelow(2**31)
    n = limits.sql_int(seed, "The seed")
    if n < 0:
        raise DataError("The seed: a whole number of 0 or more (empty: a new one).")
    return n


def checked_assignees(names: Iterable[str] | str | None) -> list[str]:
    """The people a sample is dealt to: one or more distinct names (checked as users when assigned)."""
    if isinstance(names, str):
        names = [names]
    out = list(dict.fromkeys((n or "").strip() for n in names or [] if (n or "").strip()))
    if not out:
        raise DataError("Pick the people to assign the sample to (one or more).")
    if len(out) > MAX_ASSIGNEES:
        raise DataError(f"At most {MAX_ASSIGNEES} people share one sample.")
    return out


def _population(
    db: sqlite_utils.Database, f: clips.Filter, stratify: str
) -> dict[str, tuple[array.array, array.array]]:
    """Stratum -> (the ids of its clips, ascending; their current caption ids), read in one SELECT: one consistent
    snapshot. Compact arrays: a population of a million clips is 16 MB."""
    sql, args = clips.id_query(f, columns="c.id, c.hazard_level, c.current_caption_id")
    out: dict[str, tuple[array.array, array.array]] = {}
    for cid, level, caption_id in db.execute(sql, args):
        key = ALL if stratify == "none" else (level if level in taxonomy.HAZARD_LEVELS else NO_LEVEL)
        ids, caps = out.setdefault(key, (array.array("q"), array.array("q")))
        ids.append(cid)
        caps.append(caption_id)
    return out


def draw(
    db: sqlite_utils.Database,
    f: clips.Filter,
    size: int,
    assignees: Iterable[str] | str,
    *,
    actor: str,
    role: str,
    stratify: str = "none",
    seed: int | None = None,
) -> dict:
    """Draw a random review sample of `size` clips from the population of `f` (`population_filter`), record it and
    give its members to `assignees` (`deal`: round-robin in draw order, never taking a clip someone holds), in one
    write transaction. Returns the sample as `get` does, plus `assigned` (person -> clips), `kept` (someone else
    -> clips left with them) and `also_in` (another sample -> its members drawn here too). Raises Forbidden for a
    non-lead, DataError for a bad size, seed, stratify, person or filter, or an empty population."""
    check_lead(role, "draws review samples")
    size, seed, people = checked_size(size), checked_seed(seed), checked_assignees(assignees)
    if stratify not in STRATIFY:
        raise DataError(f"Stratify: one of {', '.join(STRATIFY)} (got {str(stratify)[:20]!r}).")
    pop_f = population_filter(f)
    # The population is read before the write transaction, in one SELECT (a consistent snapshot): reading a
    # million clips under the write lock would stall every other writer for seconds. The draw, N_h and each
    # member's caption are those of that snapshot; a member reviewed in the meantime is still a random member.
    strata = _population(db, pop_f, stratify)
    total = sum(len(ids) for ids, _ in strata.values())
    if not total:
        raise DataError(
            "No clip of this filter can be sampled: a sample takes clips whose machine caption nobody has "
            "reviewed yet (and whose ingest succeeded). Widen the filter, or caption the clips first."
        )
    keys = [ALL] if stratify == "none" else [h for h in STRATA if h in strata]
    sizes = {h: len(strata[h][0]) for h in keys}
    counts = allocate(size, sizes, stratify)
    rng = random.Random(seed)
    picked: list[tuple[int, str, int]] = []  # (clip id, stratum, caption id at the draw)
    for h in keys:
        ids, caps = strata[h]
        picked += [(ids[i], h, caps[i]) for i in rng.sample(range(sizes[h]), counts[h])]
    rng.shuffle(picked)
    # what a further round draws from (data.quality.rounds), encoded before the write lock is taken
    kept = [(h, population.encode(strata[h][0]), population.encode(strata[h][1]), sizes[h]) for h in keys]
    with immediate(db):
        t = now()
        sample_id = db.execute(
            "INSERT INTO samples (created_by, created_at, source, job_id, population, size, drawn, stratify, seed, "
            "assignees) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                actor,
                t,
                json.dumps(pop_f.to_dict(), sort_keys=True),
                f.job_id,
                total,
                size,
                len(picked),
                stratify,
                seed,
                json.dumps(people),
            ],
        ).lastrowid
        db.conn.executemany(
            "INSERT INTO sample_strata (sample_id, stratum, population, drawn) VALUES (?, ?, ?, ?)",
            [(sample_id, h, sizes[h], counts[h]) for h in keys],
        )
        population.store(db, sample_id, kept)
        picked_ids = [cid for cid, _, _ in picked]
        holders, shares, left_with = deal(db, picked_ids, people, actor=actor, role=role)
        db.conn.executemany(
            "INSERT INTO sample_members (sample_id, clip_id, stratum, draw_order, assignee, caption_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(sample_id, cid, h, k, holders[k], cap) for k, (cid, h, cap) in enumerate(picked)],
        )
        shared = also_in(db, sample_id, picked_ids)
        events.record(
            db,
            actor,
            "sample.draw",
            job_id=f.job_id,
            sample_id=sample_id,
            population=total,
            drawn=len(picked),
            stratify=stratify,
            seed=seed,
            assignees=people,
        )
    return {**get(db, sample_id), "assigned": shares, "kept": left_with, "also_in": shared}


def _held(db: sqlite_utils.Database, clip_ids: list[int]) -> dict[int, str]:
    """clip id -> the person it is assigned to, for the clips of `clip_ids` someone holds."""
    out: dict[int, str] = {}
    for i in range(0, len(clip_ids), 500):  # SQLite's variable limit
        chunk = clip_ids[i : i + 500]
        sql = f"SELECT clip_id, assignee FROM assignments WHERE clip_id IN ({','.join('?' * len(chunk))})"
        out.update(dict(db.execute(sql, chunk).fetchall()))
    return out


def also_in(db: sqlite_utils.Database, sample_id: int, clip_ids: list[int]) -> dict[int, int]:
    """Other sample -> how many of `clip_ids` are its members too (one review of a clip counts for each)."""
    out: dict[int, int] = {}
    for i in range(0, len(clip_ids), 500):
        chunk = clip_ids[i : i + 500]
        for sid, n in db.execute(
            f"SELECT sample_id, COUNT(*) FROM sample_members WHERE sample_id != ? AND clip_id IN "
            f"({','.join('?' * len(chunk))}) GROUP BY sample_id",
            [sample_id, *chunk],
        ):
            out[sid] = out.get(sid, 0) + n
    return dict(sorted(out.items()))


def deal(
    db: sqlite_utils.Database, clip_ids: list[int], people: list[str], *, actor: str, role: str
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """Give drawn clips to `people`, inside the caller's write transaction, without taking a clip from anyone: a
    clip someone holds already stays theirs (one of `people`, or someone else: another sample's reviewer, a lead's
    assignment), and the clips nobody holds are dealt round-robin (the first to the first person). A clip stays a
    member either way: who reviews it does not change what it measures, and taking it would move work from one
    person (and one sample) to another without a word to either. Returns (who holds each clip, in order; person
    of `people` -> clips of theirs; anyone else -> clips left with them)."""
    held = _held(db, clip_ids)
    free = [cid for cid in clip_ids if cid not in held]
    dealt: dict[int, str] = {}
    for j, person in enumerate(people):
        share = free[j :: len(people)]
        if share:
            out = assignments.assign_ids(db, share, person, actor=actor, role=role)
            dealt.update(dict.fromkeys(share, out["assignee"]))
    holders = [held.get(cid) or dealt[cid] for cid in clip_ids]
    shares = {p: 0 for p in people}
    kept: dict[str, int] = {}
    for who in holders:
        if who in shares:
            shares[who] += 1
        else:
            kept[who] = kept.get(who, 0) + 1
    return holders, {p: n for p, n in shares.items() if n}, kept


def _decode_sample(row: dict) -> dict:
    row = dict(row)
    row["source"] = json.loads(row["source"])
    row["assignees"] = json.loads(row["assignees"])
    return row


def get(db: sqlite_utils.Database, sample_id: int) -> dict:
    """One sample: its row (`source` is the population's filter dict, `assignees` a list), `strata`, `drawn`
    (its members now, every round) and `rounds` (further rounds drawn into it, data.quality.rounds)."""
    sample_id = limits.sql_int(sample_id, "sample id")
    row = next(
        db.query(
            "SELECT s.*, (SELECT COUNT(*) FROM sample_rounds r WHERE r.sample_id = s.id) AS rounds "
            "FROM samples s WHERE s.id = ?",
            [sample_id],
        ),
        None,
    )
    if row is None:
        raise NotFound(f"There is no sample {sample_id}.")
    parts = strata(db, sample_id)
    return {**_decode_sample(row), "drawn": sum(p["drawn"] for p in parts), "strata": parts}


def list_samples(db: sqlite_utils.Database, limit: int = 50) -> list[dict]:
    """The newest samples first, each with how many members are reviewed and how many second reviews it has."""
    rows = db.query(
        "SELECT s.*, (SELECT COUNT(*) FROM sample_members m WHERE m.sample_id = s.id) AS members, "
        "(SELECT COUNT(*) FROM sample_members m JOIN clips c ON c.id = m.clip_id "
        " WHERE m.sample_id = s.id AND c.review_status != 'unreviewed') AS reviewed, "
        "(SELECT COUNT(*) FROM second_reviews r WHERE r.sample_id = s.id) AS second_sent, "
        "(SELECT COUNT(*) FROM second_reviews r WHERE r.sample_id = s.id AND r.state = 'done') AS second_done "
        "FROM samples s ORDER BY s.id DESC LIMIT ?",
        [limit],
    )
    return [{**_decode_sample(r), "drawn": r["members"]} for r in rows]


def strata(db: sqlite_utils.Database, sample_id: int) -> list[dict]:
    """N_h (`population`, at the draw) and n_h (`drawn`: its members now, every round) of each stratum of a
    sample (most hazardous first; a sample drawn without strata has the one stratum "all")."""
    rows = [
        dict(r)
        for r in db.query(
            "SELECT st.sample_id, st.stratum, st.population, (SELECT COUNT(*) FROM sample_members m "
            "WHERE m.sample_id = st.sample_id AND m.stratum = st.stratum) AS drawn "
            "FROM sample_strata st WHERE st.sample_id = ?",
            [sample_id],
        )
    ]
    rank = {h: i for i, h in enumerate((ALL, *STRATA))}
    return sorted(rows, key=lambda r: rank.get(r["stratum"], len(rank)))


def members(db: sqlite_utils.Database, sample_id: int) -> list[dict]:
    """The clips of a sample in draw order: `clip_id`, `stratum`, `draw_order`, `round` (0: the first draw),
    `assignee` and `caption_id` (the caption version at the draw), with the clip's review now (`review_status`,
    `reviewed_by`, `current_caption_id`)."""
    return [
        dict(r)
        for r in db.query(
            "SELECT m.clip_id, m.stratum, m.draw_order, m.round, m.assignee, m.caption_id, c.review_status, "
            "c.reviewed_by, "
            "c.current_caption_id FROM sample_members m JOIN clips c ON c.id = m.clip_id "
            "WHERE m.sample_id = ? ORDER BY m.draw_order",
            [sample_id],
        )
    ]


def of_clip(db: sqlite_utils.Database, clip_id: int) -> list[int]:
    """The samples clip `clip_id` was drawn into (oldest first): none means it is no random-sample member."""
    return [r[0] for r in db.execute("SELECT sample_id FROM sample_members WHERE clip_id = ? ORDER BY 1", [clip_id])]
