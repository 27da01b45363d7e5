"""Export current captions with their labels and provenance, as JSON Lines or CSV, streamed.

    python -m data.export --db var/workbench.db --format jsonl --status approved > approved.jsonl

One row per clip that has a current caption and matches the filter (data.clips.Filter fields). Rows come
from a cursor in id order and are written as they arrive, so memory stays constant on a million clips.
`export(db, filter, fmt, out)` is what the web app calls for downloads.

Columns (CSV flattens `labels` to one column per label, lists joined with ';'; JSON Lines keeps them nested):
clip_id, path, sha256, duration, width, height, review_status, reviewed_by, reviewed_at, sidecar,
caption_id, version, text, labels, source, author, created_at, and the provenance fields of data.captions.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
from typing import Any, Iterator, TextIO

import sqlite_utils

from data import clips, taxonomy
from data.captions import PROVENANCE_FIELDS
from data.clips import Filter
from data.job_params import current_names

FORMATS = ("jsonl", "csv")
CLIP_COLUMNS = (
    "clip_id",
    "path",
    "sha256",
    "duration",
    "width",
    "height",
    "review_status",
    "reviewed_by",
    "reviewed_at",
    "sidecar",
)
CAPTION_COLUMNS = (
    "caption_id",
    "version",
    "text",
    "labels",
    "source",
    "author",
    "created_at",
    "job_id",
    *PROVENANCE_FIELDS,
)


def iter_rows(db: sqlite_utils.Database, f: Filter = Filter()) -> Iterator[dict[str, Any]]:
    """Matching clips with a current caption, joined with it, in id order, decoded."""
    where, args = clips._where(dataclasses.replace(f, has_caption=True))
    prov = ", ".join(f"k.{p}" for p in PROVENANCE_FIELDS)
    sql = (
        f"SELECT c.id AS clip_id, c.path, c.sha256, c.duration, c.width, c.height, c.review_status, "
        f"c.reviewed_by, c.reviewed_at, c.sidecar, k.id AS caption_id, k.version, k.text, k.labels, "
        f"k.source, k.author, k.created_at, k.job_id, {prov} "
        f"FROM clips c JOIN captions k ON k.id = c.current_caption_id "
        f"WHERE {' AND '.join(where)} ORDER BY c.id"
    )
    cursor = db.execute(sql, args)
    names = [d[0] for d in cursor.description]
    for values in cursor:  # a cursor, never fetchall: constant memory
        row = dict(zip(names, values))
        row["labels"] = json.loads(row["labels"]) if row["labels"] else {}
        # NaN/Infinity stored before ingest refused them become null: strict JSONL readers reject them
        row["sidecar"] = json.loads(row["sidecar"], parse_constant=lambda _: None) if row["sidecar"] else {}
        if row.get("params"):
            row["params"] = current_names(json.loads(row["params"]))
        row["simulated"] = bool(row.get("simulated"))
        yield row


def _csv_header() -> list[str]:
    return [
        *CLIP_COLUMNS,
        *(c for c in CAPTION_COLUMNS if c != "labels"),
        *(f"label_{name}" for name in taxonomy.ENUMS),
    ]


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet will not run: NUL bytes dropped, and a leading =, +, -, @, tab or CR
    (formula triggers in Excel, LibreOffice and Sheets) escaped with a leading apostrophe (OWASP's advice)."""
    if not isinstance(value, str):
        return value
    value = value.replace("\x00", "")
    return "'" + value if value.startswith(FORMULA_START) else value


def _csv_row(row: dict) -> list[Any]:
    out = []
    for col in _csv_header():
        if col.startswith("label_"):
            v = row["labels"].get(col[6:])
            v = ";".join(v) if isinstance(v, list) else v
        else:
            v = row.get(col)
            if isinstance(v, (dict, list)):
                v = json.dumps(v, sort_keys=True, ensure_ascii=False)
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
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n")
            n += 1
    else:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(_csv_header())
        for row in rows:
            w.writerow(_csv_row(row))
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    from data import settings as settings_mod
    from data.db import connect

    parser = argparse.ArgumentParser(
        prog="python -m data.export",
        description="Export current captions with labels and provenance (streamed, constant memory).",
        epilog="examples:\n"
        "  python -m data.export --db var/workbench.db --format jsonl --status approved > approved.jsonl\n"
        "  python -m data.export --data-dir var --format csv --hazard-level high --weather rain > rainy.csv\n"
        "  python -m data.export --db var/workbench.db --text pedestrian --source human > ped.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--format", choices=FORMATS, default="jsonl", help="output format (default jsonl)")
    parser.add_argument(
        "--status", dest="review_status", choices=("unreviewed", "approved", "rejected"), help="review status to export"
    )
    for name in ("scenario", "hazard_level", "weather", "lighting", "road_type"):
        parser.add_argument("--" + name.replace("_", "-"), dest=name, help=f"only clips whose {name} is this")
    parser.add_argument(
        "--source",
        dest="caption_source",
        choices=("model", "human"),
        help="only captions written by the model or by a human",
    )
    parser.add_argument("--job-id", dest="job_id", type=int, help="only clips of this captioning job")
    parser.add_argument("--text", help="full-text query over path, caption and labels")
    parser.add_argument("--include-missing", action="store_true", help="also clips whose file is gone")
    parser.add_argument("--output", "-o", help="write here instead of standard output")
    settings_mod.add_arguments(parser, ["data_dir", "db"])
    args = parser.parse_args(argv)
    s = settings_mod.from_args(args)
    f = Filter(
        **{
            k: getattr(args, k)
            for k in (
                "review_status",
                "scenario",
                "hazard_level",
                "weather",
                "lighting",
                "road_type",
                "caption_source",
                "job_id",
                "text",
            )
        },
        include_missing=args.include_missing,
    )
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
