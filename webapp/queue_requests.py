"""What a request to Gradio's queue must look like before the guard lets it reach Gradio (issue 46, point 5).

Gradio reads the bodies of `queue/join`, `cancel` and `reset` with pydantic and answers what it cannot read with
FastAPI's 422 list of validation errors (the field names and types of its own models), and a join whose
`fn_index` names no event of the app with a plain 500 and a 13.9 KB traceback in the log. Neither is an answer
for a person, and the traceback is a write a request can make the server do. The page itself never sends such
a request: so the guard (webapp.guard) refuses each one here, with a sentence and a 400, before Gradio reads it.

`problem(route, body, events)` checks the shape the page sends, field by field (the fields and types of Gradio's
PredictBody, CancelBody and ResetBody), and that an `fn_index` is one of the app's events. Fields the page does
not send are let through as Gradio would (it ignores unknown fields).
"""

from __future__ import annotations

import json
from typing import Any, Collection

RELOAD = "reload the page (this request is not one the workbench's page sends)."
_OPTIONAL_TEXT = ("event_id", "oauth_token")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(name: str, value: Any, needed: bool) -> str | None:
    if value is None and not needed:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        return f"its {name} must be the text the page was given"
    return None


def _fn_index(value: Any, events: Collection[int] | None) -> str | None:
    if not _is_int(value):
        return "its fn_index must be the number of one of the page's events"
    if events is not None and value not in events:
        return f"fn_index {str(value)[:24]} names no event of this app"
    return None


def problem(route: str, body: bytes, events: Collection[int] | None) -> str | None:
    """Why the body of a POST to the queue route `route` ("queue/join", "cancel", "reset") is not one the page
    sends, as a sentence with what to do; None when it is. `events`: the app's fn indices (None: any)."""
    try:
        data = json.loads(body or b"null")
    except (ValueError, RecursionError):
        return f"The {route} request's body is not JSON: {RELOAD}"
    if not isinstance(data, dict):
        return f"The {route} request's body is not a JSON object: {RELOAD}"
    why = None
    if route == "queue/join":
        why = (
            _text("session_hash", data.get("session_hash"), True)
            or _fn_index(data.get("fn_index"), events)
            or (None if isinstance(data.get("data"), list) else "its data must be the list of the event's inputs")
            or next((_text(k, data.get(k), False) for k in _OPTIONAL_TEXT if _text(k, data.get(k), False)), None)
            or (None if data.get("trigger_id") is None or _is_int(data["trigger_id"]) else "its trigger_id is no id")
            or (None if isinstance(data.get("simple_format", False), bool) else "its simple_format is not true/false")
            or (None if data.get("batched") in (None, True, False) else "its batched is not true/false")
        )
    elif route == "cancel":
        why = (
            _text("session_hash", data.get("session_hash"), True)
            or _fn_index(data.get("fn_index"), events)
            or _text("event_id", data.get("event_id"), True)
        )
    elif route == "reset":
        why = _text("event_id", data.get("event_id"), True)
    return f"The {route} request cannot be read: {why}; {RELOAD}" if why else None


def data_problem(session_hashes: list[str]) -> str | None:
    """Why a GET of the queue's data stream is not one the page sends (it names exactly one session), or None."""
    if len(session_hashes) != 1 or not session_hashes[0] or len(session_hashes[0]) > 200:
        return f"The queue's data stream needs the one session_hash the page was given: {RELOAD}"
    return None
