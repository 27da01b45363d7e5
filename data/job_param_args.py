"""The job parameters on a command line: one flag per `JobParams` field, made from the field (its help, its check,
its default), so the command that starts a captioning job (serving.caption) takes a flag for every parameter, and
a field added to JobParams reaches it without an edit here.

A flag is `--<field-name-with-dashes>`. Its text is read by the field's own check, the one `JobParams.checked`
runs, while the command line is parsed: a value that cannot work ends the command with argparse's message, which
names the flag and says what to use, before anything is opened. A flag left out stays None and the job takes the
default `JobParams.resolve` gives it: the deployment's setting of the same name (its CW_ variable) where there is
one, else the field's.

example:
    parser = argparse.ArgumentParser()
    job_param_args.add_arguments(parser.add_argument_group("how"))
    params = job_param_args.from_args(parser.parse_args(["--frames", "8", "--max-pixels", "4718592"]), settings)
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable

from data.errors import InvalidJobParams
from data.job_params import JobParams
from data.settings import Settings, env_name

# The JobParams fields a command line must not set, each with why. None so far: every parameter a job records is
# one a lead may choose when starting it. tests/data/test_job_params.py fails for a field that is neither a flag nor
# here.
NOT_FLAGS: dict[str, str] = {}
_SETTINGS = {f.name for f in dataclasses.fields(Settings)}


def flag(name: str) -> str:
    """The option string of JobParams field `name`: `--max-tokens`."""
    return "--" + name.replace("_", "-")


def fields() -> list[dataclasses.Field]:
    """The JobParams fields that are flags, in declaration order."""
    return [f for f in dataclasses.fields(JobParams) if f.name not in NOT_FLAGS]


def _reader(f: dataclasses.Field) -> Callable[[str], Any]:
    """The argparse type of field `f`'s flag: the field's check, its refusal turned into argparse's error."""
    check = f.metadata["check"]

    def read(text: str) -> Any:
        try:
            return check(text)
        except InvalidJobParams as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    read.__name__ = f.name  # what argparse would name in "invalid ... value" if a check raised something else
    return read


def _default(f: dataclasses.Field) -> str:
    """The default the help shows: the setting of the same name where there is one (JobParams.resolve takes it)."""
    if f.name in _SETTINGS:
        return f" [env {env_name(f.name)}; default {f.default}]"
    if f.default is None:
        return ""  # the help says what none means ("none: the server's")
    return f" [default {f.default:,}]" if isinstance(f.default, int) else f" [default {f.default}]"


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add one flag per JobParams field (but NOT_FLAGS) to `parser` (or an argument group of it): the field's
    help and default, its check as the type; a flag left out stays None."""
    for f in fields():
        help = f.metadata["help"] + _default(f)
        parser.add_argument(
            flag(f.name),
            dest=f.name,
            type=_reader(f),
            default=None,
            metavar=f.name.upper(),
            help=help.replace("%", "%%"),
        )


def from_args(args: argparse.Namespace, settings: Any) -> JobParams:
    """The JobParams the flags of `add_arguments` ask for, over the deployment's defaults (`settings`), checked
    (`JobParams.resolve`)."""
    return JobParams.resolve(settings, {f.name: getattr(args, f.name) for f in fields()})
