"""The clip filter's flags are made in one place (data.filter_args) from `clips.Filter`'s fields: every command
that selects clips takes a flag for every field, with the field's help and allowed values, so a new field
reaches every command with no other edit."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from data import clips, export, filter_args, review_states
from data.clips import Filter
from data.errors import DataError
from data.quality.__main__ import main as quality_main
from data.release import make as release
from serving import caption
from tests.support.export_library import populate

ROOT = Path(__file__).resolve().parents[2]
# Every command line that selects clips with flags: each must take all of the filter's.
COMMANDS = {
    "data.export": export.build_parser,
    "serving.caption": caption.build_parser,
    "data.release": release.build_parser,
}


def _argv(name: str) -> tuple[list[str], object]:
    """Flags that set field `name` alone (and the job it needs), and the value the Filter must then hold."""
    kind, flag = clips.FIELD_TYPES[name], filter_args.flags(name)[0]
    meta = {f.name: f.metadata for f in dataclasses.fields(Filter)}[name]
    if kind is bool and meta["switch"]:
        return [flag], True
    if kind is bool:
        return [flag, "no"], False
    if kind is int:
        return [flag, "7"], 7
    if name in clips.CHOICES:
        value = clips.CHOICES[name][-1]
        return [flag, value, *(["--job", "3"] if name == "job_item_state" else [])], value
    return [flag, f"{name} value"], f"{name} value"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Filter)])
def test_every_filter_field_has_a_flag_in_every_command_that_selects_clips(command, field):
    # generated from the dataclass: a field added to Filter is a case here, and fails until it has its help
    meta = {f.name: f.metadata for f in dataclasses.fields(Filter)}[field]
    assert meta.get("help"), f"Filter.{field} has no help: declare it with clips._field(help, ...)"
    parser = COMMANDS[command]()
    argv, value = _argv(field)
    f = filter_args.from_args(parser.parse_args(argv))
    assert getattr(f, field) == value
    assert f.to_dict() == {field: value, **({"job_id": 3} if field == "job_item_state" else {})}  # that alone
    assert meta["help"] in " ".join(parser.format_help().split())  # the field's own help, not a copy


def test_a_flag_left_out_is_not_set():
    for make in COMMANDS.values():
        assert filter_args.from_args(make().parse_args([])) == Filter()


def test_both_commands_read_the_same_flags_as_the_same_filter():
    argv = ["--status", "approved", "--weather", "rain", "--has-caption", "YES", "--ingest-failed", "n"]
    argv += ["--job-id", "4", "--job-state", "failed", "--text", "red car", "--include-missing", "--unassigned"]
    got = {name: filter_args.from_args(make().parse_args(argv)) for name, make in COMMANDS.items()}
    assert (
        got["data.export"]
        == got["serving.caption"]
        == Filter(
            review_status="approved",
            weather="rain",
            has_caption=True,
            failed=False,
            job_id=4,
            job_item_state="failed",
            text="red car",
            include_missing=True,
            unassigned=True,
        )
    )


@pytest.mark.parametrize("field", sorted(clips.CHOICES))
def test_a_value_outside_a_fields_choices_is_refused_naming_the_allowed_ones(field, capsys):
    for make in COMMANDS.values():
        with pytest.raises(SystemExit) as e:
            make().parse_args([filter_args.flags(field)[0], "Rainy"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "invalid choice: 'Rainy'" in err and all(repr(v) in err for v in clips.CHOICES[field]), err


def test_a_yes_no_flag_refuses_anything_else(capsys):
    with pytest.raises(SystemExit):
        caption.build_parser().parse_args(["--disagrees", "maybe"])
    assert "argument --disagrees: expected yes or no, got 'maybe'" in capsys.readouterr().err


def test_a_job_state_without_a_job_is_refused_in_the_flags_words():
    with pytest.raises(DataError, match="--job-state needs --job"):
        filter_args.from_args(export.build_parser().parse_args(["--job-state", "failed"]))


def test_checked_names_the_allowed_values_and_stored_filters_still_read():
    bad = Filter(weather="rainy")  # a selection recorded before the check: still a Filter, matching nothing
    with pytest.raises(DataError, match="weather must be one of: clear, cloudy, rain, snow, fog, unknown"):
        bad.checked()
    with pytest.raises(DataError, match="job_item_state needs job_id"):
        Filter(job_item_state="done").checked()
    good = Filter(weather="rain", job_id=2, job_item_state="done")
    assert good.checked() is good


def test_no_command_lists_a_filter_flag_by_hand():
    # a copy of a filter flag outside data.filter_args would drift from the Filter; the one flag of that name
    # with another meaning is data.quality's --job (the job whose machine captions are measured)
    other_meaning = {("data/quality/__main__.py", "--job")}
    names = {flag for f in dataclasses.fields(Filter) for flag in filter_args.flags(f.name)}
    found = []
    for path in sorted(p for top in ("data", "serving", "webapp", "benchmarks") for p in (ROOT / top).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value in names and (rel, arg.value) not in other_meaning:
                        found.append(f"{rel}:{node.lineno} {arg.value}")
    assert found == []


def test_export_selects_by_the_shared_flags(settings, db, capsys):
    ids = populate(db)  # 0: machine, 1: human, 2: machine approved; 3, 4: no caption
    db.execute("UPDATE clips SET missing = 1 WHERE id = ?", [ids[0]])

    def exported(*flags: str) -> list[int]:
        assert export.main(["--db", str(settings.db), *flags]) == 0
        return [json.loads(line)["clip_id"] for line in capsys.readouterr().out.splitlines()]

    assert exported() == [ids[1], ids[2]]
    assert exported("--include-missing") == ids[:3]
    assert exported("--source", "human") == [ids[1]]
    assert exported("--status", "approved", "--weather", "rain", "--unassigned") == [ids[2]]
    assert exported("--has-caption", "no") == []
    assert review_states.REVIEW_STATES[-1] == "broken" and exported("--status", "broken") == []


def test_export_refuses_an_unknown_label_value_with_the_allowed_values(settings, db):
    r = subprocess.run(
        [sys.executable, "-m", "data.export", "--db", str(settings.db), "--weather", "rainy"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert "argument --weather: invalid choice: 'rainy'" in r.stderr and "'fog'" in r.stderr


def test_quality_filter_json_refuses_an_unknown_label_value(settings, db, capsys):
    argv = ["--db", str(settings.db), "--filter"]
    assert quality_main([*argv, '{"hazard_level": "extreme"}']) == 2
    err = capsys.readouterr().err
    assert "hazard_level must be one of: none, low, medium, high, critical (not 'extreme')" in err
    assert quality_main([*argv, '{"hazard_level": "high"}']) == 0
