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
- **Gradio's queue sessions belong to one user**: the first user to use a `session_hash` (join, data stream,
  heartbeat) owns it; another user naming it is 403 (a lead-only output went to an annotator who listened on
  the lead's session id).
- **/monitoring/summary** (per-endpoint counts and timings) is for leads only.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import socket
import threading
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse

from data.settings import Settings

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
CSP = "frame-ancestors 'none'; object-src 'none'; base-uri 'self'; form-action 'self'"
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
WILDCARDS = {"0.0.0.0", "::", ""}
MAX_SESSIONS = 100_000


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


class SessionOwners:
    """session_hash -> user, first use wins, bounded (oldest forgotten first)."""

    def __init__(self, limit: int = MAX_SESSIONS):
        self._owners: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit

    def claim(self, session_hash: str, user: str) -> bool:
        """True if `user` may use `session_hash` (it is theirs, or it was nobody's and now is)."""
        with self._lock:
            owner = self._owners.get(session_hash)
            if owner is None:
                self._owners[session_hash] = user
                if len(self._owners) > self.limit:
                    self._owners.popitem(last=False)
                return True
            self._owners.move_to_end(session_hash)
            return owner == user


class Guard:
    """The middleware (see the module docstring). `user_name(request)` and `role_of(name)` come from the app."""

    def __init__(self, app, *, settings: Settings, user_name: Callable, is_lead: Callable[[str | None], bool]):
        self.app = app
        self.hosts = allowed_hosts(settings)
        self.user_name = user_name
        self.is_lead = is_lead
        self.owners = SessionOwners()

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
        if path.endswith("/monitoring/summary") and not self.is_lead(self.user_name(Request(scope))):
            return await JSONResponse({"detail": "monitoring is for leads"}, status_code=403)(scope, receive, send)
        if "/gradio_api/" in path or "/heartbeat/" in path:
            refused = await self._check_session(scope, receive, path, method)
            if refused is not None:
                return await refused(scope, receive, send)
            receive = self._replay(scope, receive)

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

    async def _check_session(self, scope, receive, path: str, method: str):
        session = None
        if "/heartbeat/" in path:
            session = path.rsplit("/heartbeat/", 1)[1].split("/")[0]
        elif method == "GET":
            qs = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            session = (qs.get("session_hash") or [None])[0]
        elif method == "POST" and (path.endswith("/queue/join") or path.endswith("/cancel")):
            chunks, more = [], True
            size = 0
            while more:
                message = await receive()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > 4 << 20:  # a join is a few KiB (a caption of 100,000 characters fits)
                    return JSONResponse({"detail": "request too large"}, status_code=413)
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            scope["cw.body"] = body
            try:
                data = json.loads(body or b"{}")
                session = data.get("session_hash") if isinstance(data, dict) else None
            except (ValueError, RecursionError):
                session = None
        if not session or not isinstance(session, str):
            return None
        user = self.user_name(Request(scope))
        if user is None:
            return None  # Gradio itself answers 401
        if not self.owners.claim(session, user):
            return JSONResponse({"detail": "this queue session belongs to another user"}, status_code=403)
        return None
