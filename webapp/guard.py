"""What other sites, and other users, cannot make the app do (docs/RELIABILITY.md, S8; issue 11).

One pure ASGI middleware, outside everything else (Gradio's mounted app included):
- **Host allow-list, always** (login on or off): loopback names, IP literals (a DNS-rebinding attack needs a
  name the attacker controls, never an IP literal), the --host name and --allowed-hosts. Anything else is 400:
  with `--auth off` a page on another site could otherwise rebind its name to 127.0.0.1 and export the library.
- **Origin check on every state-changing request** (POST/PUT/PATCH/DELETE, Gradio's queue endpoints and
  /login included: login CSRF): an Origin (or, without one, a Referer) naming another site is 403. Requests
  with neither come from programs, not from a browser page, and cannot carry a victim's cookie by accident.
- **No cross-origin reads**: Access-Control-Allow-* headers are removed from every answer (Gradio reflects
  any Origin for a non-loopback Host); a preflight from another origin is 403.
- **Headers**: CSP `frame-ancestors 'none'` (+ X-Frame-Options) against clickjacking, `object-src 'none'`,
  `base-uri 'self'`, `form-action 'self'`; nosniff; Referrer-Policy same-origin. script-src is not restricted:
  Gradio's page runs inline scripts (its bootstrap and our shortcuts), so a strict script-src would break it;
  S3 (escaping everywhere) is what stops script injection.
- **Only the routes the page uses** (issue 27): a request goes on only to a route of the app's own (login,
  media, drafts, ...: `own_routes`, matched as Starlette routes them) or to one of the Gradio routes the page
  uses (GRADIO_ROUTES: the page, its assets, the queue's join and data stream, heartbeat, cancel, reset).
  Every other route of Gradio's (`run`, `api`, `call`, `call/v2`, `info`, `file=`, `upload`, `stream`,
  `component_server`, ... and whatever a new Gradio adds) answers 403 for everyone, before any login.
- **Gradio's queue is bound to its user** (issue 21): all of it only after login. Every session id a request
  names (a body's `session_hash`, the data stream's query, the heartbeat's path) belongs to the first user who
  used it; every event id (`cancel`, `reset`) to the user whose join created it (read from the join's
  answer). Another user naming either is 403: otherwise a save could land on another user's clip with that
  user's session id.
- **One write budget per person** (issue 27, webapp.budget): a join of an event that writes, a draft, a lease
  ping, costs the person one write; past their budget it is 429 with the wait, before the queue or a thread
  does any work for it.
- **/monitoring/summary** (per-endpoint counts and timings) is for leads only.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import logging
import math
import re
import secrets
import socket
import threading
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match

from data.settings import Settings
from webapp import failures, queue_requests
from webapp.budget import WriteBudget

log = logging.getLogger(__name__)

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
# (methods, the whole path) of the Gradio routes the app's page uses; every other route of Gradio's is 403
GRADIO_ROUTES = [
    ({"GET", "HEAD"}, re.compile(r"/")),  # the page
    ({"GET"}, re.compile(r"/config/?")),  # the Blocks config (the page also carries it inline)
    ({"GET", "HEAD"}, re.compile(r"/(assets|static)/[^?#]+")),  # Gradio's scripts, styles and fonts
    ({"GET"}, re.compile(r"/(theme\.css|favicon\.ico)")),
    ({"POST"}, re.compile(r"/gradio_api/queue/join/?")),
    ({"GET"}, re.compile(r"/gradio_api/queue/data/?")),
    ({"GET"}, re.compile(r"/gradio_api/heartbeat/[^/]+/?")),
    ({"POST"}, re.compile(r"/gradio_api/(cancel|reset)/?")),
    ({"GET"}, re.compile(r"/monitoring/summary")),  # leads only (below)
]
JOIN = re.compile(r"/gradio_api/queue/join/?")  # its answer is {"event_id": ...}
# the app's own routes that write for the person (each costs one from their write budget, webapp.budget); the
# others that change state are the login (its own limiter, webapp.login.throttle) and the logout (ends a session)
OWN_WRITES = {("PUT", "/drafts/{clip_id}"), ("POST", "/leases/{clip_id}")}
TARPIT_S = 2.0  # a write refused by the budget is answered after this pause (at most its wait)
MAX_BODY = 4 << 20  # a join is a few KiB (a caption at its limit fits)
CSP = "frame-ancestors 'none'; object-src 'none'; base-uri 'self'; form-action 'self'"
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
WILDCARDS = {"0.0.0.0", "::", ""}
MAX_PER_USER = 20_000  # session and event ids remembered per user (oldest forgotten: only that user's own)


def _host_name(host_header: str) -> str:
    """'example.org:7860' -> 'example.org'; '[::1]:80' -> '::1'."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1 : h.index("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def allowed_hosts(settings: Settings) -> set[str]:
    names = set(LOOPBACK_NAMES)
    names |= set(settings.allowed_hosts)
    if settings.host not in WILDCARDS:
        names.add(settings.host.lower())
    else:  # bound to every interface: the machine's own names too
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names


class Owners:
    """id -> user (Gradio session ids, event ids). Bounded per user: a user who makes more ids than
    MAX_PER_USER forgets their own oldest, and nobody can push another user's ids out."""

    def __init__(self, per_user: int = MAX_PER_USER):
        self._owner: dict[str, str] = {}
        self._by_user: dict[str, collections.deque] = {}
        self._lock = threading.Lock()
        self.per_user = per_user

    def _add(self, key: str, user: str) -> None:
        self._owner[key] = user
        mine = self._by_user.setdefault(user, collections.deque())
        mine.append(key)
        if len(mine) > self.per_user:
            self._owner.pop(mine.popleft(), None)

    def claim(self, key: str, user: str) -> bool:
        """True if `user` may use `key` (it is theirs, or it was nobody's and now is)."""
        with self._lock:
            owner = self._owner.get(key)
            if owner is None:
                self._add(key, user)
                return True
            return owner == user

    def owns(self, key: str, user: str) -> bool:
        """True only if `key` was claimed by `user` (an unknown id is nobody's to use)."""
        with self._lock:
            return self._owner.get(key) == user


class Guard:
    """The middleware (see the module docstring). `user_name(request)` and `role_of(name)` come from the app."""

    def __init__(
        self,
        app,
        *,
        settings: Settings,
        user_name: Callable,
        is_lead: Callable[[str | None], bool],
        auth_required: bool = True,
        own_routes: list | None = None,
        budget: WriteBudget | None = None,
        reads: frozenset[int] = frozenset(),
        event_ids: frozenset[int] | None = None,
    ):
        self.app = app
        self.hosts = allowed_hosts(settings)
        self.user_name = user_name
        self.is_lead = is_lead
        self.owners = Owners()  # Gradio session ids
        self.events = Owners()  # Gradio event ids
        self.auth_required = auth_required
        self.own_routes = list(own_routes or [])  # the app's routes, in front of Gradio's mount
        self.budget = budget
        self.reads = reads  # fn indices of the Gradio events that write nothing (webapp.budget.READS)
        self.event_ids = event_ids  # fn indices of every event of the page (None: any number)

    def host_ok(self, host: str | None) -> bool:
        if not host:
            return False
        name = _host_name(host)
        return name in self.hosts or _is_ip(name)

    @staticmethod
    def same_origin(url: str, host: str) -> bool:
        try:
            parts = urlsplit(url)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._handle(scope, receive, tracked)
        except Exception as e:  # the last place an error can become a message instead of a reset
            if started:
                raise
            known = failures.describe(e)
            ref = secrets.token_hex(4)
            log.error("%s %s failed (reference %s)", scope["method"], scope["path"], ref, exc_info=e)
            status, text = known or (500, f"the server failed on this request (reference {ref} in its log).")
            await JSONResponse({"detail": text[0].upper() + text[1:]}, status_code=status)(scope, receive, send)

    async def _handle(self, scope, receive, send):
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        method = scope["method"]
        path = scope["path"]
        if not self.host_ok(host):
            return await JSONResponse(
                {
                    "detail": f"unknown Host {host[:80]!r}: open the app by its own address "
                    "(or add the name to --allowed-hosts)"
                },
                status_code=400,
            )(scope, receive, send)
        origin = headers.get("origin")
        if method == "OPTIONS" and origin is not None:
            return await JSONResponse({"detail": "cross-origin requests are not allowed"}, status_code=403)(
                scope, receive, send
            )
        if method in STATE_CHANGING:
            source = origin if origin is not None else headers.get("referer")
            if source is not None and not self.same_origin(source, host):
                return await JSONResponse(
                    {"detail": f"refused: this request came from another site (Origin {source[:80]!r})"},
                    status_code=403,
                )(scope, receive, send)
        own = self._own_route(scope)
        if own is None and not any(method in m and p.fullmatch(path) for m, p in GRADIO_ROUTES):
            return await JSONResponse(
                {"detail": f"this route is closed: the workbench's page does not use {path[:80]}"}, status_code=403
            )(scope, receive, send)
        if path == "/monitoring/summary" and not self.is_lead(self.user_name(Request(scope))):
            return await JSONResponse({"detail": "monitoring is for leads"}, status_code=403)(scope, receive, send)
        if own is not None and (method, own) in OWN_WRITES:
            refused = await self._charge(self.user_name(Request(scope)))
            if refused is not None:
                return await refused(scope, receive, send)
        if path.startswith("/gradio_api/"):
            refused, user = await self._check_gradio(scope, receive, path, method)
            if refused is not None:
                return await refused(scope, receive, send)
            receive = self._replay(scope, receive)
            if method == "POST" and JOIN.fullmatch(path):
                send = self._claiming_events(send, user)

        async def send_secured(message):
            if message["type"] == "http.response.start":
                kept = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if not k.lower().startswith(b"access-control-allow-")
                    and k.lower() not in {h for h, _ in SECURITY_HEADERS}
                ]
                message = {**message, "headers": kept + SECURITY_HEADERS}
            await send(message)

        await self.app(scope, receive, send_secured)

    def _own_route(self, scope) -> str | None:
        """The path template of the app's own route that `scope` goes to (a method it does not take included:
        the route answers 405), or None when the request would go on to Gradio's mount."""
        for route in self.own_routes:
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return getattr(route, "path", "")
        return None

    async def _charge(self, user: str | None) -> JSONResponse | None:
        """One write of `user`'s budget: None when it may go on (or nobody is signed in: the route answers
        401), or the 429 that says how long to wait. The 429 itself comes after a pause (up to TARPIT_S, never
        past the wait): a script that sends again at once meets the pause on every connection it holds, so a
        refused flood costs the server a sleeping coroutine, not the event loop that serves everyone else."""
        if self.budget is None or user is None:
            return None
        wait = self.budget.take(user)
        if wait <= 0:
            return None
        await asyncio.sleep(min(wait, TARPIT_S))
        wait = max(0.0, wait - TARPIT_S)
        return JSONResponse(
            {"detail": self.budget.message(wait), "retry_after": max(1, math.ceil(wait))},
            status_code=429,
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )

    # -- Gradio queue sessions -----------------------------------------------------------------------------
    def _replay(self, scope, receive):
        body = scope.pop("cw.body", None)
        if body is None:
            return receive
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay

    async def _read_body(self, receive):
        """The request body (at most MAX_BODY), or None past it."""
        chunks, more, size = [], True, 0
        while more:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _check_gradio(self, scope, receive, path: str, method: str):
        """(a refusal or None, the user) for a request to Gradio's queue (see the module docstring)."""
        sub = path.split("/gradio_api/", 1)[1]
        user = self.user_name(Request(scope))
        if user is None:
            # Gradio's heartbeat, cancel and reset routes check no login: none of them may act for nobody
            return (JSONResponse({"detail": "log in first"}, status_code=401) if self.auth_required else None), None
        sessions, events, fn_index = [], [], None
        if sub.startswith("heartbeat/"):
            sessions.append(sub.split("/")[1])
        elif method == "GET":
            qs = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            sessions += qs.get("session_hash") or []
            malformed = queue_requests.data_problem(sessions)
            if malformed:
                return JSONResponse({"detail": malformed}, status_code=400), user
        elif method == "POST":
            body = await self._read_body(receive)
            if body is None:
                return JSONResponse({"detail": "request too large"}, status_code=413), user
            scope["cw.body"] = body
            malformed = queue_requests.problem(sub.rstrip("/"), body, self.event_ids)
            if malformed:  # Gradio's answer: a 422 list, or a 500 and a traceback (webapp.queue_requests)
                return JSONResponse({"detail": malformed}, status_code=400), user
            try:
                data = json.loads(body or b"{}")
            except (ValueError, RecursionError):
                data = None  # Gradio answers 422 for a body it cannot read
            if isinstance(data, dict):
                if isinstance(data.get("session_hash"), str):
                    sessions.append(data["session_hash"])
                if isinstance(data.get("event_id"), str) and sub.rstrip("/") in ("cancel", "reset"):
                    events.append(data["event_id"])
                if JOIN.fullmatch(path):
                    fn_index = data.get("fn_index")
        for session in sessions:
            if not self.owners.claim(session, user):
                return JSONResponse({"detail": "this queue session belongs to another user"}, status_code=403), user
        for event in events:
            if not self.events.owns(event, user):
                return JSONResponse({"detail": "this event is not yours (or is unknown)"}, status_code=403), user
        if JOIN.fullmatch(path) and not (isinstance(fn_index, int) and fn_index in self.reads):
            return await self._charge(user), user
        return None, user

    def _claiming_events(self, send, user: str | None):
        """`send` for a join: the event id in its answer ({"event_id": ...}, a few bytes) becomes the
        user's before the answer leaves, so the user can follow or cancel it and nobody else can."""
        held: list[dict] = []

        async def claiming(message):
            if message["type"] == "http.response.start":
                held.append(message)
                return
            if message["type"] == "http.response.body" and held:
                held.append(message)
                if message.get("more_body", False):
                    return
                body = b"".join(m.get("body", b"") for m in held[1:])
                try:
                    data = json.loads(body) if len(body) < 65536 else None
                except (ValueError, RecursionError):
                    data = None
                if user is not None and isinstance(data, dict) and isinstance(data.get("event_id"), str):
                    self.events.claim(data["event_id"], user)
                for m in held:
                    await send(m)
                held.clear()
                return
            await send(message)

        return claiming
