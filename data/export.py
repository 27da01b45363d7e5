"""Export current captions with their labels and lineage, as JSON Lines or CSV, streamed.

    python -m data.export --db var/workbench.db --format jsonl --status approved > approved.jsonl
    python -m data.export --schema > docs/export.schema.json

One record per clip that has a current caption and matches the filter (data.clips.Filter fields). Records come
from one cursor in id order (clip, current caption and its origin machine caption joined on primary keys) and are
written as they arrive; a human-edited caption adds one bounded lookup (data.captions.edits, at most
EDITS_MAX + 1 rows). Memory stays constant on a million clips. `export(db, filter, fmt, out)` is what the web
app calls for downloads.

Every field is declared once below (`FIELDS`, `ORIGIN_FIELDS`): its SQL, its JSON Schema and its meaning. The
query, the JSONL record, the CSV header and the published JSON Schema (docs/export.schema.json, `--schema`) are
all made from those declarations, so a new field (a confidence, "sampled at random") is one entry. CSV flattens:
`labels` to one `label_<name>` column per label (lists joined with ';'), `origin` to `origin_<field>` columns,
lists of names joined with ';', and objects or lists of objects (sidecar, params, edits) as JSON text.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TextIO

import sqlite_utils

from data import caption_history, clips, filter_args, limits, review_states, taxonomy
from data.clips import Filter
from data.errors import DataError
from data.job_params import current_names

FORMATS = ("jsonl", "csv")


def _null(*types: str) -> dict:
    return {"type": [*types, "null"]}


# NaN/Infinity stored before ingest refused them become null: strict JSONL readers reject them. One decoder for
# every cell (json.loads with an option builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=lambda _: None)


def _json(value: str | None) -> Any:
    return _DECODER.decode(value) if value else None


def _params(value: str | None) -> dict | None:
    """Recorded params under today's names (rows written before one naming carry the old ones)."""
    return current_names(_DECODER.decode(value)) if value else None


@dataclass(frozen=True)
class Field:
    """One exported field: `sql` is an expression over `c` (the clip), `k` (its current caption) and `o` (the
    origin machine caption), or None for a field computed from the others (`_lineage_fields`)."""

    name: str
    sql: str | None
    schema: dict
    doc: str
    decode: Callable[[Any], Any] | None = None


FIELDS: tuple[Field, ...] = (
    Field("clip_id", "c.id", {"type": "integer"}, "the clip's id in the library"),
    Field("path", "c.path", {"type": "string"}, "the clip's file, relative to the clip root"),
    Field("sha256", "c.sha256", _null("string"), "SHA-256 of the clip's bytes (ties the caption to the footage)"),
    Field("duration", "c.duration", _null("number"), "seconds"),
    Field("width", "c.width", _null("integer"), "pixels"),
    Field("height", "c.height", _null("integer"), "pixels"),
    Field(
        "review_status",
        "c.review_status",
        {"enum": list(review_states.REVIEW_STATES)},
        "the clip's review decision ('broken': a person flagged the video as unreviewable, apart from rejections)",
    ),
    Field("reviewed_by", "c.reviewed_by", _null("string"), "who decided it"),
    Field("reviewed_at", "c.reviewed_at", _null("number"), "when (Unix seconds)"),
    Field(
        "human_reviewed",
        "c.review_status <> 'unreviewed'",
        {"type": "boolean"},
        "true when a person decided on the clip (approved, rejected, or marked it broken)",
        bool,
    ),
    Field(
        "random_sample",
        "EXISTS (SELECT 1 FROM sample_members sm WHERE sm.clip_id = c.id)",
        {"type": "boolean"},
        "true when the clip was drawn into a random review sample (a clip reviewed because someone chose it is "
        "not one): only such clips tell what the unreviewed rest is worth",
        bool,
    ),
    Field(
        "double_reviewed",
        "EXISTS (SELECT 1 FROM second_reviews sr WHERE sr.clip_id = c.id AND sr.state = 'done')",
        {"type": "boolean"},
        "true when a second reviewer also answered for the clip, blind to the first review",
        bool,
    ),
    Field(
        "sidecar",
        "c.sidecar",
        {"type": "object"},
        "the clip's sidecar metadata as ingested ({} when it had none)",
        lambda v: _json(v) or {},
    ),
    Field("caption_id", "k.id", {"type": "integer"}, "the current caption version's id"),
    Field("version", "k.version", {"type": "integer"}, "its version number on this clip (1, 2, ...)"),
    Field("text", "k.text", {"type": "string"}, "the caption text"),
    Field("labels", "k.labels", taxonomy.LABELS_SCHEMA, "the structured labels", lambda v: _json(v) or {}),
    Field("source", "k.source", {"enum": ["model", "human"]}, "who wrote this version: the model or a person"),
    Field("author", "k.author", {"type": "string"}, "the person, or the model's writer name"),
    Field("created_at", "k.created_at", {"type": "number"}, "when this version was written (Unix seconds)"),
    Field(
        "derived_from_id",
        "k.derived_from_id",
        _null("integer"),
        "the version this one was made from (a save: the version edited; an adopt: the version adopted); "
        "null for a machine caption",
    ),
    Field(
        "simulated",
        None,
        {"type": "boolean"},
        "true when this text or the text it was derived from was written by the simulated fleet",
    ),
    Field(
        "origin",
        None,
        {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/origin"}]},
        "the machine caption at the root of this version's lineage (this version itself when the model wrote "
        "it); null for text a person wrote from scratch",
    ),
    Field(
        "changed",
        None,
        {"enum": list(caption_history.CHANGE_KINDS)},
        "what people changed compared with the origin: unchanged, text, labels or both; written when there is "
        "no origin (text compared word by word, multi-choice labels as sets)",
    ),
    Field(
        "labels_changed",
        None,
        {"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}]},
        "the labels whose value differs from the origin's; null when there is no origin",
    ),
    Field(
        "edits",
        None,
        {"type": "array", "items": {"$ref": "#/$defs/edit"}},
        "the human versions between the origin and this one, oldest first: who edited and when",
    ),
    Field(
        "edits_truncated",
        None,
        {"type": "boolean"},
        f"true when more than {caption_history.EDITS_MAX} human versions lie on the chain (only the newest are listed)",
    ),
)

# The origin machine caption's provenance (`origin` above; CSV: origin_<name>).
ORIGIN_FIELDS: tuple[Field, ...] = (
    Field("caption_id", "o.id", {"type": "integer"}, "the origin caption version's id"),
    Field("version", "o.version", {"type": "integer"}, "its version number on the clip"),
    Field("created_at", "o.created_at", {"type": "number"}, "when the model wrote it (Unix seconds)"),
    Field("job_id", "o.job_id", _null("integer"), "the captioning job that wrote it"),
    Field("model", "o.model", _null("string"), "the model's name as the fleet reported it"),
    Field("prompt_id", "o.prompt_id", _null("integer"), "the prompt version's id"),
    Field("prompt_name", "o.prompt_name", _null("string"), "the prompt's name"),
    Field("prompt_version", "o.prompt_version", _null("integer"), "the prompt's version"),
    Field("params", "o.params", _null("object"), "sampling and request parameters", _params),
    Field("frames", "o.frames", _null("integer"), "frames of the clip the model saw"),
    Field("replica", "o.replica", _null("string"), "the fleet replica that answered"),
    Field("decode_backend", "o.decode_backend", _null("string"), "the video decoder the replica used"),
    Field("latency_ms", "o.latency_ms", _null("number"), "request latency"),
    Field("prompt_tokens", "o.prompt_tokens", _null("integer"), "tokens in"),
    Field("completion_tokens", "o.completion_tokens", _null("integer"), "tokens out"),
    Field("finish_reason", "o.finish_reason", _null("string"), "why the model stopped"),
    Field("simulated", "o.simulated", {"type": "boolean"}, "written by the simulated fleet", bool),
    Field(
        "confidence",
        "o.confidence",
        {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/confidence"}]},
        "the model's probability of each label value it generated, from its token logprobs; null when not "
        "recorded (captioned without logprobs, or before confidence was recorded)",
        _json,
    ),
)

_P = {"oneOf": [{"type": "null"}, {"type": "number", "minimum": 0, "maximum": 1}]}
CONFIDENCE_SCHEMA = {
    "type": "object",
    "properties": {
        "labels": {
            "type": "object",
            "properties": {name: _P for name in taxonomy.ENUMS},
            "description": "per label, the probability of the value generated (a list label: of exactly that "
            "list); null where it could not be read",
        },
        "items": {
            "type": "object",
            "additionalProperties": {"type": "object", "additionalProperties": _P},
            "description": "per list label, the probability of each item generated",
        },
        "end": {
            "type": "object",
            "additionalProperties": _P,
            "description": "per list label, the probability that the list ended where it did",
        },
        "note": {"type": "string", "description": "why no label has a confidence, when the logprobs were unreadable"},
    },
    "required": ["labels", "items", "end"],
    "additionalProperties": False,
}

EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "caption_id": {"type": "integer", "description": "the human version's id"},
        "version": {"type": "integer", "description": "its version number on the clip"},
        "author": {"type": "string", "description": "who saved it"},
        "created_at": {"type": "number", "description": "when (Unix seconds)"},
        "changed": {
            "enum": list(caption_history.CHANGE_KINDS),
            "description": "what it changed compared with the version it was derived from",
        },
    },
    "required": ["caption_id", "version", "author", "created_at", "changed"],
    "additionalProperties": False,
}


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of one JSONL record, made from the field declarations."""

    def obj(fields: tuple[Field, ...]) -> dict:
        return {
            "type": "object",
            "properties": {f.name: {**f.schema, "description": f.doc} for f in fields},
            "required": [f.name for f in fields],
            "additionalProperties": False,
        }

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "A clip's current caption with its labels and lineage (one JSON Lines record)",
        **obj(FIELDS),
        "$defs": {"origin": obj(ORIGIN_FIELDS), "edit": EDIT_SCHEMA, "confidence": CONFIDENCE_SCHEMA},
    }


# Read for `changed` and `labels_changed`, not exported: the origin's text and labels, the version's own flag.
_INTERNAL = {"_origin_text": "o.text", "_origin_labels": "o.labels", "_simulated": "k.simulated"}


def _select(f: Filter) -> tuple[str, list[Any]]:
    # a record is a current caption: "without a caption" (has_caption False) stays, and matches nothing
    where, args = clips._where(f if f.has_caption is False else dataclasses.replace(f, has_caption=True))
    cols = [f"{x.sql} AS {x.name}" for x in FIELDS if x.sql]
    cols += [f"{x.sql} AS origin_{x.name}" for x in ORIGIN_FIELDS]
    cols += [f"{sql} AS {alias}" for alias, sql in _INTERNAL.items()]
    return (
        f"SELECT {', '.join(cols)} FROM clips c JOIN captions k ON k.id = c.current_caption_id "
        f"LEFT JOIN captions o ON o.id = k.origin_id WHERE {' AND '.join(where)} ORDER BY c.id",
        args,
    )


# (name, column, decoder or None) of the fields read from SQL, decided once: a record costs no lookups of these
_READ = tuple((x.name, x.name, x.decode) for x in FIELDS if x.sql)
_ORIGIN_READ = tuple((x.name, "origin_" + x.name, x.decode) for x in ORIGIN_FIELDS)


def _decoded(raw: dict, fields: tuple) -> dict:
    return {name: raw[col] if decode is None else decode(raw[col]) for name, col, decode in fields}


def _lineage_fields(db: sqlite_utils.Database, raw: dict, rec: dict) -> dict:
    """The computed fields of FIELDS for one record (`raw`: the query's row, `rec`: its decoded fields)."""
    origin = None
    if raw["origin_caption_id"] is not None:
        origin = _decoded(raw, _ORIGIN_READ)
    if origin is None:
        changed, labels = caption_history.change_kind(None, rec), None
    elif origin["caption_id"] == rec["caption_id"]:  # a machine caption, its own origin (most rows)
        changed, labels = "unchanged", []
    else:
        before = {"text": raw["_origin_text"], "labels": _json(raw["_origin_labels"]) or {}}
        changed, labels = (
            caption_history.change_kind(before, rec),
            caption_history.labels_changed(before["labels"], rec["labels"]),
        )
    human, truncated = caption_history.edits(db, rec["caption_id"]) if rec["source"] == "human" else ([], False)
    return {
        "simulated": bool(raw["_simulated"]) or bool(origin and origin["simulated"]),
        "origin": origin,
        "changed": changed,
        "labels_changed": labels,
        "edits": human,
        "edits_truncated": truncated,
    }


_ORDER = tuple(x.name for x in FIELDS)


def iter_rows(db: sqlite_utils.Database, f: Filter = Filter()) -> Iterator[dict[str, Any]]:
    """Matching clips with a current caption, as export records (FIELDS order), in id order, streamed."""
    sql, args = _select(f)
    cursor = db.execute(sql, args)
    names = [d[0] for d in cursor.description]
    for values in cursor:  # a cursor, never fetchall: constant memory
        raw = dict(zip(names, values))
        rec = _decoded(raw, _READ)
        computed = _lineage_fields(db, raw, rec)
        # what leaves the workbench holds no invisible or bidi character, also in rows stored before saves dropped
        # them (limits.CONTROLS): the export's CSV and JSONL, and a release's files, are made from these records
        yield limits.visible({name: rec[name] if name in rec else computed[name] for name in _ORDER})


def csv_header() -> list[str]:
    """The CSV columns: FIELDS flattened (labels to label_<name>, origin to origin_<field>)."""
    out: list[str] = []
    for x in FIELDS:
        if x.name == "labels":
            out += [f"label_{name}" for name in taxonomy.ENUMS]
        elif x.name == "origin":
            out += [f"origin_{o.name}" for o in ORIGIN_FIELDS]
        else:
            out.append(x.name)
    return out


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_CONTROLS_LEFT = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what json.dumps leaves unescaped


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet will not run and a terminal will not act on: NUL and the controls a reader
    cannot see (ESC, BEL, BS, bidi overrides: limits.CONTROLS, also in rows stored before saves dropped them)
    removed, and a leading =, +, -, @, tab or CR (formula triggers in Excel, LibreOffice and Sheets) escaped with
    a leading apostrophe (OWASP's advice)."""
    if not isinstance(value, str):
        return value
    value = limits.CONTROLS.sub("", value.replace("\x00", ""))
    return "'" + value if value.startswith(FORMULA_START) else value


def _escaped(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def jsonl_line(row: dict) -> str:
    """One record as a JSON Lines line (with its newline): what the export and a release's split files write.
    JSON escapes C0 controls itself; DEL, C1 and the bidi controls are written as \\u
    escapes too, so the record holds the same value and a terminal that shows it acts on none of them."""
    return _CONTROLS_LEFT.sub(_escaped, json.dumps(row, ensure_ascii=False, allow_nan=False)) + "\n"


def _flat(value: Any) -> Any:
    if isinstance(value, bool):  # as the JSON Lines spell it: a reader of both sees one vocabulary
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ";".join(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


def _csv_row(row: dict) -> list[Any]:
    flat = {k: v for k, v in row.items() if k not in ("labels", "origin")}
    flat.update({f"label_{k}": v for k, v in row["labels"].items()})
    flat.update({f"origin_{k}": v for k, v in (row["origin"] or {}).items()})
    out = []
    for col in csv_header():
        v = _flat(flat.get(col))
        out.append("" if v is None else csv_cell(v))
    return out


def export(db: sqlite_utils.Database, f: Filter | None, fmt: str, out: TextIO) -> int:
    """Write matching current captions to `out` in `fmt` ('jsonl' | 'csv'). Returns the row count."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    n = 0
    rows = iter_rows(db, f or Filter())
    if fmt == "jsonl":
        for row in rows:
            out.write(jsonl_line(row))
            n += 1
    else:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(csv_header())
        for row in rows:
            w.writerow(_csv_row(row))
            n += 1
    return n


def build_parser() -> argparse.ArgumentParser:
    """The command line: the format, where to write, the library, and the clip filter (data.filter_args)."""
    from data import settings as settings_mod

    parser = argparse.ArgumentParser(
        prog="python -m data.export",
        description="Export current captions with labels and lineage (streamed, constant memory). The fields "
        "are described in the README and by --schema.",
        epilog="examples:\n"
        "  python -m data.export --db var/workbench.db --format jsonl --status approved > approved.jsonl\n"
        "  python -m data.export --schema > export.schema.json\n"
        "  python -m data.export --data-dir var --format csv --hazard-level high --weather rain > rainy.csv\n"
        "  python -m data.export --db var/workbench.db --text pedestrian --source human > ped.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--format", choices=FORMATS, default="jsonl", help="output format (default jsonl)")
    parser.add_argument("--output", "-o", help="write here instead of standard output")
    parser.add_argument("--schema", action="store_true", help="print the JSON Schema of a JSONL record and exit")
    settings_mod.add_arguments(parser, ["data_dir", "db"])
    filter_args.add_arguments(parser.add_argument_group("which clips"))
    return parser


def main(argv: list[str] | None = None) -> int:
    from data import settings as settings_mod
    from data.db import connect

    args = build_parser().parse_args(argv)
    if args.schema:
        print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
        return 0
    s = settings_mod.from_args(args)
    try:
        f = filter_args.from_args(args)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not s.db.exists():
        print(f"error: no database at {s.db}", file=sys.stderr)
        return 2
    db = connect(s.db)
    try:
        if args.output:
            with open(args.output, "w", encoding="utf-8", newline="") as out:
                n = export(db, f, args.format, out)
        else:
            try:
                n = export(db, f, args.format, sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0
    finally:
        db.close()
    print(f"exported {n} captions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
