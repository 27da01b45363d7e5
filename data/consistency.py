"""Do a caption's text and its labels agree? A cheap check from the taxonomy, run when a caption is stored.

`conflicts(text, labels)` lists each disagreement it finds, e.g. the text names a pedestrian but `road_users`
lacks it, or the text says night but `lighting` is daylight. data.captions stores the list with every version
(`captions.conflicts`) and mirrors its length onto the clip (`clips.label_conflicts`), which the risk order of
the review queue (data.order) puts first within a hazard level.

How: `SYNONYMS` holds, per label, the words that name its values (a word may name several: "night" is
night_lit or night_dark). The text is read once, word by word, each word (and each pair of words, which wins)
looked up in one table of every phrase with a plural s/es allowed, so the check is linear in the text and
matches whole words only ("card" is not a car). A mention within three words after a negation ("no
pedestrians", "without rain") does not count.
- A list label (road users): each value the text names must be in the list.
- A single label: a conflict when the text names values of the label, none of them is the label's value, and
  the text names nothing that supports the label's value ("clear skies after the rain" supports clear).
It finds contradictions a person would call obvious, not every one: it is a ranking signal, not a judgement.
"""

from __future__ import annotations

import re
from typing import Any

from data import taxonomy

# label -> {phrase: values it names}. Phrases are one or two lower-case words.
SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "road_users": {
        "pedestrian": ("pedestrian",),
        "person": ("pedestrian",),
        "people": ("pedestrian",),
        "walker": ("pedestrian",),
        "jaywalker": ("pedestrian",),
        "child": ("pedestrian",),
        "children": ("pedestrian",),
        "cyclist": ("bicycle",),
        "bicycle": ("bicycle",),
        "bicyclist": ("bicycle",),
        "bike": ("bicycle",),
        "motorcycle": ("motorcycle",),
        "motorcyclist": ("motorcycle",),
        "motorbike": ("motorcycle",),
        "scooter": ("motorcycle",),
        "truck": ("truck",),
        "lorry": ("truck",),
        "semi truck": ("truck",),
        "bus": ("bus",),
        "coach": ("bus",),
        "car": ("car",),
        "sedan": ("car",),
        "taxi": ("car",),
        "animal": ("animal",),
        "dog": ("animal",),
        "deer": ("animal",),
        "cat": ("animal",),
        "horse": ("animal",),
        "cow": ("animal",),
        "emergency vehicle": ("emergency_vehicle",),
        "ambulance": ("emergency_vehicle",),
        "fire truck": ("emergency_vehicle",),
        "fire engine": ("emergency_vehicle",),
        "police car": ("emergency_vehicle",),
        "construction equipment": ("construction_equipment",),
        "construction vehicle": ("construction_equipment",),
        "excavator": ("construction_equipment",),
        "bulldozer": ("construction_equipment",),
        "road roller": ("construction_equipment",),
    },
    "lighting": {
        "daylight": ("daylight",),
        "daytime": ("daylight",),
        "sunlight": ("daylight",),
        "sunny": ("daylight",),
        "dawn": ("dawn_dusk",),
        "dusk": ("dawn_dusk",),
        "twilight": ("dawn_dusk",),
        "sunset": ("dawn_dusk",),
        "sunrise": ("dawn_dusk",),
        "night": ("night_lit", "night_dark"),
        "nighttime": ("night_lit", "night_dark"),
        "darkness": ("night_dark", "tunnel"),
        "streetlight": ("night_lit",),
        "street light": ("night_lit",),
        "street lamp": ("night_lit",),
        "unlit": ("night_dark",),
    },
    "weather": {
        "clear sky": ("clear",),
        "clear skies": ("clear",),
        "clear weather": ("clear",),
        "sunny": ("clear",),
        "cloudy": ("cloudy",),
        "overcast": ("cloudy",),
        "rain": ("rain",),
        "rainy": ("rain",),
        "raining": ("rain",),
        "drizzle": ("rain",),
        "downpour": ("rain",),
        "wet road": ("rain",),
        "snow": ("snow",),
        "snowy": ("snow",),
        "snowing": ("snow",),
        "sleet": ("snow",),
        "fog": ("fog",),
        "foggy": ("fog",),
        "mist": ("fog",),
        "misty": ("fog",),
        "haze": ("fog",),
    },
    # only kinds of road that exclude each other: an intersection, a bridge or a tunnel lies on any of them
    "road_type": {
        "highway": ("highway",),
        "motorway": ("highway",),
        "freeway": ("highway",),
        "expressway": ("highway",),
        "rural": ("rural",),
        "country road": ("rural",),
        "countryside": ("rural",),
        "parking lot": ("parking_lot",),
        "car park": ("parking_lot",),
        "parking garage": ("parking_lot",),
    },
    "hazard_level": {
        "collision": ("medium", "high", "critical"),
        "crash": ("medium", "high", "critical"),
        "near miss": ("medium", "high", "critical"),
        "near collision": ("medium", "high", "critical"),
    },
}
NEGATIONS = frozenset({"no", "not", "without", "never", "none", "nor", "neither", "absent", "free", "lacks"})
NEGATION_REACH = 3  # words before a mention that can negate it


def _phrases() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for label, table in SYNONYMS.items():
        for phrase, values in table.items():
            out.setdefault(phrase, []).append((label, values))
    return out


_PHRASES = _phrases()  # "fire truck" -> [(label, values)]
# every written form of a phrase (its last word plain, +s, +es) -> the phrase
_FORMS = {p + end: p for p in _PHRASES for end in ("es", "s", "")}
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")  # of the lower-cased text: captions are English


def mentions(text: str | None) -> dict[str, dict[str, set[str]]]:
    """label -> {phrase found: the values it names} for every mention in `text` that is not negated."""
    words = _WORD.findall((text or "").lower())
    out: dict[str, dict[str, set[str]]] = {}
    i, n = 0, len(words)
    while i < n:
        pair = words[i] + " " + words[i + 1] if i + 1 < n else ""
        width, phrase = (2, _FORMS[pair]) if pair in _FORMS else (1, _FORMS.get(words[i]))
        if phrase is not None and not _negated(words[max(0, i - NEGATION_REACH) : i]):
            for label, values in _PHRASES[phrase]:
                out.setdefault(label, {}).setdefault(phrase, set()).update(values)
        i += width
    return out


def conflicts(text: str | None, labels: dict[str, Any] | None) -> list[str]:
    """Each disagreement between `text` and `labels`, as a sentence naming the label and the words, in taxonomy
    order; [] when none is found."""
    labels = labels or {}
    found = mentions(text)
    out: list[str] = []
    for label in taxonomy.ENUMS:
        said = found.get(label)
        if not said or label not in labels:
            continue
        value = labels[label]
        if label in taxonomy.MULTI:
            have = set(value if isinstance(value, list) else [])
            for phrase, values in said.items():
                missing = sorted(values - have)
                if missing and not values & have:
                    out.append(f"the text names {_a(phrase)} but {_name(label)} lacks {', '.join(missing)}")
            continue
        if any(value in values for values in said.values()):
            continue  # the text supports the label's value somewhere
        words = ", ".join(repr(p) for p in sorted(said))
        out.append(f"the text says {words} but {_name(label)} is {value}")
    return out


def _negated(before: list[str]) -> bool:
    return any(w in NEGATIONS or w.endswith("n't") for w in before)


def _name(label: str) -> str:
    return label.replace("_", " ")


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase
