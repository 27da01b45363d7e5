"""A machine caption's label confidence as stored, read back; split from data.captions, which writes it.

What the model thought of its labels, and whether the text agrees with them (issue 19, migration m014):
- `confidence` (a machine caption's provenance, JSON; NULL on human versions, on versions written before m014
  and when the job asked for no logprobs): `{"labels": {label: p or null}, "items": {list label: {value: p}},
  "end": {list label: p}}`. `labels[name]` is the model's probability of the value it generated for that label
  (for a list label: of exactly that list), read from vLLM's token logprobs by serving.logprobs; `items` the
  probability of each list item, `end` that the list ended where it did; `note` says why, when the logprobs
  could not be read (then every label is null). `confidence_of(row)` reads it as {label: p or None}.
- `conflicts` (every version, JSON list of sentences; [] when none): where the text and the labels disagree,
  found by data.consistency when the version is written.
The clip mirrors its current caption's lowest label confidence (`clips.confidence_min`) and its number of
conflicts (`clips.label_conflicts`), kept in step here like the facet columns: the risk order reads them.
"""

from __future__ import annotations

import json
from typing import Any

from data import taxonomy


def confidence_of(row: dict | None) -> dict[str, float | None]:
    """{label: the model's probability of its value} for a caption row (of `get`, or raw with `confidence` as
    stored): every taxonomy label, None where nothing is known (a human version, a caption written before
    confidence was recorded, a label whose logprobs could not be read)."""
    conf = (row or {}).get("confidence")
    if isinstance(conf, str):
        conf = json.loads(conf)
    labels = conf.get("labels") if isinstance(conf, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    return {name: _probability(labels.get(name)) for name in taxonomy.ENUMS}


def lowest_confidence(confidence: dict | None) -> float | None:
    """The lowest label probability of a stored confidence (what `clips.confidence_min` mirrors), None when no
    label has one."""
    found = [p for p in confidence_of({"confidence": confidence}).values() if p is not None]
    return min(found) if found else None


def _probability(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    return float(value) if ok else None
