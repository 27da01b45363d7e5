"""What can go wrong when asking the fleet for a caption, as a small exception hierarchy.

    FleetError                 base: .kind, .retryable, .status, .replica
    ├── ClipRejected           the clip itself is the problem: 400/422, a decode-failure 500
    │                          (CreateFormatContext / Invalid data found / Could not open video),
    │                          or a path outside the clip root. Never retried.
    ├── BadAnswer              HTTP 200, but the answer is unusable: finish_reason != "stop" (e.g. "length":
    │                          truncated), JSON invalid, or not schema-valid. Not retried (same prompt, same
    │                          limits, same answer).
    ├── ReplicaError           any other 5xx: the server failed. Retried elsewhere with backoff.
    ├── Overloaded             503 / 429: the replica is busy or its engine is down. Retried with backoff.
    ├── Unreachable            connect error, read timeout, remote closed. Retried elsewhere.
    │   defined beside their use (never raised out of the fleet client: it turns them into the ones above):
    ├── bounded.ReadRefused    an answer not read in full: Oversized, TooSlow, BadEncoding (serving.bounded)
    ├── fleet_key.FleetKeyError    the data dir's fleet key file is missing where it must exist, or not a key
    └── media_urls.MediaKeyError   the media URL signing key cannot be trusted (wrong size, readable by others)

The runner decides what to do from `retryable` alone; `kind` is a short stable word stored on the job
item (`last_error` kind) so leads can group failures. The message is fit to show a user: the fleet client
(serving.client) redacts every error it raises (`redacted`: no fleet key, bearer token or URL signature, whatever
a replica put in its answer).
"""

from __future__ import annotations

from typing import Callable


class FleetError(Exception):
    """Base of every error the fleet client raises on purpose."""

    kind: str = "fleet"
    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, replica: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.replica = replica
        if kind is not None:
            self.kind = kind

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, kind={self.kind!r}, status={self.status!r}, "
            f"replica={self.replica!r})"
        )

    def redacted(self, redact: Callable[[str], str]) -> "FleetError":
        """This error with `redact` applied to every text the fleet may have written into it (its message, the
        replica it names, a bad answer's raw text): the fleet client's boundary does this (serving.redact)."""
        self.message = redact(self.message)
        self.args = (self.message,)
        self.replica = redact(self.replica) if self.replica else self.replica
        return self


class ClipRejected(FleetError):
    """The clip cannot be captioned as sent (bad request, undecodable video, path outside the root)."""

    kind = "rejected"
    retryable = False


class BadAnswer(FleetError):
    """The model answered, but the answer is truncated, not JSON, or does not fit the schema. `raw` holds the
    start of what the model said (at most RAW_ANSWER_CHARS), so a lead can see it on the failed item."""

    kind = "bad_answer"
    retryable = False
    RAW_ANSWER_CHARS = 4000

    def __init__(self, message: str, *, raw: str | None = None, **kw):
        super().__init__(message, **kw)
        self.raw = raw[: self.RAW_ANSWER_CHARS] if isinstance(raw, str) else None

    def redacted(self, redact: Callable[[str], str]) -> "BadAnswer":
        super().redacted(redact)
        self.raw = redact(self.raw) if self.raw else self.raw
        return self


class ReplicaError(FleetError):
    """The replica failed on its side (5xx other than a decode failure or 503)."""

    kind = "replica"
    retryable = True


class Overloaded(FleetError):
    """The replica is overloaded or not serving (503/429); try again later or elsewhere."""

    kind = "overloaded"
    retryable = True


class Unreachable(FleetError):
    """No answer: connection refused, timed out, or closed mid-response."""

    kind = "unreachable"
    retryable = True


__all__ = [
    "BadAnswer",
    "ClipRejected",
    "FleetError",
    "Overloaded",
    "ReplicaError",
    "Unreachable",
]
