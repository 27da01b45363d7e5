"""Rows without media for the data tests: a clip inserted by path (`add_clip`), and a full set of labels."""

from __future__ import annotations

from data.db import immediate

LABELS = {
    "scenario_category": "hard_braking",
    "hazard_level": "medium",
    "road_users": ["car"],
    "ego_maneuver": "slowing",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "urban",
}


def add_clip(db, path="a.mp4"):
    with immediate(db):
        return db.execute("INSERT INTO clips (path) VALUES (?)", [path]).lastrowid
