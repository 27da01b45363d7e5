"""The parameters of a captioning job, resolved and checked in one place.

The review tab (re-caption), the jobs tab, the caption CLI and the runner all build a `JobParams` from what
they were given plus the settings' defaults, instead of each resolving defaults its own way. `validate`
refuses values that cannot work, with a message that says what to use instead; it runs server side, so a
call through Gradio's API gets the same refusal as the form.

Why MIN_MAX_TOKENS is 256: the answer is a JSON object (caption + seven labels, data.taxonomy). Real vLLM
with dummy weights answered this schema in about 190-530 completion tokens (docs/GPU.md runs). A limit below
the shortest complete answer truncates every caption (`finish_reason = length`, the item fails as
"truncated"), which is what 64 did. 256 is the shortest answer plus a margin; long answers (up to ~530)
still need more, hence RECOMMENDED_MAX_TOKENS in the message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from data.errors import InvalidJobParams

MIN_FRAMES, MAX_FRAMES = 1, 128
MIN_MAX_TOKENS = 256  # the shortest complete answer measured (~190) plus a margin
RECOMMENDED_MAX_TOKENS = 600  # the longest answer measured (~530) plus a margin
MAX_MAX_TOKENS = 8192
MAX_TEMPERATURE = 2.0


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidJobParams(f"{name} must be a whole number, not {value!r}.")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InvalidJobParams(f"{name} must be a whole number, not {str(value)[:40]!r}.") from None
    if f != int(f):
        raise InvalidJobParams(f"{name} must be a whole number, not {value!r}.")
    return int(f)


@dataclasses.dataclass(frozen=True)
class JobParams:
    frames: int
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None

    @classmethod
    def resolve(
        cls, settings, given: dict[str, Any] | None = None, *, validate: bool = True, **overrides: Any
    ) -> "JobParams":
        """Settings' defaults, then `given` (a job's stored params), then non-None `overrides`; validated
        (the runner passes validate=False for jobs stored before these checks: it runs what was asked).

        Empty values ("" or None, as an untouched form field or an omitted CLI flag sends) take the default.
        """
        values: dict[str, Any] = {
            "frames": settings.frames,
            "max_tokens": settings.max_tokens,
            "temperature": settings.temperature,
            "seed": None,
        }
        for source in (given or {}, overrides):
            for k, v in source.items():
                if k in values and v not in (None, ""):
                    values[k] = v
        if not validate:
            return cls(
                frames=int(values["frames"]),
                max_tokens=int(values["max_tokens"]),
                temperature=float(values["temperature"]),
                seed=None if values["seed"] in (None, "") else int(values["seed"]),
            )
        return cls.checked(**values)

    @classmethod
    def checked(cls, *, frames: Any, max_tokens: Any, temperature: Any = 0.0, seed: Any = None) -> "JobParams":
        frames = _as_int("Frames", frames)
        if not MIN_FRAMES <= frames <= MAX_FRAMES:
            raise InvalidJobParams(f"Frames must be {MIN_FRAMES}-{MAX_FRAMES} (got {frames}).")
        max_tokens = _as_int("Max tokens", max_tokens)
        if max_tokens < MIN_MAX_TOKENS:
            raise InvalidJobParams(
                f"Max tokens {max_tokens} cannot hold a complete answer: answers to this schema take about "
                f"190-530 tokens, so every caption would be cut off and fail as truncated. Use at least "
                f"{MIN_MAX_TOKENS} ({RECOMMENDED_MAX_TOKENS} or more to be safe with long answers)."
            )
        if max_tokens > MAX_MAX_TOKENS:
            raise InvalidJobParams(f"Max tokens must be at most {MAX_MAX_TOKENS} (got {max_tokens}).")
        try:
            temperature = float(temperature)
        except (TypeError, ValueError):
            raise InvalidJobParams(f"Temperature must be a number, not {str(temperature)[:40]!r}.") from None
        if not 0.0 <= temperature <= MAX_TEMPERATURE:
            raise InvalidJobParams(f"Temperature must be 0-{MAX_TEMPERATURE:g} (got {temperature:g}).")
        if seed not in (None, ""):
            seed = _as_int("Seed", seed)
        else:
            seed = None
        return cls(frames=frames, max_tokens=max_tokens, temperature=temperature, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        """What a job row stores (seed only when set)."""
        d = {"frames": self.frames, "max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.seed is not None:
            d["seed"] = self.seed
        return d
