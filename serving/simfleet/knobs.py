"""A replica's failure knobs: how it misbehaves, set at start (flags) or at run time (`POST /sim/knobs`).

error_rate (share of requests answered 500), unavailable_for (seconds of 503 from now), hang (accept and never
answer), die_after (stop listening after N chat requests), die (stop now), slow (latency factor), speed,
unhealthy (/health 503), capacity, allowed_media_domains (hosts http(s) video URLs may come from).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from serving.simfleet.costs import DEFAULT_CAPACITY
from serving.simfleet.errors import SimError

# The knobs a fleet can start with, as command-line flags (--error-rate for error_rate): one table read by the
# CLI's parser, by the CLI to gather the values, and by the harness to turn keyword arguments into flags.
# (knob, type, default, help); a bool knob is a switch.
FLAGS: tuple[tuple[str, type, object, str], ...] = (
    ("speed", float, 1.0, "latency multiplier; 0 = answer at once"),
    ("slow", float, 1.0, "extra latency factor (a slow replica)"),
    ("capacity", int, DEFAULT_CAPACITY, "requests run at once per replica"),
    ("error_rate", float, 0.0, "share of requests answered HTTP 500"),
    ("unavailable_for", float, 0.0, "answer 503 for this many seconds"),
    ("hang", bool, False, "accept requests and never answer"),
    ("die_after", int, None, "stop listening after N chat requests"),
    ("unhealthy", bool, False, "GET /health answers 503"),
    (
        "allowed_media_domains",
        str,
        "",
        "comma-separated hosts http(s) video URLs may come from (default: none; file:// only)",
    ),
)


def flag(knob: str) -> str:
    """The command-line flag of a knob: error_rate -> --error-rate."""
    return "--" + knob.replace("_", "-")


def as_flags(knobs: dict) -> list[str]:
    """Knob values as command-line flags (a true bool is a bare switch; None and false are left out)."""
    args: list[str] = []
    for key, value in knobs.items():
        if isinstance(value, bool):
            args += [flag(key)] if value else []
        elif value is not None:
            args += [flag(key), str(value)]
    return args


@dataclass
class Knobs:
    error_rate: float = 0.0
    unavailable_until: float = 0.0
    hang: bool = False
    die_after: int | None = None
    slow: float = 1.0
    speed: float = 1.0
    unhealthy: bool = False
    capacity: int = DEFAULT_CAPACITY
    # hosts http(s) video URLs may come from (vLLM's --allowed-media-domains); empty: none (S4: no SSRF)
    allowed_media_domains: str = ""

    def update(self, changes: dict) -> None:
        for key, value in changes.items():
            if key == "unavailable_for":
                self.unavailable_until = time.monotonic() + float(value) if value else 0.0
            elif key == "die_after":
                self.die_after = None if value is None else int(value)
            elif key in ("hang", "unhealthy"):
                self.hang = bool(value) if key == "hang" else self.hang
                self.unhealthy = bool(value) if key == "unhealthy" else self.unhealthy
            elif key in ("error_rate", "slow", "speed"):
                setattr(self, key, float(value))
            elif key == "capacity":
                self.capacity = max(1, int(value))
            elif key == "allowed_media_domains":
                self.allowed_media_domains = ",".join(
                    v.strip().lower()
                    for v in (value.split(",") if isinstance(value, str) else value or [])
                    if v.strip()
                )
            elif key != "die":
                raise SimError(400, f"unknown knob {key!r}")

    def public(self) -> dict:
        d = asdict(self)
        d["unavailable_for"] = max(0.0, self.unavailable_until - time.monotonic()) if self.unavailable_until else 0.0
        del d["unavailable_until"]
        return d
