"""Prompt versions (data.prompts, data.quality.prompt_compare): a new version is checked against what the fleet's
structured-output backend accepts (the recorded xgrammar 400) and against the label taxonomy before it is saved;
old versions are never edited; and, end to end on the simulated fleet, a new version runs over the approved clips
as one job whose captions never replace an approved caption, and the side-by-side comparison equals a hand count."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path

import pytest

from data import captions, clips, events, jobs, prompts, review_states, taxonomy
from data.errors import DataError, InvalidPrompt
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from data.quality import prompt_compare
from serving import simfleet
from serving.runner import run_job

RECORDING = json.loads((Path(__file__).resolve().parents[1] / "recordings" / "vllm-0.25.0-answers.json").read_text())
SAFE = taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)  # what v2 of the preset stores


def new_version(db, schema, **kw):
    base = prompts.latest(db)
    args = dict(name=base["name"], system=base["system"], user=base["user"], schema=schema, actor="lead")
    return prompts.create_version(db, **{**args, **kw})


def narrowed() -> dict:
    """A version that narrows two labels' choices: still the taxonomy's labels, and other answers."""
    s = copy.deepcopy(SAFE)
    s["properties"]["weather"]["enum"] = ["clear", "rain", "snow", "fog"]
    s["properties"]["hazard_level"]["enum"] = ["none", "low", "medium", "high"]
    return s


def test_the_schema_xgrammar_refused_on_real_vllm_cannot_be_saved(db):
    """The preset v1 schema is what real vLLM 0.25 answered with HTTP 400 (the recording): refused before it is
    saved, quoting vLLM's words and naming the keyword."""
    refused = RECORDING["answers"]["unsupported_schema"]
    assert refused["status"] == 400
    prompts.latest(db)  # the presets are installed
    n = db.execute("SELECT COUNT(*) FROM prompts").fetchone()[0]
    with pytest.raises(InvalidPrompt) as e:
        new_version(db, taxonomy.CAPTION_SCHEMA)
    assert refused["body"]["error"]["message"] in str(e.value) and "uniqueItems" in str(e.value)
    assert prompts.GRAMMAR_REFUSAL == refused["body"]["error"]["message"]
    assert db.execute("SELECT COUNT(*) FROM prompts").fetchone()[0] == n  # nothing saved


def _mutations():
    def drop(name):
        def f(s):
            del s["properties"][name]
            s["required"].remove(name)

        return f

    def label(name, spec):
        return lambda s: s["properties"].__setitem__(name, spec)

    return {
        "missing label": (drop("lighting"), "Missing properties: lighting"),
        "extra property": (
            lambda s: s["properties"].__setitem__("mood", {"type": "string"}),
            "not the taxonomy's: mood",
        ),
        "value outside the taxonomy": (
            label("weather", {"type": "string", "enum": ["clear", "hail"]}),
            "weather: hail is not among its values",
        ),
        "empty choice": (label("lighting", {"type": "string", "enum": []}), "lighting: offers no value"),
        "multi label as one value": (
            label("road_users", {"type": "string", "enum": ["car"]}),
            "road_users: must be a list",
        ),
        "not required": (lambda s: s["required"].remove("weather"), "Not required: weather"),
        "open object": (lambda s: s.pop("additionalProperties"), '"additionalProperties": false'),
        "a $ref": (label("weather", {"$ref": "#/$defs/w"}), "$ref"),
        "invalid JSON Schema": (lambda s: s.__setitem__("required", "caption"), "not a valid JSON Schema"),
        "nested refused keyword": (
            lambda s: s["properties"]["caption"].__setitem__("patternProperties", {}),
            "refuses patternProperties",
        ),
        "not an object": (lambda s: s.__setitem__("type", "array"), '"type": "object"'),
    }


@pytest.mark.parametrize("case", sorted(_mutations()))
def test_a_version_whose_answers_could_not_be_compared_is_refused_with_what_to_change(db, case):
    mutate, words = _mutations()[case]
    schema = copy.deepcopy(SAFE)
    mutate(schema)
    with pytest.raises(InvalidPrompt, match="cannot be saved") as e:
        new_version(db, schema)
    assert words in str(e.value)


def test_a_narrowed_version_is_saved_as_the_next_version_and_old_ones_are_never_edited(db):
    v2 = prompts.latest(db)
    v3 = new_version(db, narrowed(), description="fewer weather and hazard choices")
    assert (v3["name"], v3["version"]) == (v2["name"], v2["version"] + 1) and v3["schema"] == narrowed()
    (ev,) = events.iter_all(db, "prompt.create")
    assert ev["actor"] == "lead" and '"version": 3' in ev["detail"]
    assert prompts.latest(db)["id"] == v3["id"] and prompts.get(db, v2["id"])["schema"] == SAFE
    for sql in ("UPDATE prompts SET system = 'edited'", "DELETE FROM prompts"):
        with pytest.raises(sqlite3.IntegrityError, match="never edited"):
            db.execute(sql)
    for bad, words in (
        (dict(name="bad name!"), "prompt name"),
        (dict(system="  "), "system text is empty"),
        (dict(user="x" * (prompts.MAX_PROMPT_CHARS + 1)), "limit"),
        (dict(user="nul\x00"), "NUL"),
    ):
        with pytest.raises(DataError, match=words):
            new_version(db, narrowed(), **bad)


def test_schema_text_that_cannot_be_read_says_so():
    assert prompts.parse_schema(json.dumps(SAFE)) == SAFE
    for text, words in (
        ("", "Write the answer schema"),
        ("{", "not JSON"),
        ('{"a": NaN}', "not JSON"),
        ("[1]", "JSON object"),
        ("[" * 100 + "]" * 100, "levels deep"),
    ):
        with pytest.raises(InvalidPrompt, match=words):
            prompts.parse_schema(text)


def test_a_ground_truth_run_needs_approved_clips(db):
    v2 = prompts.latest(db)
    with pytest.raises(DataError, match="ground truth is the approved clips"):
        prompt_compare.start_on_ground_truth(
            db, v2["id"], created_by="lead", params=JobParams(), f=clips.Filter(review_status="unreviewed")
        )
    with pytest.raises(DataError, match="No approved clip"):
        prompt_compare.start_on_ground_truth(db, v2["id"], created_by="lead", params=JobParams())
    with pytest.raises(DataError, match="two different"):
        list(prompt_compare.pairs(db, v2["id"], v2["id"]))


def _hand_count(db, truth_ids: dict[int, int], a_job: int, b_job: int) -> dict:
    """The comparison counted by hand from the caption rows of the two jobs (no SQL of the module under test)."""
    out = {name: [0, 0, 0.0, 0.0] for name in taxonomy.ENUMS}
    for clip_id, truth_id in truth_ids.items():
        truth = captions.get(db, truth_id)["labels"]
        for k, job in enumerate((a_job, b_job)):
            (row,) = db.execute("SELECT labels FROM captions WHERE job_id = ? AND clip_id = ?", [job, clip_id])
            got = json.loads(row[0])
            for name in taxonomy.ENUMS:
                if name in taxonomy.MULTI:
                    g, t = set(got[name]), set(truth[name])
                    out[name][k] += g == t
                    out[name][2 + k] += len(g & t) / len(g | t) if g | t else 1.0
                else:
                    out[name][k] += got[name] == truth[name]
    return out


def test_a_new_version_runs_over_the_approved_clips_as_candidates_and_compares_with_a_hand_count(settings, db):
    """End to end on the simulated fleet over loopback HTTP, through the runner: v2 captions 10 clips; reviewers
    fix labels on some and approve 8; a lead saves v3 (narrowed choices) and runs it on the approved clips. No
    approved caption is replaced (each v3 caption is a candidate), the 2 unreviewed clips are not in the job,
    and the comparison per label equals a count made by hand from the caption rows."""
    ids = tiny_library(settings, db, 10)
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, mode="thread", speed=0)
    try:
        v2 = prompts.latest(db)
        first = jobs.create(
            db, name="v2", created_by="lead", selection=Selection.of_clips(ids), prompt_id=v2["id"], params=JobParams()
        )
        assert run_job(settings, first, fleet.urls)["counts"]["done"] == 10
        truth_ids = {}
        for k, cid in enumerate(ids[:8]):
            cap = clips.get(db, cid)["caption"]
            assert cap["job_id"] == first and cap["simulated"]
            labels = dict(cap["labels"])
            if k % 2:
                labels["weather"] = next(w for w in taxonomy.WEATHER if w != labels["weather"])
            if k % 3 == 0:
                labels["hazard_level"] = "critical"
                labels["road_users"] = sorted(set(labels["road_users"]) | {"pedestrian"})
            if labels != cap["labels"]:
                cap = captions.save_human(
                    db, cid, text=cap["text"], labels=labels, author="ann", base_caption_id=cap["id"]
                )
            review_states.set_review(db, cid, status="approved", user="ann", base_caption_id=cap["id"])
            truth_ids[cid] = cap["id"]

        v3 = new_version(db, narrowed(), description="narrowed choices")
        second, created = prompt_compare.start_on_ground_truth(db, v3["id"], created_by="lead", params=JobParams())
        assert created and job_queries.get(db, second)["total"] == 8
        assert job_queries.get(db, second)["prompt_id"] == v3["id"]
        assert run_job(settings, second, fleet.urls)["counts"]["done"] == 8
    finally:
        fleet.stop()

    for cid in ids[:8]:
        clip = clips.get(db, cid)
        assert clip["current_caption_id"] == truth_ids[cid] and clip["review_status"] == "approved"
        (new,) = [v for v in captions.history(db, cid) if v["job_id"] == second]
        assert new["candidate"] and not new["current"] and new["prompt_version"] == v3["version"] and new["simulated"]
    for cid in ids[8:]:
        assert all(v["job_id"] != second for v in captions.history(db, cid))
    assert len([e for e in events.iter_all(db, "caption.candidate") if e["job_id"] == second]) == 8

    got = prompt_compare.compare(db, v2["id"], v3["id"])
    hand = _hand_count(db, truth_ids, first, second)
    assert got["clips"] == 8 and got["a"]["version"] == v2["version"] and got["b"]["version"] == v3["version"]
    for name, (a, b, ja, jb) in hand.items():
        row = got["labels"][name]
        assert (row["a_correct"], row["b_correct"]) == (a, b), name
        assert row["a_accuracy"] == a / 8 and row["b_accuracy"] == b / 8
        if name in taxonomy.MULTI:
            assert row["a_jaccard"] == pytest.approx(ja / 8) and row["b_jaccard"] == pytest.approx(jb / 8)
    # the versions really differ (v3 cannot answer critical or cloudy), so the counts are not trivially equal
    assert any(hand[n][0] != hand[n][1] for n in ("weather", "hazard_level"))
    assert [p["clip_id"] for p in prompt_compare.pairs(db, v2["id"], v3["id"])] == sorted(truth_ids)
    # a filter narrows the clip set: the same clips for both versions
    one = prompt_compare.compare(db, v2["id"], v3["id"], clips.Filter(weather=clips.get(db, ids[0])["weather"]))
    assert 1 <= one["clips"] < 8
    none = prompt_compare.compare(db, v2["id"], v3["id"], clips.Filter(job_id=first + second + 1))
    assert none["clips"] == 0 and none["labels"]["weather"] == {
        "a_correct": 0,
        "b_correct": 0,
        "a_accuracy": None,
        "b_accuracy": None,
    }
