"""The parameters of a captioning job, declared once: each is a field of `JobParams` with its default and the
check that refuses a value that cannot work. Building (`resolve`), checking (`checked`), storing (`to_dict`) and
reading (`from_dict`) all go through the fields, so a new per-job knob is one new field here (and, if the
deployment should set its default, a setting of the same name in data.settings: `resolve` takes it from there).
Its help is also the help of its flag in `python -m serving.caption` (data.job_param_args makes the flags), and
its label (with the values it offers, if any) names its input on the Jobs form (webapp.jobs.fields makes them).

A job row stores `to_dict()`; `data.jobs.queries` reads it back as a `JobParams`; the runner sends it as it is
(serving.client builds the request from it); each caption's provenance records it under the same names.
`checked` runs server side, so a call through Gradio's API gets the same refusal as the form.

Why MIN_MAX_TOKENS is 256: the answer is a JSON object (caption + seven labels, data.taxonomy). Real vLLM
with dummy weights answered this schema in about 190-530 completion tokens (docs/GPU.md runs). A limit below
the shortest complete answer truncates every caption (`finish_reason = length`, the item fails as
"truncated"), which is what 64 did. 256 is the shortest answer plus a margin; long answers (up to ~530)
still need more, hence RECOMMENDED_MAX_TOKENS in the message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from data.errors import InvalidJobParams
from data.settings import Settings

MIN_FRAMES, MAX_FRAMES = 1, 128
MIN_MAX_TOKENS = 256  # the shortest complete answer measured (~190) plus a margin
RECOMMENDED_MAX_TOKENS = 600  # the longest answer measured (~530) plus a margin
MAX_MAX_TOKENS = 8192
MAX_TEMPERATURE = 2.0
# Alternatives per generated token asked of vLLM for the labels' confidence (serving.logprobs, docs/CONFIDENCE.md).
# vLLM refuses more than its --max-logprobs (default 20) with a 400. At a label's decision 5 show the sampled value
# and the 4 likeliest others; every alternative is listed for every token of the answer, caption included
# (benchmarks/bench_confidence.py, a 202-token answer: 5 make it 100 KB and cost the runner 1.8 ms of CPU to parse
# and read, 20 make it 295 KB and 6.5 ms).
DEFAULT_TOP_LOGPROBS = 5
MAX_TOP_LOGPROBS = 20
# Qwen3-VL's video processor resizes the sampled frames so that frames x height x width stays within
# size.longest_edge pixels (at least size.shortest_edge). The replicas start with NVIDIA's recipe
# (serving.launch.commands.vllm_command): 16 frames of 1024x576 = 9,437,184. A job may ask for fewer pixels per
# clip, never more: the server sized its encoder budget for the recipe.
RECIPE_MAX_PIXELS = 9_437_184
MIN_PIXELS = 65_536
# names that captions' provenance used before it took the names of the fields (rows written then keep them)
FORMER_NAMES = {"max_completion_tokens": "max_tokens", "num_frames": "frames"}
# what a stored params dict from before a field existed asked for: jobs then asked for no logprobs
BEFORE_FIELDS = {"top_logprobs": 0}


def _whole(label: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidJobParams(f"{label} must be a whole number, not {value!r}.")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InvalidJobParams(f"{label} must be a whole number, not {str(value)[:40]!r}.") from None
    if f != int(f):
        raise InvalidJobParams(f"{label} must be a whole number, not {value!r}.")
    return int(f)


def _frames(value: Any) -> int:
    frames = _whole("Frames", value)
    if not MIN_FRAMES <= frames <= MAX_FRAMES:
        raise InvalidJobParams(f"Frames must be {MIN_FRAMES}-{MAX_FRAMES} (got {frames}).")
    return frames


def _max_tokens(value: Any) -> int:
    max_tokens = _whole("Max tokens", value)
    if max_tokens < MIN_MAX_TOKENS:
        raise InvalidJobParams(
            f"Max tokens {max_tokens} cannot hold a complete answer: answers to this schema take about "
            f"190-530 tokens, so every caption would be cut off and fail as truncated. Use at least "
            f"{MIN_MAX_TOKENS} ({RECOMMENDED_MAX_TOKENS} or more to be safe with long answers)."
        )
    if max_tokens > MAX_MAX_TOKENS:
        raise InvalidJobParams(f"Max tokens must be at most {MAX_MAX_TOKENS} (got {max_tokens}).")
    return max_tokens


def _temperature(value: Any) -> float:
    try:
        temperature = float(value)
    except (TypeError, ValueError):
        raise InvalidJobParams(f"Temperature must be a number, not {str(value)[:40]!r}.") from None
    if not 0.0 <= temperature <= MAX_TEMPERATURE:
        raise InvalidJobParams(f"Temperature must be 0-{MAX_TEMPERATURE:g} (got {temperature:g}).")
    return temperature


def _max_pixels(value: Any) -> int:
    pixels = _whole("Pixels per clip", value)
    if not MIN_PIXELS <= pixels <= RECIPE_MAX_PIXELS:
        raise InvalidJobParams(
            f"Pixels per clip must be {MIN_PIXELS:,}-{RECIPE_MAX_PIXELS:,} (got {pixels:,}): the budget of all "
            f"sampled frames together; {RECIPE_MAX_PIXELS:,} is the fleet's own (16 frames of 1024x576), half or a "
            "quarter of it cost fewer vision tokens."
        )
    return pixels


def _seed(value: Any) -> int | None:
    return None if value in (None, "") else _whole("Seed", value)


def _top_logprobs(value: Any) -> int:
    k = _whole("Top logprobs", value)
    if not 0 <= k <= MAX_TOP_LOGPROBS:
        raise InvalidJobParams(
            f"Top logprobs must be 0-{MAX_TOP_LOGPROBS} (got {k}): vLLM refuses more than its --max-logprobs "
            f"(default {MAX_TOP_LOGPROBS}); 0 asks for none (no label confidence)."
        )
    return k


def _optional_int(value: Any) -> int | None:
    return None if value in (None, "") else int(value)


_DEPLOYMENT = {f.name: f.default for f in dataclasses.fields(Settings)}


def knob(
    check: Callable[[Any], Any],
    read: Callable[[Any], Any],
    help: str,
    default: Any = None,
    *,
    label: str | None = None,
    choices: tuple[tuple[Any, str], ...] = (),
) -> Any:
    """A job parameter: `check` turns a value a person gave into the field's type or raises InvalidJobParams
    saying what to use; `read` converts a stored value without judging it (a job runs what was asked when it
    was started). The default is the setting of the same name where there is one (data.settings). `label` is
    what a person reads beside its input (default: the name in words); `choices`, (value, what it is) pairs,
    are values a form offers, any other still allowed."""
    return dataclasses.field(
        default=default,
        metadata={"check": check, "read": read, "help": help, "label": label, "choices": tuple(choices)},
    )


@dataclasses.dataclass(frozen=True)
class JobParams:
    """How each clip of a job is captioned. Constructed directly, nothing is checked (tests, stored jobs);
    `checked` and `resolve` check every field."""

    frames: int = knob(
        _frames,
        int,
        f"frames sampled from each clip, {MIN_FRAMES}-{MAX_FRAMES}",
        _DEPLOYMENT["frames"],
        label=f"Frames ({MIN_FRAMES}-{MAX_FRAMES})",
    )
    max_tokens: int = knob(
        _max_tokens,
        int,
        f"output token limit of each request, {MIN_MAX_TOKENS}-{MAX_MAX_TOKENS} (an answer takes about 190-530)",
        _DEPLOYMENT["max_tokens"],
        label=f"Max tokens ({MIN_MAX_TOKENS}-{MAX_MAX_TOKENS})",
    )
    temperature: float = knob(
        _temperature,
        float,
        f"sampling temperature, 0-{MAX_TEMPERATURE:g}",
        _DEPLOYMENT["temperature"],
        label=f"Temperature (0-{MAX_TEMPERATURE:g})",
    )
    seed: int | None = knob(
        _seed, _optional_int, "sampling seed (none: the server's)", label="Seed (empty: the server's)"
    )
    top_logprobs: int = knob(
        _top_logprobs,
        int,
        f"alternatives per token asked of vLLM, from which each label's confidence is read, 0-{MAX_TOP_LOGPROBS} "
        "(0: none, no label confidence)",
        DEFAULT_TOP_LOGPROBS,
        label=f"Top logprobs (0-{MAX_TOP_LOGPROBS})",
    )
    max_pixels: int = knob(
        _max_pixels,
        int,
        f"pixel budget of the sampled frames together (Qwen3-VL's size.longest_edge), {MIN_PIXELS:,}-"
        f"{RECIPE_MAX_PIXELS:,}: at most the fleet's recipe (16 frames of 1024x576); half or a quarter of it cost "
        "fewer vision tokens",
        RECIPE_MAX_PIXELS,
        label="Pixels per clip (all frames)",
        # the work-per-clip sweep's pixel budgets (docs/work-per-clip.json): 16 frames of 1024x576, half, a quarter
        choices=((RECIPE_MAX_PIXELS, "recipe"), (RECIPE_MAX_PIXELS // 2, "half"), (RECIPE_MAX_PIXELS // 4, "quarter")),
    )

    @classmethod
    def resolve(cls, settings: Any, given: Mapping[str, Any] | None = None, **overrides: Any) -> "JobParams":
        """The deployment's defaults (the settings of the same names), then `given`, then `overrides`; checked.
        Empty values ("" or None, as an untouched form field or an omitted CLI flag sends) take the default."""
        values = {f.name: getattr(settings, f.name, f.default) for f in dataclasses.fields(cls)}
        for source in (given or {}, overrides):
            values.update({k: v for k, v in source.items() if v not in (None, "")})
        return cls.checked(**values)

    @classmethod
    def checked(cls, **values: Any) -> "JobParams":
        """A JobParams from values a person gave (missing ones take the field's default), every field checked;
        an unknown name or a value that cannot work is an InvalidJobParams that says what to use."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise InvalidJobParams(f"Unknown job parameter(s): {', '.join(unknown)} (known: {', '.join(fields)}).")
        return cls(**{k: f.metadata["check"](values.get(k, f.default)) for k, f in fields.items()})

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any] | None) -> "JobParams":
        """What `to_dict` stored (a job row, a caption's provenance, also under its former names), unchecked;
        other keys (a provenance's camera) are ignored; a field stored before it existed reads as what was asked
        then (BEFORE_FIELDS: no logprobs), other missing ones take the field's default."""
        values = {**BEFORE_FIELDS, **current_names(stored)}
        return cls(**{f.name: f.metadata["read"](values[f.name]) for f in dataclasses.fields(cls) if f.name in values})

    def to_dict(self) -> dict[str, Any]:
        """Every parameter by its field name, those without a value (seed None) left out."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


def current_names(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """Recorded params under today's names: captions written before one naming carry `max_completion_tokens`
    and `num_frames` (a current name wins where both are there); other keys (camera) pass through."""
    out = dict(stored or {})
    for old, new in FORMER_NAMES.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out
