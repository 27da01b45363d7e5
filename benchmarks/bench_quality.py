"""The quality view on a big library: data.quality's report, estimate, agreement and comparison, and the CLI.

    python benchmarks/bench_quality.py --db /tmp/quality-1m.db --clips 1000000 --reviewed 100000

Builds (or reuses, if it already holds --clips clips) a library through data.db.connect (the real schema and
migrations): 90 % of clips captioned by machine captions of 10 jobs (prompt av-hazard v1 for jobs 1-5, v2 for
6-10; a second model on jobs 9-10), --reviewed of them approved. A reviewer changes each label with a known
probability (the hazard level mostly by one step) and the text of 40 % of captions (a few words, or all of
them); each change is a human version derived from the machine caption, as data.captions writes it. A third
prompt version (job 11) re-captions 20,000 approved clips as candidates (the version comparison), and a random
sample stratified by hazard level is drawn from job 1, 1,500 of its members reviewed and 400 of those reviewed
again, blind, by a second reviewer (data.quality.samples' and second_review's tables).

Then empties `quality_pairs` and times storing every pair again (what the first report after an upgrade does;
--warm skips it), and prints, per operation, the median wall and CPU time of --repeat runs (ms; CPU includes child
processes) and the result's size: a full recompute (every approved clip, grouped three ways), filtered views (Browse
facets, a text search) and scoped ones (a job, a prompt version), the reviewers' agreement, the sample estimate,
the version comparison (data.quality.prompt_compare), what the Quality tab's refresh does (figures drawn to PNG), and
the
CLI as a user runs it (a fresh interpreter: import, open, report, print).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.child_env import child_env
from benchmarks.library_build import fresh_library
from data import prompts, quality, schema, taxonomy
from data.clips import Filter
from data.db import connect, immediate
from data.quality import prompt_compare
from webapp.quality import plots as quality_plots, tab as quality_tab

JOBS = 10
MODELS = ("Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-32B-Instruct")
VOCAB = (
    "the ego vehicle slows as a pedestrian crosses while cyclist waits at light on wet street truck merges "
    "from right lane into gap ahead bus stops near intersection car brakes hard rain falls at night with "
    "glare from oncoming headlights road curves left past parked vans and construction cones under bridge"
).split()
# how often a reviewer changes each label of a machine caption
FIX_RATE = {
    "scenario_category": 0.25,
    "hazard_level": 0.22,
    "road_users": 0.30,
    "ego_maneuver": 0.15,
    "weather": 0.08,
    "lighting": 0.10,
    "road_type": 0.12,
}
HAZARD_WEIGHTS = (40, 30, 18, 9, 3)


def _labels(rng: random.Random) -> dict:
    out = {}
    for name, values in taxonomy.ENUMS.items():
        if name in taxonomy.MULTI:
            out[name] = sorted(rng.sample(values, rng.choice((0, 1, 1, 2, 2, 3))))
        elif name == "hazard_level":
            out[name] = rng.choices(values, HAZARD_WEIGHTS)[0]
        else:
            out[name] = rng.choice(values)
    return out


def _fix(rng: random.Random, labels: dict) -> dict:
    """What a reviewer approves: each label changed with FIX_RATE (the hazard level one step, mostly)."""
    out = dict(labels)
    for name, rate in FIX_RATE.items():
        if rng.random() >= rate:
            continue
        values = taxonomy.ENUMS[name]
        if name in taxonomy.MULTI:
            items = set(out[name]) ^ {rng.choice(values)}
            out[name] = sorted(items)
        elif name == "hazard_level":
            i = values.index(out[name]) + rng.choice((-1, 1, 1, 2))
            out[name] = values[min(len(values) - 1, max(0, i))]
        else:
            out[name] = rng.choice([v for v in values if v != out[name]])
    return out


def _edit(rng: random.Random, text: str) -> str:
    words = text.split()
    if rng.random() < 0.1:
        return " ".join(rng.choices(VOCAB, k=len(words)))
    for _ in range(rng.randint(1, 8)):
        words[rng.randrange(len(words))] = rng.choice(VOCAB)
    return " ".join(words)


class Builder:
    """Bulk rows as data.captions writes them (ids chosen here; lineage columns set), flushed in batches."""

    CLIP_SQL = (
        "INSERT INTO clips (id, path, sha256, duration, width, height, review_status, reviewed_by, reviewed_at, "
        "current_caption_id, caption_source, caption_text, labels_text, scenario, hazard_level, weather, lighting, "
        "road_type) VALUES (?, ?, ?, 12.0, 1920, 1080, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?)"
    )
    CAP_SQL = (
        "INSERT INTO captions (id, clip_id, version, parent_id, derived_from_id, origin_id, text, labels, source, "
        "author, model, prompt_name, prompt_version, job_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def __init__(self, conn, now: float):
        self.conn, self.now = conn, now
        self.clips: list[tuple] = []
        self.caps: list[tuple] = []
        self.cap_id = 0

    def caption(self, clip_id, version, parent, derived, origin, text, labels, source, author, prov=(None,) * 4):
        self.cap_id += 1
        cid = self.cap_id
        origin = cid if source == "model" else origin
        self.caps.append(
            (cid, clip_id, version, parent, derived, origin, text, json.dumps(labels, sort_keys=True), source, author)
            + tuple(prov)
            + (self.now + version,)
        )
        return cid

    def flush(self) -> None:
        with self.conn:
            self.conn.executemany(self.CLIP_SQL, self.clips)
            self.conn.executemany(self.CAP_SQL, self.caps)
        self.clips.clear()
        self.caps.clear()


def build(db_path: Path, n: int, reviewed: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    db = fresh_library(db_path, n)
    if db is None:
        return 0.0
    conn = db.conn
    rng = random.Random(seed)
    b = Builder(conn, time.time())
    captioned = int(n * 0.9)
    approve = set(rng.sample(range(1, captioned + 1), reviewed))
    per_job = captioned // JOBS + 1
    candidates: list[tuple[int, dict, str]] = []
    for i in range(1, n + 1):
        current = text = labels = source = None
        status, by, at = "unreviewed", None, None
        if i <= captioned:
            job = 1 + (i - 1) // per_job
            prov = (MODELS[job >= 9], "av-hazard", 1 if job <= 5 else 2, job)
            labels = _labels(rng)
            text = " ".join(rng.choices(VOCAB, k=rng.randint(100, 200)))
            current = origin = b.caption(i, 1, None, None, None, text, labels, "model", "model", prov)
            source = "model"
            if i in approve:
                fixed = _fix(rng, labels)
                new_text = _edit(rng, text) if rng.random() < 0.4 else text
                if fixed != labels or new_text != text:
                    current = b.caption(i, 2, origin, origin, origin, new_text, fixed, "human", "annotator1")
                    labels, text, source = fixed, new_text, "human"
                status, by, at = "approved", "annotator1", b.now
                if len(candidates) < 20_000 and rng.random() < 0.25:
                    candidates.append((i, labels, text))
        facets = taxonomy.facet_values(labels) if labels else {}
        b.clips.append(
            (i, f"route{i % 997:03d}/cam_{i:07d}.mp4", f"{i:064x}", status, by, at, current, source, text)
            + tuple(facets.get(c) for c in ("scenario", "hazard_level", "weather", "lighting", "road_type"))
        )
        if len(b.clips) == 50_000:
            b.flush()
    b.flush()
    versions = dict(conn.execute("SELECT clip_id, MAX(version) FROM captions GROUP BY clip_id"))
    for clip_id, approved_labels, approved_text in candidates:  # prompt v3 on approved clips: candidates
        said = _fix(rng, approved_labels)
        text = _edit(rng, approved_text)
        prov = (MODELS[0], "av-hazard", 3, JOBS + 1)
        b.caption(clip_id, versions[clip_id] + 1, None, None, None, text, said, "model", "model", prov)
    b.flush()
    schema._fts_clips(db)
    conn.execute("ANALYZE")
    conn.execute("PRAGMA synchronous=NORMAL")
    db.close()
    return time.perf_counter() - t0


def sample(db_path: Path, seed: int = 1) -> None:
    """Draw a random sample stratified by hazard level (proportional) from job 1's unreviewed clips, as
    data.quality.samples records one (the strata's N_h and n_h, the members with the caption they had), unless the
    library has one already; 1,500 of its 2,000 members reviewed by annotator2, 400 of those again, blind, by
    annotator3 (each label changed with FIX_RATE by each reviewer)."""
    db = connect(db_path)
    conn = db.conn
    if conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]:
        db.close()
        return
    rng = random.Random(seed)
    pool = conn.execute(
        "SELECT c.id, c.hazard_level, c.current_caption_id, k.labels, k.text FROM clips c "
        "JOIN captions k ON k.id = c.current_caption_id WHERE k.job_id = 1 AND c.review_status = 'unreviewed' "
        "ORDER BY c.id"
    ).fetchall()
    strata: dict[str, list] = {}
    for row in pool:
        strata.setdefault(row[1], []).append(row)
    size, now = 2_000, time.time()
    b = Builder(conn, now)
    b.cap_id = conn.execute("SELECT MAX(id) FROM captions").fetchone()[0]
    with conn:
        sid = conn.execute(
            "INSERT INTO samples (created_by, created_at, source, job_id, population, size, drawn, stratify, seed, "
            "assignees) VALUES ('lead', ?, ?, 1, ?, ?, ?, 'proportional', ?, '[\"annotator2\"]')",
            [now, json.dumps({"job_id": 1}), len(pool), size, size, seed],
        ).lastrowid
        drawn = []
        for level, rows in strata.items():
            picked = rng.sample(rows, min(len(rows), round(size * len(rows) / len(pool))))
            conn.execute(
                "INSERT INTO sample_strata (sample_id, stratum, population, drawn) VALUES (?, ?, ?, ?)",
                [sid, level, len(rows), len(picked)],
            )
            drawn += picked
        conn.executemany(
            "INSERT INTO sample_members (sample_id, clip_id, stratum, draw_order, assignee, caption_id) "
            "VALUES (?, ?, ?, ?, 'annotator2', ?)",
            [(sid, r[0], r[1], k, r[2]) for k, r in enumerate(drawn)],
        )
    rng.shuffle(drawn)
    second = []
    for k, (clip_id, _, cap, labels, text) in enumerate(drawn[:1500]):
        labels = json.loads(labels)
        fixed = _fix(rng, labels)
        current = cap
        if fixed != labels:
            current = b.caption(clip_id, 2, cap, cap, cap, text, fixed, "human", "annotator2")
        b.clips.clear()
        facets = taxonomy.facet_values(fixed)
        b.flush()
        conn.execute(
            "UPDATE clips SET review_status = 'approved', reviewed_by = 'annotator2', reviewed_at = ?, "
            "current_caption_id = ?, scenario = ?, hazard_level = ?, weather = ?, lighting = ?, road_type = ? "
            "WHERE id = ?",
            [
                now,
                current,
                *(facets[c] for c in ("scenario", "hazard_level", "weather", "lighting", "road_type")),
                clip_id,
            ],
        )
        if k < 400:
            second.append((sid, clip_id, cap, json.dumps(_fix(rng, fixed), sort_keys=True)))
    with conn:
        conn.executemany(
            "INSERT INTO second_reviews (sample_id, clip_id, reviewer, requested_by, requested_at, "
            "origin_caption_id, state, labels, decision, answered_at) "
            "VALUES (?, ?, 'annotator3', 'lead', 0, ?, 'done', ?, 'approved', 0)",
            second,
        )
    db.close()


def timed(fn, repeat: int) -> tuple[float, float, float, object]:
    """(median wall ms, max wall ms, median CPU ms of this process and its children, the last result)."""
    walls, cpus = [], []
    out = None
    for _ in range(repeat):
        t, c = time.perf_counter(), _cpu()
        out = fn()
        walls.append((time.perf_counter() - t) * 1000)
        cpus.append((_cpu() - c) * 1000)
    return statistics.median(walls), max(walls), statistics.median(cpus), out


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def prompt_ids(db) -> tuple[int, int]:
    """The ids of av-hazard v2 and v3 (v3 added as a copy of v2: the builder's candidates name it)."""
    prompts.ensure_presets(db)
    v2 = next(db.query("SELECT * FROM prompts WHERE name = 'av-hazard' AND version = 2"))
    v3 = next(db.query("SELECT id FROM prompts WHERE name = 'av-hazard' AND version = 3"), None)
    if v3 is None:
        with immediate(db):
            db.execute(
                "INSERT INTO prompts (name, version, description, system, user, schema, created_at) "
                "VALUES ('av-hazard', 3, 'benchmark copy of v2', ?, ?, ?, ?)",
                [v2["system"], v2["user"], v2["schema"], time.time()],
            )
        v3 = next(db.query("SELECT id FROM prompts WHERE name = 'av-hazard' AND version = 3"))
    return v2["id"], v3["id"]


def tab_view(db) -> int:
    """What the Quality tab's refresh does for its first group: the report, the reviewers' agreement, the
    tables and the three figures drawn to PNG. Returns the PNG bytes."""
    r = quality.report(db)
    agree = quality.agreement(db)
    g = r.groups[0]
    quality_tab.overview_rows(r)
    quality.label_rows(g, agree)
    quality_tab.class_rows(g.labels["hazard_level"])
    size = 0
    for fig in (
        quality_plots.accuracy_figure(g, agree),
        quality_plots.matrix_figure(g.labels["hazard_level"]),
        quality_plots.edit_ratio_figure(g.text),
    ):
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        size += buf.tell()
    return size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="/tmp/quality-1m.db", help="database file to build or reuse")
    ap.add_argument("--clips", type=int, default=1_000_000, help="clips to build (default 1,000,000)")
    ap.add_argument("--reviewed", type=int, default=100_000, help="approved clips (default 100,000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per measured operation (default 5)")
    ap.add_argument("--warm", action="store_true", help="keep the stored pairs (skip the cold fill)")
    args = ap.parse_args(argv)
    built = build(Path(args.db), args.clips, args.reviewed)
    sample(Path(args.db))
    db = connect(args.db)
    v2, v3 = prompt_ids(db)
    count = db.execute("SELECT COUNT(*) FROM clips WHERE review_status = 'approved'").fetchone()[0]
    print(
        f"database {args.db}: {args.clips:,} clips, "
        f"{db.execute('SELECT COUNT(*) FROM captions').fetchone()[0]:,} caption versions, {count:,} approved "
        f"({'built in %.0f s' % built if built else 'reused'}, {os.path.getsize(args.db) / 1e6:.0f} MB)"
    )
    if not args.warm:
        with immediate(db):
            db.execute("DELETE FROM quality_pairs")
        wall, _, cpu, added = timed(lambda: quality.fill(db), 1)
        print(f"first fill of quality_pairs (cold): {added:,} pairs, {wall / 1000:.1f} s wall, {cpu / 1000:.1f} s CPU")
    print("| operation | median wall ms | max wall ms | median CPU ms | result |")
    print("|---|---|---|---|---|")

    def row(name: str, fn, describe) -> None:
        wall, worst, cpu, out = timed(fn, args.repeat)
        print(f"| {name} | {wall:,.0f} | {worst:,.0f} | {cpu:,.0f} | {describe(out)} |", flush=True)

    def groups(r) -> str:
        return f"{len(r.groups)} groups, {sum(g.n for g in r.groups):,} pairs"

    row("full recompute, by model and prompt", lambda: quality.report(db), groups)
    row("full recompute, by model, prompt and job", lambda: quality.report(db, by=quality.DIMENSIONS), groups)
    row("full recompute, one group", lambda: quality.report(db, by=()), groups)
    row("filtered: hazard level = critical", lambda: quality.report(db, Filter(hazard_level="critical")), groups)
    row(
        "filtered: weather = rain, lighting = night_lit",
        lambda: quality.report(db, Filter(weather="rain", lighting="night_lit")),
        groups,
    )
    row("filtered: text search 'pedestrian'", lambda: quality.report(db, Filter(text="pedestrian")), groups)
    row("scoped: one job (job 3)", lambda: quality.report(db, scope=quality.Scope(job_id=3)), groups)
    row(
        "scoped: one prompt version (v2)",
        lambda: quality.report(db, scope=quality.Scope(prompt_name="av-hazard", prompt_version=2)),
        groups,
    )
    row("reviewers' agreement (kappa), every clip", lambda: quality.agreement(db), lambda a: f"{a.pairs:,} pairs")
    sid = db.execute("SELECT MAX(id) FROM samples").fetchone()[0]
    row(
        "sample estimate (stratified, 2,000 drawn)",
        lambda: quality.estimate(db, sid),
        lambda e: f"{e.reviewed:,} reviewed, {e.more} more for +/- 5 %",
    )
    row(
        "prompt versions v2 vs v3 on the same clips",
        lambda: prompt_compare.compare(db, v2, v3),
        lambda c: f"{c['clips']:,} clips",
    )
    row("Quality tab: report, agreement, tables, 3 figures as PNG", lambda: tab_view(db), lambda n: f"{n:,} bytes")
    cli = [sys.executable, "-m", "data.quality", "--db", args.db]
    env = child_env(Path(__file__).resolve().parents[1])
    for name, extra in (
        ("CLI, everything", []),
        ("CLI, --job 3", ["--job", "3"]),
        ("CLI, --prompt av-hazard:2 --json", ["--prompt", "av-hazard:2", "--json"]),
    ):
        row(
            name,
            lambda extra=extra: subprocess.run(cli + extra, check=True, capture_output=True, env=env),
            lambda p: f"{len(p.stdout):,} bytes out",
        )
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
