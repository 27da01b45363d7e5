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
       "conversations": [
         {"from": "human", "value": "<video>\\n<the system text>\\n\\n<the user text, for this clip's camera>"},
         {"from": "gpt", "value": "{\\"caption\\": \\"...\\", \\"scenario_category\\": \\"...\\", ...}"}]}

  Qwen's reader (`_build_messages`) maps `human` to the user role and anything else to the assistant, and has no
  system message of its own: the fleet's system text can only reach the model inside the human turn, so it is
  there, before the user text the runner sent (data.prompts.render_user for the clip's camera). The gpt turn is
  the released caption as the model answers it: one JSON object of `caption` and every label
  (data.taxonomy.CAPTION_SCHEMA). `SFT_ITEM_SCHEMA` is this shape as a JSON Schema.
- `messages/<split>.jsonl`: the same examples in the messages format that ms-swift reads as its standard format
  and LLaMA-Factory reads through the release's dataset_info.json (data.release.meta), one JSON object per
  line: `{"clip_id", "videos": [path], "simulated", "prompt", "messages": [{"role": "system", "content": the
  system text}, {"role": "user", "content": "<video>\\n" + the user text}, {"role": "assistant", "content": the
  answer}]}` (no system message when the prompt version has no system text). `MESSAGES_ITEM_SCHEMA`.

Placeholders. The trainers count `<video>`, `<image>` and `<audio>` in the turns against the media an item
carries (LLaMA-Factory over every turn, Qwen's reader over the user turns), so one typed into a caption or a
prompt would break the item. An answer is JSON, where `<` may be written `\\u003c`: every `<` in it is (the JSON
decodes to the very same caption). A prompt's system and user text are plain text: a placeholder typed there is
written with full-width brackets (`＜video＞`), and the card says so (`neutralise`).
`video` and the paths are relative to the clip root (Qwen's `data_path`), or with `--media copy|link` to the
release (`media/...`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from data import export, taxonomy

ROW_GROUP = 5_000  # parquet rows per row group (and records held before one is written)
VIDEO_TAG = "<video>"
PLACEHOLDERS = ("<video>", "<image>", "<audio>")  # what LLaMA-Factory, ms-swift and Qwen's reader count

SFT_ITEM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "One training example of sft/<split>.json (Qwen-VL fine-tuning's conversation format)",
    "type": "object",
    "properties": {
        "clip_id": {"type": "integer"},
        "video": {"type": "string", "description": "the clip, relative to the clip root"},
        "simulated": {"type": "boolean"},
        "prompt": {"type": "string", "description": "the prompt version: NAME vVERSION"},
        "conversations": {
            "type": "array",
            "prefixItems": [
                {
                    "type": "object",
                    "properties": {
                        "from": {"const": "human"},
                        "value": {"type": "string", "pattern": "^<video>\\n(?![\\s\\S]*<(video|image|audio)>)"},
                    },
                    "required": ["from", "value"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"from": {"const": "gpt"}, "value": {"type": "string", "pattern": "^[^<]*$"}},
                    "required": ["from", "value"],
                    "additionalProperties": False,
                },
            ],
            "minItems": 2,
            "maxItems": 2,
        },
    },
    "required": ["clip_id", "video", "simulated", "prompt", "conversations"],
    "additionalProperties": False,
}

MESSAGES_ITEM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "One training example of messages/<split>.jsonl (ms-swift's standard format; LLaMA-Factory sharegpt)",
    "type": "object",
    "properties": {
        "clip_id": {"type": "integer"},
        "videos": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1},
        "simulated": {"type": "boolean"},
        "prompt": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 2,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"role": {"enum": ["system", "user", "assistant"]}, "content": {"type": "string"}},
                "required": ["role", "content"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["clip_id", "videos", "simulated", "prompt", "messages"],
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


def neutralise(text: str) -> str:
    """Plain prompt text with each placeholder a trainer counts written with full-width brackets."""
    for tag in PLACEHOLDERS:
        if tag in text:
            text = text.replace(tag, "\uff1c" + tag[1:-1] + "\uff1e")
    return text


def answer(record: dict) -> str:
    """The released caption as the model answers: one JSON object, `caption` then the labels in taxonomy order,
    with every `<` written `\\u003c` (the same JSON value; no placeholder can be read in it)."""
    labels = record["labels"] or {}
    out = {"caption": record["text"]}
    out.update({name: labels.get(name) for name in taxonomy.ENUMS if name in labels})
    out.update({k: v for k, v in labels.items() if k not in out})
    return json.dumps(out, ensure_ascii=False).replace("<", "\\u003c")


def human_turn(system: str, user: str) -> str:
    """Qwen's human turn: the video, then the system text (its reader has no system message), then the user text."""
    system, user = neutralise(system), neutralise(user)
    return f"{VIDEO_TAG}\n{system}\n\n{user}" if system.strip() else f"{VIDEO_TAG}\n{user}"


def sft_item(record: dict, prompt_name: str, system: str, user: str) -> dict:
    """One Qwen SFT example (the shape in the module docstring) for an export record and the rendered prompt."""
    return {
        "clip_id": record["clip_id"],
        "video": record["path"],
        "simulated": record["simulated"],
        "prompt": prompt_name,
        "conversations": [
            {"from": "human", "value": human_turn(system, user)},
            {"from": "gpt", "value": answer(record)},
        ],
    }


def messages_item(record: dict, prompt_name: str, system: str, user: str) -> dict:
    """One example of messages/<split>.jsonl (ms-swift, LLaMA-Factory) for an export record and the prompt."""
    turns = [{"role": "system", "content": neutralise(system)}] if system.strip() else []
    turns += [
        {"role": "user", "content": f"{VIDEO_TAG}\n{neutralise(user)}"},
        {"role": "assistant", "content": answer(record)},
    ]
    return {
        "clip_id": record["clip_id"],
        "videos": [record["path"]],
        "simulated": record["simulated"],
        "prompt": prompt_name,
        "messages": turns,
    }


_SFT = (
    '{"clip_id": %d, "video": %s, "simulated": %s, "prompt": %s, "conversations": '
    '[{"from": "human", "value": %s}, {"from": "gpt", "value": %s}]}'
)
_MESSAGES = (
    '{"clip_id": %d, "videos": [%s], "simulated": %s, "prompt": %s, "messages": '
    '[%s{"role": "user", "content": %s}, {"role": "assistant", "content": %s}]}'
)


def encoded_prompt(prompt_name: str, system: str, user: str) -> tuple[str, str, str, str]:
    """The JSON text of an item's prompt parts, made once per prompt version and camera (`sft_json`,
    `messages_json`): the name, Qwen's human turn, the system message (with its separator; empty without system
    text) and the messages' user turn."""
    dumps = json.dumps
    system_turn = (
        '{"role": "system", "content": %s}, ' % dumps(neutralise(system), ensure_ascii=False) if system.strip() else ""
    )
    return (
        dumps(prompt_name, ensure_ascii=False),
        dumps(human_turn(system, user), ensure_ascii=False),
        system_turn,
        dumps(f"{VIDEO_TAG}\n{neutralise(user)}", ensure_ascii=False),
    )


def sft_json(record: dict, prompt: tuple[str, str, str, str], path: str, answer_json: str) -> str:
    """`json.dumps(sft_item(...), ensure_ascii=False)`, with the prompt's parts encoded once (`encoded_prompt`) and
    the record's path and answer encoded once for both files: the same 1-2 KB of prompt text on every item is most
    of an SFT file."""
    return _SFT % (
        record["clip_id"],
        path,
        "true" if record["simulated"] else "false",
        prompt[0],
        prompt[1],
        answer_json,
    )


def messages_json(record: dict, prompt: tuple[str, str, str, str], path: str, answer_json: str) -> str:
    """`json.dumps(messages_item(...), ensure_ascii=False)`, made as `sft_json` is."""
    return _MESSAGES % (
        record["clip_id"],
        path,
        "true" if record["simulated"] else "false",
        prompt[0],
        prompt[2],
        prompt[3],
        answer_json,
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
    """The open files of one split: `<split>.jsonl`, `<split>.parquet`, `sft/<split>.json` and
    `messages/<split>.jsonl` under `root`."""

    def __init__(self, root: Path, split: str, schema: Any, to_row: Callable[[dict], dict]):
        import pyarrow.parquet as pq

        self.split, self.n = split, 0
        self.jsonl = open(root / f"{split}.jsonl", "w", encoding="utf-8", newline="\n")
        self.sft = open(root / "sft" / f"{split}.json", "w", encoding="utf-8", newline="\n")
        self.messages = open(root / "messages" / f"{split}.jsonl", "w", encoding="utf-8", newline="\n")
        self.sft.write("[")
        self.schema, self.to_row = schema, to_row
        self.parquet = pq.ParquetWriter(root / f"{split}.parquet", schema)
        self.rows: list[dict] = []
        self.nbytes = 0  # the Arrow data written (what a Hugging Face header's num_bytes counts)

    def add(self, record: dict, item: str, messages: str) -> None:
        """Write one record, its SFT item and its messages item as JSON text (`sft_json`, `messages_json`)."""
        self.jsonl.write(export.jsonl_line(record))
        self.sft.write(("\n" if not self.n else ",\n") + item)
        self.messages.write(messages + "\n")
        self.rows.append(self.to_row(record))
        self.n += 1
        if len(self.rows) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.rows:
            table = pa.Table.from_pylist(self.rows, schema=self.schema)
            self.nbytes += table.nbytes
            self.parquet.write_table(table)
            self.rows = []

    def close(self) -> None:
        self._flush()
        self.parquet.close()
        self.jsonl.close()
        self.messages.close()
        self.sft.write("\n]\n" if self.n else "]\n")
        self.sft.close()
