"""Training-set releases (data.release.make, issue 30): the files load with the libraries a trainer uses, the
manifest is byte-identical for the same database and arguments, a release never changes and is never written
over, the next one says what changed, and only what was asked is released (never rejected, broken or
ingest-failed clips; simulated text only when asked, and then flagged everywhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jsonschema
import pandas as pd
import pyarrow.parquet as pq
import pytest

from data import captions, clips, export, prompts, review_states, taxonomy
from data.clips import Filter
from data.db import immediate
from data.errors import DataError, Forbidden
from data.quality import stats
from data.quality.accuracy import report
from data.quality.pairs import Scope
from data.release import card, card_text, files as release_files, make as rel
from data.release.options import Options
from tests.support.release_library import ClipSpec, build

ROOT = Path(__file__).resolve().parents[3]
LEVELS = taxonomy.HAZARD_LEVELS


def library(db, n_routes: int = 8, per_route: int = 5):
    """Routes of approved clips of every hazard level, one folder without sidecars, and one clip in each state
    that must never be released."""
    specs = []
    for r in range(n_routes):
        for k in range(per_route):
            specs.append(
                ClipSpec(
                    folder=f"drive{r}",
                    sidecar={"route": f"R{r:03d}", "camera": "rear"},
                    hazard=LEVELS[(r + k) % len(LEVELS)],
                    edited=k == 0,
                    weather="rain" if k % 2 else "clear",
                )
            )
    specs += [ClipSpec(folder="loose", sidecar=None, hazard="low") for _ in range(3)]
    specs += [
        ClipSpec(folder="drive0", sidecar={"route": "R000"}, status="rejected"),
        ClipSpec(folder="drive0", sidecar={"route": "R000"}, status="broken"),
        ClipSpec(folder="drive0", sidecar={"route": "R000"}, status="unreviewed"),
        ClipSpec(folder="drive0", sidecar={"route": "R000"}, failed=True, status="unreviewed"),
        ClipSpec(folder="drive1", sidecar={"route": "R001"}, simulated=True),
    ]
    return build(db, specs)


def make(db, out: Path, **options) -> rel.Result:
    return rel.release(db, Options(**options), out, actor="lead", role="lead")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_file_loads_with_the_library_a_trainer_uses(db, tmp_path):
    built = library(db)
    r = make(db, tmp_path / "r1", name="av")
    manifest = lines(r.path / "manifest.jsonl")
    by_split = {s: [m["clip_id"] for m in manifest if m["split"] == s] for s in ("train", "val", "test")}
    assert all(by_split.values()) and sum(map(len, by_split.values())) == len(manifest) == 43
    approved = export.iter_rows(db, Filter(review_status="approved"))
    want = {row["clip_id"]: row for row in approved if not row["simulated"]}
    v2 = next(p for p in prompts.list_prompts(db) if (p["name"], p["version"]) == ("av-hazard", 2))
    schema = export.json_schema()
    for split, ids in by_split.items():
        # JSON Lines: the export's records, lineage included, valid against the export's published schema
        records = lines(r.path / f"{split}.jsonl")
        assert [x["clip_id"] for x in records] == ids
        for x in records:
            assert x == want[x["clip_id"]]
            jsonschema.validate(x, schema)
        # Parquet, as pandas and pyarrow read it: the same clips, texts and labels
        frame = pd.read_parquet(r.path / f"{split}.parquet")
        assert list(frame["clip_id"]) == ids and list(frame["text"]) == [x["text"] for x in records]
        assert [row["hazard_level"] for row in frame["labels"]] == [x["labels"]["hazard_level"] for x in records]
        table = pq.read_table(r.path / f"{split}.parquet")
        assert table.column("origin").to_pylist()[0]["model"] == records[0]["origin"]["model"]
        assert [json.loads(s) for s in table.column("sidecar").to_pylist()] == [x["sidecar"] for x in records]
        # the SFT file (Qwen's format): json, every item of the documented shape, the system text the fleet sent
        # opening the human turn (Qwen's reader has no system message), the answer the caption as the model answers
        items = json.loads((r.path / "sft" / f"{split}.json").read_text())
        assert [i["clip_id"] for i in items] == ids
        written = []
        for item, x in zip(items, records):
            jsonschema.validate(item, release_files.SFT_ITEM_SCHEMA)
            human, gpt = item["conversations"]
            assert human["value"].count("<video>") == 1 and "<video>" not in gpt["value"]
            assert item["video"] == x["path"] and item["prompt"] == "av-hazard v2" and "system" not in item
            # the prompt as the runner renders it for the clip's camera (a route's clips are rear ones)
            user = prompts.render_user(v2, prompts.camera_of(x["path"], x["sidecar"]))
            assert human["value"] == "<video>\n" + prompts.HAZARD_SYSTEM + "\n\n" + user
            assert ("rear-facing camera" in human["value"]) == (x["sidecar"].get("camera") == "rear")
            assert v2["system"] == prompts.HAZARD_SYSTEM
            answer = json.loads(gpt["value"])
            jsonschema.validate(answer, taxonomy.CAPTION_SCHEMA)
            assert answer == {"caption": x["text"], **x["labels"]}
            item = release_files.sft_item(x, "av-hazard v2", v2["system"], user)
            written.append(json.dumps(item, ensure_ascii=False))
        # the file as written is json.dumps of the documented items, character for character
        assert (r.path / "sft" / f"{split}.json").read_text() == "[\n" + ",\n".join(written) + "\n]\n"
        # the messages file (ms-swift, LLaMA-Factory): the system text as the system message, one line per item
        raw = (r.path / "messages" / f"{split}.jsonl").read_text().splitlines()
        assert len(raw) == len(records)
        for line, x in zip(raw, records):
            item = json.loads(line)
            jsonschema.validate(item, release_files.MESSAGES_ITEM_SCHEMA)
            user = prompts.render_user(v2, prompts.camera_of(x["path"], x["sidecar"]))
            assert [m["role"] for m in item["messages"]] == ["system", "user", "assistant"]
            assert item["messages"][0]["content"] == prompts.HAZARD_SYSTEM
            assert item["messages"][1]["content"] == "<video>\n" + user and item["videos"] == [x["path"]]
            assert json.loads(item["messages"][2]["content"]) == {"caption": x["text"], **x["labels"]}
            documented = release_files.messages_item(x, "av-hazard v2", v2["system"], user)
            assert line == json.dumps(documented, ensure_ascii=False)
    assert set(want) == {m["clip_id"] for m in manifest}
    assert not set(built.ids[-5:]) & set(want)  # rejected, broken, unreviewed, failed, simulated


def test_the_same_database_and_arguments_give_a_byte_identical_manifest(db, tmp_path, db_path):
    library(db)
    a = make(db, tmp_path / "a", seed=3, name="x")
    b = make(db, tmp_path / "b", seed=3, name="x")
    assert (a.path / "manifest.jsonl").read_bytes() == (b.path / "manifest.jsonl").read_bytes()
    # the command line, in a fresh process, writes the same bytes
    out = tmp_path / "c"
    proc = subprocess.run(
        [sys.executable, "-m", "data.release", "--db", str(db_path), "--out", str(out), "--seed", "3", "--name", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "manifest.jsonl").read_bytes() == (a.path / "manifest.jsonl").read_bytes()
    assert "Wrote x v3" in proc.stdout and "0 of 43 earlier clips changed split" in proc.stdout
    other = make(db, tmp_path / "d", seed=4, name="y")  # a seed is part of the arguments
    assert {m["clip_id"] for m in lines(other.path / "manifest.jsonl")} == {
        m["clip_id"] for m in lines(a.path / "manifest.jsonl")
    }


def test_a_release_is_never_written_over_and_never_changes(db, tmp_path):
    library(db)
    r = make(db, tmp_path / "r1", name="av")
    before = {p: p.read_bytes() for p in r.path.rglob("*") if p.is_file()}
    with pytest.raises(DataError, match="never written over"):
        make(db, tmp_path / "r1", name="av")
    assert {p: p.read_bytes() for p in r.path.rglob("*") if p.is_file()} == before
    for p in [r.path, *r.path.rglob("*")]:  # read-only for everyone, folders included
        assert not p.stat().st_mode & 0o222, p
    row = rel.get(db, r.id)
    assert row["state"] == "done" and row["counts"] == r.counts and row["version"] == 1
    with pytest.raises(Exception, match="never changed"):
        with immediate(db):
            db.execute("UPDATE releases SET counts = '{}' WHERE id = ?", [r.id])
    with pytest.raises(Exception, match="never deleted"):
        with immediate(db):
            db.execute("DELETE FROM releases WHERE id = ?", [r.id])
    # an empty folder is a fine place for one
    (tmp_path / "empty").mkdir()
    assert make(db, tmp_path / "empty", name="av").version == 2


def test_a_failed_release_leaves_nothing_at_out_and_is_recorded(db, tmp_path):
    build(db, [ClipSpec(folder=f"d{i % 40}", sidecar={"route": str(i % 40)}) for i in range(1_200)])

    def interrupt(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rel.release(db, Options(name="av"), tmp_path / "out" / "r1", actor="lead", role="lead", progress=interrupt)
    assert not (tmp_path / "out").exists()  # neither the release, its hidden work folder, nor the folder it made
    (row,) = db.query("SELECT * FROM releases")
    assert row["state"] == "failed" and "KeyboardInterrupt" in row["error"]
    assert make(db, tmp_path / "r1", name="av").changes is None  # a failed one is not "the release before"


def test_never_rejected_broken_failed_or_missing_clips(db, tmp_path):
    built = library(db)
    with immediate(db):
        db.execute("UPDATE clips SET missing = 1 WHERE id = ?", [built.ids[0]])
    r = make(db, tmp_path / "any", filter=Filter(), include_simulated=True)
    released = {m["clip_id"] for m in lines(r.path / "manifest.jsonl")}
    states = {built.ids[-5]: "rejected", built.ids[-4]: "broken", built.ids[-2]: "failed"}
    assert not released & set(states) and built.ids[0] not in released
    for f, words in (
        (Filter(review_status="rejected"), "never released"),
        (Filter(review_status="broken"), "never released"),
        (Filter(failed=True), "ingest failed"),
        (Filter(include_missing=True), "file is gone"),
        (Filter(has_caption=False), "select nothing"),
    ):
        with pytest.raises(DataError, match=words):
            make(db, tmp_path / "no", filter=f)
    assert not (tmp_path / "no").exists()
    unreviewed = make(db, tmp_path / "u", filter=Filter(review_status="unreviewed"))
    assert [m["clip_id"] for m in lines(unreviewed.path / "manifest.jsonl")] == [built.ids[-3]]


def test_simulated_text_only_when_asked_and_then_flagged_on_every_record(db, tmp_path):
    built = library(db)
    sim = built.ids[-1]
    # a person edited a simulated caption: the text still derives from simulated text
    (edited,) = build(
        db, [ClipSpec(folder="drive2", sidecar={"route": "R002"}, simulated=True, edited=True)], start=99
    ).ids
    assert clips.get(db, edited)["caption"]["source"] == "human"
    plain = make(db, tmp_path / "plain", name="p")
    ids = {m["clip_id"] for m in lines(plain.path / "manifest.jsonl")}
    assert sim not in ids and edited not in ids and plain.simulated_left_out == 2
    assert "Simulated text is left out: 2 clips" in plain.card
    for split in plain.counts:
        assert not any(x["simulated"] for x in lines(plain.path / f"{split}.jsonl"))

    flagged = make(db, tmp_path / "sim", name="s", include_simulated=True)
    manifest = lines(flagged.path / "manifest.jsonl")
    assert {m["clip_id"] for m in manifest if m["simulated"]} == {sim, edited}
    for split in flagged.counts:
        records = {x["clip_id"]: x["simulated"] for x in lines(flagged.path / f"{split}.jsonl")}
        sft = {i["clip_id"]: i["simulated"] for i in json.loads((flagged.path / "sft" / f"{split}.json").read_text())}
        frame = pd.read_parquet(flagged.path / f"{split}.parquet")
        assert records == sft == dict(zip(frame["clip_id"], frame["simulated"]))
    assert sum(1 for m in manifest if m["simulated"]) == 2
    assert "**Simulated text is included**" in flagged.card and "2 records are flagged" in flagged.card


def test_a_second_release_says_what_changed(db, tmp_path):
    library(db)
    first = make(db, tmp_path / "v1", name="av")
    before = {m["clip_id"]: m for m in lines(first.path / "manifest.jsonl")}
    a, b, c = sorted(before)[:3]
    # a: re-labelled by a person and approved again; b: text only; c: rejected; one new clip approved
    for cid, labels_change in ((a, True), (b, False)):
        cur = clips.get(db, cid)["caption"]
        labels = {**cur["labels"], "hazard_level": "critical" if cur["labels"]["hazard_level"] != "critical" else "low"}
        saved = captions.save_human(
            db,
            cid,
            text=cur["text"] + " Again.",
            labels=labels if labels_change else cur["labels"],
            author="ann",
            base_caption_id=cur["id"],
        )
        review_states.set_review(db, cid, status="approved", user="lead", base_caption_id=saved["id"])
    review_states.set_review(
        db, c, status="rejected", user="lead", base_caption_id=clips.get(db, c)["current_caption_id"]
    )
    new = build(db, [ClipSpec(folder="drive9", sidecar={"route": "R900"}, hazard="critical")], start=9_000).ids[0]
    second = make(db, tmp_path / "v2", name="av")
    ch = second.changes
    assert (ch["added"], ch["removed"], ch["relabelled"], ch["text_only"]) == (1, 1, 1, 1)
    assert ch["relabelled_by_label"] == {"hazard_level": 1} and ch["previous_version"] == 1
    after = {m["clip_id"]: m for m in lines(second.path / "manifest.jsonl")}
    assert set(after) - set(before) == {new} and set(before) - set(after) == {c}
    moved = sum(1 for cid in set(before) & set(after) if before[cid]["split"] != after[cid]["split"])
    assert ch["moved"] == moved == 0 and ch["kept_clips"] == len(before) - 1  # each group kept where v1 put it
    assert "| clips added | 1 |" in second.card and "|   of them hazard_level | 1 |" in second.card
    said = rel.summary(second)
    assert "Since v1: 1 added, 1 removed, 1 re-labelled, 1 with new text only" in said
    assert f"0 of {len(before) - 1} earlier clips changed split (each group kept where v1 placed it)" in said
    assert f"**0 of {len(before) - 1} earlier clips changed split.**" in second.card


def test_a_previous_manifest_that_changed_is_not_trusted(db, tmp_path):
    """The release before is the record of where each group was placed: one whose manifest changed (or is gone)
    is refused before anything is recorded (no version used), unless --reshuffle places every group anew."""
    library(db)
    first = make(db, tmp_path / "v1", name="av")
    m = first.path / "manifest.jsonl"
    for p in (first.path, m):
        p.chmod(0o755)
    m.write_text(m.read_text().replace('"split": "test"', '"split": "train"'))
    with pytest.raises(DataError, match="cannot be trusted.*SHA-256 differs.*--reshuffle"):
        make(db, tmp_path / "v2", name="av")
    assert not (tmp_path / "v2").exists() and [r["version"] for r in db.query("SELECT version FROM releases")] == [1]
    second = make(db, tmp_path / "v2", name="av", reshuffle=True)
    assert second.version == 2 and "not the manifest that was written" in second.changes["unreadable"]
    assert "what changed is not known" in second.card and "placed anew (`--reshuffle`)" in second.card
    third = make(db, tmp_path / "v3", name="av")  # v2, the newest, is intact: the record now
    assert third.changes["moved"] == 0 and third.changes["previous_version"] == 2
    third.path.chmod(0o755)
    (third.path / "manifest.jsonl").unlink()  # gone (deleted, or the folder moved): the record is gone too
    with pytest.raises(DataError, match="v3.*cannot be trusted.*No such file"):
        make(db, tmp_path / "v4", name="av")
    assert not (tmp_path / "v4").exists()


def test_the_card_counts_what_the_files_hold_and_reports_the_quality_figures(db, tmp_path):
    library(db)
    r = make(db, tmp_path / "r", name="av", seed=11)
    manifest = lines(r.path / "manifest.jsonl")
    for split in r.counts:
        records = lines(r.path / f"{split}.jsonl")
        weather = Counter(x["labels"]["weather"] for x in records)
        for value in ("clear", "rain"):  # the weather table's row for the value, this split's column
            row = next(line for line in r.card.splitlines() if line.startswith(f"| {value} |"))
            col = 1 + list(r.counts).index(split)
            assert row.split("|")[1 + col].strip() == f"{weather[value]:,}"
        edited = sum(x["changed"] in ("text", "labels", "both") for x in records)
        assert f"| {split} | 100.0% | {edited / len(records):.1%} |" in r.card
    assert "Seed 11." in r.card
    by_route = [m for m in manifest if m["group"].startswith("route=")]
    assert f"| the sidecar's `route` | {len(by_route)} | {len({m['group'] for m in by_route})} |" in r.card
    assert "| no `route`, in a folder where no clip names one: grouped by folder | 3 | 1 |" in r.card
    groups = {m["group"] for m in manifest}
    assert {"folder=loose"} <= groups  # the folder where a clip has no route
    # the measured accuracy: the Quality report's figure with its Wilson interval
    q = report(db, Filter(review_status="approved"), Scope(), by=("model", "prompt"))
    s = q.groups[0].labels["weather"]
    i = stats.wilson(s.correct, s.n)
    assert f"{i.p:.3f} [{i.low:.3f}, {i.high:.3f}] (n = {s.n:,})" in r.card
    assert "This is the first release named av." in r.card
    # its figures count only the clips it releases: the approved clip with simulated text is left out of both
    assert f"over the **{len(manifest)} approved clips** this release holds" in r.card
    assert "the 1 approved clips with simulated text are not in this release, nor in these figures" in r.card
    everything = report(db, Filter(review_status="approved"), Scope(), by=("model", "prompt"))
    assert everything.approved == len(manifest) + 1 and len(everything.groups) == 2  # the simulated model's row too
    assert "(simulated)" not in r.card.split("## What the labels are worth")[1].split("**Two reviewers")[0]
    # how these clips were chosen for review: none was drawn into a random sample
    assert "None of these clips was drawn into a random review sample" in r.card and "not drawn at random" in r.card
    readme = (r.path / "README.md").read_text()  # the Hugging Face header, then the card as shown
    assert readme.startswith("---\nlicense: ") and readme.endswith("---\n\n" + r.card + "\n")


def test_markdown_from_users_and_the_fleet_is_inert_on_the_card():
    assert card_text.md("<script>alert(1)</script> | x *y* [l](u)") == (
        "&lt;script&gt;alert\\(1\\)&lt;/script&gt; \\| x \\*y\\* \\[l\\]\\(u\\)"
    )


def test_only_a_lead_releases_and_bad_options_say_what_to_write(db, tmp_path):
    library(db)
    with pytest.raises(Forbidden):
        rel.release(db, Options(), tmp_path / "x", actor="ann", role="annotator")
    for options, words in (
        ({"group_by": "route; DROP"}, "--group-by"),
        ({"name": "../up"}, "--name"),
        ({"shares": (("train", 0.5), ("test", 0.4))}, "add up to 1"),
    ):
        with pytest.raises(DataError, match=words):
            make(db, tmp_path / "x", **options)
    assert not (tmp_path / "x").exists()


def test_the_command_line_has_help_with_examples_and_refuses_clearly(db_path, tmp_path):
    run = [sys.executable, "-m", "data.release"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    h = subprocess.run([*run, "--help"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert (
        h.returncode == 0 and "python -m data.release --data-dir var --out" in h.stdout and "--hazard-level" in h.stdout
    )
    bad = subprocess.run(
        [*run, "--db", str(db_path), "--out", str(tmp_path / "o"), "--splits", "train=0.9,val=0.2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "add up to 1" in bad.stderr
    bad = subprocess.run(
        [*run, "--db", str(db_path), "--out", str(tmp_path / "o"), "--status", "rejected"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "never released" in bad.stderr and not (tmp_path / "o").exists()
    bad = subprocess.run([*run, "--db", str(db_path)], cwd=ROOT, capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--out DIR" in bad.stderr


def test_nothing_to_release_is_refused_with_why_and_recorded_nowhere(db, tmp_path):
    build(
        db, [ClipSpec(folder="d", sidecar={"route": "R1"}, simulated=True), ClipSpec(folder="d", status="unreviewed")]
    )
    with pytest.raises(DataError, match="Nothing to release.*1 are simulated"):
        make(db, tmp_path / "r")
    assert not (tmp_path / "r").exists() and db.execute("SELECT COUNT(*) FROM releases").fetchone()[0] == 0
    r = rel.release(db, Options(include_simulated=True), into=tmp_path / "all", actor="lead", role="lead")
    assert r.path == (tmp_path / "all" / "release-v1").absolute() and r.counts == {"train": 1, "val": 0, "test": 0}
    assert "val and test hold no clip" in r.card and "val and test: no clip" in rel.summary(r)


def test_the_cards_agreement_text_is_the_quality_tabs():
    """The blind second reviews are read as the Quality tab reads them (data.quality.tables.AGREEMENT_NOTE), not
    as "the ceiling" of the model's figures, which the tab contradicts."""
    from data.quality.accuracy import Report
    from data.quality.reviewers import Agreement, LabelAgreement
    from data.quality.tables import AGREEMENT_NOTE

    agree = Agreement(
        2,
        LabelAgreement("decision", {("approved", "approved"): 2}, None),
        {"weather": LabelAgreement("weather", {("rain", "rain"): 1, ("rain", "fog"): 1}, None)},
    )
    text = "\n".join(card._quality(card.Measured(Report([], 2, 0, ()), agree, None), "approved", "not in this release"))
    assert "As the Quality tab says: " + AGREEMENT_NOTE in text and "ceiling" not in text
    assert "| weather | 2 | 0.500 | 0.00 |" in text
