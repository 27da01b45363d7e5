"""What a simulated replica answers: the request read as vLLM reads it, a deterministic schema-valid answer
derived from the clip, with token logprobs when asked (serving.simfleet.logprobs), and the response bodies of
vLLM 0.25, key for key.

Pure functions, no I/O. The caption always starts with "[SIMULATED]" and the served model id ends with
" (simulated)", so a simulated caption can never pass for a real one.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from data import taxonomy
from data.job_params import RECIPE_MAX_PIXELS
from serving.flops import vision_grid, vision_tokens
from serving.simfleet import logprobs
from serving.simfleet.costs import DEFAULT_FRAMES
from serving.simfleet.errors import XGRAMMAR_REFUSAL, SimError
from serving.simfleet.probe import ClipInfo

SIM_SUFFIX = " (simulated)"
SIM_MARK = "[SIMULATED]"
CHARS_PER_TOKEN = 4.5  # English prose and JSON through a Qwen tokenizer, roughly


@dataclass(frozen=True)
class ChatRequest:
    """What a chat request asks of the replica, once the fault knobs have let it through."""

    video_url: str | None
    schema: dict | None
    frames: int
    max_tokens: Any  # as sent: read as an int only after the clip is opened, so a bad clip is reported first
    top_logprobs: int | None = None  # alternatives per token asked for; None: no logprobs (`logprobs` not true)
    max_pixels: int = RECIPE_MAX_PIXELS  # mm_processor_kwargs.size.longest_edge, else the recipe's (the server's)


def read_request(body: dict) -> ChatRequest:
    """Read a `/v1/chat/completions` body as vLLM 0.25 does, refusing what it refuses (in its words)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SimError(400, "messages: field required")
    video_url = None
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "video_url":
                video_url = (part.get("video_url") or {}).get("url")
    schema = None
    rf = body.get("response_format") or {}
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
    if schema is not None and taxonomy.unsupported_features(schema):
        raise SimError(400, XGRAMMAR_REFUSAL)
    frames = DEFAULT_FRAMES
    mik = body.get("media_io_kwargs") or {}
    if isinstance(mik, dict) and isinstance(mik.get("video"), dict):
        frames = int(mik["video"].get("num_frames") or mik["video"].get("max_frames") or DEFAULT_FRAMES)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
    # vLLM's chat request: `logprobs=top_logprobs if logprobs else None`, top_logprobs defaulting to 0
    top = int(body.get("top_logprobs") or 0) if body.get("logprobs") else None
    max_pixels = RECIPE_MAX_PIXELS
    mpk = body.get("mm_processor_kwargs")
    size = mpk.get("size") if isinstance(mpk, dict) else None
    if isinstance(size, dict) and isinstance(size.get("longest_edge"), int) and size["longest_edge"] > 0:
        max_pixels = size["longest_edge"]
    return ChatRequest(str(video_url) if video_url else None, schema, frames, max_tokens, top, max_pixels)


def _pick(h: bytes, i: int, options: list | tuple) -> Any:
    return options[int.from_bytes(hashlib.sha256(h + i.to_bytes(2, "big")).digest()[:4], "big") % len(options)]


SCENE = {
    "normal_driving": "the ego vehicle follows the flow of traffic without any notable event",
    "pedestrian_crossing": "a pedestrian steps onto the roadway ahead and crosses in front of the ego vehicle",
    "cyclist_interaction": "a cyclist rides close to the ego lane and the ego vehicle gives way",
    "vehicle_cut_in": "a vehicle from the adjacent lane cuts in with a short gap ahead of the ego vehicle",
    "hard_braking": "the lead vehicle brakes hard and the ego vehicle decelerates sharply",
    "intersection_conflict": "crossing traffic enters the intersection while the ego vehicle proceeds",
    "lane_change": "the ego vehicle changes lanes after checking the gap in the target lane",
    "merge": "traffic merges from an on-ramp into the ego lane",
    "road_obstruction": "an object blocks part of the lane and vehicles steer around it",
    "construction_zone": "cones and barriers narrow the road through a construction zone",
    "emergency_vehicle": "an emergency vehicle approaches and traffic moves aside to let it pass",
    "animal_on_road": "an animal appears on the road surface ahead",
    "near_collision": "another road user comes within a very short distance of the ego vehicle",
    "collision": "a collision occurs between road users in view of the camera",
    "traffic_violation": "a road user ignores a signal or right of way rule",
    "other": "an unusual situation develops that fits no common category",
}


def synthetic_answer(clip_key: str, info: ClipInfo | None, schema: dict | None) -> dict:
    """A deterministic, schema-valid answer for a clip: the same clip always gets the same labels."""
    schema = schema if isinstance(schema, dict) and schema.get("type") == "object" else taxonomy.CAPTION_SCHEMA
    h = hashlib.sha256(f"{clip_key}|{info.size if info else 0}".encode("utf-8", "surrogatepass")).digest()
    answer: dict[str, Any] = {}
    props = schema.get("properties") or {}
    for i, (name, spec) in enumerate(props.items()):
        if name == "caption":
            continue
        answer[name] = _value_for(h, i, spec)
    answer_caption = _caption(h, answer, info)
    if "caption" in props or "caption" in (schema.get("required") or []):
        cap_spec = props.get("caption", {})
        max_len = int(cap_spec.get("maxLength", 10_000)) if isinstance(cap_spec, dict) else 10_000
        answer = {"caption": answer_caption[:max_len], **answer}
    return answer


def _value_for(h: bytes, i: int, spec: Any) -> Any:
    if not isinstance(spec, dict):
        return None
    if "enum" in spec:
        return _pick(h, i, spec["enum"])
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items") or {}
        if isinstance(items, dict) and "enum" in items:
            pool = list(items["enum"])
            n = 1 + int.from_bytes(h[i % 32 : i % 32 + 1], "big") % min(3, len(pool))
            start = int.from_bytes(hashlib.sha256(h + b"a" + bytes([i % 256])).digest()[:2], "big")
            picked = [pool[(start + k * 3) % len(pool)] for k in range(n)]
            return list(dict.fromkeys(picked))
        return []
    if kind == "integer":
        return int.from_bytes(h[:2], "big") % 100
    if kind == "number":
        return (int.from_bytes(h[:2], "big") % 1000) / 10
    if kind == "boolean":
        return bool(h[i % 32] & 1)
    if kind == "object":
        return {}
    return f"{SIM_MARK} value"


def _caption(h: bytes, labels: dict, info: ClipInfo | None) -> str:
    scenario = labels.get("scenario_category", "normal_driving")
    users = labels.get("road_users") or ["car"]
    size = f"{info.width}x{info.height}, {info.duration:.1f} s" if info else "unknown size"
    sentences = [
        f"{SIM_MARK} This caption was produced by the simulated fleet, not by a model, for a synthetic clip ({size}).",
        f"The ego vehicle is {str(labels.get('ego_maneuver', 'going_straight')).replace('_', ' ')} on a "
        f"{str(labels.get('road_type', 'urban')).replace('_', ' ')} road in "
        f"{str(labels.get('weather', 'clear')).replace('_', ' ')} weather with "
        f"{str(labels.get('lighting', 'daylight')).replace('_', ' ')} lighting.",
        f"In this scene {SCENE.get(scenario, SCENE['other'])}.",
        f"Visible road users include {', '.join(str(u).replace('_', ' ') for u in users)}, each moving at a "
        "steady pace relative to the ego vehicle and keeping to their lanes for most of the clip.",
        f"The hazard level is judged {labels.get('hazard_level', 'none')} because of the distance kept between "
        "the ego vehicle and the other road users while the event develops over the clip.",
        "Lane markings are visible on both sides and the road surface appears even, with no debris in the "
        "path of travel during the first seconds of the recording.",
        "As the clip continues the situation resolves without further change, and the ego vehicle keeps a "
        "safe following distance to the vehicle ahead until the end of the recording.",
        "Signs and signals along the road are visible but not legible at this resolution, and no person can "
        "be identified from the footage.",
        "This text exists only to exercise the captioning pipeline and carries no information about any real "
        "recording.",
    ]
    words: list[str] = []
    for s in sentences:
        words.extend(s.split())
    variant = int.from_bytes(h[-2:], "big") % 60
    return " ".join(words[: 100 + variant])


def estimate_prompt_tokens(body: dict, info: ClipInfo | None, frames: int, max_pixels: int = RECIPE_MAX_PIXELS) -> int:
    """Prompt tokens as Qwen3-VL counts them: the text (~4 characters a token) plus the vision tokens of
    `frames` frames resized within the `max_pixels` budget (serving.flops.vision_grid)."""
    text = 0
    for msg in body.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            text += len(content)
        elif isinstance(content, list):
            text += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    video = 0
    if info and info.height > 0 and info.width > 0:
        video = vision_tokens(vision_grid(max(1, frames), info.height, info.width, max_pixels))
    return 12 + text // 4 + video


@dataclass(frozen=True)
class Answer:
    """What the model "generated": the message content, its completion tokens, the finish reason (`length` past
    max tokens) and, when asked for, the token logprobs (`choices[0].logprobs`)."""

    content: str
    tokens: int
    finish: str
    logprobs: dict | None = None


def answer_text(clip_key: str, info: ClipInfo | None, req: ChatRequest) -> Answer:
    """The answer to `req` for this clip (deterministic: the same clip gets the same answer and logprobs)."""
    answer = synthetic_answer(clip_key, info, req.schema)
    content = json.dumps(answer, ensure_ascii=False)
    completion_tokens = max(1, math.ceil(len(content) / CHARS_PER_TOKEN))
    max_tokens = int(req.max_tokens)
    finish = "stop"
    if completion_tokens > max_tokens:
        content, completion_tokens, finish = content[: int(max_tokens * CHARS_PER_TOKEN)], max_tokens, "length"
        answer = {}  # cut short: no label was generated whole
    lp = None
    if req.top_logprobs is not None:
        seed = f"{clip_key}|{info.size if info else 0}".encode("utf-8", "surrogatepass")
        schema = req.schema if isinstance(req.schema, dict) and req.schema.get("type") == "object" else None
        lp = logprobs.answer_logprobs(
            content, answer, schema or taxonomy.CAPTION_SCHEMA, req.top_logprobs, seed, stopped=finish == "stop"
        )
        if finish == "stop":
            completion_tokens = len(lp["content"])  # as on real vLLM: one entry per generated token, the stop too
    return Answer(content, completion_tokens, finish, lp)


def completion_body(served: str, index: int, answer: Answer, prompt_tokens: int) -> dict:
    """The body real vLLM 0.25 answers, key for key (tests/recordings/vllm-0.25.0-answers.json), plus "simulated"."""
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": served,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer.content,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": answer.logprobs,
                "finish_reason": answer.finish,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": f"vllm-simulated-{index}",
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + answer.tokens,
            "completion_tokens": answer.tokens,
            "prompt_tokens_details": None,
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "metrics": None,
        "simulated": True,
    }


def models_body(model: str) -> dict:
    """`GET /v1/models` of a replica serving `model` (listed with the simulated suffix)."""
    return {
        "object": "list",
        "data": [
            {
                "id": model + SIM_SUFFIX,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": 32768,
                "simulated": True,
            }
        ],
    }
