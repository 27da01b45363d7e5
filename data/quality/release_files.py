"""The files of a release, one writer per split, each written as records stream by (constant memory):

- `manifest.jsonl`: one line per clip, in clip-id order: `split`, `clip_id`, `path` (relative to the clip root),
  `sha256` (of the clip's bytes), `caption_id` (the caption version released), `group` (what kept its clips in
  one split) and `simulated`. Written the same way for the same clips, byte for byte.
- `<split>.jsonl`: data.export's records (`export.iter_rows`, lineage included; docs/export.schema.json).
- `<split>.parquet`: the same records with a fixed Arrow schema made from the export's JSON Schema
  (`arrow_schema`): an object whose keys the schema closes (labels, origin, each edit) is a struct, an array a
  list, an object with free keys (sidecar, params, parts of confidence) JSON text. Written in row groups of
  ROW_GROUP records with pyarrow's ParquetWriter.
- `sft/<split>.json`: the conversation format of Qwen's own fine-tuning code (QwenLM/Qwen3-VL,
  qwen-vl-finetune/README.md "Custom Dataset Configuration"; read by qwenvl/data/data_processor.py, also
  JSONL there): a JSON array of items, one per clip,

      {"clip_id": 12, "video": "R012/front_center_0003.mp4", "simulated": false, "prompt": "av-hazard v2",
       "system": "<the prompt version's system text>",
       "conversations": [
         {"from": "human", "value": "<video>\\n<the prompt version's user text, for this clip's camera>"},
         {"from": "gpt", "value": "{\\"caption\\": \\"...\\", \\"scenario_category\\": \\"...\\", ...}"}]}

  `video` is relative to the clip root (Qwen's `data_path`). The human turn is what the runner asked the model
  (data.prompts.render_user for the clip's camera), the gpt turn the released caption as the model answers it:
  one JSON object of `caption` and every label (data.taxonomy.CAPTION_SCHEMA). Qwen's reader maps `human` to
  the user role and anything else to the assistant, so the prompt's system text cannot be a turn: it is the
  item's `system` (which Qwen's reader ignores), with `prompt`, `clip_id` and `simulated`.
  `SFT_ITEM_SCHEMA` is this shape as a JSON Schema; tests/test_release.py checks every item against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from data import export, taxonomy

ROW_GROUP = 5_000  # parquet rows per row group (and records held before one is written)
VIDEO_TAG = "<video>"

SFT_ITEM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "One training example of sft/<split>.json (Qwen-VL fine-tuning's conversation format)",
    "type": "object",
    "properties": {
        "clip_id": {"type": "integer"},
        "video": {"type": "string", "description": "the clip, relative to the clip root"},
        "simulated": {"type": "boolean"},
        "prompt": {"type": "string", "description": "the prompt version: NAME vVERSION"},
        "system": {"type": "string", "description": "the prompt version's system text (not a turn)"},
        "conversations": {
            "type": "array",
            "prefixItems": [
                {
                    "type": "object",
                    "properties": {
                        "from": {"const": "human"},
                        "value": {"type": "string", "pattern": "^<video>\\n"},
                    },
                    "required": ["from", "value"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"from": {"const": "gpt"}, "value": {"type": "string"}},
                    "required": ["from", "value"],
                    "additionalProperties": False,
                },
            ],
            "minItems": 2,
            "maxItems": 2,
        },
    },
    "required": ["clip_id", "video", "simulated", "prompt", "system", "conversations"],
    "additionalProperties": False,
}

MANIFEST_FIELDS = ("split", "clip_id", "path", "sha256", "caption_id", "group", "simulated")


def manifest_line(record: dict, split: str, group: str) -> str:
    """One manifest line for an export record."""
    row = {
        "split": split,
        "clip_id": record["clip_id"],
        "path": record["path"],
        "sha256": record["sha256"],
        "caption_id": record["caption_id"],
        "group": group,
        "simulated": record["simulated"],
    }
    return json.dumps(row, ensure_ascii=False) + "\n"


def answer(record: dict) -> str:
    """The released caption as the model answers: one JSON object, `caption` then the labels in taxonomy order."""
    labels = record["labels"] or {}
    out = {"caption": record["text"]}
    out.update({name: labels.get(name) for name in taxonomy.ENUMS if name in labels})
    out.update({k: v for k, v in labels.items() if k not in out})
    return json.dumps(out, ensure_ascii=False)


def sft_item(record: dict, prompt_name: str, system: str, user: str) -> dict:
    """One SFT example (the shape in the module docstring) for an export record and the rendered prompt."""
    return {
        "clip_id": record["clip_id"],
        "video": record["path"],
        "simulated": record["simulated"],
        "prompt": prompt_name,
        "system": system,
        "conversations": [
            {"from": "human", "value": f"{VIDEO_TAG}\n{user}"},
            {"from": "gpt", "value": answer(record)},
        ],
    }


_SFT = (
    '{"clip_id": %d, "video": %s, "simulated": %s, "prompt": %s, "system": %s, "conversations": '
    '[{"from": "human", "value": %s}, {"from": "gpt", "value": %s}]}'
)


def encoded_prompt(prompt_name: str, system: str, user: str) -> tuple[str, str, str]:
    """The JSON text of an item's prompt parts, made once per prompt version and camera (`sft_json`)."""
    return tuple(json.dumps(x, ensure_ascii=False) for x in (prompt_name, system, f"{VIDEO_TAG}\n{user}"))


def sft_json(record: dict, prompt: tuple[str, str, str]) -> str:
    """`json.dumps(sft_item(...), ensure_ascii=False)`, with the prompt's parts encoded once (`encoded_prompt`):
    the same 1-2 KB of prompt text on every item is most of an SFT file."""
    dumps = json.dumps
    return _SFT % (
        record["clip_id"],
        dumps(record["path"], ensure_ascii=False),
        "true" if record["simulated"] else "false",
        *prompt,
        dumps(answer(record), ensure_ascii=False),
    )


# -- parquet --------------------------------------------------------------------------------------------------


def _resolve(schema: dict, defs: dict) -> dict:
    if "$ref" in schema:
        return _resolve(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "oneOf" in schema:  # null or one other shape: the column is nullable anyway
        (other,) = [s for s in schema["oneOf"] if s.get("type") != "null"]
        return _resolve(other, defs)
    return schema


def _kind(schema: dict) -> str:
    if "enum" in schema or "const" in schema:
        return "string"
    t = schema.get("type")
    if isinstance(t, list):
        (t,) = [x for x in t if x != "null"]
    if t == "object":
        return "struct" if schema.get("properties") and schema.get("additionalProperties") is False else "json"
    return t


def _column(schema: dict, defs: dict) -> tuple[Any, Callable[[Any], Any] | None]:
    """(Arrow type, value converter) of one JSON Schema node; the converter is None where Arrow takes the JSON
    value as it is (pyarrow fills a struct from a dict by name, ignoring other keys), so that only the paths to
    JSON-text columns cost a Python step per record."""
    import pyarrow as pa

    schema = _resolve(schema, defs)
    kind = _kind(schema)
    if kind == "struct":
        parts = {name: _column(sub, defs) for name, sub in schema["properties"].items()}
        arrow = pa.struct([pa.field(n, t) for n, (t, _) in parts.items()])
        convert = {name: c for name, (_, c) in parts.items() if c is not None}
        if not convert:
            return arrow, None

        def struct(value: Any) -> Any:
            if value is None:
                return None
            out = dict(value)
            for name, c in convert.items():
                out[name] = c(value.get(name))
            return out

        return arrow, struct
    if kind == "array":
        item_type, item = _column(schema.get("items", {}), defs)
        if item is None:
            return pa.list_(item_type), None
        return pa.list_(item_type), lambda v: None if v is None else [item(x) for x in v]
    if kind == "json":
        return pa.string(), lambda v: None if v is None else json.dumps(v, ensure_ascii=False, sort_keys=True)
    simple = {"integer": pa.int64(), "number": pa.float64(), "string": pa.string(), "boolean": pa.bool_()}
    return simple[kind], None


def arrow_schema() -> tuple[Any, Callable[[dict], dict]]:
    """(the Arrow schema of a release's parquet files, record -> row converter), made from the export's JSON
    Schema (data.export.json_schema), so a new export field reaches the parquet files without an edit here."""
    import pyarrow as pa

    spec = export.json_schema()
    defs = spec["$defs"]
    cols = {name: _column(sub, defs) for name, sub in spec["properties"].items()}
    convert = {name: c for name, (_, c) in cols.items() if c is not None}

    def row(record: dict) -> dict:
        out = dict(record)
        for name, c in convert.items():
            out[name] = c(record.get(name))
        return out

    return pa.schema([pa.field(n, t) for n, (t, _) in cols.items()]), row


class SplitFiles:
    """The open files of one split: `<split>.jsonl`, `<split>.parquet` and `sft/<split>.json` under `root`."""

    def __init__(self, root: Path, split: str, schema: Any, to_row: Callable[[dict], dict]):
        import pyarrow.parquet as pq

        self.split, self.n = split, 0
        self.jsonl = open(root / f"{split}.jsonl", "w", encoding="utf-8", newline="\n")
        self.sft = open(root / "sft" / f"{split}.json", "w", encoding="utf-8", newline="\n")
        self.sft.write("[")
        self.schema, self.to_row = schema, to_row
        self.parquet = pq.ParquetWriter(root / f"{split}.parquet", schema)
        self.rows: list[dict] = []

    def add(self, record: dict, item: str) -> None:
        """Write one record, and its SFT item as JSON text (`sft_json`)."""
        self.jsonl.write(export.jsonl_line(record))
        self.sft.write(("\n" if not self.n else ",\n") + item)
        self.rows.append(self.to_row(record))
        self.n += 1
        if len(self.rows) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.rows:
            self.parquet.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> None:
        self._flush()
        self.parquet.close()
        self.jsonl.close()
        self.sft.write("\n]\n" if self.n else "]\n")
        self.sft.close()
