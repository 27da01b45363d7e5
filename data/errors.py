"""What the data layer refuses on purpose, as one small exception hierarchy.

    DataError                  base: a refusal, never a bug; str(e) is a message fit to show a user
    ├── NotFound               no such clip, caption version, job, prompt or user
    ├── Conflict               a save or decision based on a stale version: someone changed the record
    │                          first (.current holds what is there now)
    ├── Forbidden              the user's role does not allow the action
    ├── TooLarge               an input over one of data.limits' bounds (the message names the limit)
    ├── TooFast                saves faster than a person makes them (data.limits.SaveRate; says how long to wait)
    ├── InvalidLabels          labels, or a model's answer, that do not fit the taxonomy's schema
    ├── InvalidJobParams       a job parameter out of range (the message says what to use instead)
    ├── InvalidPrompt          a prompt version that cannot be saved: its schema is refused by the fleet's
    │                          structured-output backend, or its answers would not be the taxonomy's labels
    ├── BadCursor              a page cursor that data.order did not make for that order (tampered,
    │                          truncated, or from another order)
    ├── SearchSyntaxError      a search data.search cannot run as written (the message says what to write)
    ├── RootMismatch           ingest asked to scan a folder that is not the library's clip root
    ├── RootMissing            the recorded clip root is not a folder any more (moved, unmounted)
    ├── DeploymentMismatch     a setting (role, media base, TTL) that contradicts the recorded deployment
    │                          (data.deployment; the message names the command that changes the record)
    ├── UnreadableJson         JSON a person gave that is not read: not JSON, too deep, a number out of range
    │                          (a ValueError too, as json.loads' own refusals are; data.limits.outside_json)
    ├── Unstorable             JSON that parses but would not be stored as the value it holds (a ValueError
    │                          too; data.limits.storable_json)
    ├── PatternRefused         a schema `pattern` RE2 cannot match in linear time (a ValueError too;
    │                          data.schema_keywords: the message says why and what to write instead)
    │   defined in the library wing:
    └── library.media.DecodeError  a clip whose frames cannot be decoded (stored as the clip's probe error)

The edges catch `DataError` once and show its message (webapp: `gr.Error` or an inline message; CLIs: one
line on stderr and a non-zero exit); a subclass is caught apart only where the edge does something else with
it (a `Conflict` offers a reload). Errors that are not refusals (SQLite's own, a library's unexpected one)
are not in this tree: they are bugs or outages, and reach the logs as they are.
"""

from __future__ import annotations


class DataError(Exception):
    """Base of every error the data layer raises on purpose (message fit for a user)."""


class NotFound(DataError):
    """The record asked for does not exist."""


class Conflict(DataError):
    """A save based on a stale version: someone else changed the record first."""

    def __init__(self, message: str, *, current: dict | None = None):
        super().__init__(message)
        self.current = current or {}


class Forbidden(DataError):
    """The user's role does not allow this action."""


class TooLarge(DataError):
    """An input over its bound: refused with a message naming the limit."""


class TooFast(DataError):
    """Saves faster than a person makes them: refused with how long to wait (the edit stays in the form)."""


class InvalidLabels(DataError):
    """Labels or a model answer that do not fit the taxonomy's schema; the message names the first problem."""


class InvalidJobParams(DataError):
    """A job parameter out of range; the message says which and what to use."""


class InvalidPrompt(DataError):
    """A prompt version that cannot be saved; the message lists every change it needs."""


class BadCursor(DataError):
    """A page cursor that is not one data.order made for the order it is used with."""


class SearchSyntaxError(DataError):
    """A search that cannot be run as written (it cannot be read, or it is over a bound); the message says what
    to write instead."""


class RootMismatch(DataError):
    """Ingest was asked to scan a folder that is not this library's clip root."""


class RootMissing(DataError):
    """The recorded clip root is not a folder any more (moved, unmounted)."""


class DeploymentMismatch(DataError):
    """A role, media base or TTL that says something else than the library's recorded deployment."""


class UnreadableJson(DataError, ValueError):
    """JSON from outside (typed by a person, or a file they gave) that is not read: not JSON, too deep, a
    number a double cannot hold. A ValueError too, for callers that treat any unreadable text alike."""


class Unstorable(DataError, ValueError):
    """JSON that parses but would not be stored as the value it holds (a ValueError too, as json.loads' own
    refusals are: its readers catch both alike)."""


class PatternRefused(DataError, ValueError):
    """A schema `pattern` RE2 cannot express; its message says why and what to write instead."""


__all__ = [
    "BadCursor",
    "Conflict",
    "DataError",
    "DeploymentMismatch",
    "Forbidden",
    "InvalidJobParams",
    "InvalidLabels",
    "InvalidPrompt",
    "NotFound",
    "PatternRefused",
    "RootMismatch",
    "RootMissing",
    "SearchSyntaxError",
    "TooFast",
    "TooLarge",
    "UnreadableJson",
    "Unstorable",
]
