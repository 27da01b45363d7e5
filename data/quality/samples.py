"""Random review samples, and blind second reviews of their clips.

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
  `random.Random(seed).sample`, then the members are shuffled and dealt round-robin to the assignees.
- Recorded: the sample (who, when, the filter and job, N, n, the allocation, the seed), N_h and n_h per stratum,
  per member its stratum, place in the draw, assignee and the caption version it had (what is measured), and the
  population itself (data.quality.population), from which further rounds draw more of the same batch
  (data.quality.rounds: a sample's `drawn` counts every round). Rows are written once (triggers); the
  assignment is audited per clip like any other (data.assignments).

Second reviews: a lead sends a sample's members (or those already reviewed) to a second reviewer, blind to the
first review and to the model: the second reviewer is given the footage alone (`task`), never a caption, the
model's labels, the first reviewer's edits, decision or name. Were they shown the model's labels, both reviewers
would start from the same answer, and their agreement would measure how often people keep it rather than how
often they agree. (`origin_caption_id` still records the machine caption the first reviewer started from.)
Their answer (`answer`: labels and approve/reject) is stored in `second_reviews` and changes nothing of the
clip: not its caption, not its review status. Nobody second-reviews a clip they reviewed (or were given to
review) first. While a second review is pending, `is_blind` / `blind_clip_ids` tell the web app which clips to
show that person without their first review (Review and Browse). `second_reviews` returns the answered pairs
(first review = the clip's current caption and review status) for Cohen's kappa.

Only leads draw samples and send second reviews: the role is checked here, not only in the UI.
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
DECISIONS = ("approved", "rejected")
# the clip fields a second reviewer is given: the footage, nothing that mirrors the current caption or its review
BLIND_CLIP_FIELDS = (
    "id",
    "path",
    "duration",
    "fps",
    "frames",
    "width",
    "height",
    "codec",
    "probe_error",
    "preview",
    "filmstrip",
    "filmstrip_indices",
)


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
    assign its members to `assignees` (round-robin in draw order), in one write transaction. Returns the sample as `get`
    does, plus `assigned` (person -> clips) and `reassigned` (clips taken from someone else). Raises Forbidden
    for a non-lead, DataError for a bad size, seed, stratify, person or filter, or an empty population."""
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
        db.conn.executemany(
            "INSERT INTO sample_members (sample_id, clip_id, stratum, draw_order, assignee, caption_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(sample_id, cid, h, k, people[k % len(people)], cap) for k, (cid, h, cap) in enumerate(picked)],
        )
        shares, reassigned = deal(db, [cid for cid, _, _ in picked], people, actor=actor, role=role)
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
    return {**get(db, sample_id), "assigned": shares, "reassigned": reassigned}


def deal(
    db: sqlite_utils.Database, clip_ids: list[int], people: list[str], *, actor: str, role: str
) -> tuple[dict[str, int], int]:
    """Assign drawn clips round-robin to `people` (the first clip to the first person), inside the caller's
    write transaction. Returns (person -> clips, clips taken from someone else)."""
    shares: dict[str, int] = {}
    reassigned = 0
    for j, person in enumerate(people):
        share = clip_ids[j :: len(people)]
        if share:
            out = assignments.assign_ids(db, share, person, actor=actor, role=role)
            shares[out["assignee"]] = len(share)
            reassigned += out["reassigned"]
    return shares, reassigned


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


# -- second reviews --------------------------------------------------------------------------------------------


def send_to_second(
    db: sqlite_utils.Database,
    sample_id: int,
    reviewer: str,
    *,
    actor: str,
    role: str,
    reviewed_only: bool = False,
) -> dict:
    """Send the members of sample `sample_id` (with `reviewed_only`, those whose first review is done) to
    `reviewer` for a blind second review. A member `reviewer` reviewed first, or was given to review (by the draw
    or since), is skipped (`own`), as is one already answered (`answered`); a pending one of someone else moves to
    `reviewer` (`moved`). Returns those counts with `sent` (new), `unchanged` and `unreviewed` (skipped by
    `reviewed_only`). One audit event per clip sent or moved."""
    check_lead(role, "sends clips to a second reviewer")
    with immediate(db):
        sample = get(db, sample_id)
        reviewer = users.enabled_name(db, reviewer, ask="Pick the second reviewer.")
        rows = list(
            db.query(
                "SELECT m.clip_id, m.assignee, a.assignee AS assignee_now, m.caption_id, c.review_status, "
                "c.reviewed_by, k.origin_id, r.id AS review_id, r.state, r.reviewer FROM sample_members m "
                "JOIN clips c ON c.id = m.clip_id LEFT JOIN assignments a ON a.clip_id = m.clip_id "
                "LEFT JOIN captions k ON k.id = c.current_caption_id "
                "LEFT JOIN second_reviews r ON r.sample_id = m.sample_id AND r.clip_id = m.clip_id "
                "WHERE m.sample_id = ? ORDER BY m.draw_order",
                [sample["id"]],
            )
        )
        counts = {"sent": 0, "moved": 0, "unchanged": 0, "answered": 0, "own": 0, "unreviewed": 0}
        new, moved, audit = [], [], []
        t = now()
        for r in rows:
            first_done = r["review_status"] != "unreviewed"
            if reviewed_only and not first_done:
                counts["unreviewed"] += 1
                continue
            if reviewer in (r["assignee"], r["assignee_now"], r["reviewed_by"]):
                counts["own"] += 1
                continue
            if r["state"] == "done":
                counts["answered"] += 1
            elif r["state"] == "pending":
                if r["reviewer"] == reviewer:
                    counts["unchanged"] += 1
                else:
                    moved.append((reviewer, actor, t, r["review_id"]))
                    audit.append(
                        (r["clip_id"], {"sample_id": sample["id"], "reviewer": reviewer, "previous": r["reviewer"]})
                    )
            else:
                origin = r["origin_id"] if r["origin_id"] is not None else r["caption_id"]
                new.append((sample["id"], r["clip_id"], reviewer, actor, t, origin))
                audit.append((r["clip_id"], {"sample_id": sample["id"], "reviewer": reviewer, "previous": None}))
        db.conn.executemany(
            "INSERT INTO second_reviews (sample_id, clip_id, reviewer, requested_by, requested_at, origin_caption_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            new,
        )
        db.conn.executemany(
            "UPDATE second_reviews SET reviewer = ?, requested_by = ?, requested_at = ? WHERE id = ?", moved
        )
        events.record_many(db, actor, "second_review.request", audit)
        counts["sent"], counts["moved"] = len(new), len(moved)
    return {"reviewer": reviewer, "sample_id": sample["id"], **counts}


def pending_count(db: sqlite_utils.Database, reviewer: str) -> int:
    """How many second reviews wait for `reviewer`."""
    return db.execute(
        "SELECT COUNT(*) FROM second_reviews WHERE reviewer = ? AND state = 'pending'", [reviewer]
    ).fetchone()[0]


def next_task(db: sqlite_utils.Database, reviewer: str, *, after: int | None = None) -> dict | None:
    """`reviewer`'s next pending second review after review `after` (in the order they were sent, wrapping
    around), as `task` gives it; None when none is left."""
    for start in ((after or 0), 0) if after else (0,):
        row = db.execute(
            "SELECT id FROM second_reviews WHERE reviewer = ? AND state = 'pending' AND id > ? ORDER BY id LIMIT 1",
            [reviewer, start],
        ).fetchone()
        if row:
            return task(db, row[0], reviewer)
    return None


def task(db: sqlite_utils.Database, review_id: int, reviewer: str) -> dict:
    """What the second reviewer of review `review_id` is given, and nothing more: `id`, `sample_id`, `clip_id`
    and `clip` (BLIND_CLIP_FIELDS: the footage; no caption, no labels, not the clip's review). NotFound for no
    such review, Forbidden for someone else's, DataError for one answered."""
    row = _review(db, review_id)
    if row["reviewer"] != reviewer:
        raise Forbidden(f"Second review {row['id']} is {row['reviewer']}'s, not yours.")
    if row["state"] != "pending":
        raise DataError(f"Second review {row['id']} is answered already: an answer is never changed.")
    cols = ", ".join(BLIND_CLIP_FIELDS)
    clip = dict(
        zip(BLIND_CLIP_FIELDS, db.execute(f"SELECT {cols} FROM clips WHERE id = ?", [row["clip_id"]]).fetchone())
    )
    return {"id": row["id"], "sample_id": row["sample_id"], "clip_id": row["clip_id"], "clip": clip}


def _review(db: sqlite_utils.Database, review_id: int) -> dict:
    try:
        review_id = limits.sql_int(review_id, "second review id")
    except DataError:
        raise NotFound(f"There is no second review {str(review_id)[:24]}.") from None
    row = next(db.query("SELECT * FROM second_reviews WHERE id = ?", [review_id]), None)
    if row is None:
        raise NotFound(f"There is no second review {review_id}.")
    return dict(row)


def answer(db: sqlite_utils.Database, review_id: int, reviewer: str, *, labels: dict, decision: str) -> dict:
    """Store `reviewer`'s answer to second review `review_id`: `labels` (the whole taxonomy, checked) and
    `decision` (approved | rejected). The clip's caption and review status are not touched. Refused (with what
    to do) when the review is someone else's or answered, or when `reviewer` has meanwhile reviewed the clip
    first. Returns the stored row (labels decoded)."""
    if decision not in DECISIONS:
        raise DataError(f"A second review approves or rejects (got {str(decision)[:20]!r}).")
    limits.check_labels(labels)
    taxonomy.validate_labels(labels)
    with immediate(db):
        row = _review(db, review_id)
        if row["reviewer"] != reviewer:
            raise Forbidden(f"Second review {row['id']} is {row['reviewer']}'s, not yours.")
        if row["state"] != "pending":
            raise DataError(f"Second review {row['id']} is answered already: an answer is never changed.")
        first = db.execute("SELECT reviewed_by, review_status FROM clips WHERE id = ?", [row["clip_id"]]).fetchone()
        if first and first[1] != "unreviewed" and first[0] == reviewer:
            raise DataError(
                f"You reviewed clip {row['clip_id']} yourself, so your answer would not be a second opinion. "
                "Ask the lead to send it to someone else."
            )
        db.execute(
            "UPDATE second_reviews SET state = 'done', labels = ?, decision = ?, answered_at = ? WHERE id = ?",
            [taxonomy.dumps(labels), decision, now(), row["id"]],
        )
        events.record(
            db,
            reviewer,
            "second_review.answer",
            clip_id=row["clip_id"],
            sample_id=row["sample_id"],
            review_id=row["id"],
            decision=decision,
        )
    done = _review(db, row["id"])
    done["labels"] = json.loads(done["labels"])
    return done


def is_blind(db: sqlite_utils.Database, clip_id: int, reviewer: str) -> bool:
    """Whether `reviewer` has a pending second review of clip `clip_id` (so must not see its first review)."""
    return bool(
        db.execute(
            "SELECT 1 FROM second_reviews WHERE clip_id = ? AND reviewer = ? AND state = 'pending' LIMIT 1",
            [clip_id, reviewer],
        ).fetchone()
    )


def blind_clip_ids(db: sqlite_utils.Database, reviewer: str, clip_ids: Iterable[int]) -> set[int]:
    """The clips of `clip_ids` (a page of Browse) that `reviewer` has a pending second review of."""
    ids = list(clip_ids)
    out: set[int] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        out.update(
            r[0]
            for r in db.execute(
                f"SELECT clip_id FROM second_reviews WHERE reviewer = ? AND state = 'pending' "
                f"AND clip_id IN ({','.join('?' * len(chunk))})",
                [reviewer, *chunk],
            )
        )
    return out


def second_reviews(
    db: sqlite_utils.Database, *, sample_id: int | None = None, answered_only: bool = True
) -> list[dict]:
    """Second reviews (of one sample, or all), oldest first, each beside the first review as it stands now:
    `reviewer`, `labels`, `decision`, `answered_at`, `origin_caption_id` (the machine caption the first reviewer
    started from; the second saw none); `first_reviewer`,
    `first_decision` (the clip's review status: a pair exists only when it is not "unreviewed"),
    `first_caption_id` and `first_labels` (the clip's current caption: the first reviewer's labels when they
    approved). With `answered_only=False`, pending ones too (`labels` and `decision` None)."""
    where = ["1 = 1"]
    args: list[Any] = []
    if sample_id is not None:
        where.append("r.sample_id = ?")
        args.append(limits.sql_int(sample_id, "sample id"))
    if answered_only:
        where.append("r.state = 'done'")
    out = []
    for r in db.query(
        "SELECT r.id, r.sample_id, r.clip_id, r.reviewer, r.requested_by, r.requested_at, r.origin_caption_id, "
        "r.state, r.labels, r.decision, r.answered_at, c.reviewed_by AS first_reviewer, "
        "c.review_status AS first_decision, c.current_caption_id AS first_caption_id, k.labels AS first_labels "
        "FROM second_reviews r JOIN clips c ON c.id = r.clip_id LEFT JOIN captions k ON k.id = c.current_caption_id "
        f"WHERE {' AND '.join(where)} ORDER BY r.id",
        args,
    ):
        r = dict(r)
        r["labels"] = json.loads(r["labels"]) if r["labels"] else None
        r["first_labels"] = json.loads(r["first_labels"]) if r["first_labels"] else None
        out.append(r)
    return out
