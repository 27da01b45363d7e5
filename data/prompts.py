"""Versioned prompts. A prompt is never edited in place: a change is a new (name, version) row, so every
caption can name exactly what it was asked (a trigger refuses updates and deletes, m017). `ensure_presets`
installs the shipped presets (idempotent).

A new version (`create_version`, which the Jobs tab's prompt editor calls for a lead) is checked before it is
saved (`schema_problems`), so that it can run and be compared:
- its schema has no check whose cost on an answer is more than linear (the runner checks every answer against
  it): no `patternProperties` or `format` (data.taxonomy's COSTLY_CHECKS), and only `pattern`s that RE2 matches in
  linear time, at any depth, under any keyword of any draft (data.schema_keywords); it declares no `$schema` but
  JSON Schema drafts 4, 6, 7, 2019-09 or 2020-12;
- its schema has none of the keywords the fleet's structured-output backend refuses (data.taxonomy's
  GRAMMAR_UNSUPPORTED: vLLM 0.25 with xgrammar answers every request that carries one with HTTP 400, recorded in
  tests/recordings/vllm-0.25.0-answers.json), and it is a valid JSON Schema;
- its answers are the taxonomy's labels: an object of exactly `caption` (text) and every label of
  data.taxonomy.ENUMS, all required, no other property, each label's values a non-empty subset of the
  taxonomy's (a version may narrow a label's choices, never rename or add one), so its captions can be reviewed
  in the same form and compared label by label with any other version's (data.quality.prompt_compare).
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import sqlite_utils

from data import limits, schema_keywords, taxonomy
from data.db import immediate, now
from data.errors import InvalidPrompt, NotFound

HAZARD_SYSTEM = (
    "You are an expert annotator of dashcam and autonomous-vehicle camera footage. You watch a short clip "
    "recorded from the ego vehicle and describe it for a safety team that searches footage for hazardous "
    "scenarios. Be factual: describe only what is visible. Never guess identities or read licence plates."
)
HAZARD_USER = (
    "Watch the clip from the ego vehicle's forward camera. Answer with one JSON object:\n"
    "- caption: 100 to 200 words. What the ego vehicle does, the other road users and what they do, "
    "the road layout, any hazard and how it develops over time, and how it resolves.\n"
    "- scenario_category: the single category that best describes the most safety-relevant event.\n"
    "- hazard_level: none, low, medium, high or critical, judged by how close the ego vehicle came to harm.\n"
    "- road_users: every kind of road user that is visible.\n"
    "- ego_maneuver, weather, lighting, road_type: as observed; 'unknown' where it cannot be seen."
)

# v2: the camera is named per clip ("{camera}", filled by `render_user`), and the stored schema is the form every
# structured-output backend compiles (xgrammar refuses v1's `uniqueItems`: HTTP 400 for every request).
HAZARD_USER_V2 = HAZARD_USER.replace("the ego vehicle's forward camera", "the ego vehicle's {camera}")
CAMERA_PLACEHOLDER = "{camera}"

PRESETS: tuple[dict[str, Any], ...] = (
    {
        "name": "av-hazard",
        "version": 1,
        "description": "AV hazard taxonomy + 100-200 word caption",
        "system": HAZARD_SYSTEM,
        "user": HAZARD_USER,
        "schema": taxonomy.CAPTION_SCHEMA,
    },
    {
        "name": "av-hazard",
        "version": 2,
        "description": "AV hazard taxonomy + 100-200 word caption; names the clip's camera; backend-safe schema",
        "system": HAZARD_SYSTEM,
        "user": HAZARD_USER_V2,
        "schema": taxonomy.model_schema(taxonomy.CAPTION_SCHEMA),
    },
)
DEFAULT_PROMPT = "av-hazard"

# camera ids (sidecar "camera", or a path part) -> how the prompt names them
CAMERA_PHRASES = {
    "front_center": "forward-facing centre camera",
    "front_wide": "forward-facing wide-angle camera",
    "front": "forward camera",
    "rear": "rear-facing camera (looking backwards: vehicles behind approach the ego vehicle)",
    "back": "rear-facing camera (looking backwards: vehicles behind approach the ego vehicle)",
    "left_repeater": "left side-repeater camera (looking backwards along the ego vehicle's left side)",
    "right_repeater": "right side-repeater camera (looking backwards along the ego vehicle's right side)",
    "left_pillar": "left B-pillar camera (looking sideways to the left)",
    "right_pillar": "right B-pillar camera (looking sideways to the right)",
}
DEFAULT_CAMERA_PHRASE = "forward camera"


def camera_of(path: str, sidecar: dict | str | None) -> str | None:
    """The clip's camera id: the sidecar's "camera" if it names a known camera, else a known camera name in the
    path ("R012/rear_0001.mp4" -> "rear"), else None. Only known ids come back: sidecar text never reaches the
    prompt."""
    if isinstance(sidecar, str):
        try:
            sidecar = json.loads(sidecar)
        except ValueError:
            sidecar = None
    if isinstance(sidecar, dict):
        cam = str(sidecar.get("camera") or "").strip().lower().replace("-", "_").replace(" ", "_")
        if cam in CAMERA_PHRASES:
            return cam
    words = [w for w in re.split(r"[^a-z0-9]+", path.lower()) if w]
    for size in (2, 1):  # "left_repeater" before "left"
        for i in range(len(words) - size + 1):
            cand = "_".join(words[i : i + size])
            if cand in CAMERA_PHRASES:
                return cand
    return None


def render_user(prompt: dict, camera: str | None) -> str:
    """The user text of `prompt` for one clip: `{camera}` becomes the camera's phrase (the forward camera when
    unknown). Prompts without the placeholder are sent as stored."""
    text = prompt.get("user") or ""
    if CAMERA_PLACEHOLDER not in text:
        return text
    return text.replace(CAMERA_PLACEHOLDER, CAMERA_PHRASES.get(camera or "", DEFAULT_CAMERA_PHRASE))


def _decode(row: dict) -> dict:
    row = dict(row)
    row["schema"] = json.loads(row["schema"])
    return row


MAX_NAME_CHARS = 64
MAX_PROMPT_CHARS = 20_000  # the system or the user text (the presets' are under 1,000)
MAX_SCHEMA_BYTES = 64 * 1024  # the taxonomy's schema is ~2 KiB
# what vLLM 0.25's xgrammar backend answered for a schema with a keyword it does not support (HTTP 400)
GRAMMAR_REFUSAL = "The provided JSON schema contains features not supported by xgrammar."
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def parse_schema(text: str) -> dict:
    """A schema as a person typed it (JSON text) -> a dict; InvalidPrompt saying where it cannot be read."""
    limits.check_text(text, MAX_SCHEMA_BYTES, "The schema")
    if not (text or "").strip():
        raise InvalidPrompt("Write the answer schema (JSON): start from the version you are changing.")
    if len(text.encode()) > MAX_SCHEMA_BYTES or not limits.json_depth_ok(text):
        raise InvalidPrompt(
            f"The schema is over {MAX_SCHEMA_BYTES // 1024} KiB or {limits.MAX_SIDECAR_DEPTH} levels deep."
        )
    try:
        schema = limits.strict_json_loads(text)
    except ValueError as e:
        raise InvalidPrompt(f"The schema is not JSON: {str(e)[:200]}.") from None
    if not isinstance(schema, dict):
        raise InvalidPrompt("The schema must be a JSON object.")
    return schema


def _has_key(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_has_key(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, key) for v in value)
    return False


def _label_problems(name: str, spec: Any) -> list[str]:
    allowed = taxonomy.ENUMS[name]
    multi = name in taxonomy.MULTI
    if not isinstance(spec, dict):
        return [f"{name}: must be a schema object."]
    if multi:
        if spec.get("type") != "array" or not isinstance(spec.get("items"), dict):
            return [f"{name}: must be a list (type array) of the taxonomy's values (items with an enum)."]
        spec = spec["items"]
    if spec.get("type") != "string" or not isinstance(spec.get("enum"), list):
        return [f"{name}: must be {'items of ' if multi else ''}type string with an enum of the taxonomy's values."]
    values = spec["enum"]
    if not values:
        return [f"{name}: offers no value at all."]
    outside = [str(v)[:40] for v in values if v not in allowed]
    if outside:
        verb = "is" if len(outside) == 1 else "are"
        return [f"{name}: {', '.join(outside)} {verb} not among its values ({', '.join(allowed)})."]
    return []


def schema_problems(schema: Any) -> list[str]:
    """What stops `schema` from being saved as a prompt version's answer schema, each in words with what to do
    (the module docstring says why); an empty list when it can be saved."""
    if not isinstance(schema, dict):
        return ["The schema must be a JSON object."]
    problems = []
    costly = taxonomy.costly_refusal(schema)
    if costly:
        problems.append(costly)
    draft = schema_keywords.declared_draft_problem(schema)
    if draft:
        return problems + [draft]
    refused = sorted(taxonomy.unsupported_features(schema))
    if refused:
        problems.append(
            f"The fleet's structured-output backend (xgrammar) refuses {', '.join(refused)}: vLLM would answer "
            f'every request with HTTP 400 "{GRAMMAR_REFUSAL}" Remove {"it" if len(refused) == 1 else "them"} '
            "(the answers are still checked against the taxonomy)."
        )
    try:
        schema_keywords.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        problems.append(f"This is not a valid JSON Schema: {e.message[:200]}.")
    if _has_key(schema, "$ref"):
        problems.append("Write every label inline: $ref is not followed here.")
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, dict):
        return problems + ['The answer must be an object ("type": "object") with "properties".']
    expected = ["caption", *taxonomy.ENUMS]
    missing = [k for k in expected if k not in props]
    extra = sorted(str(k)[:40] for k in props if k not in expected)
    if missing:
        problems.append(f"Missing properties: {', '.join(missing)} (every version answers with all of them).")
    if extra:
        problems.append(
            f"Properties that are not the taxonomy's: {', '.join(extra)} (answers must be comparable across "
            "versions: only caption and the labels)."
        )
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    optional = [k for k in expected if k in props and k not in required]
    if optional:
        problems.append(f'Not required: {", ".join(optional)} (add them to "required").')
    if schema.get("additionalProperties") is not False:
        problems.append('Set "additionalProperties": false, so that an answer holds nothing but the labels.')
    cap = props.get("caption")
    if "caption" in props and not (isinstance(cap, dict) and cap.get("type") == "string"):
        problems.append("caption: must be type string.")
    for name in taxonomy.ENUMS:
        if name in props:
            problems += _label_problems(name, props[name])
    return problems


def _check_text(value: str, limit: int, what: str, *, needed: bool = True) -> str:
    # no invisible or bidi character (limits.CONTROLS): hidden instructions to the model, text reordered for a reader
    value = limits.check_text((limits.plain_text(value) or "").strip(), limit, what)
    if needed and not value:
        raise InvalidPrompt(f"{what} is empty: write it (start from the version you are changing).")
    return value


def create_version(
    db: sqlite_utils.Database,
    *,
    name: str,
    system: str,
    user: str,
    schema: dict,
    description: str = "",
    actor: str = "system",
) -> dict:
    """Add the next version of prompt `name` (version 1 if new), after checking it: a name of letters, digits,
    `.`, `_` and `-`; a system and a user text; a schema without `schema_problems`. InvalidPrompt (or TooLarge)
    lists what to change; nothing is saved then."""
    from data import events

    name = (name or "").strip()
    if not (len(name) <= MAX_NAME_CHARS and _NAME.fullmatch(name)):
        raise InvalidPrompt(
            f"A prompt name is 1 to {MAX_NAME_CHARS} letters, digits, '.', '_' or '-', starting with a letter or "
            "a digit (e.g. av-hazard)."
        )
    system = _check_text(system, MAX_PROMPT_CHARS, "The system text")
    user = _check_text(user, MAX_PROMPT_CHARS, "The user text")
    description = _check_text(description, limits.MAX_NOTE_CHARS, "The description", needed=False)
    if len(json.dumps(schema, default=str)) > MAX_SCHEMA_BYTES:
        raise InvalidPrompt(f"The schema is over {MAX_SCHEMA_BYTES // 1024} KiB.")
    problems = schema_problems(schema)
    if problems:
        raise InvalidPrompt("This version cannot be saved: " + " ".join(problems))
    with immediate(db):
        version = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM prompts WHERE name = ?", [name]).fetchone()[0]
        pid = db.execute(
            "INSERT INTO prompts (name, version, description, system, user, schema, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [name, version, description, system, user, json.dumps(schema, sort_keys=True), now()],
        ).lastrowid
        events.record(db, actor, "prompt.create", name=name, version=version, prompt_id=pid)
    return get(db, pid)


def ensure_presets(db: sqlite_utils.Database) -> None:
    """Insert the shipped presets that are missing (by name and version)."""
    with immediate(db):
        for p in PRESETS:
            db.execute(
                "INSERT OR IGNORE INTO prompts (name, version, description, system, user, schema, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    p["name"],
                    p["version"],
                    p["description"],
                    p["system"],
                    p["user"],
                    json.dumps(p["schema"], sort_keys=True),
                    now(),
                ],
            )


def get(db: sqlite_utils.Database, prompt_id: int) -> dict:
    row = next(db.query("SELECT * FROM prompts WHERE id = ?", [prompt_id]), None)
    if row is None:
        raise NotFound(f"prompt {prompt_id} does not exist")
    return _decode(row)


def latest(db: sqlite_utils.Database, name: str = DEFAULT_PROMPT) -> dict:
    """The newest version of prompt `name`. A shipped preset newer than what the database holds is installed
    first, so an existing library moves to a new preset version (v1 -> v2) without anyone editing a prompt."""
    row = next(db.query("SELECT * FROM prompts WHERE name = ? ORDER BY version DESC LIMIT 1", [name]), None)
    shipped = max((p["version"] for p in PRESETS if p["name"] == name), default=None)
    if shipped is not None and (row is None or row["version"] < shipped):
        ensure_presets(db)
        return latest(db, name)
    if row is None:
        raise NotFound(f"no prompt named {name!r}")
    return _decode(row)


def list_prompts(db: sqlite_utils.Database) -> list[dict]:
    return [_decode(r) for r in db.query("SELECT * FROM prompts ORDER BY name, version DESC")]
