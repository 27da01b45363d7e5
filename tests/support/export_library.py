"""A small library for the export and filter tests: clips inserted as rows (no media), a machine caption, a
human one, an approved one and two clips with none (`populate`)."""

from __future__ import annotations

import json

from data import captions, review_states
from data.db import immediate

LABELS = {
    "scenario_category": "vehicle_cut_in",
    "hazard_level": "high",
    "road_users": ["car", "truck"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "night_lit",
    "road_type": "highway",
}
CALM = {**LABELS, "scenario_category": "normal_driving", "hazard_level": "none", "road_users": [], "weather": "clear"}


def make_clips(db, n, prefix="r"):
    with immediate(db):
        for i in range(n):
            db.execute(
                "INSERT INTO clips (path, sha256, duration, width, height, sidecar) VALUES (?, ?, ?, ?, ?, ?)",
                [f"{prefix}/clip_{i}.mp4", f"{i:064x}", 2.0, 160, 90, json.dumps({"camera": "front", "i": i})],
            )
    return [r["id"] for r in db.query("SELECT id FROM clips WHERE path LIKE ? ORDER BY id", [prefix + "/%"])]


def populate(db):
    ids = make_clips(db, 5)
    captions.add_machine(
        db,
        ids[0],
        job_id=None,
        text='A truck cuts in, "close" call, commas, and\nnewline.',
        labels=LABELS,
        provenance={"model": "m", "replica": "r0", "params": {"t": 0}, "simulated": True, "frames": 16},
    )
    captions.save_human(db, ids[1], text="Calm drive.", labels=CALM, author="ann", base_caption_id=None)
    cur = captions.add_machine(db, ids[2], job_id=None, text="Rainy cut-in.", labels=LABELS, provenance={"model": "m"})[
        0
    ]
    review_states.set_review(db, ids[2], status="approved", user="lead", base_caption_id=cur["id"])
    return ids  # ids[3], ids[4] have no caption
