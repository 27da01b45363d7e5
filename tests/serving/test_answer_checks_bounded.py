"""Answer checks in bounded time (issue 31, item 2; issue 46, point 3): nothing a lead writes in a schema, or a
fleet writes in an answer, makes the runner's check of an answer run unbounded, and no job starves another.

- `pattern` is matched by RE2, in linear time, under every keyword of every draft a schema may declare
  (data.schema_keywords): patterns that backtrack for hours in Python's `re` are read at once, also hidden in a
  draft-07 `dependencies` (issue 46: that one passed the check and burned every clip's budget). A pattern RE2
  cannot express, `patternProperties` and `format` are refused with why wherever they hide (the walker is
  checked against each draft's metaschema). Each job gets its share of the checkers: a job whose every check
  costs the whole budget does not hold another job's answers behind its own.
- A version stored before those rules is refused by the runner before any clip is sent, and the runner's other
  jobs go on (before: `(\\w+\\s?)*$` froze the runner and every job).
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
from serving import procs, simfleet
from serving.answer_check import MIN_WALL_S, AnswerChecker
from serving.errors import BadAnswer
from serving.launch import commands as fleet_commands
from tests.support.examples import examples

pytestmark = pytest.mark.waits  # minutes of the product's clocks: started first (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
RECORDED = json.loads((Path(__file__).resolve().parents[1] / "recordings" / "vllm-0.25.0-answers.json").read_text())
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


# patterns RE2 cannot express: what makes matching costly (backreferences, lookarounds)
REFUSED_PATTERNS = st.sampled_from(
    [r"^(a+)\1$", r"(\w+)\s\1", r"^(?=.*a)(\w+\s?)*$", r"(?!x)a+", r"(?<=a)b", r"(?<!a)b+$", r"(.)\1{3}"]
)
DRAFT_URIS = {
    "4": "http://json-schema.org/draft-04/schema#",
    "6": "http://json-schema.org/draft-06/schema#",
    "7": "http://json-schema.org/draft-07/schema#",
    "2019-09": "https://json-schema.org/draft/2019-09/schema",
    "2020-12": "https://json-schema.org/draft/2020-12/schema",
}


def schema_keywords_of(draft: str) -> dict[str, set[str]]:
    """From the draft's own metaschema (and its vocabularies), every keyword whose value holds schemas, with the
    shapes it takes ("one" schema, a "list", a "map" of names to schemas): an oracle independent of the walker."""
    from urllib.parse import urljoin

    import jsonschema
    from jsonschema_specifications import REGISTRY

    def is_schema(x) -> bool:
        return isinstance(x, dict) and (
            x.get("$ref") == "#" or x.get("$dynamicRef") == "#meta" or x.get("$recursiveRef") == "#"
        )

    def shapes(x) -> set[str]:
        out: set[str] = set()
        if not isinstance(x, dict):
            return out
        if is_schema(x):
            out.add("one")
        if str(x.get("$ref", "")).endswith("schemaArray") or (x.get("type") == "array" and is_schema(x.get("items"))):
            out.add("list")
        if "one" in shapes(x.get("additionalProperties")):
            out.add("map")
        for k in ("anyOf", "oneOf", "allOf"):
            for y in x.get(k) or []:
                out |= shapes(y)
        return out

    meta = jsonschema.validators.validator_for({"$schema": DRAFT_URIS[draft]}).META_SCHEMA
    metas = [meta] + [REGISTRY.contents(urljoin(meta["$id"], sub["$ref"])) for sub in meta.get("allOf", [])]
    return {k: shapes(v) for m in metas for k, v in m.get("properties", {}).items() if shapes(v)}


def hide(schema: dict, draft: str, keyword: str, shape: str, inner: dict) -> dict:
    """`schema` declaring `draft`, with `inner` placed inside the caption's schema under `keyword` in `shape`."""
    s = copy.deepcopy(schema)
    s["$schema"] = DRAFT_URIS[draft]
    place = {"one": inner, "list": [{}, inner], "map": {"caption": inner}}[shape]
    s["properties"]["caption"][keyword] = place
    return s


def test_the_walker_opens_every_keyword_that_holds_a_schema_in_every_draft():
    """Issue 46: a `pattern` hidden in a draft-07 `dependencies` passed the check, because the walker opened only
    2020-12's keywords while the validator follows the draft the schema declares. Each keyword each draft's
    metaschema says holds schemas, in each shape it takes, now hides nothing: a `format` and a pattern RE2
    cannot express placed there are both found."""
    placed = 0
    for draft in DRAFT_URIS:
        for keyword, shapes in schema_keywords_of(draft).items():
            for shape in shapes:
                inner = {"format": "email", "pattern": r"(a)\1"}
                found = taxonomy.costly_refusal(hide(SAFE, draft, keyword, shape, inner))
                assert found and "format" in found and "(a)" in found, (draft, keyword, shape, found)
                placed += 1
    assert placed >= 80, placed  # 5 drafts x 11 to 21 keywords, some in two shapes (86 with jsonschema 4.26)


@hsettings(max_examples=examples(40), deadline=None)
@given(
    pattern=REFUSED_PATTERNS,
    draft=st.sampled_from(sorted(DRAFT_URIS)),
    keyword=st.sampled_from(["allOf", "anyOf", "not", "if", "dependencies", "items", "contains", "additionalItems"]),
)
def test_a_pattern_re2_cannot_express_is_refused_with_why_wherever_it_hides(tmp_path_factory, pattern, draft, keyword):
    from data import db as dbmod

    shape = "map" if keyword == "dependencies" else "list" if keyword in ("allOf", "anyOf") else "one"
    d = dbmod.connect(tmp_path_factory.mktemp("p") / "w.db")
    try:
        base = prompts.latest(d)
        schema = hide(SAFE, draft, keyword, shape, {"type": "string", "pattern": pattern})
        with pytest.raises(InvalidPrompt) as e:
            prompts.create_version(d, name=base["name"], system="s", user="u", schema=schema)
        assert "cannot be matched in linear time" in str(e.value) and "lookaround" in str(e.value), str(e.value)
        assert prompts.latest(d)["id"] == base["id"]  # nothing saved
    finally:
        d.close()


@hsettings(max_examples=examples(40), deadline=None)
@given(
    keyword=st.sampled_from(["patternProperties", "format"]),
    draft=st.sampled_from(sorted(DRAFT_URIS)),
    where=st.sampled_from(["properties", "dependencies", "allOf", "items"]),
)
def test_keywords_the_runner_cannot_check_in_bounded_time_are_refused_with_why(tmp_path_factory, keyword, draft, where):
    from data import db as dbmod

    inner = {"format": "email"} if keyword == "format" else {"patternProperties": {r"(\w+\s?)*$": {}}}
    shape = {"properties": "map", "dependencies": "map", "allOf": "list", "items": "one"}[where]
    d = dbmod.connect(tmp_path_factory.mktemp("p") / "w.db")
    try:
        base = prompts.latest(d)
        with pytest.raises(InvalidPrompt) as e:
            prompts.create_version(
                d, name=base["name"], system="s", user="u", schema=hide(SAFE, draft, where, shape, inner)
            )
        assert keyword in str(e.value) and "regular expression" in str(e.value)
        assert prompts.latest(d)["id"] == base["id"]
    finally:
        d.close()


def test_a_schema_declaring_another_draft_is_refused_with_the_ones_it_may_declare(db):
    base = prompts.latest(db)
    for declared in ("http://json-schema.org/draft-03/schema#", "https://example.org/my-draft", 7):
        schema = {**copy.deepcopy(SAFE), "$schema": declared}
        with pytest.raises(InvalidPrompt) as e:
            prompts.create_version(db, name=base["name"], system="s", user="u", schema=schema)
        assert "2020-12" in str(e.value) and "declare one of" in str(e.value), str(e.value)
    saved = prompts.create_version(
        db, name=base["name"], system="s", user="u", schema={**copy.deepcopy(SAFE), "$schema": DRAFT_URIS["7"]}
    )
    assert saved["version"] == base["version"] + 1


def answer_body(caption: str) -> bytes:
    content = json.loads(GOOD["choices"][0]["message"]["content"])
    content["caption"] = caption
    body = copy.deepcopy(GOOD)
    body["choices"][0]["message"]["content"] = json.dumps(content)
    body["choices"][0]["logprobs"] = None
    return json.dumps(body).encode()


@hsettings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=HOSTILE_PATTERNS,
    words=st.integers(1, 4000),
    word=st.sampled_from(["a", "ab", "word", "aaaaaaaaaa"]),
    tail=st.sampled_from(["!", ".", " 1", "", "é"]),
    draft=st.sampled_from(sorted(DRAFT_URIS)),
    keyword=st.sampled_from(["properties", "dependencies", "allOf", "not"]),
)
def test_patterns_that_backtrack_are_matched_in_linear_time_wherever_they_hide(
    pattern, words, word, tail, draft, keyword
):
    """Patterns that run for hours in Python's `re` on answers up to ~40,000 characters, under any keyword of any
    draft: each answer is read, well within a budget of 1 s of the checker's CPU (RE2), never `check_timeout`.
    A pattern under `not` makes the answer fail the schema when it matches: read and refused (`schema`)."""
    inner = {"type": "string", "pattern": pattern, "maxLength": 100_000}
    shape = {"properties": "map", "dependencies": "map", "allOf": "list", "not": "one"}[keyword]
    schema = hide(SAFE, draft, keyword, shape, inner)
    schema["properties"]["caption"]["maxLength"] = 100_000
    assert taxonomy.costly_refusal(schema) is None  # the runner sends it: RE2 matches it in linear time
    body = answer_body(" ".join([word] * words) + tail)

    async def check():
        checker = AnswerChecker(BUDGET_S, workers=1)
        try:
            await checker.read(answer_body("warm up"), SAFE, confidence=False)  # starts the checker
            try:
                return await checker.read(body, schema, confidence=False)
            except BadAnswer as e:
                return e
        finally:
            await checker.aclose()

    got = asyncio.run(check())
    if isinstance(got, BadAnswer):  # a near miss of the pattern, or a `not` it matched: the schema said no
        assert got.kind == "schema", got
    else:
        assert got.text.startswith(word)


def costly_refs(depth: int) -> dict:
    """A schema whose check doubles with each level (`allOf` of two `$ref`s to the next level): a check that
    costs its whole budget, whatever the answer, without any pattern. data.prompts refuses `$ref` at save; a
    version stored before that rule is one way such a check still reaches the checkers."""
    s = copy.deepcopy(SAFE)
    s["$defs"] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(depth)}
    s["$defs"][f"d{depth}"] = {"type": "string"}
    s["properties"]["caption"] = {"type": "string", "$ref": "#/$defs/d0"}
    return s


def test_a_check_past_its_budget_times_out_and_the_next_answer_gets_a_fresh_checker():
    async def check():
        checker = AnswerChecker(BUDGET_S, workers=1)
        try:
            await checker.read(answer_body("warm up"), SAFE, confidence=False)
            t = time.monotonic()
            with pytest.raises(BadAnswer) as e:
                await checker.read(
                    answer_body("the ego vehicle slows for a cyclist"), costly_refs(40), confidence=False
                )
            took = time.monotonic() - t
            # the next answer gets a fresh checker and is read
            read = await checker.read(answer_body("a plain caption"), SAFE, confidence=False)
            return e.value, took, read, checker.stats
        finally:
            await checker.aclose()

    err, took, read, stats = asyncio.run(check())
    assert err.kind == "check_timeout" and not err.retryable and "budget of 1 s" in err.message
    assert took < MIN_WALL_S + 10, took
    assert read.text == "a plain caption"
    assert stats["timeouts"] == 1 and stats["started"] == 2


def test_a_job_whose_checks_cost_the_whole_budget_does_not_hold_another_jobs_answers():
    """One checker (a 2-core head's default), a hostile job with three answers in the checkers' way, each costing
    the whole budget, then a normal job's answers: every normal answer is read while the hostile job's first is
    still being checked (a spare checker of its own), not after the three budgets. Before: first come, first
    served, every normal answer behind every hostile one (issue 46: a 24-clip job at 0 done for 177 s)."""
    hostile = costly_refs(40)
    order: list[str] = []

    async def check():
        checker = AnswerChecker(5.0, workers=1)  # a budget well past a spare checker's start on a loaded machine
        try:
            await checker.start()

            async def read(job: str, schema: dict, n: int) -> None:
                try:
                    await checker.read(answer_body(f"{job} {n}"), schema, confidence=False, job=job)
                    order.append(f"{job} read")
                except BadAnswer as e:
                    order.append(f"{job} {e.kind}")

            bad = [asyncio.ensure_future(read("hostile", hostile, n)) for n in range(3)]
            await asyncio.sleep(0.2)  # the hostile job's answers came first and wait in line
            good = [asyncio.ensure_future(read("normal", SAFE, n)) for n in range(6)]
            await asyncio.gather(*good)
            during = list(order)
            await asyncio.gather(*bad)
            return during, dict(checker.stats)
        finally:
            await checker.aclose()

    during, stats = asyncio.run(check())
    assert during == ["normal read"] * 6, during  # all six before the first hostile check ended
    assert order.count("hostile check_timeout") == 3, order
    assert stats["spares"] >= 1, stats


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
    hostile = with_keyword(SAFE, "caption", "pattern", r"^(\w+)\s\1")  # a backreference: RE2 cannot match it
    with db.conn:  # a version saved before prompts refused such patterns: straight into the table
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
    assert all("linear time" in f["last_error"] and "new prompt version" in f["last_error"] for f in failures)
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


def test_each_runnable_job_first_takes_its_share_of_the_runners_slots(settings, db):
    """The older job does not take every free slot: each job first takes an even share of the runner's bound
    (less what it has in flight), then what the others left. Before: the oldest job took all, so a job whose
    clips each hold a slot for a whole check budget held every later job at 0 done."""
    from serving.runner.store import JobStore

    ids = tiny_library(settings, db, 30)
    made = [
        jobs.create(
            db,
            name=name,
            created_by="lead",
            selection=Selection.of_clips(part),
            prompt_id=prompts.latest(db)["id"],
            params=JobParams(),
        )
        for name, part in (("older", ids[:20]), ("newer", ids[20:]))
    ]
    store = JobStore(settings, "runner-test")
    first = {job["id"]: len(items) for job, items in store.claim(db, 8, 8)}
    assert first == {made[0]: 4, made[1]: 4}, first
    # the older job's four still in flight, the newer's answered: the newer takes its share again, the older
    # only what is left beyond the newer's share
    inflight = [(made[0], 1)] * 4
    second = {job["id"]: len(items) for job, items in store.claim(db, 4, 8, inflight)}
    assert second == {made[1]: 4}, second
    # a job with fewer items than its share leaves the rest to the others
    third = {job["id"]: len(items) for job, items in store.claim(db, 8, 8, inflight + [(made[1], 1)] * 4)}
    assert third == {made[0]: 6, made[1]: 2}, third


def test_a_stop_signal_to_the_runners_group_does_not_fail_the_answer_being_checked():
    """launch.sh stops the runner with SIGTERM to its process group, the checkers included: a checker that died of
    it failed the answer it was reading as `unreadable`, for good. The runner drains, then ends its checkers."""
    import os
    import signal

    async def check():
        checker = AnswerChecker(30.0, workers=1)
        try:
            await checker.start()
            (pid,) = [c.proc.pid for c in checker._all]
            reading = asyncio.ensure_future(checker.read(answer_body("a caption"), costly_refs(12), confidence=False))
            await asyncio.sleep(0.05)
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGINT)
            return await reading
        finally:
            await checker.aclose()

    assert asyncio.run(check()).text == "a caption"
