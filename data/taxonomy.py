"""The fixed label taxonomy of a driving clip, and the JSON schema the model must answer in.

One source for the structured-output schema sent to vLLM, the editable form in the web app, the facet
columns of `clips`, and validation of human edits.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from data import schema_keywords
from data.errors import InvalidLabels

SCENARIO_CATEGORIES = (
    "normal_driving",
    "pedestrian_crossing",
    "cyclist_interaction",
    "vehicle_cut_in",
    "hard_braking",
    "intersection_conflict",
    "lane_change",
    "merge",
    "road_obstruction",
    "construction_zone",
    "emergency_vehicle",
    "animal_on_road",
    "near_collision",
    "collision",
    "traffic_violation",
    "other",
)
HAZARD_LEVELS = ("none", "low", "medium", "high", "critical")
ROAD_USERS = (
    "car",
    "truck",
    "bus",
    "motorcycle",
    "bicycle",
    "pedestrian",
    "animal",
    "emergency_vehicle",
    "construction_equipment",
    "other",
)
EGO_MANEUVERS = (
    "going_straight",
    "turning_left",
    "turning_right",
    "lane_change_left",
    "lane_change_right",
    "merging",
    "slowing",
    "stopped",
    "reversing",
    "parking",
    "accelerating",
)
WEATHER = ("clear", "cloudy", "rain", "snow", "fog", "unknown")
LIGHTING = ("daylight", "dawn_dusk", "night_lit", "night_dark", "tunnel", "unknown")
ROAD_TYPES = ("highway", "urban", "residential", "rural", "intersection", "parking_lot", "tunnel", "bridge", "unknown")

# label name -> allowed values; road_users is a list, the others single values
ENUMS: dict[str, tuple[str, ...]] = {
    "scenario_category": SCENARIO_CATEGORIES,
    "hazard_level": HAZARD_LEVELS,
    "road_users": ROAD_USERS,
    "ego_maneuver": EGO_MANEUVERS,
    "weather": WEATHER,
    "lighting": LIGHTING,
    "road_type": ROAD_TYPES,
}
MULTI = {"road_users"}

# label -> column of `clips` that holds the current caption's value, for fast filtering
FACETS = {
    "scenario_category": "scenario",
    "hazard_level": "hazard_level",
    "weather": "weather",
    "lighting": "lighting",
    "road_type": "road_type",
}

LABELS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        name: (
            {"type": "array", "items": {"type": "string", "enum": list(values)}, "uniqueItems": True}
            if name in MULTI
            else {"type": "string", "enum": list(values)}
        )
        for name, values in ENUMS.items()
    },
    "required": list(ENUMS),
    "additionalProperties": False,
}

# What the model answers: the free-text caption plus the labels, in one JSON object.
CAPTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        # 100-200 words are ~600-1,400 characters; the bound also stops a runaway generation early
        "caption": {"type": "string", "minLength": 1, "maxLength": 1500},
        **LABELS_SCHEMA["properties"],
    },
    "required": ["caption", *ENUMS],
    "additionalProperties": False,
}


# What vLLM 0.25's xgrammar backend refuses with HTTP 400 "The provided JSON schema contains features not
# supported by xgrammar." (measured on an H200; docs/GPU.md). Other backends accept less or more; the model is
# only ever sent a schema without these, and the stricter checks (uniqueItems, ...) run in our validation.
GRAMMAR_UNSUPPORTED = frozenset(
    {
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "multipleOf",
    }
)
# What the runner does not check on an answer, or not in bounded time: `patternProperties` names are matched inside
# jsonschema's own `unevaluatedProperties` with Python's backtracking `re` (data.schema_keywords matches `pattern`,
# `patternProperties` and `additionalProperties` with RE2, not that one), and a `format` is checked, when it is,
# by expressions of the same kind. The labels are enums and the caption is free text, so a prompt version needs
# neither: data.prompts refuses them, and the runner sends no clip of a stored version that has one. `pattern`
# itself is matched in linear time and allowed (data.schema_keywords), unless RE2 cannot express it.
COSTLY_CHECKS = frozenset({"patternProperties", "format"})


def _walk_schema(schema: Any, visit) -> Any:
    """data.schema_keywords.walk: every keyword that holds a schema, in every draft."""
    return schema_keywords.walk(schema, visit)


def unsupported_features(schema: Any) -> set[str]:
    """The keywords of `schema` (at any depth) that the grammar backend refuses."""
    found: set[str] = set()

    def visit(s: dict) -> dict:
        found.update(GRAMMAR_UNSUPPORTED.intersection(s))
        return s

    _walk_schema(schema, visit)
    return found


def costly_features(schema: Any) -> set[str]:
    """The keywords of `schema` (at any depth) whose check on an answer the runner cannot bound (COSTLY_CHECKS)."""
    return schema_keywords.keywords_in(schema, COSTLY_CHECKS)


def costly_refusal(schema: Any) -> str | None:
    """Why a schema the runner cannot check in bounded time is refused, in words with what to do; None when it can
    be: no COSTLY_CHECKS keyword, and every `pattern` one that RE2 matches in linear time."""
    costly = sorted(costly_features(schema))
    problems = []
    if costly:
        problems.append(
            f"The schema uses {', '.join(costly)}: every answer is checked against the schema, and "
            f"{'it is' if len(costly) == 1 else 'they are'} matched by a regular expression that can take hours "
            "on one caption (Python's backtracks), stalling every job. The labels are enums and the caption is "
            f"free text: remove {'it' if len(costly) == 1 else 'them'} (save a new prompt version without)."
        )
    problems += schema_keywords.pattern_problems(schema)
    if problems and not costly:
        problems.append("Save a new prompt version without it.")
    return " ".join(problems) or None


def model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The form of `schema` that is sent to the model: every keyword the grammar backend refuses removed (the
    answer is still checked against the full `schema` by `split_answer`). Works on any stored prompt's schema,
    so libraries whose prompts predate this rule are not refused."""
    return _walk_schema(schema, lambda s: {k: v for k, v in s.items() if k not in GRAMMAR_UNSUPPORTED})


_VALIDATORS: dict[str, Any] = {}
_BY_OBJECT: dict[int, tuple[dict, Any]] = {}  # id(schema) -> (schema, validator): no serialisation per answer


def _validate(instance: Any, schema: dict[str, Any]) -> None:
    """`jsonschema.validate` with the validator built once per schema: `validate` re-checks the schema itself on
    every call (~2 ms for CAPTION_SCHEMA), which capped the runner at a few hundred results per second. The
    schema object a caller passes again is found by identity (serialising it to find its validator cost ~0.1 ms
    per answer); an equal schema in another object shares the validator through its JSON."""
    hit = _BY_OBJECT.get(id(schema))
    if hit is not None and hit[0] is schema:
        v = hit[1]
    else:
        key = json.dumps(schema, sort_keys=True)
        v = _VALIDATORS.get(key)
        if v is None:
            cls = schema_keywords.validator_for(schema)  # `pattern` in RE2: linear in the answer
            cls.check_schema(schema)
            v = _VALIDATORS[key] = cls(schema)
        if len(_BY_OBJECT) < 1024:  # prompts are few; a caller building a new dict per call is not cached
            _BY_OBJECT[id(schema)] = (schema, v)
    error = jsonschema.exceptions.best_match(v.iter_errors(instance))
    if error is not None:
        raise error


def validate_labels(labels: dict[str, Any]) -> dict[str, Any]:
    """Return `labels` if they fit the taxonomy, else raise InvalidLabels naming the first problem."""
    try:
        _validate(labels, LABELS_SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "labels"
        raise InvalidLabels(f"{where}: {e.message}") from None
    return labels


def split_answer(answer: dict[str, Any], schema: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Validate a model answer against `schema` (default CAPTION_SCHEMA); return (caption, labels).

    Multi-valued labels are de-duplicated first (order kept): grammar-constrained decoding (xgrammar) does not
    enforce `uniqueItems`, and "car, car" means "car"."""
    answer = {k: (list(dict.fromkeys(v)) if k in MULTI and isinstance(v, list) else v) for k, v in answer.items()}
    try:
        _validate(answer, schema or CAPTION_SCHEMA)
    except jsonschema.ValidationError as e:
        raise InvalidLabels(f"answer does not fit the schema: {e.message}") from None
    labels = {k: v for k, v in answer.items() if k != "caption"}
    return answer["caption"], labels


def labels_text(labels: dict[str, Any] | None) -> str:
    """Labels flattened to words for full-text search ("near_collision" -> "near collision")."""
    if not labels:
        return ""
    words = []
    for key in ENUMS:
        value = labels.get(key)
        for v in value if isinstance(value, list) else [value]:
            if v:
                words.append(str(v).replace("_", " "))
    return " ".join(words)


def facet_values(labels: dict[str, Any] | None) -> dict[str, Any]:
    """The facet columns of `clips` for a caption with these labels (None where absent)."""
    labels = labels or {}
    return {col: labels.get(name) for name, col in FACETS.items()}


def dumps(labels: dict[str, Any] | None) -> str:
    return json.dumps(labels or {}, sort_keys=True, ensure_ascii=False)
