"""Whole on purpose: the migrations are one ordered list, applied by name and never edited once shipped; read
in one file, in order, they are the history of every table, and each one sees the helpers (FTS triggers,
facet columns) the others use.

Schema and migrations (sqlite-utils `Migrations`). Append a new function to change the schema; never
edit one that has shipped. `table.transform()` silently drops triggers (FTS ones included): a migration
that transforms `clips` must call `_fts_clips(db)` again.

Tables
- clips: one row per file under the clip root (path relative to it). Facet columns (scenario, hazard_level,
  weather, lighting, road_type) and caption_text/labels_text mirror the *current* caption so that browsing a
  million clips needs no join; data.captions keeps them in step inside the same transaction.
- captions: append-only versions. `clips.current_caption_id` points at the current one.
  A machine result of a job is unique on (job_id, clip_id), which makes writing it idempotent.
  Lineage (m011): `derived_from_id` is the version a row was made from, `origin_id` the machine caption at the
  root of that chain (data.captions explains both); `parent_id` is the version that was current when it was written.
- prompts: versioned (name, version), never edited in place.
- jobs / job_items: a captioning job and its per-clip work, claimed with leases. `jobs.run_seconds` and
  `running_since` (m020) measure how long a job has really run; `jobs.fleet` (m023) is the fleet it is for.
- users, events (append-only audit trail, enforced by triggers), heartbeats (runner liveness).
- assignments: which clip a lead gave to whom (the review queue serves a person's clips first).
- samples, sample_strata, sample_members, second_reviews (m017): random review samples with their draw, and blind
  second reviews of their clips (data.quality.samples, data.quality.second_review; m017_samples documents each
  column).
- Confidence and consistency (m014): captions.confidence (a machine caption's per-label probabilities, JSON) and
  captions.conflicts (where text and labels disagree, JSON list), mirrored onto clips.confidence_min and
  clips.label_conflicts for the risk order (m014_confidence documents each column).
- review_leases: which person is on which clip (the shared queue skips clips others are on); drafts: edits not
  saved yet, per person and clip (m013).
- quality_pairs (m019): a machine caption measured against an approved one, cached per pair of versions
  (data.quality).
- releases (m021): training-set releases, versioned per name, never changed once written (data.release.make).
- quality_targets, sample_populations, sample_rounds (m022): each label's target and confidence, the clips a
  sample was drawn from, and the further rounds drawn into it (m022_quality_decision documents each column).
"""

from __future__ import annotations

import json
import re
import time

import sqlite_utils

MIGRATIONS = sqlite_utils.Migrations("workbench")


def _fts_clips(db: sqlite_utils.Database) -> None:
    db["clips"].enable_fts(
        ["path", "caption_text", "labels_text"], create_triggers=True, tokenize="porter unicode61", replace=True
    )


@MIGRATIONS()
def m001_initial(db: sqlite_utils.Database) -> None:
    db.execute("""
    CREATE TABLE clips (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        sha256 TEXT,
        size INTEGER,
        mtime REAL,
        duration REAL,
        fps REAL,
        frames INTEGER,
        width INTEGER,
        height INTEGER,
        codec TEXT,
        probe_error TEXT,
        thumbnail TEXT,
        filmstrip TEXT,
        sidecar TEXT,
        missing INTEGER NOT NULL DEFAULT 0,
        review_status TEXT NOT NULL DEFAULT 'unreviewed'
            CHECK (review_status IN ('unreviewed', 'approved', 'rejected')),
        reviewed_by TEXT,
        reviewed_at REAL,
        current_caption_id INTEGER,
        caption_source TEXT,
        caption_text TEXT,
        labels_text TEXT,
        scenario TEXT,
        hazard_level TEXT,
        weather TEXT,
        lighting TEXT,
        road_type TEXT,
        ingested_at REAL,
        updated_at REAL
    )""")
    for cols in (
        ["review_status", "id"],
        ["scenario", "id"],
        ["hazard_level", "id"],
        ["weather", "id"],
        ["lighting", "id"],
        ["road_type", "id"],
        ["caption_source", "id"],
        ["sha256"],
    ):
        db["clips"].create_index(cols)
    db.execute("CREATE INDEX idx_clips_failed ON clips(id) WHERE probe_error IS NOT NULL")
    db.execute("CREATE INDEX idx_clips_uncaptioned ON clips(id) WHERE current_caption_id IS NULL")

    db.execute("""
    CREATE TABLE prompts (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        description TEXT,
        system TEXT NOT NULL,
        user TEXT NOT NULL,
        schema TEXT NOT NULL,
        created_at REAL,
        UNIQUE (name, version)
    )""")

    db.execute("""
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        created_by TEXT,
        selection TEXT,
        prompt_id INTEGER REFERENCES prompts(id),
        params TEXT,
        state TEXT NOT NULL DEFAULT 'queued'
            CHECK (state IN ('queued', 'running', 'paused', 'cancelled', 'done')),
        total INTEGER NOT NULL DEFAULT 0,
        done INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        created_at REAL,
        started_at REAL,
        finished_at REAL,
        updated_at REAL
    )""")
    db["jobs"].create_index(["state"])

    db.execute("""
    CREATE TABLE job_items (
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        clip_id INTEGER NOT NULL REFERENCES clips(id),
        state TEXT NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'leased', 'done', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        lease_until REAL,
        leased_by TEXT,
        not_before REAL,
        last_error TEXT,
        error_kind TEXT,
        caption_id INTEGER,
        replica TEXT,
        latency_ms REAL,
        finished_at REAL,
        updated_at REAL,
        PRIMARY KEY (job_id, clip_id)
    ) WITHOUT ROWID""")
    db["job_items"].create_index(["job_id", "state"])
    db["job_items"].create_index(["job_id", "finished_at"])
    db["job_items"].create_index(["clip_id"])

    db.execute("""
    CREATE TABLE captions (
        id INTEGER PRIMARY KEY,
        clip_id INTEGER NOT NULL REFERENCES clips(id),
        version INTEGER NOT NULL,
        parent_id INTEGER,
        text TEXT NOT NULL,
        labels TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('model', 'human')),
        author TEXT NOT NULL,
        simulated INTEGER NOT NULL DEFAULT 0,
        model TEXT,
        prompt_id INTEGER,
        prompt_name TEXT,
        prompt_version INTEGER,
        params TEXT,
        frames INTEGER,
        replica TEXT,
        decode_backend TEXT,
        latency_ms REAL,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        finish_reason TEXT,
        job_id INTEGER,
        note TEXT,
        created_at REAL NOT NULL,
        UNIQUE (clip_id, version)
    )""")
    db.execute("CREATE UNIQUE INDEX idx_captions_job_clip ON captions(job_id, clip_id) WHERE job_id IS NOT NULL")

    db.execute("""
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL CHECK (role IN ('annotator', 'lead', 'admin')),
        password_hash TEXT NOT NULL,
        created_at REAL,
        disabled INTEGER NOT NULL DEFAULT 0
    )""")

    db.execute("""
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        clip_id INTEGER,
        caption_id INTEGER,
        job_id INTEGER,
        detail TEXT
    )""")
    db["events"].create_index(["clip_id"])
    db["events"].create_index(["job_id"])
    db.execute("""CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
                  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""")
    db.execute("""CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
                  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""")
    db.execute("""CREATE TRIGGER captions_append_only_delete BEFORE DELETE ON captions
                  BEGIN SELECT RAISE(ABORT, 'caption versions are append-only'); END""")
    db.execute("""CREATE TRIGGER captions_append_only_update
                  BEFORE UPDATE OF clip_id, version, parent_id, text, labels, source, author, created_at ON captions
                  BEGIN SELECT RAISE(ABORT, 'caption versions are append-only'); END""")

    db.execute("""
    CREATE TABLE heartbeats (
        name TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        pid INTEGER,
        at REAL NOT NULL,
        info TEXT
    )""")
    _fts_clips(db)


@MIGRATIONS()
def m002_clip_library(db: sqlite_utils.Database) -> None:
    """Ingest: which frames the filmstrip shows (the model's frames, a JSON list of indices) and which
    decoder made it (pyav | nvdec)."""
    db.execute("ALTER TABLE clips ADD COLUMN filmstrip_indices TEXT")
    db.execute("ALTER TABLE clips ADD COLUMN media_decoder TEXT")


@MIGRATIONS()
def m003_browse_at_scale(db: sqlite_utils.Database) -> None:
    """A million clips: the unfiltered total comes from a trigger-kept row count (`_counts`) instead of a
    scan, and missing rows (rare) from a partial index."""
    db["clips"].enable_counts()
    db.execute("CREATE INDEX idx_clips_missing ON clips(id) WHERE missing = 1")


@MIGRATIONS()
def m004_hazard_weather_index(db: sqlite_utils.Database) -> None:
    """The browse view's most used pair (hazard level x weather): a covering index makes its pages and
    counts index-only (170 ms -> 0.3 ms for a count on a million clips, see docs/BENCHMARKS.md)."""
    db.execute("CREATE INDEX IF NOT EXISTS idx_clips_hazard_weather ON clips(hazard_level, weather, missing, id)")


@MIGRATIONS()
def m005_previews(db: sqlite_utils.Database) -> None:
    """clips.preview: a browser-playable H.264 copy of an HEVC clip, relative to media_dir (data.library.media)."""
    db.execute("ALTER TABLE clips ADD COLUMN preview TEXT")


@MIGRATIONS()
def m006_events_by_time(db: sqlite_utils.Database) -> None:
    """Team statistics read the audit trail by time window (data.events.team_stats)."""
    db["events"].create_index(["at"])


@MIGRATIONS()
def m007_clip_roots(db: sqlite_utils.Database) -> None:
    """The library remembers where its clips are (data.library.clip_root): `clip_roots` holds the folder ingest scanned,
    which the runner, the media route and the launcher use instead of a default or the current directory.
    job_items.raw_answer keeps the start of an answer that could not be used, for the lead to read."""
    db.execute("""
    CREATE TABLE clip_roots (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        added_at REAL NOT NULL,
        moved_from TEXT
    )""")
    db.execute("ALTER TABLE job_items ADD COLUMN raw_answer TEXT")


@MIGRATIONS()
def m009_hardening(db: sqlite_utils.Database) -> None:
    """Server-side sessions (data.sessions): a cookie names a row here, so logout, a password or role change
    and disabling a user end sessions at once, and idle and absolute lifetimes are enforced by the server.
    Only a hash of the token is stored (a copy of the database opens no session)."""
    db.execute("""
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        user TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_seen REAL NOT NULL
    ) WITHOUT ROWID""")
    db["sessions"].create_index(["user"])


@MIGRATIONS()
def m010_assignments(db: sqlite_utils.Database) -> None:
    """The assignable review queue (data.assignments): a lead assigns clips to a person, whose "next" serves
    them first. A table of its own, not a column of `clips`: assigning 10,000 clips must not rewrite 10,000
    clip rows (and re-index them in clips_fts, whose triggers fire on every update of a clip)."""
    db.execute("""
    CREATE TABLE assignments (
        clip_id INTEGER PRIMARY KEY REFERENCES clips(id),
        assignee TEXT NOT NULL,
        assigned_by TEXT NOT NULL,
        assigned_at REAL NOT NULL
    )""")
    db["assignments"].create_index(["assignee", "clip_id"])


@MIGRATIONS()
def m011_lineage(db: sqlite_utils.Database) -> None:
    """Lineage of every caption version (data.captions): `derived_from_id` is the version its text and labels
    were made from (a human save: the version it was based on; an adopt: the version adopted; a machine caption:
    none, it is an origin) and `origin_id` the machine caption at the root of that chain (a machine caption's
    own id; none for text written from scratch). `parent_id` keeps its meaning, the clip's current version when
    the row was written, which differs for an adopt (it replaced one version and copied another) and for a
    machine candidate (written beside whatever was current, derived from nothing).

    Existing versions are backfilled: a human version is derived from its parent, an adopt from the version its
    `caption.adopt` event names, and origins follow those links. Chains never leave a clip and point to earlier
    versions, so one pass per range of clips in version order settles every row. Lineage is then append-only
    like the rest of a version."""
    db.execute("ALTER TABLE captions ADD COLUMN derived_from_id INTEGER")
    db.execute("ALTER TABLE captions ADD COLUMN origin_id INTEGER")
    adopted: dict[int, int] = {}
    for caption_id, detail in db.execute(
        "SELECT caption_id, detail FROM events WHERE action = 'caption.adopt' AND caption_id IS NOT NULL"
    ):
        try:
            source = json.loads(detail or "{}").get("adopted")
        except (ValueError, AttributeError):
            continue
        if isinstance(source, int) and not isinstance(source, bool):
            adopted[caption_id] = source
    span = 20_000  # clip ids per pass: every version of those clips is read at once, in version order
    start = db.execute("SELECT MIN(clip_id) FROM captions").fetchone()[0]
    while start is not None:
        rows = db.execute(
            "SELECT id, clip_id, source, parent_id FROM captions WHERE clip_id >= ? AND clip_id < ? "
            "ORDER BY clip_id, version",
            [start, start + span],
        ).fetchall()
        origin: dict[int, int | None] = {}  # caption id -> its origin, for the clips of this pass
        clip_of: dict[int, int] = {}
        updates = []
        for cid, clip_id, source, parent_id in rows:
            clip_of[cid] = clip_id
            if source == "model":
                derived = None
                origin[cid] = cid
            else:
                derived = adopted.get(cid, parent_id)
                if derived is not None and clip_of.get(derived) != clip_id:
                    derived = parent_id  # an adopt event naming no earlier version of this clip: keep the parent
                origin[cid] = origin.get(derived) if derived is not None else None
            updates.append((derived, origin[cid], cid))
        db.conn.executemany("UPDATE captions SET derived_from_id = ?, origin_id = ? WHERE id = ?", updates)
        start = db.execute("SELECT MIN(clip_id) FROM captions WHERE clip_id >= ?", [start + span]).fetchone()[0]
    db.execute("""CREATE TRIGGER captions_lineage_append_only BEFORE UPDATE OF derived_from_id, origin_id ON captions
                  BEGIN SELECT RAISE(ABORT, 'caption versions are append-only'); END""")


@MIGRATIONS()
def m012_hardening2(db: sqlite_utils.Database) -> None:
    """Issue 21. An index for the per-person save rate (data.captions counts a person's recent versions); the
    browsers and addresses each account signed in from (data.sessions.remember: the login limiter does not
    hold back a person at a browser or address they used before, so an attacker cannot lock them out); and
    the clips still assigned to disabled users given back, audited, so that they are in the review queue
    (data.team.set_disabled gives them back at every disable)."""
    db.execute("CREATE INDEX IF NOT EXISTS idx_captions_author_time ON captions(author, created_at)")
    db.execute("""
    CREATE TABLE IF NOT EXISTS login_trust (
        user TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('device', 'address')),
        value_hash TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used REAL NOT NULL,
        PRIMARY KEY (user, kind, value_hash)
    ) WITHOUT ROWID""")
    db.execute(
        "INSERT INTO events (at, actor, action, clip_id, detail) "
        "SELECT ?, 'migration', 'clip.unassign', a.clip_id, "
        "json_object('previous', a.assignee, 'why', 'user disabled') "
        "FROM assignments a JOIN users u ON u.name = a.assignee WHERE u.disabled = 1 ORDER BY a.clip_id",
        [time.time()],
    )
    db.execute("DELETE FROM assignments WHERE assignee IN (SELECT name FROM users WHERE disabled = 1)")


@MIGRATIONS()
def m017_samples(db: sqlite_utils.Database) -> None:
    """Random review samples and blind second reviews (data.quality.samples, data.quality.second_review).

    - samples: one row per draw: who drew it and when, the population it was drawn from (`source`: the filter,
      as `Filter.to_dict()`, with the clips a draw can take added to it; `job_id` when the filter names a job),
      N (`population`), n asked (`size`) and drawn (`drawn`), the allocation (`stratify`: none, proportional or
      equal, over the hazard level of each clip's caption at the draw) and the `seed` that reproduces it.
    - sample_strata: per sample and stratum (a hazard level; "" for a caption without one; "all" when not
      stratified) N_h (`population`) and n_h (`drawn`), as they were at the draw.
    - sample_members: the clips drawn, each with its stratum, its place in the draw (`draw_order`), the person it
      was assigned to, and the caption version it had at the draw (`caption_id`: the machine caption measured).
      Only these clips are a random sample; a clip reviewed because someone chose it has no row here.
    - second_reviews: a sample member sent to a second reviewer, blind to the first review. `origin_caption_id`
      is the machine caption they are shown (the origin of the first reviewer's work); their answer is `labels`
      (taxonomy-valid JSON) and `decision` (approved | rejected), and changes nothing of the clip. One per
      (sample, clip); pending ones may be handed to someone else, answered ones are never changed (triggers).
    Samples, strata and members are written once (triggers refuse updates and deletes), and so are prompt
    versions from now on: a new prompt is a new version (data.prompts), which the comparison of versions relies on."""
    db.execute("""
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY,
        created_by TEXT NOT NULL,
        created_at REAL NOT NULL,
        source TEXT NOT NULL,
        job_id INTEGER,
        population INTEGER NOT NULL,
        size INTEGER NOT NULL,
        drawn INTEGER NOT NULL,
        stratify TEXT NOT NULL CHECK (stratify IN ('none', 'proportional', 'equal')),
        seed INTEGER NOT NULL,
        assignees TEXT NOT NULL
    )""")
    db.execute("""
    CREATE TABLE sample_strata (
        sample_id INTEGER NOT NULL REFERENCES samples(id),
        stratum TEXT NOT NULL,
        population INTEGER NOT NULL,
        drawn INTEGER NOT NULL,
        PRIMARY KEY (sample_id, stratum)
    ) WITHOUT ROWID""")
    db.execute("""
    CREATE TABLE sample_members (
        sample_id INTEGER NOT NULL REFERENCES samples(id),
        clip_id INTEGER NOT NULL REFERENCES clips(id),
        stratum TEXT NOT NULL,
        draw_order INTEGER NOT NULL,
        assignee TEXT NOT NULL,
        caption_id INTEGER,
        PRIMARY KEY (sample_id, clip_id)
    ) WITHOUT ROWID""")
    db["sample_members"].create_index(["clip_id"])
    db.execute("""
    CREATE TABLE second_reviews (
        id INTEGER PRIMARY KEY,
        sample_id INTEGER NOT NULL REFERENCES samples(id),
        clip_id INTEGER NOT NULL REFERENCES clips(id),
        reviewer TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        requested_at REAL NOT NULL,
        origin_caption_id INTEGER,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
        labels TEXT,
        decision TEXT CHECK (decision IN ('approved', 'rejected')),
        answered_at REAL,
        UNIQUE (sample_id, clip_id)
    )""")
    db["second_reviews"].create_index(["reviewer", "state", "id"])
    db["second_reviews"].create_index(["clip_id"])
    for table in ("samples", "sample_strata", "sample_members"):
        for verb in ("UPDATE", "DELETE"):
            db.execute(f"""CREATE TRIGGER {table}_write_once_{verb.lower()} BEFORE {verb} ON {table}
                           BEGIN SELECT RAISE(ABORT, 'a drawn sample is never changed'); END""")
    db.execute("""CREATE TRIGGER second_reviews_answered_stay BEFORE UPDATE ON second_reviews
                  WHEN OLD.state = 'done'
                  BEGIN SELECT RAISE(ABORT, 'an answered second review is never changed'); END""")
    db.execute("""CREATE TRIGGER second_reviews_no_delete BEFORE DELETE ON second_reviews
                  BEGIN SELECT RAISE(ABORT, 'second reviews are never deleted'); END""")
    # prompt versions are compared with each other (data.quality.prompt_compare): a version is never edited in place
    for verb in ("UPDATE", "DELETE"):
        db.execute(f"""CREATE TRIGGER prompts_never_edited_{verb.lower()} BEFORE {verb} ON prompts
                       BEGIN SELECT RAISE(ABORT, 'a prompt version is never edited: save a new version'); END""")


@MIGRATIONS()
def m014_confidence(db: sqlite_utils.Database) -> None:
    """The model's confidence per label, and whether a caption's text and labels agree (issue 19).

    - captions.confidence: JSON, what the model's token probabilities say of each label of a machine caption
      (serving.logprobs writes it, data.confidence reads it): `{"labels": {label: p or null}, "items": {list
      label: {value: p}}, "end": {list label: p}}`, p in [0, 1], plus `"note"` when the logprobs could not be
      read. NULL for a human version, for a caption written before this migration, and when the job asked for
      no logprobs.
    - captions.conflicts: JSON list of the disagreements data.consistency found between the version's text and
      its labels ([] when none); NULL for versions written before this migration.
    - clips.confidence_min (the lowest label confidence of the current caption; NULL when it has none) and
      clips.label_conflicts (how many disagreements its current caption has; NULL without a caption or for a
      caption written before this migration) mirror the current caption, kept in step by data.captions in the
      same transaction as the other facet columns.
    - idx_clips_risk: the key of the "risk" order (data.order.RISK_KEY, which must stay this expression for the
      index to serve it), so a page of the risk-ordered queue is an index seek on a million clips.
    Both new caption columns are append-only like the rest of a version. Existing rows keep NULL: nothing is
    backfilled (a caption's confidence cannot be known after the fact; its check runs when it is next stored)."""
    db.execute("ALTER TABLE captions ADD COLUMN confidence TEXT")
    db.execute("ALTER TABLE captions ADD COLUMN conflicts TEXT")
    db.execute("ALTER TABLE clips ADD COLUMN confidence_min REAL")
    db.execute("ALTER TABLE clips ADD COLUMN label_conflicts INTEGER")
    db.execute(
        "CREATE INDEX idx_clips_risk ON clips(("
        "CASE hazard_level WHEN 'critical' THEN 4 WHEN 'high' THEN 3 WHEN 'medium' THEN 2 WHEN 'low' THEN 1 "
        "WHEN 'none' THEN 0 END * 10000 + (COALESCE(label_conflicts, 0) > 0) * 2000 "
        "+ CAST(ROUND((1.0 - COALESCE(confidence_min, 0.5)) * 1000) AS INTEGER)), id)"
    )
    db.execute("""CREATE TRIGGER captions_confidence_append_only BEFORE UPDATE OF confidence, conflicts ON captions
                  BEGIN SELECT RAISE(ABORT, 'caption versions are append-only'); END""")


# The review states a clip can be in. 'broken' (added by m013): a person saw that the video cannot be reviewed
# (it does not play, shows nothing, is another clip's footage) although ingest passed; it is counted apart
# from rejections, and the review queue never serves it.
_REVIEW_CHECK_BEFORE = "CHECK (review_status IN ('unreviewed', 'approved', 'rejected'))"
_REVIEW_CHECK_AFTER = "CHECK (review_status IN ('unreviewed', 'approved', 'rejected', 'broken'))"


def _rebuild_with(db: sqlite_utils.Database, table: str, old: str, new: str) -> None:
    """Rebuild `table` with `old` replaced by `new` in its CREATE statement (SQLite cannot alter a CHECK), by SQLite's
    twelve-step procedure, generic over the columns, indexes and triggers the table has now (other migrations add
    columns; sqlite-utils' `transform()` would drop the CHECKs and the triggers). The caller holds a write
    transaction and has turned foreign keys off: dropping a parent table inside a transaction with them on leaves
    violations counted that no re-insert clears. Foreign keys are checked before the caller commits."""
    sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchone()[0]
    if sql.count(old) != 1:
        raise RuntimeError(f"{table}: expected {old!r} once in its schema, found it {sql.count(old)} times")
    head = re.match(rf'CREATE TABLE\s+("?){table}\1\s*\(', sql)  # a rebuilt table's name is quoted
    if head is None:
        raise RuntimeError(f"{table}: unexpected schema text {sql[:60]!r}")
    extras = [
        r[0]
        for r in db.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') AND sql IS NOT NULL "
            "ORDER BY type, name",
            [table],
        )
    ]
    tmp = f"_{table}_rebuild"
    db.execute(f"CREATE TABLE {tmp} (" + sql[head.end() :].replace(old, new))
    db.execute(f"INSERT INTO {tmp} SELECT * FROM {table}")
    db.execute(f"DROP TABLE {table}")
    db.execute(f"ALTER TABLE {tmp} RENAME TO {table}")
    for statement in extras:
        db.execute(statement)
    broken = db.execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise RuntimeError(f"{table}: the rebuild broke {len(broken)} foreign key(s), e.g. {tuple(broken[0])}")


@MIGRATIONS(transactional=False)
def m013_review_queue(db: sqlite_utils.Database) -> None:
    """The shared review queue (data.review_queue), broken clips and drafts (data.drafts).

    - clips.review_status may be 'broken' (flagged by a person, with the reason in review_note), counted apart
      from rejections; the queue serves only unreviewed clips that ingest could read.
    - review_leases: the clip a person was served (or opened) is theirs until they move on or stop being
      active on it (expires_at); the others' "next" skips it. One row per clip; a person holds at most one.
    - drafts: an edit not yet saved, per person and clip, with the version it started from (base_caption_id);
      written as the person types, never a caption version. Labels as typed (JSON; may be incomplete).

    Not in the migrations' own transaction: rebuilding `clips` needs foreign keys off, which SQLite only allows
    outside one. It runs in a transaction of its own, and again from the start if the process died before
    sqlite-utils recorded it (each step checks whether it is done)."""
    db.execute("PRAGMA foreign_keys = OFF")
    try:
        with db.atomic():
            clips_sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'clips'").fetchone()
            if _REVIEW_CHECK_AFTER not in clips_sql[0]:
                _rebuild_with(db, "clips", _REVIEW_CHECK_BEFORE, _REVIEW_CHECK_AFTER)
            if "review_note" not in db["clips"].columns_dict:
                db.execute("ALTER TABLE clips ADD COLUMN review_note TEXT")
            db.execute("""
            CREATE TABLE IF NOT EXISTS review_leases (
                clip_id INTEGER PRIMARY KEY REFERENCES clips(id),
                holder TEXT NOT NULL,
                taken_at REAL NOT NULL,
                expires_at REAL NOT NULL
            )""")
            db.execute("CREATE INDEX IF NOT EXISTS idx_review_leases_holder ON review_leases(holder)")
            db.execute("""
            CREATE TABLE IF NOT EXISTS drafts (
                user TEXT NOT NULL,
                clip_id INTEGER NOT NULL REFERENCES clips(id),
                base_caption_id INTEGER,
                text TEXT NOT NULL,
                labels TEXT NOT NULL,
                saved_at REAL NOT NULL,
                PRIMARY KEY (user, clip_id)
            ) WITHOUT ROWID""")
    finally:
        db.execute("PRAGMA foreign_keys = ON")


@MIGRATIONS()
def m018_deployment(db: sqlite_utils.Database) -> None:
    """Where the fleet fetches clips from (data.deployment): one row once a head has been launched on this
    library; none on a single machine."""
    db.execute("""
    CREATE TABLE deployment (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        role TEXT NOT NULL CHECK (role IN ('all', 'head')),
        media_url_base TEXT NOT NULL,
        media_url_ttl REAL NOT NULL,
        recorded_at REAL NOT NULL,
        recorded_by TEXT NOT NULL
    )""")


@MIGRATIONS()
def m019_quality(db: sqlite_utils.Database) -> None:
    """The quality view's pairs (data.quality): one row per (approved caption version `truth_id`, machine caption
    version `machine_id` measured against it), with what a report reads of both: the machine caption's model,
    prompt name and version and job, each label's value as the machine said it (`s_<label>`) and as approved
    (`a_<label>`; the multi-choice label as a sorted JSON array), and the word-level edit ratio of the texts.
    `origin` is 1 for the pair of a version with the machine caption it derives from (its origin); a version
    written from scratch has one such row with `machine_id` 0 and nothing else. Rows are filled when a report
    first needs them; both versions are append-only, so a row never goes stale and the table is a cache whose
    rows may be deleted at any time (a change of the taxonomy's labels empties it in the migration that adds the
    columns). `idx_clips_quality` covers what a report reads of an approved clip (its current caption, missing
    flag and facets), so a report reads neither the clips' rows nor their captions: one index entry and one pair
    per approved clip (docs/BENCHMARKS.md)."""
    # the taxonomy's labels as they are at this migration (a migration never follows later changes)
    labels = ("scenario_category", "hazard_level", "road_users", "ego_maneuver", "weather", "lighting", "road_type")
    label_cols = "".join(f"s_{name} TEXT, a_{name} TEXT, " for name in labels)
    db.execute(f"""
    CREATE TABLE quality_pairs (
        truth_id INTEGER NOT NULL,
        machine_id INTEGER NOT NULL,
        origin INTEGER NOT NULL,
        model TEXT,
        prompt_name TEXT,
        prompt_version INTEGER,
        job_id INTEGER,
        ratio REAL,
        {label_cols}
        PRIMARY KEY (truth_id, machine_id)
    ) WITHOUT ROWID""")
    db.execute(
        "CREATE INDEX idx_clips_quality ON clips(review_status, missing, current_caption_id, scenario, hazard_level, "
        "weather, lighting, road_type, caption_source)"
    )


@MIGRATIONS()
def m020_fleet_state(db: sqlite_utils.Database) -> None:
    """How long each job has really run, so that a paused, cancelled or done job's clips/s is its clips over
    that time (data.jobs.queries.progress): `run_seconds` sums the finished stretches in state running,
    `running_since` is when the current one began (NULL while not running). The fleet's state itself is not
    a table: the runner reports it with its heartbeat (serving.runner.replicas).

    Jobs that ran before this are backfilled from what their rows know: from the start to the end (a cancel,
    or the last result), or to the last change for a paused one; a pause in between is counted as running."""
    db.execute("ALTER TABLE jobs ADD COLUMN run_seconds REAL NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE jobs ADD COLUMN running_since REAL")
    db.execute(
        "UPDATE jobs SET run_seconds = MAX(0, COALESCE(finished_at, updated_at, started_at) - started_at) "
        "WHERE started_at IS NOT NULL AND state IN ('paused', 'cancelled', 'done')"
    )
    db.execute("UPDATE jobs SET running_since = started_at WHERE started_at IS NOT NULL AND state = 'running'")


@MIGRATIONS()
def m021_releases(db: sqlite_utils.Database) -> None:
    """Training-set releases (data.release.make): one row per release, `version` counting up per `name`. A row
    is reserved in state 'writing' before its files are written and finished as 'done' (or 'failed') after, with
    what it holds: `path` (the folder written), `options` (JSON: the clip filter, grouping field, splits, seed,
    whether simulated text was included), `counts` (JSON: clips per split), `changes` (JSON: what changed since
    `previous_id`, the release before it of the same name) and `manifest_sha256` (the hash of its manifest.jsonl,
    checked when the next release reads it). A finished release never changes (triggers), as its files never do."""
    db.execute("""
    CREATE TABLE releases (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        state TEXT NOT NULL DEFAULT 'writing' CHECK (state IN ('writing', 'done', 'failed')),
        path TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at REAL NOT NULL,
        finished_at REAL,
        options TEXT NOT NULL,
        counts TEXT,
        changes TEXT,
        previous_id INTEGER REFERENCES releases(id),
        manifest_sha256 TEXT,
        error TEXT,
        UNIQUE (name, version)
    )""")
    db.execute("""CREATE TRIGGER releases_finished_stay BEFORE UPDATE ON releases WHEN OLD.state <> 'writing'
                  BEGIN SELECT RAISE(ABORT, 'a finished release is never changed: make a new one'); END""")
    db.execute("""CREATE TRIGGER releases_never_deleted BEFORE DELETE ON releases
                  BEGIN SELECT RAISE(ABORT, 'releases are never deleted'); END""")


@MIGRATIONS()
def m022_quality_decision(db: sqlite_utils.Database) -> None:
    """What a lead decides a batch from (data.quality.decision), and samples that grow by rounds.

    - quality_targets: per label, the accuracy a batch must reach to be used as the model captioned it
      (`target`, a share; NULL: no requirement on that label) and how sure the lead wants to be (`confidence`),
      with who set it and when. A label without a row has data.quality.targets' default.
    - sample_populations: the clips a sample was drawn from, per stratum, as they were at the draw (`clip_ids`
      ascending and each one's `caption_ids`, delta-coded 64-bit integers, zlib-compressed): so that a further
      round draws from the same batch, whatever has happened to its clips since. `clips` is their number.
      Samples drawn before this migration have none, and cannot grow.
    - sample_rounds: each further round drawn into a sample (round 1, 2, ...; round 0 is the draw itself, in
      `samples`): who, when, how many asked (`size`) and drawn, and its `seed`.
    - sample_members.round: the round a member was drawn in (0: the first draw).
    Populations and rounds are written once, as samples are (triggers)."""
    db.execute("""
    CREATE TABLE quality_targets (
        label TEXT PRIMARY KEY,
        target REAL CHECK (target IS NULL OR (target > 0 AND target <= 1)),
        confidence REAL NOT NULL CHECK (confidence >= 0.5 AND confidence < 1),
        set_by TEXT NOT NULL,
        set_at REAL NOT NULL
    )""")
    db.execute("""
    CREATE TABLE sample_populations (
        sample_id INTEGER NOT NULL REFERENCES samples(id),
        stratum TEXT NOT NULL,
        clips INTEGER NOT NULL,
        clip_ids BLOB NOT NULL,
        caption_ids BLOB NOT NULL,
        PRIMARY KEY (sample_id, stratum)
    ) WITHOUT ROWID""")
    db.execute("""
    CREATE TABLE sample_rounds (
        sample_id INTEGER NOT NULL REFERENCES samples(id),
        round INTEGER NOT NULL CHECK (round >= 1),
        created_by TEXT NOT NULL,
        created_at REAL NOT NULL,
        size INTEGER NOT NULL,
        drawn INTEGER NOT NULL,
        seed INTEGER NOT NULL,
        PRIMARY KEY (sample_id, round)
    ) WITHOUT ROWID""")
    db.execute("ALTER TABLE sample_members ADD COLUMN round INTEGER NOT NULL DEFAULT 0")
    for table in ("sample_populations", "sample_rounds"):
        for verb in ("UPDATE", "DELETE"):
            db.execute(f"""CREATE TRIGGER {table}_write_once_{verb.lower()} BEFORE {verb} ON {table}
                           BEGIN SELECT RAISE(ABORT, 'a drawn sample is never changed'); END""")


@MIGRATIONS()
def m023_job_fleet(db: sqlite_utils.Database) -> None:
    """The fleet each job is for (data.jobs.fleet_of: its URLs, normalised, sorted, comma-separated), so that a
    runner takes only the jobs of the fleet it sends to (serving.runner): a job made from a terminal with
    `--fleet-urls X` is captioned on X, not by the supervised runner on the launcher's fleet. NULL: a job made
    before fleets were recorded, which any runner of the data dir takes, as before."""
    db.execute("ALTER TABLE jobs ADD COLUMN fleet TEXT")


@MIGRATIONS()
def m024_queue_captioned(db: sqlite_utils.Database) -> None:
    """The review queue serves only clips with a caption (data.assignments.queue_tiers). After an ingest, the newest
    unreviewed clips have none, and the queue's walk in the newest order passed each of them: 272 ms a press with
    50,000 such clips among 200,000 (the shared VM). A partial index of the captioned clips by review state and id
    makes it a seek again (0.4 ms)."""
    db.execute(
        "CREATE INDEX IF NOT EXISTS idx_clips_captioned_review ON clips(review_status, id) "
        "WHERE current_caption_id IS NOT NULL"
    )


@MIGRATIONS()
def m025_job_items_by_state(db: sqlite_utils.Database) -> None:
    """A runner's claim, the count of leases on a fleet and the check for a drained job find a job's items by
    state (data.jobs.items, INDEXED BY this index). The planner, with no statistics, chose the primary key
    (job_id, clip_id) for them, so each read every item of the job: the items already done lie first, and a claim
    late in a job of 1,000,000 clips read ~900,000 rows under the write lock (benchmarks/bench_leases.py). With
    `attempts` last, the claim's "gave up after the last attempt" check is a seek too. It replaces the index on
    (job_id, state), its prefix."""
    db.execute("CREATE INDEX IF NOT EXISTS idx_job_items_job_id_state_attempts ON job_items(job_id, state, attempts)")
    db.execute("DROP INDEX IF EXISTS idx_job_items_job_id_state")


@MIGRATIONS()
def m026_job_items_by_replica(db: sqlite_utils.Database) -> None:
    """The Jobs tab's per-replica view (data.jobs.queries.replica_load: done items and their mean latency per
    replica) read every done item's row through the primary key, every 2 s while a lead watched: 234 ms at
    900,000 done items. An index of the done items' replicas and latencies holds all it reads, in its order:
    73 ms, and a result's write 0.015 ms more (benchmarks/bench_progress.py)."""
    db.execute(
        "CREATE INDEX IF NOT EXISTS idx_job_items_job_id_state_replica ON job_items(job_id, state, replica, latency_ms)"
    )


@MIGRATIONS()
def m027_decisions_on_later_versions(db: sqlite_utils.Database) -> None:
    """Until 2026-12-04 a person's save or adopt on an approved clip kept 'approved' for the new version, which
    nobody had approved, and the export and the release took it as approved (data.captions now leaves such a clip
    unreviewed). The clips whose decision is older than their current version are set unreviewed here (no
    reviewer, no time: no decision stands), each with a `review.reset` event naming the decision, who made it, when,
    and the version it was on, so the history says who approved what.
    Approving with an edit saves first, then decides: its decision is newer than the version and stays."""
    rows = list(
        db.query(
            "SELECT c.id, c.review_status, c.reviewed_by, c.reviewed_at, v.id AS caption_id, v.version "
            "FROM clips c JOIN captions v ON v.id = c.current_caption_id "
            "WHERE c.review_status IN ('approved', 'rejected') AND v.created_at > COALESCE(c.reviewed_at, 0)"
        )
    )
    if not rows:
        return
    db.conn.executemany(
        "UPDATE clips SET review_status = 'unreviewed', reviewed_by = NULL, reviewed_at = NULL WHERE id = ?",
        [(r["id"],) for r in rows],
    )
    db.conn.executemany(
        "INSERT INTO events (at, actor, action, clip_id, caption_id, detail) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                time.time(),
                "migration",
                "review.reset",
                r["id"],
                r["caption_id"],
                json.dumps(
                    {
                        "review_was": r["review_status"],
                        "reviewed_by_was": r["reviewed_by"],
                        "reviewed_at_was": r["reviewed_at"],
                        "why": f"version {r['version']} was saved after the decision",
                    }
                ),
            )
            for r in rows
        ],
    )


_JOB_CHECK_BEFORE = "CHECK (state IN ('queued', 'running', 'paused', 'cancelled', 'done'))"
_JOB_CHECK_AFTER = "CHECK (state IN ('queued', 'running', 'paused', 'cancelled', 'done', 'failed'))"


@MIGRATIONS(transactional=False)
def m028_job_failed_state(db: sqlite_utils.Database) -> None:
    """A job may end `failed`: nothing left to do and not one clip captioned (data.jobs.items.finish_if_drained).
    A fleet that failed every request ended its jobs `done`, and the Jobs tab read "done · 100%" over 0 captioned.
    Jobs that ended so before are set failed here. Rebuilding `jobs` (SQLite cannot alter a CHECK) needs foreign
    keys off, so this runs outside the migrations' transaction, in one of its own (as m013)."""
    db.execute("PRAGMA foreign_keys = OFF")
    try:
        with db.atomic():
            sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").fetchone()[0]
            if _JOB_CHECK_AFTER not in sql:
                _rebuild_with(db, "jobs", _JOB_CHECK_BEFORE, _JOB_CHECK_AFTER)
            db.execute("UPDATE jobs SET state = 'failed' WHERE state = 'done' AND done = 0 AND failed > 0")
    finally:
        db.execute("PRAGMA foreign_keys = ON")


@MIGRATIONS()
def m029_login_trust_networks(db: sqlite_utils.Database) -> None:
    """Issue 46, point 4. The login limiter's trust (data.sessions) also remembers the networks each account signed
    in from (an IPv4 /24, an IPv6 /64: an attempt from one of its own is not held back by failures from
    elsewhere, and an attempt from a network any account signed in from goes before attempts from networks none
    did), and the one-time sign-in links an admin issues (`python -m webapp.accounts sign-in-link`). SQLite cannot
    change a CHECK: the table is made again with the two new kinds, its rows copied. (Named m029: m028 is another
    branch's.)"""
    db.execute("ALTER TABLE login_trust RENAME TO login_trust_before_m029")
    db.execute("""
    CREATE TABLE login_trust (
        user TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('device', 'address', 'network', 'link')),
        value_hash TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used REAL NOT NULL,
        PRIMARY KEY (user, kind, value_hash)
    ) WITHOUT ROWID""")
    db.execute(
        "INSERT INTO login_trust SELECT user, kind, value_hash, created_at, last_used FROM login_trust_before_m029"
    )
    db.execute("DROP TABLE login_trust_before_m029")
    db.execute("CREATE INDEX IF NOT EXISTS idx_login_trust_kind_value ON login_trust(kind, value_hash)")
