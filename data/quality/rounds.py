"""Further rounds of a random sample: more clips drawn into it from the rest of the same batch.

When a sample's figures cannot decide yet (data.quality.decision says "review K more"), the K more must be drawn
at random from the clips of the batch the sample has not taken, so that all its members together are still one
random sample of that batch. "The batch" is the sample's population as it was at the first draw
(data.quality.population): a clip since reviewed, re-captioned or moved out of the filter is still in it, and is
measured by the caption it had then.

`draw_more` spreads the K over the strata as the plan does (data.quality.stats.spread: in proportion to N_h,
never past the clips a stratum has left), draws each stratum's share with `random.Random(seed).sample` over its
clips not yet members (in clip-id order), shuffles them, records the round (who, when, how many, the seed: a
new one unless given) and deals them round-robin to the sample's people, in one write transaction. A clip someone
holds already (a member of another sample, given to its reviewer; a lead's assignment) is drawn like any other,
so the round stays random, but is never taken from them: it stays theirs, their review counts for this sample
too, and the answer says so (`kept`, `also_in`). The
population is decoded and the draw made before the write lock is taken; the transaction then checks that nobody
grew the sample meanwhile.
"""

from __future__ import annotations

import random
from typing import Any, Iterable

import sqlite_utils

from data import events
from data.db import immediate, now
from data.errors import DataError
from data.quality import population, samples, stats


def draw_more(
    db: sqlite_utils.Database,
    sample_id: int,
    size: Any,
    *,
    actor: str,
    role: str,
    assignees: Iterable[str] | str | None = None,
    seed: Any = None,
) -> dict:
    """Draw `size` more clips into sample `sample_id` from the clips of its batch it has not taken, and assign
    them to `assignees` (default: the sample's people; samples.deal: nobody's clip is taken). Returns the sample
    as samples.get gives it, with `round`, `round_drawn`, `round_seed`, `assigned` (person -> clips), `kept`
    (someone else -> clips left with them) and `also_in` (another sample -> its members drawn here too).
    Forbidden for a non-lead; DataError for a bad size or seed, a sample drawn before populations were kept, one
    that holds its whole batch already, or one that grew while this draw was made; NotFound for no such
    sample."""
    samples.check_lead(role, "draws more clips into a sample")
    size, seed = samples.checked_size(size), samples.checked_seed(seed)
    sample = samples.get(db, sample_id)
    sid = sample["id"]
    people = samples.checked_assignees(assignees if assignees else sample["assignees"])
    pop = population.load(db, sid)
    if pop is None:
        raise DataError(
            f"Sample {sid} was drawn before samples kept their batch, so it cannot grow: draw a new sample of the "
            "same filter (Browse, Random review sample)."
        )
    parts = sample["strata"]
    room = [p["population"] - p["drawn"] for p in parts]
    if not sum(room):
        raise DataError(
            f"Sample {sid} holds every clip of its batch already: its figures are the exact values, and there is "
            "nothing more to draw."
        )
    counts = stats.spread(size, [p["population"] for p in parts], room)
    taken = {m["clip_id"] for m in samples.members(db, sid)}
    rng = random.Random(seed)
    picked: list[tuple[int, str, int]] = []  # (clip id, stratum, caption id at the first draw)
    for part, k in zip(parts, counts):
        ids, caps = pop[part["stratum"]]
        free = [i for i in range(len(ids)) if ids[i] not in taken]
        picked += [(ids[i], part["stratum"], caps[i]) for i in rng.sample(free, k)]
    rng.shuffle(picked)
    with immediate(db):
        if db.execute("SELECT COUNT(*) FROM sample_members WHERE sample_id = ?", [sid]).fetchone()[0] != len(taken):
            raise DataError(f"Sample {sid} grew while these clips were drawn: look at its decision again.")
        rnd = db.execute("SELECT COALESCE(MAX(round), 0) + 1 FROM sample_rounds WHERE sample_id = ?", [sid]).fetchone()[
            0
        ]
        first = db.execute(
            "SELECT COALESCE(MAX(draw_order), -1) + 1 FROM sample_members WHERE sample_id = ?", [sid]
        ).fetchone()[0]
        db.execute(
            "INSERT INTO sample_rounds (sample_id, round, created_by, created_at, size, drawn, seed) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [sid, rnd, actor, now(), size, len(picked), seed],
        )
        picked_ids = [cid for cid, _, _ in picked]
        holders, shares, kept = samples.deal(db, picked_ids, people, actor=actor, role=role)
        db.conn.executemany(
            "INSERT INTO sample_members (sample_id, clip_id, stratum, draw_order, round, assignee, caption_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(sid, cid, h, first + k, rnd, holders[k], cap) for k, (cid, h, cap) in enumerate(picked)],
        )
        shared = samples.also_in(db, sid, picked_ids)
        events.record(
            db,
            actor,
            "sample.draw_more",
            job_id=sample.get("job_id"),
            sample_id=sid,
            round=rnd,
            drawn=len(picked),
            seed=seed,
            assignees=people,
        )
    return {
        **samples.get(db, sid),
        "round": rnd,
        "round_drawn": len(picked),
        "round_seed": seed,
        "assigned": shares,
        "kept": kept,
        "also_in": shared,
    }
