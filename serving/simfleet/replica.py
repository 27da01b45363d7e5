"""One simulated vLLM server: its state, its faults, its queue, and what it does with a chat request.

A request goes through the fault knobs first (die_after, the served model, a 503 window, the error-rate dice,
hang), then is read as vLLM reads it, its clip opened (a `file://` path inside the allowed root, or an http(s)
URL from an allowed domain), queued for one of `capacity` slots, held for the latency model's time, and
answered. The order of the checks is vLLM's, so that each bad input gets the error real vLLM gave first.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx

from serving.simfleet import answers, costs, logprobs
from serving.simfleet.answers import SIM_SUFFIX
from serving.simfleet.errors import SimError
from serving.simfleet.knobs import Knobs
from serving.simfleet.metrics import ReplicaMetrics
from serving.simfleet.probe import ClipInfo, ProbeCache, probe_file

FETCH_TIMEOUT_ENV = "VLLM_VIDEO_FETCH_TIMEOUT"  # vLLM's name and default (vllm/envs.py): seconds per fetch
FETCH_TIMEOUT_DEFAULT_S = 30.0
# vLLM 0.25 reads a fetched clip whole, with no bound of its own; the simulator spools it to a temporary file (so a
# large one costs disk, not memory) and stops at this many bytes, far above any clip
MAX_MEDIA_BYTES = 4 << 30


async def fetch_media(url: str, into: Path) -> int:
    """Fetch a clip over http(s) into the file `into`; its size. Fails as vLLM 0.25's MediaConnector fails
    (vllm/multimodal/media/connector.py, `_wrap_media_fetch_error`; vllm/entrypoints/utils.py,
    `create_error_response`): an answer of 4xx other than 408/429 is the request's fault, a 422
    `Failed to fetch media from URL: HTTP <status> error (parameter=image_url, value=<url>)`; a 5xx, 408 or 429 is
    aiohttp's ClientResponseError, a timeout (VLLM_VIDEO_FETCH_TIMEOUT) or a refused connection aiohttp's own
    error, each answered 500 InternalServerError with the exception's text, which our client retries."""
    timeout = float(os.environ.get(FETCH_TIMEOUT_ENV) or FETCH_TIMEOUT_DEFAULT_S)
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(timeout=None, trust_env=False) as c:
            async with c.stream("GET", url) as r:
                if r.status_code >= 400:
                    if r.status_code < 500 and r.status_code not in (408, 429):
                        raise SimError(
                            422,
                            f"Failed to fetch media from URL: HTTP {r.status_code} error "
                            f"(parameter=image_url, value={url})",
                            "UnprocessableEntityError",
                            "image_url",
                        )
                    raise SimError(
                        500,
                        f"{r.status_code}, message={r.reason_phrase!r}, url={url!r}",
                        "InternalServerError",
                    )
                size = 0
                with into.open("wb") as f:
                    async for chunk in r.aiter_raw():
                        size += len(chunk)
                        if size > MAX_MEDIA_BYTES:
                            raise SimError(
                                500,
                                f"the simulator reads at most {MAX_MEDIA_BYTES} bytes of a clip",
                                "InternalServerError",
                            )
                        f.write(chunk)
                return size
    except TimeoutError:
        raise SimError(500, "", "InternalServerError") from None  # asyncio.TimeoutError's text is empty
    except httpx.HTTPError as e:
        host = urlsplit(url).netloc
        raise SimError(500, f"Cannot connect to host {host} ssl:default [{e}]", "InternalServerError") from None


class SimReplica:
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
        self.at_once = 0  # chat requests between arrival and answer now, and the most there ever were
        self.most_at_once = 0
        self.statuses: dict[int, int] = {}
        self.media_fetches: dict[str, int] = {"file": 0, "http": 0}  # clips opened, by URL scheme
        self._running = 0
        self.waiting = 0
        self._slots = 0  # running requests holding a capacity slot
        # asyncio objects are created lazily, inside the loop that serves this replica
        self._slot_free: asyncio.Condition | None = None
        self.dead: asyncio.Event | None = None
        self.on_die: Callable[[], None] | None = None
        self.metrics = ReplicaMetrics(self.served)

    @property
    def running(self) -> int:
        return self._running

    @running.setter
    def running(self, value: int) -> None:
        self.metrics.set_running(value)
        self._running = value

    # -- lifecycle helpers
    def ensure_loop_objects(self) -> None:
        if self._slot_free is None:
            self._slot_free = asyncio.Condition()
            self.dead = asyncio.Event()

    def die(self) -> None:
        self.ensure_loop_objects()
        if not self.dead.is_set():
            self.dead.set()
            if self.on_die:
                self.on_die()

    def _update_gauges(self) -> None:
        m = self.metrics
        m.running.set(self.running)
        m.waiting.set(self.waiting)
        m.kv.set(min(1.0, self._slots / max(1, self.knobs.capacity) * 0.9))

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
            # a clip opened before costs one stat here; only opening a new one goes to a worker thread (a thread
            # hop per request is the largest cost of an answer after the JSON work)
            info = self.probe.cached(filepath) or await asyncio.to_thread(self.probe.probe, filepath)
            self.media_fetches["file"] += 1
            return str(resolved.relative_to(self.root)), info
        if parts.scheme in ("http", "https"):
            allowed = [d for d in self.knobs.allowed_media_domains.split(",") if d]
            if not allowed:
                # vLLM with no --allowed-media-domains fetches anything; the simulator fetches nothing (S4: no SSRF)
                raise SimError(400, "http(s) video URLs are refused: no --allowed-media-domains given (S4)")
            if (parts.hostname or "").lower() not in allowed:
                # vLLM's MediaConnector._assert_url_in_allowed_media_domains, a ValueError: 400
                raise SimError(
                    400,
                    f"The URL must be from one of the allowed domains: {allowed}. Input URL domain: {parts.hostname}",
                )
            fd, name = tempfile.mkstemp(prefix="simfleet-", suffix=".mp4")
            os.close(fd)
            try:
                size = await fetch_media(url, Path(name))
                info = await asyncio.to_thread(probe_file, Path(name), size)
            finally:
                os.unlink(name)
            if isinstance(info, SimError):
                raise info
            self.media_fetches["http"] += 1
            return parts.path, info
        raise SimError(400, "The URL must be either a HTTP, data or file URL.")

    # -- the chat endpoint
    async def _check_faults(self, body: dict, disconnected: asyncio.Event) -> None:
        """The fault knobs and the model name, in the order a request meets them; returns if it may go on."""
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

    async def _hold_slot(self, first_s: float, gen_s: float, started: float) -> float:
        """Queue for one of `capacity` slots, then take the request's time; returns the time to first token."""
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
        return ttft

    async def chat(self, body: dict, disconnected: asyncio.Event) -> tuple[int, dict]:
        """Answer one `/v1/chat/completions` body: (200, completion), or raise SimError (vLLM's error answer)
        or ConnectionAbortedError (no answer at all: the replica died, or the client left a hung request)."""
        self.ensure_loop_objects()
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            return await self._chat(body, disconnected)
        finally:
            self.at_once -= 1

    async def _chat(self, body: dict, disconnected: asyncio.Event) -> tuple[int, dict]:
        started = time.monotonic()
        self.chat_requests += 1
        await self._check_faults(body, disconnected)
        req = answers.read_request(body)
        clip_key, info = ("", None)
        if req.video_url:
            clip_key, info = await self.load_clip(req.video_url)
            need = costs.decode_bytes(info, req.frames)
            if need > costs.DECODE_BUDGET_BYTES:
                raise SimError(
                    400,
                    f"Video of {info.width}x{info.height} needs {need} bytes to decode {req.frames} "
                    f"frames, more than the decode budget of {costs.DECODE_BUDGET_BYTES} bytes per API "
                    "server (--mm-ipc-gpu-memory-gb)",
                )
        refused = logprobs.too_many(req.top_logprobs or 0)  # checked after the media, as vLLM's engine does
        if refused:
            raise SimError(400, refused, "BadRequestError", "logprobs")
        answer = answers.answer_text(clip_key, info, req)
        tokens, finish = answer.tokens, answer.finish
        prompt_tokens = answers.estimate_prompt_tokens(body, info, req.frames, req.max_pixels)
        # latency: queue for a slot, then decode + prefill + generation
        factor = self.knobs.slow * self.knobs.speed
        first_s = (costs.decode_s(info, req.frames) + costs.prefill_s(prompt_tokens)) * factor
        ttft = await self._hold_slot(first_s, costs.generation_s(tokens) * factor, started)
        if self.dead.is_set() or disconnected.is_set():
            raise ConnectionAbortedError
        self.metrics.observe(prompt_tokens, tokens, finish, ttft, time.monotonic() - started)
        return 200, answers.completion_body(self.served, self.index, answer, prompt_tokens)

    def models(self) -> dict:
        return answers.models_body(self.model)

    def stats(self) -> dict:
        return {
            "index": self.index,
            "url": self.url,
            "model": self.served,
            "knobs": self.knobs.public(),
            "chat_requests": self.chat_requests,
            "most_at_once": self.most_at_once,  # what a real replica's API servers would have held at once
            "statuses": dict(self.statuses),
            "running": self.running,
            "media_fetches": dict(self.media_fetches),
            "waiting": self.waiting,
            "dead": bool(self.dead and self.dead.is_set()),
            "simulated": True,
        }
