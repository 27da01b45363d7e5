"""A job's parameters and selection, end to end: declared once (data.job_params, data.jobs.selection), stored by
`jobs.create`, read back typed by `job_queries.get`, sent by the request builder with JobParams' defaults, and
recorded in provenance under the same names; rows written before read the same. Each is a flag of
`python -m serving.caption` made from its field (data.job_param_args)."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from data import captions, export, job_param_args, jobs
from data.clips import Filter
from data.errors import InvalidJobParams
from data.job_params import JobParams, knob
from data.jobs import items as job_items, queries as job_queries
from data.jobs.selection import Selection
from data.settings import Settings
from serving import caption as caption_cli
from serving.client import CaptionRequest, FleetClient
from tests.support.fleet_fixtures import PROMPT
from tests.support.runner_fixtures import LABELS, add_clips

# a value for each field that differs from its default, and one its check refuses
GOOD = {"frames": 8, "max_tokens": 900, "temperature": 0.7, "seed": 42, "top_logprobs": 10, "max_pixels": 2_359_296}
BAD = {"frames": 0, "max_tokens": 64, "temperature": 3, "seed": "x", "top_logprobs": 21, "max_pixels": 20_000_000}


def test_every_parameter_has_a_good_and_a_bad_example_here():
    names = {f.name for f in dataclasses.fields(JobParams)}
    assert set(GOOD) == set(BAD) == names  # a new field must be added to these examples too


@pytest.mark.parametrize("name", sorted(GOOD))
def test_each_parameter_is_checked_stored_and_read_back_by_its_name(name):
    p = JobParams.checked(**{name: str(GOOD[name])})  # as a form or a flag sends it: text
    assert getattr(p, name) == GOOD[name] and getattr(JobParams(), name) != GOOD[name]
    assert p.to_dict()[name] == GOOD[name]
    assert JobParams.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(InvalidJobParams):
        JobParams.checked(**{name: BAD[name]})


def test_unknown_parameters_are_refused_with_the_known_ones():
    with pytest.raises(InvalidJobParams, match="Unknown job parameter.*fps.*known: frames"):
        JobParams.checked(fps=2)


def test_defaults_are_the_deployment_settings_and_resolve_takes_the_settings_of_the_same_name():
    defaults = Settings.load({}, environ={})
    assert (JobParams().frames, JobParams().max_tokens, JobParams().temperature) == (
        defaults.frames,
        defaults.max_tokens,
        defaults.temperature,
    )
    mine = defaults.replace(frames=24, max_tokens=1000)
    assert JobParams.resolve(mine) == JobParams(frames=24, max_tokens=1000)
    assert JobParams.resolve(mine, {"frames": 8}, max_tokens="", seed=3) == JobParams(8, 1000, seed=3)


def test_a_new_parameter_is_one_field():
    """What issue 20 will do (a longest edge in pixels): one field, and check, resolve, store and read carry it."""

    def edge(value):
        if value in (None, ""):
            return None
        if int(value) < 64:
            raise InvalidJobParams("Longest edge must be at least 64 pixels.")
        return int(value)

    @dataclasses.dataclass(frozen=True)
    class Wider(JobParams):
        longest_edge: int | None = knob(edge, lambda v: None if v is None else int(v), "longest edge in pixels")

    assert Wider.checked(longest_edge="640").longest_edge == 640
    with pytest.raises(InvalidJobParams, match="64 pixels"):
        Wider.checked(longest_edge=10)
    deployment = types.SimpleNamespace(frames=16, max_tokens=640, temperature=0.0, longest_edge=512)
    p = Wider.resolve(deployment)
    assert p.longest_edge == 512 and p.to_dict()["longest_edge"] == 512
    assert Wider.from_dict(p.to_dict()) == p
    assert "longest_edge" not in Wider.resolve(Settings.load({}, environ={})).to_dict()  # no such setting: none


# what people type today (README, docs/, tests, benchmarks): each must keep setting its parameter
FLAGS_IN_USE = {
    "frames": "--frames",
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "seed": "--seed",
    "top_logprobs": "--top-logprobs",
    "max_pixels": "--max-pixels",
}


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(JobParams)])
def test_every_parameter_is_a_flag_of_the_caption_command_with_the_fields_help(name, capsys):
    # generated from the dataclass: a field added to JobParams is a case here, and fails until it is a flag or is
    # in job_param_args.NOT_FLAGS with the reason
    help = {f.name: f.metadata["help"] for f in dataclasses.fields(JobParams)}[name]
    parser = caption_cli.build_parser()
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    if name in job_param_args.NOT_FLAGS:
        assert job_param_args.NOT_FLAGS[name].strip(), f"say why JobParams.{name} is not a flag"
        assert name not in actions
        return
    assert name in actions, f"JobParams.{name} has no flag in serving.caption (data.job_param_args makes them)"
    flag = actions[name].option_strings[0]
    assert actions[name].option_strings == [job_param_args.flag(name)]
    assert help and actions[name].help.replace("%%", "%").startswith(help)  # the field's own help, not a copy
    assert help in " ".join(parser.format_help().split())
    # the flag's text is read as a form's is, by the field's check; its refusal names the flag
    args = parser.parse_args([flag, str(GOOD[name])])
    assert job_param_args.from_args(args, Settings.load({}, environ={})) == JobParams(**{name: GOOD[name]})
    with pytest.raises(InvalidJobParams) as refused:
        JobParams.checked(**{name: str(BAD[name])})
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([flag, str(BAD[name])])
    assert exited.value.code == 2
    assert f"argument {flag}: {refused.value}" in capsys.readouterr().err


def test_the_flags_people_type_today_set_their_parameters_and_left_out_take_the_deployments():
    parser = caption_cli.build_parser()
    argv = [a for name, flag in FLAGS_IN_USE.items() for a in (flag, str(GOOD[name]))]
    deployment = Settings.load({}, environ={}).replace(frames=24, max_tokens=1000)
    assert job_param_args.from_args(parser.parse_args(argv), deployment) == JobParams(**GOOD)
    assert job_param_args.from_args(parser.parse_args([]), deployment) == JobParams(frames=24, max_tokens=1000)


def test_the_request_takes_its_defaults_from_jobparams(fleet_settings):
    body = FleetClient(fleet_settings).build_body(CaptionRequest("a.mp4", PROMPT))
    d = JobParams()
    assert body["max_completion_tokens"] == d.max_tokens and body["temperature"] == d.temperature
    assert body["media_io_kwargs"]["video"]["num_frames"] == d.frames and "seed" not in body
    body = FleetClient(fleet_settings).build_body(CaptionRequest("a.mp4", PROMPT, JobParams(**GOOD)))
    assert (body["max_completion_tokens"], body["temperature"], body["seed"]) == (900, 0.7, 42)
    assert body["media_io_kwargs"]["video"] == {"num_frames": 8, "min_frames": 8, "max_frames": 8}
    # the whole `size` (vLLM replaces the server's per key; Qwen3-VL's processor needs both edges)
    assert body["mm_processor_kwargs"] == {"size": {"shortest_edge": 65_536, "longest_edge": 2_359_296}}


def test_the_pixel_budget_is_the_recipes_by_default_and_never_above_it(fleet_settings):
    from data.job_params import RECIPE_MAX_PIXELS
    from serving.launch import commands as fleet_commands

    assert JobParams().max_pixels == RECIPE_MAX_PIXELS == 9_437_184
    argv = fleet_commands.vllm_command(fleet_settings, 8000, version=(0, 25, 0))
    server = json.loads(argv[argv.index("--mm-processor-kwargs") + 1])
    body = FleetClient(fleet_settings).build_body(CaptionRequest("a.mp4", PROMPT))
    # a default job asks exactly the size the server starts with; where frames are processed stays the server's
    # (vLLM merges a request's kwargs over the server's key by key: measured on 0.25, docs/GPU.md)
    assert server.pop("device") == "cuda"
    assert body["mm_processor_kwargs"] == server
    for bad, why in (("9437185", "9,437,184"), ("1000", "65,536"), ("half", "whole number"), ("9.5e6", "9,500,000")):
        with pytest.raises(InvalidJobParams, match=why):
            JobParams.checked(max_pixels=bad)
    assert JobParams.from_dict({"frames": 16}).max_pixels == RECIPE_MAX_PIXELS  # jobs stored before the knob


def test_a_job_stores_its_params_and_selection_and_get_returns_them_typed(db):
    ids = add_clips(db, 5)
    params = JobParams(**GOOD)
    sel = Selection(filter=Filter(scenario="cut_in", has_caption=False), limit=3, origin="command line")
    db.execute("UPDATE clips SET scenario = 'cut_in' WHERE id IN (?, ?, ?, ?)", ids[:4])
    job_id = jobs.create(db, name="j", created_by="lead", selection=sel, prompt_id=None, params=params)
    job = job_queries.get(db, job_id)
    assert job["params"] == params and job["selection"] == sel
    assert job["total"] == 3  # the first 3 of the 4 matches
    row = db.execute("SELECT params, selection FROM jobs WHERE id = ?", [job_id]).fetchone()
    assert json.loads(row[0]) == GOOD
    assert json.loads(row[1]) == {
        "origin": "command line",
        "filter": {"scenario": "cut_in", "has_caption": False},
        "limit": 3,
        "clip_ids": None,
    }


def test_a_recaption_records_the_same_shape(db, settings):
    (clip,) = add_clips(db, 1)
    job_id = jobs.create_recaption(
        db, clip, user="ann", role="annotator", quota=5, prompt_id=None, params=JobParams.resolve(settings)
    )
    sel = json.loads(db.execute("SELECT selection FROM jobs WHERE id = ?", [job_id]).fetchone()[0])
    assert sel == {"origin": "re-caption", "filter": {}, "limit": None, "clip_ids": [clip]}


@pytest.mark.parametrize(
    "stored, expected",
    [
        # the Jobs tab before one shape
        (
            {"source": "current filter", "filter": {"weather": "rain"}},
            Selection(Filter(weather="rain"), None, None, "current filter"),
        ),
        # the command line before one shape: flat filter fields and a limit
        ({"scenario": "cut_in", "limit": 5}, Selection(Filter(scenario="cut_in"), 5)),
        # a re-caption before one shape
        ({"clip_ids": [7], "reason": "re-caption"}, Selection.of_clips([7], origin="re-caption")),
        ({}, Selection()),
    ],
)
def test_selections_stored_before_one_shape_read_the_same(db, stored, expected):
    ids = add_clips(db, 1)
    job_id = jobs.create(
        db, name="j", created_by="t", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    db.execute("UPDATE jobs SET selection = ?, params = ? WHERE id = ?", [json.dumps(stored), '{"frames": 8}', job_id])
    job = job_queries.get(db, job_id)
    assert job["selection"] == expected
    # what was stored; a knob added since reads as what was asked then (no logprobs), the rest are the defaults
    assert job["params"] == JobParams(frames=8, top_logprobs=0)


def test_a_selection_is_a_filter_or_a_list_not_both():
    with pytest.raises(Exception, match="either a filter"):
        Selection(filter=Filter(weather="rain"), clip_ids=(1,))
    with pytest.raises(Exception, match="at least 1"):
        Selection(limit=0)


def test_the_jobs_tab_and_the_command_line_record_one_shape(server, web_settings):
    """The same clips chosen from the app ("everything uncaptioned") and from a terminal
    (`--has-caption no --ingest-failed no`) record the same filter, in the same four keys."""
    from data import db as dbmod
    from tests.support.reliability_fixtures import GradioSession, dependencies

    cookie = server.client("lead").cookies["cw_session"]
    lead = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    # the Jobs tab's inputs: name, clips, prompt, frames, max tokens, pixels, the Browse filter, the preview shown
    # its outputs: the message, the message's job (state), the job id, the preview, the preview shown (state)
    ui_job = lead.call("start_job", ["uncaptioned", "everything uncaptioned", None, 16, 640, None, {}, None])[2]
    lead.close()
    args = caption_cli.build_parser().parse_args(["--has-caption", "no", "--ingest-failed", "no", "--limit", "2"])
    db = dbmod.connect(web_settings.db)
    try:
        cli_job = caption_cli.create_job(db, web_settings, args, fleet=None)
        ui, cli = (
            json.loads(db.execute("SELECT selection FROM jobs WHERE id = ?", [j]).fetchone()[0])
            for j in (ui_job, cli_job)
        )
        ui_sel, cli_sel = job_queries.get(db, int(ui_job))["selection"], job_queries.get(db, cli_job)["selection"]
    finally:
        db.close()
    assert set(ui) == set(cli) == {"origin", "filter", "limit", "clip_ids"}
    assert ui["filter"] == cli["filter"] == {"has_caption": False, "failed": False}
    assert (ui["origin"], ui["limit"]) == ("everything uncaptioned", None)
    assert (cli["origin"], cli["limit"]) == ("command line", 2)
    assert ui_sel.filter == cli_sel.filter == Filter(has_caption=False, failed=False)


def test_provenance_names_the_params_as_jobparams_does_and_old_rows_read_the_same(db):
    ids = add_clips(db, 2)
    job_id = jobs.create(
        db, name="j", created_by="t", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    job_items.claim(db, job_id, "r", 2, lease_seconds=60, max_attempts=3)
    now = {"params": {**JobParams(**GOOD).to_dict(), "camera": "front"}, "model": "m"}
    before = {
        "params": {"max_completion_tokens": 900, "num_frames": 8, "temperature": 0.7, "seed": 42, "camera": "front"}
    }
    for clip, prov in zip(ids, (now, {**before, "model": "m"})):
        job_items.complete(db, job_id, clip, text="t", labels=LABELS, provenance=prov)
    read = [captions.history(db, c)[0]["params"] for c in ids]
    assert read[0] == {**GOOD, "camera": "front"}
    # a row written before the logprobs and pixel knobs is read as it was written: it asked for no logprobs, and
    # its job ran at the recipe's pixel budget
    old = {k: v for k, v in GOOD.items() if k not in ("top_logprobs", "max_pixels")}
    assert read[1] == {**old, "camera": "front"}
    assert JobParams.from_dict(read[0]) == JobParams(**GOOD)
    assert JobParams.from_dict(read[1]) == JobParams(**{**old, "top_logprobs": 0, "max_pixels": 9_437_184})
    exported = [r["origin"]["params"] for r in export.iter_rows(db)]  # a machine caption is its own origin
    assert exported == read
