"""Versioned prompts. A prompt is never edited in place: a change is a new (name, version) row, so every
caption can name exactly what it was asked. `ensure_presets` installs the shipped presets (idempotent)."""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from data import taxonomy
from data.db import NotFound, immediate, now

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

PRESETS: tuple[dict[str, Any], ...] = (
    {"name": "av-hazard", "version": 1, "description": "AV hazard taxonomy + 100-200 word caption",
     "system": HAZARD_SYSTEM, "user": HAZARD_USER, "schema": taxonomy.CAPTION_SCHEMA},
)
DEFAULT_PROMPT = "av-hazard"


def _decode(row: dict) -> dict:
    row = dict(row)
    row["schema"] = json.loads(row["schema"])
    return row


def create_version(db: sqlite_utils.Database, *, name: str, system: str, user: str, schema: dict,
                   description: str = "", actor: str = "system") -> dict:
    """Add the next version of prompt `name` (version 1 if new)."""
    from data import events

    with immediate(db):
        version = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM prompts WHERE name = ?",
                             [name]).fetchone()[0]
        pid = db.execute("INSERT INTO prompts (name, version, description, system, user, schema, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [name, version, description, system, user, json.dumps(schema, sort_keys=True),
                          now()]).lastrowid
        events.record(db, actor, "prompt.create", name=name, version=version, prompt_id=pid)
    return get(db, pid)


def ensure_presets(db: sqlite_utils.Database) -> None:
    """Insert the shipped presets that are missing (by name and version)."""
    with immediate(db):
        for p in PRESETS:
            db.execute("INSERT OR IGNORE INTO prompts (name, version, description, system, user, schema, "
                       "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [p["name"], p["version"], p["description"], p["system"], p["user"],
                        json.dumps(p["schema"], sort_keys=True), now()])


def get(db: sqlite_utils.Database, prompt_id: int) -> dict:
    row = next(db.query("SELECT * FROM prompts WHERE id = ?", [prompt_id]), None)
    if row is None:
        raise NotFound(f"prompt {prompt_id} does not exist")
    return _decode(row)


def latest(db: sqlite_utils.Database, name: str = DEFAULT_PROMPT) -> dict:
    """The newest version of prompt `name` (installing the presets first if the table is empty)."""
    row = next(db.query("SELECT * FROM prompts WHERE name = ? ORDER BY version DESC LIMIT 1", [name]), None)
    if row is None and name in {p["name"] for p in PRESETS}:
        ensure_presets(db)
        return latest(db, name)
    if row is None:
        raise NotFound(f"no prompt named {name!r}")
    return _decode(row)


def list_prompts(db: sqlite_utils.Database) -> list[dict]:
    return [_decode(r) for r in db.query("SELECT * FROM prompts ORDER BY name, version DESC")]
