"""The clip filter on a command line: one flag per `clips.Filter` field, made from the field's type and metadata
(its help, its allowed values), so every command that selects clips (data.export, serving.caption) takes the
same flags, and a new Filter field reaches all of them without an edit here.

A flag is `--<field-name-with-dashes>` unless FLAGS spells it otherwise. A field with allowed values refuses any
other value with argparse's message, which lists them; a yes/no field is the Browse tab's any / yes / no (the
flag left out is "any"); a switch is a field whose False filters nothing. The flags build the Filter through
its dict form (`Filter.from_dict`), the seam the web app's URLs and state go through.

example:
    parser = argparse.ArgumentParser()
    filter_args.add_arguments(parser.add_argument_group("which clips"))
    f = filter_args.from_args(parser.parse_args(["--status", "approved", "--has-caption", "yes"]))
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from data.clips import CHOICES, FIELD_TYPES, Filter

# The fields whose flag is not their name: the words people type for them.
FLAGS: dict[str, tuple[str, ...]] = {
    "review_status": ("--status",),
    "caption_source": ("--source",),
    "failed": ("--ingest-failed",),
    "job_id": ("--job", "--job-id"),  # --job-id: what data.export called it
    "job_item_state": ("--job-state",),
}
YES = ("yes", "y", "true", "1")
NO = ("no", "n", "false", "0")


def flags(name: str) -> tuple[str, ...]:
    """The option strings of Filter field `name`; the first is the one messages use."""
    return FLAGS.get(name, ("--" + name.replace("_", "-"),))


def yes_no(value: str) -> bool:
    """The argparse type of a yes/no flag: yes/y/true/1 or no/n/false/0, in any case."""
    v = value.strip().lower()
    if v in YES:
        return True
    if v in NO:
        return False
    raise argparse.ArgumentTypeError(f"expected yes or no, got {value!r}")


def _argument(f: dataclasses.Field) -> dict[str, Any]:
    kind, help = FIELD_TYPES[f.name], f.metadata.get("help", "")  # tests/data/test_filter_args.py asks for help
    metavar = flags(f.name)[0].lstrip("-").replace("-", "_").upper()
    if kind is bool and f.metadata.get("switch"):
        return {"action": "store_true", "default": None, "help": help}  # None: left out, the field's default
    if kind is bool:
        return {"type": yes_no, "metavar": "yes|no", "help": help}
    if kind is int:
        return {"type": int, "metavar": metavar, "help": help}
    if f.name in CHOICES:
        allowed = CHOICES[f.name]
        return {"choices": allowed, "metavar": metavar, "help": f"{help} (one of: {', '.join(allowed)})"}
    return {"metavar": metavar, "help": help}


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add one flag per Filter field to `parser` (or an argument group of it), each with the field's help;
    a flag left out stays None, which the Filter reads as "not set"."""
    for f in dataclasses.fields(Filter):
        kw = _argument(f)
        parser.add_argument(*flags(f.name), dest=f.name, **{**kw, "help": kw["help"].replace("%", "%%")})


def from_args(args: argparse.Namespace) -> Filter:
    """The Filter the flags of `add_arguments` describe, or a DataError with the message for input that would
    silently select nothing or too much: a value outside a field's allowed values, --job-state without --job
    (both named by their flag), a search that cannot be read, a job number out of range."""
    f = Filter.from_dict({name: getattr(args, name) for name in FIELD_TYPES})
    return f.checked(lambda name: flags(name)[0])
