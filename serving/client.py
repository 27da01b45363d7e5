"""The fleet client: one caption request to one OpenAI-compatible vLLM endpoint, checked and classified.

`FleetClient.caption(replica_url, req)` makes exactly ONE attempt and either returns a `CaptionResult`
(schema-valid labels, provenance) or raises a `serving.errors.FleetError` subclass saying whether a retry
can help. Retrying, spreading over replicas and bounding concurrency are the runner's job; `backoff()`
is the delay it should wait between attempts.
What the answer means (status codes, decode failures, the caption and its labels) is read by
serving.answers.

The request, as vLLM 0.25 reads it (checked in the vLLM 0.25.0 wheel):
- the user message holds the prompt's text, then the clip as a `video_url` content part: the system text and
  the instructions are then one prefix for every clip of a camera (the camera's phrase is in the text), which
  vLLM's prefix cache (on by default) prefills once. For `file://` URLs vLLM does
  `Path(url2pathname(netloc + path))` and refuses anything whose resolved path is not under
  `--allowed-local-media-path` (vllm/multimodal/media/connector.py `_load_file_url`), so we percent-quote
  the path and, before that, refuse any path that leaves the clip root ourselves (`clip_url`).
- `media_io_kwargs` is a top-level request field, `dict[modality, dict[str, Any]]`
  (vllm/entrypoints/openai/chat_completion/protocol.py, `ChatRequestMixin.media_io_kwargs`), merged per
  modality with the server's `--media-io-kwargs` (vllm/renderers/params.py -> `merge_media_io_kwargs`);
  for video a request-level `num_frames` drops the server default `fps`, and a request can never switch
  to a GPU decode backend the server did not start with (vllm/multimodal/media/video.py `merge_kwargs`).
  For Qwen3-VL, 0.25 samples frames with its own `qwen3_vl` sampler, which ignores `num_frames` and
  clamps `total / fps * 2` to `[min_frames, max_frames]` (the recipe starts the server with 16/16). So we
  send `{"video": {"num_frames": N, "min_frames": N, "max_frames": N}}`: N frames with either sampler (the
  server's recipe already passes min/max_frames to the NVDEC backend), and leave the backend to the server.
- `mm_processor_kwargs` is a top-level request field too, merged over the server's `--mm-processor-kwargs`
  key by key and handed to the HF processor; Qwen3-VL's video processor reads `size`
  (`{"shortest_edge", "longest_edge"}`, both required: a request's `size` replaces the server's whole) and
  keeps frames x height x width within `longest_edge` pixels. So a job's `max_pixels` is sent as
  `{"size": {"shortest_edge": MIN_PIXELS, "longest_edge": max_pixels}}`, what the recipe starts the server
  with at the recipe's value.
- `response_format={"type": "json_schema", ...}` for structured output, `max_completion_tokens`,
  `temperature`, `seed`.
- `logprobs: true, top_logprobs: k` (the job's `top_logprobs`; none when it is 0): the tokens of the answer with
  their k likeliest alternatives, from which serving.logprobs reads each label's confidence (docs/CONFIDENCE.md).
  vLLM refuses k above its `--max-logprobs` (default 20) with a 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Protocol
from urllib.parse import quote, unquote, urlsplit

import httpx

from data import limits, prompts, taxonomy
from data.job_params import MIN_PIXELS, JobParams
from data.library import deployment
from serving import bounded, fleet_key
from serving.answer_check import AnswerChecker
from serving.answers import classify_status, error_message, read_answer
from serving.errors import ClipRejected, FleetError, ReplicaError, Unreachable
from serving.fleet import tls as fleet_tls
from serving.redact import Redactor

DEFAULT_DECODE_BACKEND = "pynvvideocodec"
POOL_SLOTS = 8  # requests in flight per connection pool at most (FleetClient._pool)
MAX_ANSWER_BYTES = limits.MAX_ANSWER_BYTES
# An answer with logprobs carries, per generated token, the token and k alternatives (~60 bytes each in practice,
# a long token's a few hundred): the bound grows with what was asked, and no further.
LOGPROB_ENTRY_BYTES = 256
URL_SCHEMES = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class CaptionRequest:
    """One clip to caption with one prompt version and a job's parameters. `clip_path` is relative to the
    clip root."""

    clip_path: str
    prompt: dict
    params: JobParams = JobParams()
    # a signed http(s) URL of this clip for replicas on other nodes (serving.media_urls); None: file://
    media_url: str | None = None
    job_id: int | None = None
    camera: str | None = None  # a known camera id (data.prompts.camera_of); the prompt names it


@dataclass(frozen=True)
class CaptionResult:
    """A checked answer: caption text, schema-valid labels, and the provenance of every field
    in `data.captions.PROVENANCE_FIELDS`."""

    text: str
    labels: dict
    provenance: dict = field(default_factory=dict)


def backoff(attempt: int, *, base: float = 0.5, cap: float = 30.0, rng: Any = random) -> float:
    """Seconds to wait before retry number `attempt` (1 = first retry): full-jitter exponential,
    uniform in [0, min(cap, base * 2**(attempt-1))], so that many clients retrying at once spread out."""
    attempt = max(1, int(attempt))
    ceiling = min(cap, base * (2 ** min(attempt - 1, 62)))
    return rng.uniform(0.0, ceiling)


def _hostile(clip_path: str) -> str | None:
    """Why `clip_path` is refused before touching the file system, or None if its text is acceptable."""
    if not isinstance(clip_path, str) or not clip_path.strip():
        return "empty path"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in clip_path):
        return "control character (NUL, newline, ...) in path"
    if any(0xDC80 <= ord(ch) <= 0xDCFF for ch in clip_path):
        # a non-UTF-8 file name (surrogate escapes): vLLM decodes file:// URLs as UTF-8 and could not open it
        return "file name is not valid UTF-8"
    if URL_SCHEMES.match(clip_path) or "://" in clip_path:
        return "a URL is not a clip path"
    # Decode repeatedly: "%252e%252e%252f" is "../" to anything that decodes twice.
    seen = clip_path
    for _ in range(4):
        decoded = unquote(seen)
        if decoded == seen:
            break
        seen = decoded
    for candidate in {clip_path, seen}:
        if "\x00" in candidate:
            return "NUL in path"
        if candidate.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", candidate):
            return "absolute path"
        parts = re.split(r"[\\/]+", candidate)
        if any(p == ".." for p in parts):
            return "'..' in path"
    return None


def resolve_clip(settings: Any, clip_path: str, *, root: Path | None = None) -> Path:
    """The absolute, resolved file a clip path names, guaranteed inside `settings.clip_root` (`root`: that root
    already resolved, by a caller that resolves it once).

    Raises ClipRejected for absolute paths, `..`, URLs, NUL/control characters, percent-encoded
    traversal, and symlinks (at any level) that resolve outside the root. The file need not exist."""
    why = _hostile(clip_path)
    if why:
        raise ClipRejected(f"refused clip path {clip_path!r}: {why}", kind="path")
    root = root or Path(settings.clip_root).resolve()
    try:
        target = (root / clip_path).resolve(strict=False)
    except (OSError, RuntimeError, ValueError) as e:  # symlink loops, odd names
        raise ClipRejected(f"refused clip path {clip_path!r}: {e}", kind="path") from None
    # is_relative_to compares parts; `root in target.parents` built a Path per ancestor (~0.3 ms a request)
    if target == root or not target.is_relative_to(root):
        raise ClipRejected(f"refused clip path {clip_path!r}: it resolves outside the clip root", kind="path")
    return target


def clip_url(settings: Any, clip_path: str, *, media_base_url: str | None = None, root: Path | None = None) -> str:
    """The URL a replica fetches the clip from: `file://` under the clip root (what
    `--allowed-local-media-path` admits), or `media_base_url` + the quoted relative path when clips are
    served over HTTP(S) from shared storage. Raises ClipRejected for anything outside the root. `root`: the
    clip root already resolved."""
    root = root or Path(settings.clip_root).resolve()
    target = resolve_clip(settings, clip_path, root=root)
    if media_base_url:
        rel = target.relative_to(root)
        return media_base_url.rstrip("/") + "/" + quote(os.fsencode(rel.as_posix()), safe="/")
    return "file://" + quote(os.fsencode(str(target)), safe="/")


def answer_limit(params: JobParams) -> int:
    """The most bytes an answer to a request with `params` may take before it is refused unread (R10): the
    answer itself, plus room for the token logprobs asked for."""
    if not params.top_logprobs:
        return MAX_ANSWER_BYTES
    return MAX_ANSWER_BYTES + params.max_tokens * (params.top_logprobs + 1) * LOGPROB_ENTRY_BYTES


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL, the port spelled out (80/443 when the URL leaves it out): two
    URLs of one origin compare equal. None for anything else."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return None
    scheme = (u.scheme or "").lower()
    if scheme not in ("http", "https") or not u.hostname:
        return None
    return scheme, u.hostname.lower(), port or (443 if scheme == "https" else 80)


def content_part(body: dict, kind: str) -> dict:
    """The user message's content part of type `kind` ("video_url" or "text") in a request body `build_body` made
    (tests and the GPU recordings rewrite the clip's URL through it, whatever the parts' order)."""
    return next(p for p in body["messages"][-1]["content"] if p.get("type") == kind)


def _schema_name(prompt: dict) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", str(prompt.get("name") or "caption"))[:48] or "caption"
    return f"{name}_v{prompt.get('version', 1)}"


class FleetClient:
    """Async client for the fleet (one per event loop). Timeouts are explicit and the pools are large: the
    runner, not httpx, bounds how many requests are in flight. It keeps its own connection pools per replica
    (the only pooling the runner uses; docs/BENCHMARKS.md, "Job runner"). With a `checker` (the runner passes one)
    each answer is read in a checker process within a time budget (serving.answer_check); whoever made the checker
    closes it."""

    def __init__(
        self,
        settings: Any,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        media_base_url: str | None = None,
        decode_backend: str = DEFAULT_DECODE_BACKEND,
        timeout: httpx.Timeout | None = None,
        checker: AnswerChecker | None = None,
    ):
        self.settings = settings
        # reads each answer in a checker process with a time budget (serving.answer_check); None: here, unbounded
        self._checker = checker
        self.media_base_url = media_base_url
        # replicas fetch http(s) clips only from the app's origin, port included: --allowed-media-domains checks
        # the host alone, so a URL at another port of that host would reach whatever listens there
        try:
            allowed = media_base_url or deployment.media_base(settings)
        except (ValueError, AttributeError):
            allowed = ""
        self.media_origin = origin(allowed) if allowed else None
        # the key every replica the launcher starts requires (serving.fleet_key); none: a fleet that wants none.
        # Its redactor is the client's boundary: every error raised here has been through it (serving.redact)
        self.auth = fleet_key.auth(settings) if hasattr(settings, "data_dir") else fleet_key.FleetAuth(None, Redactor())
        self.decode_backend = decode_backend
        self.timeout = timeout or httpx.Timeout(
            connect=5.0, read=float(settings.request_timeout), write=30.0, pool=None
        )
        self._limits = httpx.Limits(max_connections=4096, max_keepalive_connections=1024, keepalive_expiry=30.0)
        self._transport = transport
        # Connection pools of at most POOL_SLOTS requests in flight, as many per replica as its load needs, the
        # least busy used first: httpcore's pool work per request grows with the number of connections in it
        # (measured: 1000 requests at 128 in flight to one pool cost 18 s of CPU, at 32 in flight 1.4 s), and
        # the runner keeps ~48 in flight per replica. With an injected transport: one client for everything.
        self._pools: dict[str, list[list]] = {}  # replica URL ("" with a transport) -> [[client, in flight], ...]
        self._ssl: ssl.SSLContext | None = None  # one for all pools: each transport's own costs ~25 ms to build
        # per prompt seen (keyed by the prompt object, kept so that its id stays its own): the response_format
        # sent with it; walking its schema and naming it for every request cost ~0.15 ms of CPU per clip
        self._formats: dict[int, tuple[dict, dict]] = {}
        self._root: Path | None = None  # the clip root, resolved once: the clip path is resolved per request

    @contextlib.asynccontextmanager
    async def _pool(self, replica_url: str) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one request to `replica_url`: the least busy pool, a new one if all are full."""
        key = "" if self._transport is not None else replica_url.rstrip("/")
        pools = self._pools.setdefault(key, [])
        pool = min(pools, key=lambda p: p[1], default=None)
        if pool is None or (pool[1] >= POOL_SLOTS and self._transport is None):
            pool = [self._new_client(), 0]
            pools.append(pool)
        pool[1] += 1
        try:
            yield pool[0]
        finally:
            pool[1] -= 1

    def _new_client(self) -> httpx.AsyncClient:
        transport = self._transport
        if transport is None:
            # TCP_NODELAY: httpx writes headers and body separately; without it the body can wait for
            # the server's delayed ACK (measured: 5.0 -> 2.4 ms per request on loopback).
            self._ssl = self._ssl or fleet_tls.context()  # the CAs the Fleet tab trusts too
            transport = httpx.AsyncHTTPTransport(
                verify=self._ssl, limits=self._limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            )
        return httpx.AsyncClient(
            transport=transport,
            timeout=self.timeout,
            limits=self._limits,
            headers={"user-agent": "clip-workbench", **self.auth.headers},
            trust_env=False,
        )

    def _response_format(self, prompt: dict) -> dict:
        """The structured-output request for `prompt`: the backend-safe form of whatever schema it stores (v1 of
        the preset carries `uniqueItems`, which xgrammar refuses); the answer is checked against the full one."""
        hit = self._formats.get(id(prompt))
        if hit is None or hit[0] is not prompt:
            schema = taxonomy.model_schema(prompt.get("schema") or taxonomy.CAPTION_SCHEMA)
            fmt = {
                "type": "json_schema",
                "json_schema": {"name": _schema_name(prompt), "schema": schema, "strict": True},
            }
            hit = self._formats[id(prompt)] = (prompt, fmt)
        return hit[1]

    def build_body(self, req: CaptionRequest) -> dict:
        """The JSON body of the chat completion request for `req` (raises ClipRejected for bad paths)."""
        self._root = self._root or Path(self.settings.clip_root).resolve()
        url = clip_url(self.settings, req.clip_path, media_base_url=self.media_base_url, root=self._root)  # refuses
        if req.media_url:
            url = req.media_url
        if not url.startswith("file://") and (self.media_origin is None or origin(url) != self.media_origin):
            where = "{}://{}:{}".format(*self.media_origin) if self.media_origin else "nowhere (clips go as file://)"
            raise ClipRejected(
                f"refused to send {url.split('?', 1)[0]}: replicas fetch clips only from the app's origin, {where}",
                kind="origin",
            )
        prompt, p = req.prompt, req.params
        body: dict[str, Any] = {
            "model": self.settings.model_name,
            "messages": [
                {"role": "system", "content": prompt.get("system") or ""},
                {
                    "role": "user",
                    # the instructions before the video: what every clip shares is then a prefix that vLLM's
                    # prefix cache computes once (docs/BENCHMARKS.md, "Prefill that is not repeated")
                    "content": [
                        {"type": "text", "text": prompts.render_user(prompt, req.camera)},
                        {"type": "video_url", "video_url": {"url": url}},
                    ],
                },
            ],
            "response_format": self._response_format(prompt),
            "media_io_kwargs": {"video": {"num_frames": p.frames, "min_frames": p.frames, "max_frames": p.frames}},
            "mm_processor_kwargs": {"size": {"shortest_edge": MIN_PIXELS, "longest_edge": p.max_pixels}},
            "max_completion_tokens": p.max_tokens,
            "temperature": p.temperature,
        }
        if p.seed is not None:
            body["seed"] = p.seed
        if p.top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = p.top_logprobs
        return body

    @staticmethod
    def _endpoint(replica_url: str, path: str) -> str:
        base = replica_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        return base + path

    async def caption(self, replica_url: str, req: CaptionRequest) -> CaptionResult:
        """Send one caption request to `replica_url` (a replica or the router); one attempt.

        Returns a checked CaptionResult or raises a FleetError subclass (see serving.errors). What the fleet wrote
        into either (an error's text, the replica and model an answer names) has been redacted: a replica may
        repeat our request, fleet key and signed clip URL included, and what it says is stored and shown."""
        try:
            result = await self._caption(replica_url, req)
        except FleetError as e:
            e.redacted(self.auth.redact)
            raise
        prov = result.provenance
        for k in ("model", "replica", "decode_backend", "finish_reason"):
            if isinstance(prov.get(k), str):
                prov[k] = self.auth.redact(prov[k])
        return result

    async def _caption(self, replica_url: str, req: CaptionRequest) -> CaptionResult:
        body = self.build_body(req)
        started = time.monotonic()
        # httpx's read timeout is per read: a replica that trickles a byte now and then would never time
        # out. The whole request gets one deadline too (R8: a hung replica holds no clip past it).
        deadline = float(self.settings.request_timeout)
        try:
            async with asyncio.timeout(deadline):
                resp = await self._read_bounded(replica_url, body, answer_limit(req.params))
        except TimeoutError:
            raise Unreachable(
                f"no complete answer from {replica_url} within {deadline:.0f} s", replica=replica_url, kind="timeout"
            ) from None
        except httpx.TimeoutException as e:
            raise Unreachable(
                f"{type(e).__name__}: no answer from {replica_url} within the timeout",
                replica=replica_url,
                kind="timeout",
            ) from None
        except httpx.ConnectError as e:
            raise Unreachable(f"cannot connect to {replica_url}: {e}", replica=replica_url, kind="connect") from None
        except httpx.TransportError as e:
            raise Unreachable(
                f"{type(e).__name__} talking to {replica_url}: {e}", replica=replica_url, kind="closed"
            ) from None
        latency_ms = (time.monotonic() - started) * 1000.0
        replica = (
            resp.headers.get("x-replica")
            or resp.headers.get("x-worker-url")
            or resp.headers.get("x-worker")
            or replica_url
        )
        if resp.status_code != 200:
            raise classify_status(resp.status_code, error_message(resp), replica)
        return await self._parse(resp, req, replica=replica, latency_ms=latency_ms)

    async def _read_bounded(self, replica_url: str, body: dict, limit: int = MAX_ANSWER_BYTES) -> httpx.Response:
        """POST and read the answer, at most `limit` bytes of it (`answer_limit`), counted after decompression
        as it streams (serving.bounded): an answer is a few KiB at any max_tokens we send (a few hundred with
        logprobs), and a few hostile answers of hundreds of MB, or small compressed ones, read unbounded take the
        runner to gigabytes (R10; issue 21, class 2). Larger, or in an encoding we do not decode under that
        bound, is a ReplicaError (retried elsewhere), read no further."""
        url = self._endpoint(replica_url, "/v1/chat/completions")
        async with (
            self._pool(replica_url) as client,
            client.stream("POST", url, json=body, headers=bounded.HEADERS) as resp,
        ):
            try:
                content = await bounded.read_async(resp, limit, what=f"answer from {replica_url}")
            except bounded.ReadRefused as e:
                raise ReplicaError(str(e), status=resp.status_code, replica=replica_url, kind=e.kind) from None
            return bounded.decoded(resp, content)

    async def _parse(
        self, resp: httpx.Response, req: CaptionRequest, *, replica: str, latency_ms: float
    ) -> CaptionResult:
        """The CaptionResult of a 200 answer: read by serving.answers.read_answer, in a checker process within its
        time budget when the client has a checker (the runner's: serving.answer_check), else here."""
        schema = req.prompt.get("schema") or taxonomy.CAPTION_SCHEMA
        confidence = bool(req.params.top_logprobs)
        if self._checker is not None:
            read = await self._checker.read(
                resp.content,
                schema,
                confidence=confidence,
                max_tokens=req.params.max_tokens,
                replica=replica,
                job=req.job_id,  # each job its share of the checkers
            )
        else:
            read = read_answer(
                resp.content, schema, confidence=confidence, max_tokens=req.params.max_tokens, replica=replica
            )
        model = read.model or limits.clip_text(str(self.settings.model_name))
        simulated = (resp.headers.get("x-simulated") == "1") or ("simulated" in model.lower())
        provenance = {
            "model": model,
            "prompt_id": req.prompt.get("id"),
            "prompt_name": req.prompt.get("name"),
            "prompt_version": req.prompt.get("version"),
            # the job's parameters under their own names (data.job_params), and the camera the prompt named
            "params": {**req.params.to_dict(), "camera": req.camera},
            "frames": req.params.frames,
            "replica": limits.clip_text(replica),
            "decode_backend": limits.clip_text(resp.headers.get("x-decode-backend") or self.decode_backend),
            "latency_ms": round(latency_ms, 1),
            "prompt_tokens": read.prompt_tokens,
            "completion_tokens": read.completion_tokens,
            "finish_reason": "stop",
            "simulated": bool(simulated),
            # what the model's token probabilities say of each label (None: not asked for; a note when asked for
            # and not returned, e.g. a fleet that ignores logprobs, or unreadable)
            "confidence": read.confidence,
        }
        return CaptionResult(text=read.text, labels=read.labels, provenance=provenance)

    async def models(self, replica_url: str) -> list[str]:
        """Model ids served at `replica_url` (GET /v1/models); an error is redacted as `caption`'s are."""
        try:
            return await self._models(replica_url)
        except FleetError as e:
            e.redacted(self.auth.redact)
            raise

    async def _models(self, replica_url: str) -> list[str]:
        try:
            async with self._pool(replica_url) as client:
                resp = await bounded.fetch(
                    client,
                    "GET",
                    self._endpoint(replica_url, "/v1/models"),
                    max_bytes=MAX_ANSWER_BYTES,
                    seconds=float(self.settings.request_timeout),
                )
        except bounded.ReadRefused as e:
            raise ReplicaError(str(e), replica=replica_url, kind=e.kind) from None
        except httpx.TimeoutException:
            raise Unreachable(f"no answer from {replica_url}", replica=replica_url, kind="timeout") from None
        except httpx.TransportError as e:
            raise Unreachable(f"cannot reach {replica_url}: {e}", replica=replica_url, kind="connect") from None
        if resp.status_code != 200:
            raise classify_status(resp.status_code, error_message(resp), replica_url)
        return [m["id"] for m in resp.json().get("data", [])]

    async def aclose(self) -> None:
        pools, self._pools = [p for ps in self._pools.values() for p in ps], {}
        for client, _ in pools:
            await client.aclose()

    async def __aenter__(self) -> "FleetClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class CaptionClient(Protocol):
    """What the runner needs of a client: one attempt per call, a CaptionResult or a FleetError. FleetClient is
    one; tests pass fakes. Whoever makes a client closes it (the runner closes only the ones it makes)."""

    async def caption(self, replica_url: str, req: CaptionRequest) -> CaptionResult: ...
