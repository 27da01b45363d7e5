"""Answer checks in bounded time (issue 31, item 2): nothing a lead writes in a schema, or a fleet writes in an
answer, makes the runner's check of an answer run unbounded.

- A prompt version whose schema holds a check that can backtrack (`pattern`, `patternProperties`, `format`) is
  refused with why; a version stored before that rule is refused by the runner before any clip is sent, and the
  runner's other jobs go on (before: `(\\w+\\s?)*$` froze the runner and every job).
- Whatever slips past, a checker process reads each answer within its budget (serving.answer_check): hostile
  patterns and long answers come back within it (property-based), and an item whose check runs out of time fails
  as `check_timeout`, attempts 1, and is never leased again (not by the runner, not by "retry failed")."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from data import jobs, prompts, taxonomy
from data.errors import InvalidPrompt
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from serving import fleet_commands, procs, simfleet
from serving.answer_check import MIN_WALL_S, AnswerChecker
from serving.errors import BadAnswer

REPO = Path(__file__).resolve().parent.parent
RECORDED = json.loads((Path(__file__).parent / "data" / "vllm-0.25.0-answers.json").read_text())
GOOD = RECORDED["answers"]["good_logprobs"]["body"]
SAFE = taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)
BUDGET_S = 1.0

# patterns with nested or overlapping quantifiers: Python's re backtracks exponentially on a near miss
ATOMS = st.sampled_from([r"\w", r"\w+", r"[a-z]", r"[a-z]+", r"\s?", r"\w\s?", "a", "a|a", "a|aa", r"\d|\w", "."])
HOSTILE_PATTERNS = st.builds(
    lambda atom, inner, outer, end: f"^(({atom}){inner}){outer}{end}",
    ATOMS,
    st.sampled_from(["+", "*", "{1,}"]),
    st.sampled_from(["+", "*"]),
    st.sampled_from(["$", "!$", "[0-9]$"]),
) | st.sampled_from([r"(\w+\s?)*$", r"^(a+)+$", r"^([a-zA-Z]+)*$", r"^(a|a?)+$", r"(.*a){12}"])


def with_keyword(schema: dict, where: str, keyword: str, value) -> dict:
    s = copy.deepcopy(schema)
    spec = s["properties"]["caption"] if where == "caption" else s["properties"]["road_users"]["items"]
    if where == "nested":
        spec = s["properties"]["caption"].setdefault("allOf", [{}])[0]
    spec[keyword] = value
    return s


@hsettings(max_examples=40, deadline=None)
@given(
    pattern=HOSTILE_PATTERNS,
    where=st.sampled_from(["caption", "items", "nested"]),
    keyword=st.sampled_from(["pattern", "patternProperties", "format"]),
)
def test_a_version_with_a_check_that_can_backtrack_is_refused_with_why(tmp_path_factory, pattern, where, keyword):
    from data import db as dbmod

    d = dbmod.connect(tmp_path_factory.mktemp("p") / "w.db")
    try:
        value = {"format": "email", "patternProperties": {pattern: {}}}.get(keyword, pattern)
        base = prompts.latest(d)
        with pytest.raises(InvalidPrompt) as e:
            prompts.create_version(
                d, name=base["name"], system="s", user="u", schema=with_keyword(SAFE, where, keyword, value)
            )
        assert keyword in str(e.value) and "regular expression" in str(e.value)
        assert prompts.latest(d)["id"] == base["id"]  # nothing saved
    finally:
        d.close()


def answer_body(caption: str) -> bytes:
    content = json.loads(GOOD["choices"][0]["message"]["content"])
    content["caption"] = caption
    body = copy.deepcopy(GOOD)
    body["choices"][0]["message"]["content"] = json.dumps(content)
    body["choices"][0]["logprobs"] = None
    return json.dumps(body).encode()


@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=HOSTILE_PATTERNS,
    words=st.integers(1, 4000),
    word=st.sampled_from(["a", "ab", "word", "aaaaaaaaaa"]),
    tail=st.sampled_from(["!", ".", " 1", "", "é"]),
)
def test_hostile_patterns_and_long_answers_are_checked_within_the_budget(pattern, words, word, tail):
    """Schemas stored without the rule above, answers up to ~40,000 characters: every check comes back within
    its budget (1 s of the checker's CPU, at most MIN_WALL_S of wall time on a loaded machine), read or refused as
    `check_timeout`. The figure asserted is that stall guard; unbounded, such a check runs for hours."""
    schema = with_keyword(SAFE, "caption", "pattern", pattern)
    schema["properties"]["caption"]["maxLength"] = 100_000
    body = answer_body(" ".join([word] * words) + tail)

    async def check() -> tuple[float, object]:
        checker = AnswerChecker(BUDGET_S, workers=1)
        try:
            await checker.read(answer_body("warm up"), SAFE, confidence=False)  # starts the checker: not timed
            t = time.monotonic()
            try:
                got = await checker.read(body, schema, confidence=False)
            except BadAnswer as e:
                got = e
            return time.monotonic() - t, got
        finally:
            await checker.aclose()

    took, got = asyncio.run(check())
    assert took < MIN_WALL_S + 10, took
    if isinstance(got, BadAnswer):
        assert got.kind in ("check_timeout", "schema"), got
        if got.kind == "check_timeout":
            assert "budget of 1 s" in got.message and not got.retryable


def test_the_issues_pattern_on_a_caption_times_out_within_its_budget():
    schema = with_keyword(SAFE, "caption", "pattern", r"(\w+\s?)*$")

    async def check():
        checker = AnswerChecker(BUDGET_S, workers=1)
        try:
            await checker.read(answer_body("warm up"), SAFE, confidence=False)
            t = time.monotonic()
            with pytest.raises(BadAnswer) as e:
                await checker.read(
                    answer_body("the ego vehicle slows for a cyclist " * 8 + "!"), schema, confidence=False
                )
            took = time.monotonic() - t
            # the next answer gets a fresh checker and is read
            read = await checker.read(answer_body("a plain caption"), SAFE, confidence=False)
            return e.value, took, read, checker.stats
        finally:
            await checker.aclose()

    err, took, read, stats = asyncio.run(check())
    assert err.kind == "check_timeout" and not err.retryable
    assert took < MIN_WALL_S + 10, took
    assert read.text == "a plain caption"
    assert stats["timeouts"] == 1 and stats["started"] == 2


def run_runner(settings, urls, tmp_path, *extra: str, deadline: float = 180.0) -> None:
    cmd = fleet_commands.runner_command(settings, urls, ["--until-idle", "--log-level", "WARNING", *extra])
    child = procs.start("runner", cmd, log=tmp_path / "runner.log", cwd=REPO)
    try:
        code = child.wait(timeout=deadline)
    except Exception:
        procs.kill_group(child.pgid, child.popen)
        raise AssertionError("the runner did not finish: " + procs.tail(tmp_path / "runner.log")) from None
    assert code == 0, procs.tail(tmp_path / "runner.log")


def test_a_stored_version_with_a_pattern_sends_nothing_and_stops_no_other_job(settings, db, tmp_path):
    ids = tiny_library(settings, db, 6)
    hostile = with_keyword(SAFE, "caption", "pattern", r"(\w+\s?)*$")
    with db.conn:  # a version saved before prompts refused patterns: straight into the table
        pid = (
            db["prompts"]
            .insert(
                {
                    "name": "lead-b",
                    "version": 1,
                    "description": "",
                    "system": "s",
                    "user": "u",
                    "schema": json.dumps(hostile),
                    "created_at": time.time(),
                }
            )
            .last_pk
        )
    params = JobParams()
    bad = jobs.create(db, name="b", created_by="b", selection=Selection.of_clips(ids[:3]), prompt_id=pid, params=params)
    good = jobs.create(
        db,
        name="a",
        created_by="a",
        selection=Selection.of_clips(ids[3:]),
        prompt_id=prompts.latest(db)["id"],
        params=params,
    )
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, mode="thread", speed=0)
    try:
        run_runner(settings, fleet.urls, tmp_path)
        sent = sum(fleet.stats(i)["chat_requests"] for i in range(2))
    finally:
        fleet.stop()
    assert job_queries.counts(db, good) == {"pending": 0, "leased": 0, "done": 3, "failed": 0}
    assert job_queries.counts(db, bad) == {"pending": 0, "leased": 0, "done": 0, "failed": 3}
    failures = job_queries.failures(db, bad)
    assert {f["error_kind"] for f in failures} == {"prompt"}
    assert all("pattern" in f["last_error"] and "new prompt version" in f["last_error"] for f in failures)
    assert sent == 3  # the good job's clips only: no GPU time spent on answers that could not be checked


def test_an_item_whose_check_runs_out_of_time_fails_with_why_and_is_never_leased_again(settings, db, tmp_path):
    ids = tiny_library(settings, db, 3)
    job = jobs.create(
        db,
        name="t",
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(top_logprobs=20),  # the largest answers: a check takes milliseconds of CPU, past the budget
    )
    fleet = simfleet.start_fleet(1, 0, settings.clip_root, mode="thread", speed=0)
    try:
        run_runner(settings, fleet.urls, tmp_path, "--answer-check-seconds", "0.000001")
        assert job_queries.counts(db, job) == {"pending": 0, "leased": 0, "done": 0, "failed": 3}
        failures = job_queries.failures(db, job)
        assert {f["error_kind"] for f in failures} == {"check_timeout"}
        assert all("took longer than its budget" in f["last_error"] for f in failures), failures
        attempts = [r[0] for r in db.execute("SELECT attempts FROM job_items WHERE job_id = ?", [job])]
        assert attempts == [1, 1, 1]
        retried = jobs.retry_failed(db, job, "lead")  # the lead's "retry failed": the same answer would again
        assert retried.requeued == 0 and retried.left == {"answer": 3}
        run_runner(settings, fleet.urls, tmp_path)  # a runner with a generous budget: nothing left to lease
        assert fleet.stats(0)["chat_requests"] == 3
    finally:
        fleet.stop()
    assert job_queries.counts(db, job)["failed"] == 3
