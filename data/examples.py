"""Valid example values, shared by tests and benchmarks (which never import tests): labels that pass
data.taxonomy's checks, and the default prompt as a row."""

from __future__ import annotations

from data import prompts, taxonomy

# an uneventful clip
LABELS = {
    "scenario_category": "normal_driving",
    "hazard_level": "none",
    "road_users": ["car"],
    "ego_maneuver": "going_straight",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "urban",
}

# a hazardous one
HAZARD_LABELS = {
    "scenario_category": "pedestrian_crossing",
    "hazard_level": "high",
    "road_users": ["car", "pedestrian"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "daylight",
    "road_type": "urban",
}

# the preset prompt as a row of the prompts table (id 1), for callers without a database
PROMPT = {
    "id": 1,
    "name": "av-hazard",
    "version": 1,
    "system": prompts.HAZARD_SYSTEM,
    "user": prompts.HAZARD_USER,
    "schema": taxonomy.CAPTION_SCHEMA,
}
