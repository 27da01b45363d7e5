"""Versioned prompts. A prompt is never edited in place: a change is a new (name, version) row, so every
caption can name exactly what it was asked. `ensure_presets` installs the shipped presets (idempotent)."""

from __future__ import annotations

import json
import re
from typing import Any

import sqlite_utils

from data import taxonomy
from data.db import immediate, now
from data.errors import NotFound

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
# structured-output backend compiles (v1's `uniqueItems` made xgrammar refuse every request with HTTP 400).
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
    """Add the next version of prompt `name` (version 1 if new)."""
    from data import events

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
