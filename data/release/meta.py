"""What the trainers' tools read about a release before its rows (data.release.make):

- `header`: the Hugging Face YAML header that opens README.md, so that `datasets.load_dataset(DIR)` returns
  exactly the release's splits, by their own names, with their row counts (without it the library guesses splits
  from file names: it drops a split named `calib`, renames `val` to `validation`, and raises on an empty one).
  `configs` lists each split that holds clips with its Parquet file (one config reads one file type);
  `dataset_info` gives the features (from the Parquet files' Arrow schema, `features`), and `num_examples` and
  `num_bytes` (the Arrow data written) per split; `license` (`--license`; without it `other`, the team's own
  terms, which the card says), `task_categories`, `pretty_name` and `size_categories` (the Hub's buckets).
- `write`: `dataset_info.json`, LLaMA-Factory's registry of datasets (its data/README.md): one entry per split
  that holds clips, `NAME_SPLIT`, reading `messages/SPLIT.jsonl` in its sharegpt formatting with the role and
  content tags of the messages format and the `videos` column; the release folder is its `dataset_dir` (and so
  its `media_dir` unless one is given).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.release import card, files as release_files
from data.release.options import DEFAULT_LICENSE, Options

TASK = "video-text-to-text"
# the Hub's size buckets (upper bounds, exclusive), as its dataset cards name them
SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))
SIZES += ((10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))
TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}


def size_category(n: int) -> str:
    return next((name for bound, name in SIZES if n < bound), "n>1B")


def _dtype(t: Any) -> str:
    import pyarrow as pa

    names = {pa.int64(): "int64", pa.float64(): "float64", pa.string(): "string", pa.bool_(): "bool"}
    if t not in names:
        raise ValueError(f"no Hugging Face dtype for {t}")
    return names[t]


def features(schema: Any) -> list[dict]:
    """The Arrow schema of a release's Parquet files as the `features` of a Hugging Face header: a struct is
    `struct: [fields]`, a list `list: dtype` (or `list: [fields]` of structs), anything else `dtype`."""
    import pyarrow as pa

    def one(t: Any) -> dict:
        if pa.types.is_struct(t):
            return {"struct": [{"name": f.name, **one(f.type)} for f in t]}
        if pa.types.is_list(t):
            inner = one(t.value_type)
            return {"list": inner.get("dtype", inner.get("struct"))}
        return {"dtype": _dtype(t)}

    return [{"name": f.name, **one(f.type)} for f in schema]


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """A small YAML writer for the header: mappings and lists of mappings, scalars as JSON (valid YAML)."""
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out += [f"{pad}{k}:", *_yaml(v, indent + 2)]
            else:
                out.append(f"{pad}{k}: {json.dumps(v, ensure_ascii=False)}")
    else:
        for item in value:
            if isinstance(item, dict):
                first, *rest = _yaml(item, indent + 2)
                out += [f"{pad}- {first.lstrip()}", *rest]
            else:
                out.append(f"{pad}- {json.dumps(item, ensure_ascii=False)}")
    return out


def header(o: Options, version: int, tally: card.Tally, nbytes: dict[str, int]) -> str:
    """README.md's YAML header (the module docstring), ending with its closing `---` and a blank line."""
    schema, _ = release_files.arrow_schema()
    held = [s for s in tally.splits if tally.n[s]]
    meta = {
        "license": o.license or DEFAULT_LICENSE,
        "task_categories": [TASK],
        "pretty_name": f"{o.name} v{version}",
        "size_categories": [size_category(tally.total)],
        "configs": [
            {"config_name": "default", "data_files": [{"split": s, "path": f"{s}.parquet"} for s in held]},
        ],
        "dataset_info": {
            "features": features(schema),
            "splits": [{"name": s, "num_bytes": nbytes.get(s, 0), "num_examples": tally.n[s]} for s in held],
            "dataset_size": sum(nbytes.get(s, 0) for s in held),
        },
    }
    return "---\n" + "\n".join(_yaml(meta)) + "\n---\n\n"


def llamafactory(o: Options, tally: card.Tally) -> dict:
    """LLaMA-Factory's dataset_info.json for the release (the module docstring)."""
    return {
        f"{o.name}_{s}": {
            "file_name": f"messages/{s}.jsonl",
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "videos": "videos"},
            "tags": {**TAGS, "system_tag": "system"},
        }
        for s in tally.splits
        if tally.n[s]
    }


def write(root: Path, o: Options, version: int, tally: card.Tally) -> None:
    """dataset_info.json into the release folder `root`."""
    text = json.dumps(llamafactory(o, tally), indent=2, ensure_ascii=False) + "\n"
    (root / "dataset_info.json").write_text(text, encoding="utf-8", newline="\n")
