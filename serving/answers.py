"""Reading a replica's answer: the FleetError an HTTP status and message mean (`classify_status`), and everything a
finished answer says (`read_answer`): the caption and labels checked against the prompt's schema (`parse_answer`),
the token counts, the model's name and the labels' confidence (serving.logprobs). serving.client sends the
request and uses these on what comes back (through serving.answer_check, in a process of its own with a time
budget, for the runner); tests feed them the answers recorded from real vLLM 0.25.

What the fleet sends is read, never trusted: `read_answer` raises nothing but a FleetError (BadAnswer: the answer is
unusable, not retried; ReplicaError: not a chat completion at all, retried elsewhere), whatever the bytes. A token
count, a model name or a confidence that cannot be read is None (a confidence with a note), never a failed caption
(tests/serving/test_answers.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import orjson

from data import limits, taxonomy
from data.errors import InvalidLabels
from serving.errors import BadAnswer, ClipRejected, FleetError, Overloaded, ReplicaError
from serving.logprobs import label_confidence

# A 500 whose message says the video could not be decoded is the clip's fault: retrying cannot help. Each marker
# is what real vLLM 0.25 + NVDEC answered (tests/recordings/vllm-0.25.0-answers.json): CreateFormatContext for data that
# is not a video, SimpleDecoder for a container without a video stream, "list index out of range" for an MP4
# whose media data is cut short (the frame sampler indexes frames that are not there).
DECODE_FAILURE_MARKERS = (
    "CreateFormatContext",
    "Invalid data found",
    "Could not open video",
    "moov atom not found",
    "Error opening video",
    "Failed to decode video",
    "SimpleDecoder",
    "Could not find stream",
    "list index out of range",
)
# vLLM 0.25 answers a missing file with a 500 carrying the OSError text.
MISSING_FILE_MARKERS = ("No such file or directory", "Is a directory")
# vllm-router 0.1.17 answers 503 with this text (text/plain) when it has no worker to send to: every worker's circuit
# breaker is open (after --cb-failure-threshold failures) or its health check fails. Seen from the installed router
# in front of simulated replicas that answer 500 to everything (tests/browser/test_browser_fleet_failing.py).
ROUTER_NO_WORKERS = "No available workers"


def token_count(value: Any) -> int | None:
    """A token count from the answer, or None for anything that is not a sane integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9 else None


def error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(body, dict) and body.get("detail"):
            return str(body["detail"])
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (ValueError, AttributeError):
        pass
    return resp.text[:500] or resp.reason_phrase


def classify_status(status: int, message: str, replica: str | None = None) -> FleetError:
    """The FleetError for a non-200 answer, as vLLM and vllm-router use the codes: 400/413/422 are the clip's
    fault (never retried), 429/503 mean overloaded or engine dead (retry with backoff), other 5xx are retried a
    few times elsewhere, except a 500 whose message shows a decode failure or a missing file: that is the
    clip's fault."""
    text = f"HTTP {status}: {message}"
    if status == 401:  # a replica or the router gate refused our fleet key: the same for every clip
        text += (
            " (the fleet refused the fleet key: the key in this data dir must be the one the replicas were started "
            "with; see python -m serving.fleet_key)"
        )
    if status in (400, 413, 422):
        return ClipRejected(text, status=status, replica=replica, kind="bad_request")
    if status == 503 and ROUTER_NO_WORKERS in message:  # the router's breaker: the replicas failed (runner.replicas)
        return Overloaded(text, status=status, replica=replica, kind="no_workers")
    if status in (429, 503):
        return Overloaded(text, status=status, replica=replica)
    if status == 500 and any(m in message for m in DECODE_FAILURE_MARKERS):
        return ClipRejected(text, status=status, replica=replica, kind="decode")
    if status == 500 and any(m in message for m in MISSING_FILE_MARKERS):
        return ClipRejected(text, status=status, replica=replica, kind="missing")
    if status >= 500 or status == 408:
        return ReplicaError(text, status=status, replica=replica)
    # 401/403/404 (wrong model name, auth): no retry helps; the message says what to fix.
    return ClipRejected(text, status=status, replica=replica, kind=f"http_{status}")


# C0 controls and DEL, which grammar-constrained decoding can emit raw inside a JSON string (seen on vLLM 0.25 +
# xgrammar: json.loads -> "Invalid control character"); tabs and newlines are kept
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean_text(value: str) -> str:
    """Model text fit to store and show: raw control characters become spaces, lone surrogates (legal as JSON
    escapes, not encodable as UTF-8) become U+FFFD, runs of spaces collapse, ends are trimmed."""
    value = _SURROGATE.sub("\ufffd", _CONTROL.sub(" ", value))
    return re.sub(r"[ ]{2,}", " ", value).strip()


def parse_answer(content: Any, schema: dict, *, replica: str | None = None) -> tuple[str, dict]:
    """(caption, labels) from a finished answer's message content, or BadAnswer carrying the raw text.

    Tolerant where the grammar is lenient and the meaning is clear: raw control characters inside strings are
    accepted (`strict=False`) and cleaned, surrounding whitespace is ignored; a caption that is blank after
    cleaning, JSON that is not one object, or labels off the taxonomy are refused."""
    raw = content if isinstance(content, str) else None
    try:
        answer = json.loads(content if isinstance(content, str) else "", strict=False)
    except (ValueError, RecursionError) as e:
        raise BadAnswer(
            f"the answer is not JSON ({e}): {str(content)[:200]!r}",
            status=200,
            replica=replica,
            kind="invalid_json",
            raw=raw,
        ) from None
    if not isinstance(answer, dict):
        raise BadAnswer(
            f"the answer is JSON but not an object: {str(content)[:200]!r}",
            status=200,
            replica=replica,
            kind="schema",
            raw=raw,
        )
    if isinstance(answer.get("caption"), str):
        answer["caption"] = clean_text(answer["caption"])
        if not answer["caption"]:
            raise BadAnswer("the answer's caption is empty", status=200, replica=replica, kind="schema", raw=raw)
    for name in taxonomy.MULTI:  # a list label holds strings: anything else is refused before the schema's
        value = answer.get(name)  # checks, whose uniqueItems compares unsortable items pair by pair
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise BadAnswer(f"{name}: every item must be a string", status=200, replica=replica, kind="schema", raw=raw)
    try:
        return taxonomy.split_answer(answer, schema)
    except InvalidLabels as e:
        raise BadAnswer(str(e), status=200, replica=replica, kind="schema", raw=raw) from None


@dataclass(frozen=True)
class AnswerRead:
    """What a finished answer says, read and checked: the caption and its schema-valid labels, the model's name
    (None when the answer names none as text), the token counts (None when not a sane integer) and the labels'
    confidence (None when not asked for; with a `note` when unreadable)."""

    text: str
    labels: dict
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    confidence: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _what(value: Any) -> str:
    """A value from an answer, fit to quote in a message: strings clipped, anything else by its type's name
    (never its repr: a hostile value can be megabytes or nested a thousand deep)."""
    return repr(value[:40]) if isinstance(value, str) else type(value).__name__


def load_body(body: bytes) -> Any:
    """The JSON of an answer's body, or ValueError. orjson reads real answers ~2.5x faster than json (a vLLM answer
    with logprobs is ~220 KB: docs/BENCHMARKS.md, "Job runner"); what it refuses and json reads (NaN, integers past
    64 bits, thousands of digits) is read by json; nesting past either's depth limit is ValueError, never
    RecursionError."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body, parse_int=_integer)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _integer(digits: str) -> int | float:
    """An integer of the answer; past Python's 4,300 digits a float (inf), which no reader takes for a count or a
    logprob, instead of a ValueError that would refuse the whole answer."""
    return int(digits) if len(digits) < 4000 else float(digits)


def read_answer(
    body: bytes, schema: dict | None, *, confidence: bool, max_tokens: Any = None, replica: str | None = None
) -> AnswerRead:
    """Read a 200 answer's body (bytes, as received): the caption, labels, model, token counts and (with
    `confidence`) the labels' confidence from its token logprobs. Raises ReplicaError for a body that is not a chat
    completion, BadAnswer for an answer that is unusable (not finished, not JSON, off the schema), and nothing
    else (the module docstring)."""
    try:
        return _read(body, schema, confidence=confidence, max_tokens=max_tokens, replica=replica)
    except FleetError:
        raise
    except Exception as e:  # a reader's bug must not fail the runner: the answer is unusable, said so, not retried
        raise BadAnswer(
            f"the answer could not be read ({type(e).__name__})", status=200, replica=replica, kind="unreadable"
        ) from None


def _read(body: bytes, schema: dict | None, *, confidence: bool, max_tokens: Any, replica: str | None) -> AnswerRead:
    try:
        data = load_body(body)
        choice = data["choices"][0]
        finish = choice.get("finish_reason")
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        logprobs = choice.get("logprobs")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        start = body[:200].decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else ""
        raise ReplicaError(f"HTTP 200 without a chat completion body: {start!r}", status=200, replica=replica) from None
    if finish != "stop":
        kind = "truncated" if finish == "length" else "unfinished"
        raise BadAnswer(
            f"the model stopped with finish_reason={_what(finish)} (max_tokens={max_tokens}); the answer is incomplete",
            status=200,
            replica=replica,
            kind=kind,
            raw=content if isinstance(content, str) else None,
        )
    schema = schema or taxonomy.CAPTION_SCHEMA
    text, labels = parse_answer(content, schema, replica=replica)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    model = data.get("model")
    return AnswerRead(
        text=text,
        labels=labels,
        model=limits.clip_text(model) if isinstance(model, str) and model else None,
        prompt_tokens=token_count(usage.get("prompt_tokens")),
        completion_tokens=token_count(usage.get("completion_tokens")),
        # None: not asked for; a note when asked for and not returned (e.g. a fleet that ignores logprobs)
        confidence=label_confidence(content, logprobs or {}, schema) if confidence else None,
    )
