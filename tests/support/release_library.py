"""Libraries for the release tests, built through the real write paths (data.captions): clips in folders, with or
without a sidecar field to group by, captions of each hazard level, some edited by a person, some simulated, each
review state (approved, unreviewed, rejected, broken) and ingest failures."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from data import captions, review_states, taxonomy
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


def provenance(simulated: bool = False, **extra) -> dict:
    return {
        "model": "Qwen/Qwen3-VL-8B-Instruct" + (" (simulated)" if simulated else ""),
        "prompt_name": "av-hazard",
        "prompt_version": 2,
        "params": {"frames": 16},
        "frames": 16,
        "simulated": simulated,
        **extra,
    }


@dataclass
class ClipSpec:
    """One clip: its folder, its sidecar (None: none at all), its caption's hazard level, its review state, and
    whether its caption came from the simulated fleet, was edited by a person, or ingest failed."""

    folder: str
    sidecar: dict | None = None
    hazard: str = "none"
    status: str = "approved"  # approved | unreviewed | rejected | broken
    simulated: bool = False
    edited: bool = False
    failed: bool = False
    captioned: bool = True
    weather: str = "clear"


@dataclass
class Built:
    ids: list[int] = field(default_factory=list)
    specs: dict[int, ClipSpec] = field(default_factory=dict)


def build(db, specs: list[ClipSpec], *, start: int = 0) -> Built:
    """Insert `specs` as clips (paths FOLDER/clip_<i>.mp4) with captions and reviews; returns their ids."""
    out = Built()
    with immediate(db):
        for i, s in enumerate(specs, start):
            cur = db.execute(
                "INSERT INTO clips (path, sha256, duration, width, height, sidecar, probe_error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    f"{s.folder}/clip_{i:05d}.mp4" if s.folder else f"clip_{i:05d}.mp4",
                    f"{i:064x}",
                    4.0,
                    640,
                    360,
                    None if s.sidecar is None else json.dumps(s.sidecar),
                    "truncated: moov box missing" if s.failed else None,
                ],
            )
            out.ids.append(cur.lastrowid)
            out.specs[cur.lastrowid] = s
    for cid, s in out.specs.items():
        if not s.captioned:
            continue
        labels = {**LABELS, "hazard_level": s.hazard, "weather": s.weather}
        cap, _ = captions.add_machine(
            db,
            cid,
            job_id=None,
            text=f"Clip {cid}: the ego vehicle slows.",
            labels=labels,
            provenance=provenance(s.simulated),
        )
        if s.edited:
            other = next(w for w in taxonomy.WEATHER if w != s.weather)
            cap = captions.save_human(
                db,
                cid,
                text=f"Clip {cid}: the ego vehicle slows for a truck.",
                labels={**labels, "weather": other},
                author="ann",
                base_caption_id=cap["id"],
            )
        if s.failed:
            continue
        if s.status in ("approved", "rejected"):
            review_states.set_review(db, cid, status=s.status, user="lead", base_caption_id=cap["id"])
        elif s.status == "broken":
            review_states.flag_broken(db, cid, user="ann", reason="black frames only")
    return out
