"""The review page's background calls (webapp/static/drafts.js), plain routes beside Gradio's queue:

- `PUT /drafts/{clip_id}` with `{"base": <caption id or null>, "text": "...", "labels": {...}}`: the person's
  unsaved edit of the clip (data.drafts), written as they type. 200 `{"saved_at": t}`, or `{"dropped": true}`
  when the edit says what the current caption says (no draft any more). The draft also counts as activity on
  the clip (the person's review lease on it is renewed).
- `POST /leases/{clip_id}`: the person is active on the clip (keys, clicks, the video playing): their review
  lease on it is renewed (data.review_queue.renew: never taken, so a ping that arrives after the person moved on
  changes nothing). 200 `{"holder": <who is on it, or null>}`.

Why routes and not Gradio events: the page needs a plain answer it can act on. A 401 means the session ended
(signed out in another tab, or expired): the page then keeps the draft in the browser, says so, and pushes it
after the person logs in again. Through Gradio's queue a 401 only paints every output red.

Both need a login (401 without), act for that person only, and are state-changing requests under webapp.guard's
Origin check; each costs one of the person's write budget (webapp.budget: past it 429 with the wait, answered
by webapp.guard before this module runs). A body is bounded before it is parsed (413), a refusal of data/ is
400/413 with its message. A person keeps at most `drafts_per_person` drafts (the oldest dropped).
"""

from __future__ import annotations

import json

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from data import drafts, limits, review_queue
from data.errors import DataError, NotFound, TooLarge
from webapp.context import AppContext

# a caption at its bound, every character escaped as \uXXXX, plus the labels: anything longer is not a draft
MAX_BODY_BYTES = limits.MAX_CAPTION_CHARS * 6 + limits.MAX_LABELS_BYTES + 1024


async def _body(request: Request) -> bytes | None:
    """The request body, or None once it is longer than MAX_BODY_BYTES (read no further)."""
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _refusal(e: DataError) -> JSONResponse:
    status = 404 if isinstance(e, NotFound) else 413 if isinstance(e, TooLarge) else 400
    return JSONResponse({"detail": str(e)}, status_code=status)


def install(app: FastAPI, ctx: AppContext, user_name) -> None:
    """Add the two routes; `user_name(request)` is the app's session check."""
    ttl = ctx.settings.review_lease_seconds

    def who(request: Request) -> str | None:
        user = ctx.user_by_name(user_name(request))
        return user.name if user is not None else None

    @app.put("/drafts/{clip_id}", include_in_schema=False)
    async def put_draft(clip_id: int, request: Request):
        name = who(request)
        if name is None:
            return JSONResponse({"detail": "your session has ended: log in again"}, status_code=401)
        raw = await _body(request)
        if raw is None:
            return JSONResponse({"detail": f"a draft is at most {MAX_BODY_BYTES:,} bytes"}, status_code=413)
        try:
            if not limits.json_depth_ok(raw, 3):  # before parsing: the stdlib parser recurses
                raise ValueError
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError
        except (ValueError, UnicodeDecodeError, RecursionError):
            return JSONResponse({"detail": "a draft is a JSON object: base, text, labels"}, status_code=400)
        text = body.get("text")
        if text is not None and not isinstance(text, str):
            return JSONResponse({"detail": "text must be a string"}, status_code=400)

        def store():
            db = ctx.db()
            draft = drafts.put(
                db,
                name,
                clip_id,
                base_caption_id=body.get("base"),
                text=text,
                labels=body.get("labels"),
                keep=ctx.settings.drafts_per_person,
            )
            review_queue.renew(db, clip_id, name, ttl=ttl)
            return draft

        try:
            draft = await anyio.to_thread.run_sync(store)
        except DataError as e:
            return _refusal(e)
        return {"dropped": True} if draft is None else {"saved_at": draft["saved_at"]}

    @app.post("/leases/{clip_id}", include_in_schema=False)
    async def activity(clip_id: int, request: Request):
        name = who(request)
        if name is None:
            return JSONResponse({"detail": "your session has ended: log in again"}, status_code=401)

        def renew():
            db = ctx.db()
            review_queue.renew(db, clip_id, name, ttl=ttl)
            return review_queue.holder(db, clip_id)

        try:
            holder = await anyio.to_thread.run_sync(renew)
        except DataError as e:
            return _refusal(e)
        return {"holder": holder}
