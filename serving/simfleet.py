"""A simulated vLLM fleet: N OpenAI-compatible replicas in one process, for tests and GPU-less machines.

    python -m serving.simfleet --replicas 8 --port 8000 --allowed-local-media-path var/clips
    python -m serving.simfleet --replicas 2 --port 0 --allowed-local-media-path DIR --speed 0 --ready-file f.json

Each replica speaks what vLLM 0.25 speaks, closely enough for the client, runner, router and web app:
`POST /v1/chat/completions`, `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text with vLLM's
metric names and `model_name`/`engine` labels), errors as `{"error": {"message", "type", "param", "code"}}`.
It opens every clip with PyAV (metadata only): a file outside `--allowed-local-media-path` gets vLLM's 400,
a missing file vLLM's 500 with the OSError text, an undecodable one the NVDEC backend's 500
(`CreateFormatContext : ... "Invalid data found when processing input"`), a clip too large for the decode
budget a 400. It answers schema-valid JSON derived deterministically from the clip; the caption always
starts with "[SIMULATED]", the served model id ends with " (simulated)" and every response carries
`x-simulated: 1`, so a simulated caption can never pass for a real one.

Latency model (x `slow` x `speed`; `--speed 0` answers at once for runner benchmarks):
decode = 0.25 s x (W x H x frames) / (1920 x 1080 x 16); prefill = 4 us per prompt token;
generation = 4 ms per output token. Each replica runs at most `capacity` requests at once (default 6) and
queues the rest (`vllm:num_requests_waiting`), which gives ~5-6 clips/s per replica at saturation on 1080p
clips (~1.0-1.3 s each) -- near the ~4.2 clips/s one H200 measured.

Failure knobs, as flags and at run time per replica (`POST /sim/knobs` with a JSON object):
error_rate (share of requests answered 500), unavailable_for (seconds of 503 from now), hang (accept and
never answer), die_after (stop listening after N chat requests), die (stop now), slow (latency factor),
speed, unhealthy (/health 503), capacity. `GET /sim/stats` returns the knobs and counters.

In-process API for tests: `start_fleet(replicas, port, root, ...)` returns a `FleetHandle` with `.urls`,
`.stop()`, `.kill_replica(i)`, `.set_knobs(i, **knobs)`, `.stats(i)`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import json
import math
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from data import taxonomy

SIM_SUFFIX = " (simulated)"
SIM_MARK = "[SIMULATED]"
DECODE_BACKEND = "simulated"
REF_PIXELS_FRAMES = 1920 * 1080 * 16
REF_DECODE_S = 0.25
PREFILL_S_PER_TOKEN = 4e-6
GEN_S_PER_TOKEN = 4e-3
DEFAULT_CAPACITY = 6
DEFAULT_FRAMES = 16
# --mm-ipc-gpu-memory-gb 2 shared by 4 API servers (serving.launcher.vllm_command): vLLM gives each API server
# G / api_server_count, so 512 MiB per decode; a clip needs frames x H x W x 3 bytes of it, or it gets HTTP 400
DECODE_BUDGET_BYTES = 2 * 1024**3 // 4
E2E_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
CHARS_PER_TOKEN = 4.5  # English prose and JSON through a Qwen tokenizer, roughly
XGRAMMAR_REFUSAL = "The provided JSON schema contains features not supported by xgrammar."
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class SimError(Exception):
    """An error answered in vLLM's body shape."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}


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


# ---------------------------------------------------------------- the clip -> answer part (pure, testable)


@dataclass(frozen=True)
class ClipInfo:
    width: int
    height: int
    frames: int
    duration: float
    size: int


class ProbeCache:
    """PyAV metadata per (path, size, mtime): the same clip is opened once, not once per request."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self._items: OrderedDict[tuple, ClipInfo | SimError] = OrderedDict()
        self._lock = threading.Lock()

    def probe(self, path: Path) -> ClipInfo:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise SimError(500, f"[Errno 2] No such file or directory: '{path}'", "InternalServerError") from None
        except OSError as e:
            raise SimError(500, str(e), "InternalServerError") from None
        if stat.S_ISDIR(st.st_mode):
            raise SimError(500, f"[Errno 21] Is a directory: '{path}'", "InternalServerError")
        if not stat.S_ISREG(st.st_mode):
            raise _decode_failure(path)  # a FIFO or device: never open it (a read could block forever)
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
        if hit is None:
            hit = _probe_file(path, st.st_size)
            with self._lock:
                self._items[key] = hit
                while len(self._items) > self.limit:
                    self._items.popitem(last=False)
        if isinstance(hit, SimError):
            raise hit
        return hit


def _decode_failure(path: Path | str) -> SimError:
    # What vLLM 0.25's NVDEC (PyNvVideoCodec) backend raised for an HTML file named .mp4 on a real H200
    # (docs/gpu-runs/2026-11-30-h200/bench-1-vllm-tails.log): the path is not part of the message.
    return SimError(
        500,
        "CreateFormatContext : \nError code : -1094995529\nError Type : "
        'avformat_open_input(&ctx, szFilePath, NULL, NULL) returned error " Invalid data found when '
        'processing input"\nat /project/src/VideoCodecSDKUtils/helper_classes/Utils/'
        "FFmpegDemuxer.h:792\n",
        "InternalServerError",
    )


def _no_video_stream() -> SimError:
    # vLLM 0.25 + NVDEC for a container without a video stream (audio only), recorded on an H200
    # (tests/data/vllm-0.25.0-answers.json, "audio_only")
    return SimError(
        500,
        "SimpleDecoder : \nError code : 999\nError Type : SimpleDecoder constructor failed: Could not "
        "find stream in input file\nat /project/src/PyNvVideoCodec/src/SimpleDecoder.cpp:58\n",
        "InternalServerError",
    )


def _frames_missing() -> SimError:
    # vLLM 0.25 + NVDEC for an MP4 whose index is whole but whose media data is cut short: the sampler asks for
    # frames that are not there (recorded, "truncated")
    return SimError(500, "list index out of range", "InternalServerError")


def _probe_file(path: Path | None, size: int, data: bytes | None = None) -> ClipInfo | SimError:
    import av

    from data.probe import mp4_structure

    try:
        with av.open(io.BytesIO(data) if data is not None else str(path), "r") as container:
            streams = container.streams.video
            if not streams:
                return _no_video_stream()
            vs = streams[0]
            width, height = int(vs.codec_context.width or 0), int(vs.codec_context.height or 0)
            if width <= 0 or height <= 0:
                return _decode_failure(path)
            duration = (
                float(vs.duration * vs.time_base)
                if vs.duration and vs.time_base
                else (container.duration / 1e6 if container.duration else 0.0)
            )
            rate = float(vs.average_rate) if vs.average_rate else 0.0
            frames = int(vs.frames or round(duration * rate))
            if frames <= 0 and duration <= 0:
                return _decode_failure(path)
        if path is not None and data is None and (mp4_structure(path, size) or "").startswith("truncated"):
            return _frames_missing()
        return ClipInfo(width, height, frames, duration, size)
    except Exception:  # noqa: BLE001 - any PyAV failure is the clip's fault, as for the real decoder
        return _decode_failure(path)


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


def estimate_prompt_tokens(body: dict, info: ClipInfo | None, frames: int) -> int:
    text = 0
    for msg in body.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            text += len(content)
        elif isinstance(content, list):
            text += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    video = 0
    if info:
        # Qwen3-VL: 32x32 pixels per token after merging, two frames per temporal patch
        video = max(1, frames // 2) * max(1, math.ceil(info.height / 32)) * max(1, math.ceil(info.width / 32))
    return 12 + text // 4 + video


# ---------------------------------------------------------------- one replica


class Replica:
    """State, knobs, metrics and request handling of one simulated vLLM server."""

    def __init__(self, index: int, *, root: Path, model: str, knobs: Knobs, probe: ProbeCache, seed: int = 0):
        self.index = index
        self.root = Path(root).resolve()
        self.model = model
        self.served = model + SIM_SUFFIX
        self.knobs = knobs
        self.probe = probe
        self.url = ""
        self.rng = random.Random(seed * 1000 + index)
        self.chat_requests = 0
        self.statuses: dict[int, int] = {}
        self.media_fetches: dict[str, int] = {"file": 0, "http": 0}  # clips opened, by URL scheme
        self._running = 0
        self._acc_t = time.monotonic()
        self.waiting = 0
        self._slots = 0  # running requests holding a capacity slot
        # asyncio objects are created lazily, inside the loop that serves this replica
        self._slot_free: asyncio.Condition | None = None
        self.dead: asyncio.Event | None = None
        self.on_die: Callable[[], None] | None = None
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        lv = (self.served, "0")
        self.g_running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            labels,
            registry=self.registry,
        ).labels(*lv)
        self.g_waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=self.registry
        ).labels(*lv)
        self.g_kv = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=self.registry
        ).labels(*lv)
        self.c_prompt = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=self.registry
        ).labels(*lv)
        self.c_gen = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=self.registry
        ).labels(*lv)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels + ["finished_reason"],
            registry=self.registry,
        )
        self.c_success = {r: success.labels(*lv, r) for r in FINISH_REASONS}
        self.h_e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=E2E_BUCKETS,
            registry=self.registry,
        ).labels(*lv)
        self.h_ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        ).labels(*lv)
        # Not vLLM series: exact time integrals, so that a benchmark can say how busy a replica was between two
        # scrapes without sampling num_requests_running (busy = at least one request running).
        self.c_busy = Counter(
            "sim:busy_seconds",
            "Seconds with at least one request running (simulated fleet).",
            labels,
            registry=self.registry,
        ).labels(*lv)
        self.c_slot = Counter(
            "sim:running_request_seconds",
            "Integral of running requests over time, in request-seconds (simulated fleet).",
            labels,
            registry=self.registry,
        ).labels(*lv)
        self.g_capacity = Gauge(
            "sim:capacity", "Requests a replica runs at once (simulated fleet).", labels, registry=self.registry
        ).labels(*lv)

    @property
    def running(self) -> int:
        return self._running

    @running.setter
    def running(self, value: int) -> None:
        self.account()
        self._running = value

    def account(self) -> None:
        """Add the time since the last change to the busy integrals (called on every change and scrape)."""
        now = time.monotonic()
        dt, self._acc_t = now - self._acc_t, now
        if self._running > 0 and dt > 0:
            self.c_busy.inc(dt)
            self.c_slot.inc(dt * self._running)

    # -- lifecycle helpers
    def _ensure_loop_objects(self) -> None:
        if self._slot_free is None:
            self._slot_free = asyncio.Condition()
            self.dead = asyncio.Event()

    def die(self) -> None:
        self._ensure_loop_objects()
        if not self.dead.is_set():
            self.dead.set()
            if self.on_die:
                self.on_die()

    def _update_gauges(self) -> None:
        self.g_running.set(self.running)
        self.g_waiting.set(self.waiting)
        self.g_kv.set(min(1.0, self._slots / max(1, self.knobs.capacity) * 0.9))

    # -- media
    async def load_clip(self, url: str) -> tuple[str, ClipInfo]:
        parts = urlsplit(url)
        if parts.scheme == "file":
            filepath = Path(url2pathname(parts.netloc + parts.path))
            try:
                resolved = filepath.resolve()
            except (OSError, RuntimeError) as e:
                raise SimError(400, str(e)) from None
            if self.root not in resolved.parents:
                raise SimError(
                    400, f"The file path {filepath} must be a subpath of `--allowed-local-media-path {self.root}`."
                )
            info = await asyncio.to_thread(self.probe.probe, filepath)
            self.media_fetches["file"] += 1
            return str(resolved.relative_to(self.root)), info
        if parts.scheme in ("http", "https"):
            allowed = [d for d in self.knobs.allowed_media_domains.split(",") if d]
            if (parts.hostname or "").lower() not in allowed:
                # never fetch a URL the operator did not allow (cloud metadata, the host's own services)
                raise SimError(
                    400,
                    f"The URL's domain {parts.hostname!r} is not in --allowed-media-domains "
                    f"({', '.join(allowed) or 'none allowed'}).",
                )
            try:
                async with httpx.AsyncClient(timeout=10, trust_env=False) as c:
                    r = await c.get(url)
                    r.raise_for_status()
            except httpx.HTTPError as e:
                raise SimError(
                    422, f"Failed to fetch media from URL: {e}", "UnprocessableEntityError", "video_url"
                ) from None
            info = await asyncio.to_thread(_probe_file, Path(parts.path), len(r.content), r.content)
            if isinstance(info, SimError):
                raise info
            self.media_fetches["http"] += 1
            return parts.path, info
        raise SimError(400, "The URL must be either a HTTP, data or file URL.")

    # -- the chat endpoint
    async def chat(self, body: dict, disconnected: asyncio.Event) -> tuple[int, dict]:
        self._ensure_loop_objects()
        started = time.monotonic()
        self.chat_requests += 1
        k = self.knobs
        if k.die_after is not None and self.chat_requests > k.die_after:
            self.die()
            raise ConnectionAbortedError
        model = body.get("model")
        if model not in (None, self.model, self.served):
            raise SimError(404, f"The model `{model}` does not exist.", "NotFoundError")
        if k.unavailable_until and time.monotonic() < k.unavailable_until:
            raise SimError(503, "Service Unavailable (simulated 503 window)", "ServiceUnavailableError")
        if k.error_rate and self.rng.random() < k.error_rate:
            raise SimError(500, "simulated engine failure (error_rate knob)", "InternalServerError")
        if k.hang:
            self.running += 1
            self._update_gauges()
            try:
                waiter = asyncio.ensure_future(disconnected.wait())
                dead = asyncio.ensure_future(self.dead.wait())
                await asyncio.wait({waiter, dead}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                dead.cancel()
            finally:
                self.running -= 1
                self._update_gauges()
            raise ConnectionAbortedError
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
            # vLLM 0.25 with the xgrammar backend, word for word (tests/data/vllm-0.25.0-answers.json)
            raise SimError(400, XGRAMMAR_REFUSAL)
        frames = DEFAULT_FRAMES
        mik = body.get("media_io_kwargs") or {}
        if isinstance(mik, dict) and isinstance(mik.get("video"), dict):
            frames = int(mik["video"].get("num_frames") or mik["video"].get("max_frames") or DEFAULT_FRAMES)
        clip_key, info = ("", None)
        if video_url:
            clip_key, info = await self.load_clip(str(video_url))
            need = frames * info.width * info.height * 3
            if need > DECODE_BUDGET_BYTES:
                raise SimError(
                    400,
                    f"Video of {info.width}x{info.height} needs {need} bytes to decode {frames} "
                    f"frames, more than the decode budget of {DECODE_BUDGET_BYTES} bytes per API "
                    "server (--mm-ipc-gpu-memory-gb)",
                )
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
        answer = synthetic_answer(clip_key, info, schema)
        content = json.dumps(answer, ensure_ascii=False)
        completion_tokens = max(1, math.ceil(len(content) / CHARS_PER_TOKEN))
        finish = "stop"
        if completion_tokens > int(max_tokens):
            content = content[: int(int(max_tokens) * CHARS_PER_TOKEN)]
            completion_tokens = int(max_tokens)
            finish = "length"
        prompt_tokens = estimate_prompt_tokens(body, info, frames)

        # latency: queue for a slot, then decode + prefill + generation
        factor = k.slow * k.speed
        decode_s = REF_DECODE_S * (info.width * info.height * frames / REF_PIXELS_FRAMES) if info else 0.0
        first_s = (decode_s + prefill_s(prompt_tokens)) * factor
        gen_s = completion_tokens * GEN_S_PER_TOKEN * factor
        self.waiting += 1
        self._update_gauges()
        try:
            async with self._slot_free:
                await self._slot_free.wait_for(lambda: self._slots < self.knobs.capacity)
                self._slots += 1
        finally:
            self.waiting -= 1
        self.running += 1
        self._update_gauges()
        try:
            if first_s > 0:
                await asyncio.sleep(first_s)
            ttft = time.monotonic() - started
            if gen_s > 0:
                await asyncio.sleep(gen_s)
        finally:
            self.running -= 1
            async with self._slot_free:
                self._slots -= 1
                self._slot_free.notify()
            self._update_gauges()
        if self.dead.is_set() or disconnected.is_set():
            raise ConnectionAbortedError
        self.c_prompt.inc(prompt_tokens)
        self.c_gen.inc(completion_tokens)
        self.c_success[finish].inc()
        self.h_ttft.observe(ttft)
        self.h_e2e.observe(time.monotonic() - started)
        rid = "chatcmpl-" + uuid.uuid4().hex
        # the body real vLLM 0.25 answers, key for key (tests/data/vllm-0.25.0-answers.json), plus "simulated"
        return 200, {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "refusal": None,
                        "annotations": None,
                        "audio": None,
                        "function_call": None,
                        "reasoning": None,
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "token_ids": None,
                    "routed_experts": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": f"vllm-simulated-{self.index}",
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "completion_tokens": completion_tokens,
                "prompt_tokens_details": None,
            },
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "metrics": None,
            "simulated": True,
        }

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.served,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": 32768,
                    "simulated": True,
                }
            ],
        }

    def stats(self) -> dict:
        return {
            "index": self.index,
            "url": self.url,
            "model": self.served,
            "knobs": self.knobs.public(),
            "chat_requests": self.chat_requests,
            "statuses": dict(self.statuses),
            "running": self.running,
            "media_fetches": dict(self.media_fetches),
            "waiting": self.waiting,
            "dead": bool(self.dead and self.dead.is_set()),
            "simulated": True,
        }


def prefill_s(prompt_tokens: int) -> float:
    return prompt_tokens * PREFILL_S_PER_TOKEN


# ---------------------------------------------------------------- ASGI app around a replica


class ReplicaApp:
    """A small ASGI app (no framework: fewer layers per request, and full control of hang/die)."""

    def __init__(self, replica: Replica):
        self.replica = replica

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        r = self.replica
        r._ensure_loop_objects()
        method, path = scope["method"], scope["path"]
        body = b""
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        disconnected = asyncio.Event()

        async def watch() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    disconnected.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            status, payload, ctype = await self._route(method, path, body, disconnected)
        except ConnectionAbortedError:
            return  # no answer at all: the connection is dropped (die) or the client left (hang)
        finally:
            watcher.cancel()
        r.statuses[status] = r.statuses.get(status, 0) + 1
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", ctype.encode()),
                    (b"content-length", str(len(data)).encode()),
                    (b"x-simulated", b"1"),
                    (b"x-decode-backend", DECODE_BACKEND.encode()),
                    (b"x-replica", r.url.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def _route(self, method: str, path: str, body: bytes, disconnected: asyncio.Event):
        r = self.replica
        js = "application/json"
        try:
            if path == "/v1/chat/completions" and method == "POST":
                try:
                    req = json.loads(body or b"{}")
                except ValueError as e:
                    raise SimError(400, f"invalid JSON body: {e}") from None
                if not isinstance(req, dict):
                    raise SimError(400, "the request body must be a JSON object")
                status, payload = await r.chat(req, disconnected)
                return status, payload, js
            if path == "/health" and method == "GET":
                return (503, b"", "text/plain") if r.knobs.unhealthy else (200, b"", "text/plain")
            if path == "/v1/models" and method == "GET":
                return 200, r.models(), js
            if path == "/metrics" and method == "GET":
                r.account()
                r.g_capacity.set(r.knobs.capacity)
                return 200, generate_latest(r.registry), "text/plain; version=0.0.4; charset=utf-8"
            if path == "/sim/knobs" and method in ("POST", "PUT"):
                changes = json.loads(body or b"{}")
                if not isinstance(changes, dict):
                    raise SimError(400, "knobs must be a JSON object")
                r.knobs.update(changes)
                if changes.get("die"):
                    asyncio.get_running_loop().call_later(0.05, r.die)
                return 200, r.knobs.public(), js
            if path in ("/sim/knobs", "/sim/stats") and method == "GET":
                return 200, r.stats(), js
            if path in ("/v1/chat/completions", "/health", "/v1/models", "/metrics"):
                raise SimError(405, "Method Not Allowed", "MethodNotAllowed")
            raise SimError(404, "Not Found", "NotFoundError")
        except SimError as e:
            return e.status, e.body(), js


# ---------------------------------------------------------------- running N replicas in one loop


def _bind(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP, and
    # without it every response (headers, then body) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve_fleet(
    replicas: int,
    port: int,
    root: str | Path,
    *,
    host: str = "127.0.0.1",
    model: str = "Qwen/Qwen3-VL-8B-Instruct",
    knobs: dict | None = None,
    seed: int = 0,
    on_ready: Callable[[list[str]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve `replicas` simulated replicas (ports port..port+N-1, or ephemeral ports if port is 0) until
    `stop` is set or every replica has died."""
    import uvicorn

    root = Path(root).resolve()
    if not root.is_dir():
        raise SystemExit(f"--allowed-local-media-path {root} is not a directory")
    probe = ProbeCache()
    stop = stop or asyncio.Event()
    servers, tasks, reps = [], [], []
    for i in range(replicas):
        k = Knobs()
        k.update(dict(knobs or {}))
        rep = Replica(i, root=root, model=model, knobs=k, probe=probe, seed=seed)
        sock = _bind(host, port + i if port else 0)
        bound = sock.getsockname()[1]
        rep.url = f"http://{host if ':' not in host else '[' + host + ']'}:{bound}"
        config = uvicorn.Config(
            ReplicaApp(rep),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=75,
            timeout_graceful_shutdown=1,
            http="h11",
        )
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # we handle signals
        rep.on_die = _killer(server)
        servers.append(server)
        reps.append(rep)
        tasks.append(asyncio.ensure_future(server.serve(sockets=[sock])))
    for _ in range(200):
        if all(s.started for s in servers) or any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.01)
    for t in tasks:
        if t.done() and t.exception():
            raise t.exception()
    if on_ready:
        on_ready([r.url for r in reps])
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopper, asyncio.gather(*tasks, return_exceptions=True)], return_when=asyncio.FIRST_COMPLETED)
    for r in reps:
        r.die()
    await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()


def _killer(server: Any) -> Callable[[], None]:
    """Stop listening at once and drop every open connection, like a process that died."""

    def kill() -> None:
        server.should_exit = True
        server.force_exit = True
        for srv in getattr(server, "servers", []) or []:
            srv.close()
        for conn in list(getattr(server.server_state, "connections", [])):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()

    return kill


# ---------------------------------------------------------------- in-process API for tests


class FleetHandle:
    """A running simulated fleet (in a thread or a child process) and its controls."""

    def __init__(self, urls: list[str], stop: Callable[[], None]):
        self.urls = urls
        self._stop = stop

    def _post_knobs(self, i: int, knobs: dict) -> dict:
        r = httpx.post(self.urls[i] + "/sim/knobs", json=knobs, timeout=5, trust_env=False)
        r.raise_for_status()
        return r.json()

    def set_knobs(self, i: int, **knobs: Any) -> dict:
        """Change replica i's failure knobs now (error_rate, unavailable_for, hang, die_after, slow, ...)."""
        return self._post_knobs(i, knobs)

    def kill_replica(self, i: int) -> None:
        """Make replica i stop listening and drop its connections (as if its process died)."""
        with contextlib.suppress(httpx.HTTPError):
            self._post_knobs(i, {"die": True})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                httpx.get(self.urls[i] + "/health", timeout=0.5, trust_env=False)
            except httpx.HTTPError:
                return
            time.sleep(0.02)
        raise RuntimeError(f"replica {i} still answers after kill")

    def stats(self, i: int) -> dict:
        return httpx.get(self.urls[i] + "/sim/stats", timeout=5, trust_env=False).json()

    def stop(self) -> None:
        self._stop()

    def __enter__(self) -> "FleetHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_fleet(
    replicas: int,
    port: int,
    root: str | Path,
    *,
    host: str = "127.0.0.1",
    model: str = "Qwen/Qwen3-VL-8B-Instruct",
    mode: str = "process",
    timeout: float = 30.0,
    seed: int = 0,
    **knobs: Any,
) -> FleetHandle:
    """Start a simulated fleet and wait until every replica answers /health.

    `port=0` picks free ephemeral ports (what tests want). `mode="process"` runs it in a child process in
    its own process group (real parallelism, killable); `mode="thread"` runs it on an event loop in a
    daemon thread of this process (cheaper to start)."""
    if mode == "thread":
        return _start_thread(replicas, port, root, host=host, model=model, timeout=timeout, seed=seed, knobs=knobs)
    ready = Path(tempfile.mkstemp(prefix="simfleet-", suffix=".json")[1])
    ready.unlink()
    cmd = [
        sys.executable,
        "-m",
        "serving.simfleet",
        "--replicas",
        str(replicas),
        "--port",
        str(port),
        "--allowed-local-media-path",
        str(root),
        "--host",
        host,
        "--model",
        model,
        "--ready-file",
        str(ready),
        "--seed",
        str(seed),
    ]
    for key, value in knobs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd += [flag] if value else []
        elif value is not None:
            cmd += [flag, str(value)]
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    proc = subprocess.Popen(cmd, start_new_session=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop() -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if proc.stderr:
            proc.stderr.close()
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            stop()
            raise RuntimeError(f"simulated fleet exited with {proc.returncode}: {err}")
        if ready.exists():
            try:
                urls = json.loads(ready.read_text())["urls"]
            except (ValueError, KeyError):
                time.sleep(0.02)
                continue
            handle = FleetHandle(urls, stop)
            handle.process = proc  # type: ignore[attr-defined]
            return handle
        time.sleep(0.02)
    stop()
    raise TimeoutError(f"simulated fleet not ready within {timeout} s")


def _start_thread(
    replicas: int, port: int, root: str | Path, *, host: str, model: str, timeout: float, seed: int, knobs: dict
) -> FleetHandle:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}
    stop_event: asyncio.Event | None = None

    def run() -> None:
        nonlocal stop_event
        asyncio.set_event_loop(loop)

        async def main() -> None:
            nonlocal stop_event
            stop_event = asyncio.Event()

            def on_ready(urls: list[str]) -> None:
                box["urls"] = urls
                ready.set()

            try:
                await serve_fleet(
                    replicas,
                    port,
                    root,
                    host=host,
                    model=model,
                    knobs=knobs,
                    seed=seed,
                    on_ready=on_ready,
                    stop=stop_event,
                )
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                box["error"] = e
                ready.set()

        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=run, name="simfleet", daemon=True)
    thread.start()
    if not ready.wait(timeout):
        raise TimeoutError(f"simulated fleet not ready within {timeout} s")
    if "error" in box:
        raise RuntimeError(f"simulated fleet failed to start: {box['error']!r}")

    def stop() -> None:
        if thread.is_alive() and stop_event is not None:
            loop.call_soon_threadsafe(stop_event.set)
            thread.join(10)

    handle = FleetHandle(box["urls"], stop)
    handle.thread = thread  # type: ignore[attr-defined]
    return handle


# ---------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    from data.settings import Settings

    defaults = Settings.load()
    p = argparse.ArgumentParser(
        prog="python -m serving.simfleet",
        description="Run a simulated vLLM fleet (OpenAI-compatible; output always marked simulated).",
        epilog="example: python -m serving.simfleet --replicas 8 --port 8000 --allowed-local-media-path "
        "var/clips --speed 0.5",
    )
    p.add_argument("--replicas", type=int, default=8, help="number of replicas (ports PORT..PORT+N-1)")
    p.add_argument(
        "--port",
        type=int,
        default=defaults.fleet_port,
        help="first replica port; 0 = free ephemeral ports (see --ready-file)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument(
        "--allowed-local-media-path",
        required=True,
        help="clip root: file:// URLs outside it are refused with vLLM's 400",
    )
    p.add_argument("--model", default=defaults.model_name, help="model name to imitate")
    p.add_argument("--speed", type=float, default=1.0, help="latency multiplier; 0 = answer at once")
    p.add_argument("--slow", type=float, default=1.0, help="extra latency factor (a slow replica)")
    p.add_argument("--capacity", type=int, default=DEFAULT_CAPACITY, help="requests run at once per replica")
    p.add_argument("--error-rate", type=float, default=0.0, help="share of requests answered HTTP 500")
    p.add_argument("--unavailable-for", type=float, default=0.0, help="answer 503 for this many seconds")
    p.add_argument("--hang", action="store_true", help="accept requests and never answer")
    p.add_argument("--die-after", type=int, default=None, help="stop listening after N chat requests")
    p.add_argument("--unhealthy", action="store_true", help="GET /health answers 503")
    p.add_argument("--seed", type=int, default=0, help="seed of the error-rate dice")
    p.add_argument(
        "--allowed-media-domains",
        default="",
        help="comma-separated hosts http(s) video URLs may come from (default: none; file:// only)",
    )
    p.add_argument("--ready-file", default=None, help='write {"urls": [...]} here once every replica listens')
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    knobs = {
        "speed": args.speed,
        "slow": args.slow,
        "capacity": args.capacity,
        "error_rate": args.error_rate,
        "unavailable_for": args.unavailable_for,
        "hang": args.hang,
        "die_after": args.die_after,
        "unhealthy": args.unhealthy,
        "allowed_media_domains": args.allowed_media_domains,
    }

    def on_ready(urls: list[str]) -> None:
        print(
            f"simulated fleet ready ({len(urls)} replicas, model {args.model}{SIM_SUFFIX}): " + " ".join(urls),
            flush=True,
        )
        if args.ready_file:
            tmp = args.ready_file + ".tmp"
            Path(tmp).write_text(json.dumps({"urls": urls, "pid": os.getpid()}))
            os.replace(tmp, args.ready_file)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_fleet(
            args.replicas,
            args.port,
            args.allowed_local_media_path,
            host=args.host,
            model=args.model,
            knobs=knobs,
            seed=args.seed,
            on_ready=on_ready,
            stop=stop,
        )

    try:
        asyncio.run(run())
    except OSError as e:
        print(f"simfleet: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
