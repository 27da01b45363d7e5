"""Exports (data.export, `python -m data.export`): JSON Lines and CSV round-trip the database, filters select what
they say, each caption's origin and edits are reported, the records validate against docs/export.schema.json."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema

from data import caption_history, captions, clips, export, jobs, prompts, review_states, taxonomy
from data.clips import Filter
from data.job_params import JobParams
from data.jobs import items as job_items
from data.jobs.selection import Selection
from tests.support.export_library import CALM, LABELS, make_clips, populate


def expected(db, f=Filter()):
    return [clips.get(db, i) for i in clips.iter_ids(db, f) if clips.get(db, i)["current_caption_id"]]


def test_jsonl_round_trip_matches_the_database(db):
    populate(db)
    out = io.StringIO()
    n = export.export(db, Filter(), "jsonl", out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    want = expected(db)
    assert n == len(rows) == len(want) == 3
    for row, clip in zip(rows, want):
        cap = clip["caption"]
        assert row["clip_id"] == clip["id"] and row["path"] == clip["path"]
        assert row["text"] == cap["text"] and row["labels"] == cap["labels"]
        assert row["source"] == cap["source"] and row["author"] == cap["author"]
        assert row["review_status"] == clip["review_status"] and row["sidecar"] == clip["sidecar"]
        assert row["caption_id"] == cap["id"] and row["derived_from_id"] == cap["derived_from_id"]
        if cap["source"] == "model":  # a machine caption is its own origin
            assert row["origin"]["caption_id"] == cap["id"] and row["origin"]["model"] == cap["model"]
            assert (row["changed"], row["labels_changed"], row["edits"]) == ("unchanged", [], [])
        else:  # written from scratch: no origin to name
            assert row["origin"] is None and row["changed"] == "written" and row["labels_changed"] is None
            assert [e["author"] for e in row["edits"]] == [cap["author"]]
    origin = rows[0]["origin"]
    assert origin["params"] == {"t": 0} and origin["simulated"] is True and origin["frames"] == 16
    assert rows[0]["simulated"] is True and rows[1]["simulated"] is False


def test_csv_round_trip_matches_the_database(db):
    populate(db)
    out = io.StringIO()
    export.export(db, Filter(), "csv", out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    want = expected(db)
    assert len(rows) == len(want)
    for row, clip in zip(rows, want):
        cap = clip["caption"]
        assert int(row["clip_id"]) == clip["id"] and row["text"] == cap["text"]
        for name in taxonomy.ENUMS:
            value = cap["labels"][name]
            assert row[f"label_{name}"] == (";".join(value) if isinstance(value, list) else value)
        assert json.loads(row["sidecar"]) == clip["sidecar"]
        assert row["origin_model"] == (cap.get("model") or "") and row["changed"] in caption_history.CHANGE_KINDS


def test_filters_select_what_they_say(db):
    ids = populate(db)
    out = io.StringIO()
    assert export.export(db, Filter(review_status="approved"), "jsonl", out) == 1
    assert json.loads(out.getvalue())["clip_id"] == ids[2]
    assert export.export(db, Filter(hazard_level="high", weather="rain"), "jsonl", io.StringIO()) == 2
    assert export.export(db, Filter(caption_source="human"), "jsonl", io.StringIO()) == 1
    assert export.export(db, Filter(text="close call"), "jsonl", io.StringIO()) == 1
    assert export.export(db, Filter(has_caption=True), "jsonl", io.StringIO()) == 3
    assert export.export(db, Filter(has_caption=False), "jsonl", io.StringIO()) == 0  # a record is a caption


def test_export_streams_from_a_cursor(db):
    ids = make_clips(db, 3)
    for i in ids:
        captions.add_machine(db, i, job_id=None, text=f"clip {i}", labels=LABELS, provenance={})
    rows = export.iter_rows(db)
    assert next(rows)["clip_id"] == ids[0]  # a generator: rows arrive one at a time
    assert [r["clip_id"] for r in rows] == ids[1:]


def test_cli_help_mentions_an_example():
    out = subprocess.run([sys.executable, "-m", "data.export", "--help"], capture_output=True, text=True, check=True)
    assert "example" in out.stdout and "--status" in out.stdout and "--hazard-level" in out.stdout


def test_cli_writes_jsonl_to_stdout(settings, db):
    populate(db)
    env = {**os.environ, "CW_DATA_DIR": str(settings.data_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "data.export", "--format", "jsonl", "--status", "approved"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [json.loads(x)["review_status"] for x in out.stdout.splitlines()] == ["approved"]


def test_cli_stops_quietly_when_the_reader_does(tmp_path, db_path):
    """`python -m data.export ... | head`: the closed pipe is not a traceback."""
    import subprocess
    import sys

    from data import captions, db as dbmod

    d = dbmod.connect(db_path)
    labels = {
        "scenario_category": "other",
        "hazard_level": "low",
        "road_users": ["car"],
        "ego_maneuver": "stopped",
        "weather": "clear",
        "lighting": "daylight",
        "road_type": "urban",
    }
    for i in range(3000):
        cid = d.execute("INSERT INTO clips (path) VALUES (?)", [f"p{i}.mp4"]).lastrowid
        d.conn.commit()
        captions.add_machine(d, cid, job_id=None, text="x" * 200, labels=labels, provenance={"model": "m"})
    d.close()
    p = subprocess.run(
        f"{sys.executable} -m data.export --db {db_path} --format jsonl | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.stdout.count("\n") == 1
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr


# ---- lineage in the export ---------------------------------------------------------------------------------------
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "export.schema.json"


def exported(db, f=Filter(), fmt="jsonl"):
    out = io.StringIO()
    export.export(db, f, fmt, out)
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(out.getvalue())))
    return [json.loads(line) for line in out.getvalue().splitlines()]


def simulated_job_caption(db, clip_id, *, job_name="sim job", text="[SIMULATED] A truck cuts in.", labels=LABELS):
    """A machine caption written the way the runner writes one: a job, a claim, a result with provenance."""
    prompt = prompts.latest(db)
    job = jobs.create(
        db,
        name=job_name,
        created_by="lead",
        selection=Selection.of_clips([clip_id]),
        prompt_id=prompt["id"],
        params=JobParams(),
    )
    job_items.claim(db, job, "runner", 1, lease_seconds=60, max_attempts=3)
    provenance = {
        "model": "simulated/Qwen3-VL-8B",
        "prompt_id": prompt["id"],
        "prompt_name": prompt["name"],
        "prompt_version": prompt["version"],
        "params": {"max_completion_tokens": 512, "num_frames": 16},
        "frames": 16,
        "replica": "http://127.0.0.1:9/",
        "completion_tokens": 231,
        "simulated": True,
    }
    return job_items.complete(db, job, clip_id, text=text, labels=labels, provenance=provenance), job, prompt


def test_a_label_fix_on_a_simulated_caption_keeps_its_origin(db):
    """Issue 18's case: caption with the simulated fleet, fix one label, approve, export."""
    (clip,) = make_clips(db, 1)
    machine, job, prompt = simulated_job_caption(db, clip)
    fixed = captions.save_human(
        db,
        clip,
        text=machine["text"],
        labels={**LABELS, "weather": "snow"},
        author="anna",
        base_caption_id=machine["id"],
    )
    review_states.set_review(db, clip, status="approved", user="lead", base_caption_id=fixed["id"])
    (rec,) = exported(db, Filter(review_status="approved"))
    assert rec["source"] == "human" and rec["author"] == "anna" and rec["derived_from_id"] == machine["id"]
    assert rec["simulated"] is True
    origin = rec["origin"]
    assert (origin["caption_id"], origin["model"], origin["job_id"]) == (machine["id"], "simulated/Qwen3-VL-8B", job)
    assert (origin["prompt_name"], origin["prompt_version"], origin["prompt_id"]) == (
        prompt["name"],
        prompt["version"],
        prompt["id"],
    )
    assert origin["simulated"] is True and origin["completion_tokens"] == 231
    assert rec["changed"] == "labels" and rec["labels_changed"] == ["weather"]
    assert [(e["author"], e["caption_id"], e["changed"]) for e in rec["edits"]] == [("anna", fixed["id"], "labels")]
    assert rec["edits"][0]["created_at"] == fixed["created_at"] and rec["edits_truncated"] is False


def test_every_kind_of_edit_is_reported_against_the_origin(db):
    a, b, c, d = make_clips(db, 4)
    # a: a text edit, then a label edit by someone else -> both
    m, _ = captions.add_machine(db, a, job_id=None, text="A car.", labels=LABELS, provenance={"model": "real"})
    h1 = captions.save_human(db, a, text="A red car.", labels=LABELS, author="ann", base_caption_id=m["id"])
    h2 = captions.save_human(db, a, text="A red car.", labels=CALM, author="bob", base_caption_id=h1["id"])
    # b: edited, then the edit undone by adopting the machine version again -> unchanged, both people listed
    mb, _ = captions.add_machine(db, b, job_id=None, text="A bus.", labels=LABELS, provenance={"model": "real"})
    hb = captions.save_human(db, b, text="A bus  stops.", labels=LABELS, author="ann", base_caption_id=mb["id"])
    ab = captions.adopt(db, b, caption_id=mb["id"], author="lee", base_caption_id=hb["id"])
    # c: an approved human caption, then a re-caption (a candidate) that a lead adopts: the candidate is the origin
    hc = captions.save_human(db, c, text="Typed by hand.", labels=CALM, author="ann", base_caption_id=None)
    cand, became_current = captions.add_machine(
        db, c, job_id=None, text="Machine again.", labels=LABELS, provenance={"model": "v2", "simulated": True}
    )
    assert not became_current
    ac = captions.adopt(db, c, caption_id=cand["id"], author="lee", base_caption_id=hc["id"])
    # d: only whitespace and the order of a multi-choice label changed -> unchanged
    md, _ = captions.add_machine(db, d, job_id=None, text="Two cars.", labels=LABELS, provenance={"model": "real"})
    swapped = {**LABELS, "road_users": list(reversed(LABELS["road_users"]))}
    hd = captions.save_human(db, d, text=" Two   cars. ", labels=swapped, author="ann", base_caption_id=md["id"])

    recs = {r["clip_id"]: r for r in exported(db)}
    ra, rb, rc, rd = recs[a], recs[b], recs[c], recs[d]
    assert ra["origin"]["caption_id"] == m["id"] and ra["changed"] == "both" and ra["derived_from_id"] == h1["id"]
    assert ra["labels_changed"] == ["scenario_category", "hazard_level", "road_users", "weather"]
    assert [(e["caption_id"], e["author"], e["changed"]) for e in ra["edits"]] == [
        (h1["id"], "ann", "text"),
        (h2["id"], "bob", "labels"),
    ]
    assert ra["simulated"] is False and ra["origin"]["model"] == "real"
    # an adopt derives from the version adopted: the chain is v3 <- v1, so ann's abandoned edit is not on it
    assert rb["changed"] == "unchanged" and rb["derived_from_id"] == mb["id"]
    assert [(e["caption_id"], e["author"], e["changed"]) for e in rb["edits"]] == [(ab["id"], "lee", "unchanged")]
    assert rc["origin"]["caption_id"] == cand["id"] and rc["origin"]["model"] == "v2" and rc["simulated"] is True
    assert rc["changed"] == "unchanged" and [e["caption_id"] for e in rc["edits"]] == [ac["id"]]
    assert rd["changed"] == "unchanged" and rd["labels_changed"] == [] and rd["edits"][0]["caption_id"] == hd["id"]


def test_a_long_chain_of_edits_is_listed_up_to_its_bound_and_says_so(db):
    a, b = make_clips(db, 2)
    m, _ = captions.add_machine(db, a, job_id=None, text="v0", labels=LABELS, provenance={"model": "m"})
    base = m["id"]
    for i in range(caption_history.EDITS_MAX + 2):
        base = captions.save_human(db, a, text=f"edit {i}", labels=LABELS, author=f"p{i}", base_caption_id=base)["id"]
    m, _ = captions.add_machine(db, b, job_id=None, text="v0", labels=LABELS, provenance={"model": "m"})
    base = m["id"]
    for i in range(caption_history.EDITS_MAX):
        base = captions.save_human(db, b, text=f"edit {i}", labels=LABELS, author=f"p{i}", base_caption_id=base)["id"]
    ra, rb = exported(db)
    assert ra["edits_truncated"] is True and len(ra["edits"]) == caption_history.EDITS_MAX
    assert ra["edits"][-1]["author"] == f"p{caption_history.EDITS_MAX + 1}" and ra["edits"][0]["author"] == "p2"
    assert ra["origin"]["caption_id"] == m["id"] - caption_history.EDITS_MAX - 3 and ra["changed"] == "text"
    assert rb["edits_truncated"] is False and len(rb["edits"]) == caption_history.EDITS_MAX
    assert rb["edits"][0]["changed"] == "text" and rb["edits"][0]["author"] == "p0"


def test_csv_carries_the_same_fields_flattened(db):
    (clip,) = make_clips(db, 1)
    machine, job, _ = simulated_job_caption(db, clip)
    captions.save_human(
        db, clip, text="Edited.", labels={**LABELS, "weather": "snow"}, author="anna", base_caption_id=machine["id"]
    )
    (rec,) = exported(db)
    (row,) = exported(db, fmt="csv")
    assert list(row) == export.csv_header()
    assert row["origin_model"] == rec["origin"]["model"] and int(row["origin_job_id"]) == job
    assert row["simulated"] == "true" and row["origin_simulated"] == "true" and row["changed"] == "both"
    # every true/false is spelt as the JSON Lines spell it (before: Python's True/False)
    flat = {k: v for k, v in rec.items() if k not in ("labels", "origin")}
    flat.update({f"origin_{k}": v for k, v in rec["origin"].items()})
    bools = {k: v for k, v in flat.items() if isinstance(v, bool)}
    assert {"human_reviewed", "random_sample", "simulated", "origin_simulated"} <= set(bools)
    assert {k: row[k] for k in bools} == {k: json.dumps(v) for k, v in bools.items()}
    assert row["labels_changed"] == "weather" and json.loads(row["origin_params"]) == rec["origin"]["params"]
    assert json.loads(row["edits"]) == rec["edits"] and row["label_weather"] == "snow"
    top = [f.name for f in export.FIELDS if f.name not in ("labels", "origin")]
    assert set(top) | {f"origin_{f.name}" for f in export.ORIGIN_FIELDS} <= set(row)


def test_exported_jsonl_validates_against_the_published_schema(db):
    populate(db)
    (clip,) = make_clips(db, 1, prefix="sim")
    machine, _, _ = simulated_job_caption(db, clip)
    fixed = captions.save_human(db, clip, text="x", labels=CALM, author="anna", base_caption_id=machine["id"])
    review_states.set_review(db, clip, status="approved", user="lead", base_caption_id=fixed["id"])
    published = json.loads(SCHEMA_FILE.read_text())
    assert published == export.json_schema(), "docs/export.schema.json is stale: python -m data.export --schema"
    validator = jsonschema.Draft202012Validator(published, format_checker=jsonschema.FormatChecker())
    validator.check_schema(published)
    recs = exported(db)
    assert len(recs) == 4 and {r["changed"] for r in recs} == {"unchanged", "written", "both"}
    for rec in recs:
        errors = list(validator.iter_errors(rec))
        assert not errors, errors[0].message
    bad = {**recs[-1], "origin": {**recs[-1]["origin"], "model": 7}}
    assert list(validator.iter_errors(bad))  # the schema can fail: a wrong type is caught
    assert list(validator.iter_errors({k: v for k, v in recs[0].items() if k != "edits"}))


def test_the_readme_documents_every_exported_field():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Export format") :]
    section = section[: section.index("\n## ", 4)]
    for f in (*export.FIELDS, *export.ORIGIN_FIELDS):
        assert f"`{f.name}`" in section, f.name
    assert "docs/export.schema.json" in section


def test_cli_prints_the_schema_and_refuses_a_broken_search(settings, db):
    out = subprocess.run(
        [sys.executable, "-m", "data.export", "--schema"], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == export.json_schema()
    env = {**os.environ, "CW_DATA_DIR": str(settings.data_dir)}
    bad = subprocess.run(
        [sys.executable, "-m", "data.export", "--text", '"red car'], capture_output=True, text=True, env=env, timeout=60
    )
    assert bad.returncode == 2 and "quote" in bad.stderr and "Traceback" not in bad.stderr


def test_simulated_fleet_caption_fixed_approved_and_exported(fleet_settings, sim):
    """Issue 18's acceptance path end to end: a caption from the simulated fleet over HTTP, stored as the runner
    stores it, one label fixed, approved, exported: `simulated` stays true and the origin names model, prompt
    and job; the record validates against the published schema."""
    from data import db as dbmod
    from tests.support.fleet_fixtures import caption

    db = dbmod.connect(fleet_settings.db)
    try:
        clip = db["clips"].insert({"path": "a.mp4", "size": 1, "ingested_at": 0}).last_pk
        prompt = prompts.latest(db)
        job = jobs.create(
            db,
            name="sim",
            created_by="lead",
            selection=Selection.of_clips([clip]),
            prompt_id=prompt["id"],
            params=JobParams(),
        )
        job_items.claim(db, job, "runner", 1, lease_seconds=60, max_attempts=3)
        result = caption(fleet_settings, sim.urls[0], "a.mp4", prompt=prompt)
        assert result.text.startswith("[SIMULATED]") and result.provenance["simulated"] is True
        machine = job_items.complete(
            db, job, clip, text=result.text, labels=result.labels, provenance=result.provenance
        )
        labels = dict(machine["labels"])
        labels["lighting"] = next(v for v in taxonomy.LIGHTING if v != labels["lighting"])
        fixed = captions.save_human(
            db, clip, text=machine["text"], labels=labels, author="anna", base_caption_id=machine["id"]
        )
        review_states.set_review(db, clip, status="approved", user="lead", base_caption_id=fixed["id"])
        (rec,) = exported(db, Filter(review_status="approved"))
    finally:
        db.close()
    assert rec["source"] == "human" and rec["simulated"] is True
    origin = rec["origin"]
    assert origin["model"] == result.provenance["model"] and origin["job_id"] == job and origin["simulated"] is True
    assert (origin["prompt_name"], origin["prompt_version"]) == (prompt["name"], prompt["version"])
    assert rec["changed"] == "labels" and rec["labels_changed"] == ["lighting"]
    assert [e["author"] for e in rec["edits"]] == ["anna"]
    # the model's confidence in the labels it generated travels with its origin (a person's fix has none)
    assert origin["confidence"] == result.provenance["confidence"]
    assert set(origin["confidence"]["labels"]) == set(taxonomy.ENUMS)
    assert all(0 < p <= 1 for p in origin["confidence"]["labels"].values())
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(rec)


def test_the_origin_s_confidence_is_exported_and_null_where_there_is_none(db):
    conf = {"labels": {**dict.fromkeys(taxonomy.ENUMS, 0.9), "weather": None}, "items": {}, "end": {}}
    a, b, c = make_clips(db, 3, prefix="conf")
    m, _ = captions.add_machine(db, a, job_id=None, text="t", labels=LABELS, provenance={"confidence": conf})
    captions.save_human(db, a, text="t fixed", labels=CALM, author="anna", base_caption_id=m["id"])
    captions.add_machine(db, b, job_id=None, text="t", labels=LABELS, provenance={"model": "no logprobs"})
    captions.save_human(db, c, text="written by hand", labels=LABELS, author="anna", base_caption_id=None)
    recs = {r["clip_id"]: r for r in exported(db)}
    assert recs[a]["origin"]["confidence"] == conf and recs[a]["source"] == "human"
    assert recs[b]["origin"]["confidence"] is None and recs[c]["origin"] is None
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    for rec in recs.values():
        validator.validate(rec)
    bad = {**recs[a], "origin": {**recs[a]["origin"], "confidence": {**conf, "labels": {"weather": 1.5}}}}
    assert list(validator.iter_errors(bad))  # a probability above 1 is caught
    rows = {int(r["clip_id"]): r for r in exported(db, fmt="csv")}
    assert json.loads(rows[a]["origin_confidence"]) == conf and rows[b]["origin_confidence"] == ""
