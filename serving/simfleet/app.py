"""The HTTP face of one simulated replica: a Starlette app, the ASGI stack the web app is built on.

Endpoints as vLLM 0.25 has them -- `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`, `GET /metrics`
-- plus the simulator's controls `POST /sim/knobs` (a JSON object of knob changes) and `GET /sim/knobs|stats`.
Every answer, errors included, goes through `_answer`: it carries `x-simulated: 1` and is counted per status in
`/sim/stats`. Errors have vLLM's body shape, 404 and 405 too. A request can also get no answer at all (the
replica died, or a hung request whose client left): `NO_ANSWER` sends nothing and the connection is dropped.

With an API key (`--api-key` or VLLM_API_KEY, as vLLM reads it) every `/v1/...` request needs
`Authorization: Bearer <key>` and is otherwise answered as vLLM's AuthenticationMiddleware answers it: 401,
`{"error": "Unauthorized"}` (vllm/entrypoints/openai/server_utils.py; OPTIONS and paths outside /v1 pass).
The controls are the simulator's own and only the launcher (or a test) may drive them: a change needs the knobs
token (`Authorization: Bearer`), and any request a browser sends on a page's behalf (an `Origin` header, or
`Sec-Fetch-Site` other than `none`) is refused with 403, reads included. `build_app(..., controls=False)`
serves a replica without them (a replica bound beyond loopback: its controls get their own loopback listener,
`build_controls`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from serving.simfleet.errors import SimError
from serving.simfleet.metrics import CONTENT_TYPE as METRICS_TYPE
from serving.simfleet.replica import SimReplica

DECODE_BACKEND = "simulated"
JSON = "application/json"
# a wrong method on these is vLLM's 405; anywhere else the simulator answers 404
VLLM_PATHS = ("/v1/chat/completions", "/health", "/v1/models", "/metrics")


class _NoAnswer(Response):
    """Send nothing: the connection is dropped (die) or the client has left (hang)."""

    def __init__(self) -> None:  # no body, no headers: nothing is ever sent
        pass

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


NO_ANSWER = _NoAnswer()


def _bearer_ok(request: Request, digest: bytes | None) -> bool:
    """The request's `Authorization: Bearer` token hashes to `digest` (compared in constant time)."""
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    if digest is None or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest(), digest)


def _digest(secret: str | None) -> bytes | None:
    return hashlib.sha256(secret.encode()).digest() if secret else None


def _cross_site(request: Request) -> bool:
    """Sent by a browser for a page (another site, or this one: the simulator serves no page)."""
    site = request.headers.get("sec-fetch-site")
    return "origin" in request.headers or (site is not None and site != "none")


def build_app(
    replica: SimReplica, *, api_key: str | None = None, knobs_token: str | None = None, controls: bool = True
) -> ASGIApp:
    """The ASGI app serving `replica`: `api_key` guards /v1 as vLLM's --api-key does; `knobs_token` is what a
    knob change must carry (none: knob changes are refused); `controls=False` leaves /sim/* out."""
    r = replica
    headers = {"x-simulated": "1", "x-decode-backend": DECODE_BACKEND}
    key_digest, knobs_digest = _digest(api_key), _digest(knobs_token)

    def _answer(status: int, payload: dict | bytes, ctype: str = JSON, request: Request | None = None) -> Response:
        r.statuses[status] = r.statuses.get(status, 0) + 1
        if request is not None and request.url.path in ("/v1/chat/completions", "/v1/models"):
            r.metrics.answered(request.method, request.url.path, status)  # vLLM's http_requests_total (metrics.py)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        # content-type given as a header, not media_type: Starlette would add a charset to text/plain
        return Response(data, status, {"content-type": ctype, **headers, "x-replica": r.url})

    async def chat(request: Request) -> Response:
        r.ensure_loop_objects()
        try:
            body = await request.body()
        except ClientDisconnect:
            return NO_ANSWER
        try:
            req = json.loads(body or b"{}")
        except ValueError as e:
            raise SimError(400, f"invalid JSON body: {e}") from None
        if not isinstance(req, dict):
            raise SimError(400, "the request body must be a JSON object")
        disconnected = asyncio.Event()
        watcher = asyncio.ensure_future(_watch_disconnect(request.receive, disconnected))
        try:
            status, payload = await r.chat(req, disconnected)
        except ConnectionAbortedError:
            return NO_ANSWER
        finally:
            watcher.cancel()
        return _answer(status, payload, request=request)

    async def health(request: Request) -> Response:
        return _answer(503 if r.knobs.unhealthy else 200, b"", "text/plain")

    async def models(request: Request) -> Response:
        return _answer(200, r.models(), request=request)

    async def metrics(request: Request) -> Response:
        return _answer(200, r.metrics.scrape(r.knobs.capacity), METRICS_TYPE)

    def refused(request: Request, *, write: bool) -> Response | None:
        """Why a control request is refused (a response), or None: cross-site never, a change only with the token."""
        if _cross_site(request):
            return _answer(
                403, SimError(403, "the simulator's controls take no cross-site request", "Forbidden").body()
            )
        if write and not _bearer_ok(request, knobs_digest):
            why = "a knobs token (Authorization: Bearer)" if knobs_digest else "a knobs token, and none is set"
            return _answer(401, SimError(401, f"changing knobs needs {why}", "Unauthorized").body())
        return None

    async def set_knobs(request: Request) -> Response:
        no = refused(request, write=True)
        if no is not None:
            return no
        try:
            body = await request.body()
        except ClientDisconnect:
            return NO_ANSWER
        changes = json.loads(body or b"{}")
        if not isinstance(changes, dict):
            raise SimError(400, "knobs must be a JSON object")
        r.knobs.update(changes)
        if changes.get("die"):
            asyncio.get_running_loop().call_later(0.05, r.die)
        return _answer(200, r.knobs.public())

    async def stats(request: Request) -> Response:
        no = refused(request, write=False)
        return no if no is not None else _answer(200, r.stats())

    async def sim_error(request: Request, exc: SimError) -> Response:
        return _answer(exc.status, exc.body(), request=request)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 405 and request.url.path in VLLM_PATHS:
            return _answer(405, SimError(405, "Method Not Allowed", "MethodNotAllowed").body())
        return _answer(404, SimError(404, "Not Found", "NotFoundError").body())

    control_routes = [
        Route("/sim/knobs", set_knobs, methods=["POST", "PUT"]),
        Route("/sim/knobs", stats, methods=["GET"]),
        Route("/sim/stats", stats, methods=["GET"]),
    ]
    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *(control_routes if controls else []),
    ]
    for route in routes:
        # Starlette answers HEAD wherever GET is allowed; vLLM (FastAPI) answers it 405, and so does this
        route.methods.discard("HEAD")
    app = Starlette(routes=routes, exception_handlers={SimError: sim_error, HTTPException: http_error})
    app.router.redirect_slashes = False  # /health/ is a 404, not a redirect, as is any path not served here
    if key_digest is None:
        return app
    unauthorized = json.dumps({"error": "Unauthorized"}).encode()

    async def authenticated(scope: Scope, receive: Receive, send: Send) -> None:
        # vLLM's AuthenticationMiddleware: /v1 paths need the key; OPTIONS and every other path pass
        if scope["type"] == "http" and scope["method"] != "OPTIONS" and scope["path"].startswith("/v1"):
            if not _bearer_ok(Request(scope), key_digest):
                r.statuses[401] = r.statuses.get(401, 0) + 1
                await Response(unauthorized, 401, {"content-type": JSON, **headers, "x-replica": r.url})(
                    scope, receive, send
                )
                return
        await app(scope, receive, send)

    return authenticated


def build_controls(replica: SimReplica, *, knobs_token: str | None) -> Starlette:
    """Only the controls of `replica` (/sim/knobs, /sim/stats), for a listener of their own on loopback."""
    full = build_app(replica, knobs_token=knobs_token)
    assert isinstance(full, Starlette)  # no API key: the Starlette app itself
    full.router.routes = [rt for rt in full.router.routes if getattr(rt, "path", "").startswith("/sim/")]
    return full


async def _watch_disconnect(receive: Receive, disconnected: asyncio.Event) -> None:
    """Set `disconnected` when the client goes away (a hung request then ends without an answer)."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            disconnected.set()
            return
