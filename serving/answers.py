"""Reading a replica's answer: the FleetError an HTTP status and message mean (`classify_status`), and the caption
and labels in a finished answer (`parse_answer`), checked against the prompt's schema. serving.client sends the
request and uses these on what comes back; tests feed them the answers recorded from real vLLM 0.25."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from data import taxonomy
from data.errors import InvalidLabels
from serving.errors import BadAnswer, ClipRejected, FleetError, Overloaded, ReplicaError

# A 500 whose message says the video could not be decoded is the clip's fault: retrying cannot help. Each marker
# is what real vLLM 0.25 + NVDEC answered (tests/data/vllm-0.25.0-answers.json): CreateFormatContext for data that
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
        answer = json.loads(content or "", strict=False)
    except (ValueError, TypeError) as e:
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
    try:
        return taxonomy.split_answer(answer, schema)
    except InvalidLabels as e:
        raise BadAnswer(str(e), status=200, replica=replica, kind="schema", raw=raw) from None
