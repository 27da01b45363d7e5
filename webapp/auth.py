"""Login: a password form, a signed session cookie, and a rate limit on attempts.

Why our own login and not Gradio's `auth=`: Gradio's login has no rate limiting and keeps its tokens in
process memory (a restart logs everyone out). Ours is a FastAPI route that checks `data.users`, then sets an
HMAC-signed cookie (`cw_session`: user name + expiry) with a key kept in DATA_DIR/session.key. Gradio reads
the user through `auth_dependency`, so `gr.Request.username` is set in every handler and roles are checked
there (AppContext.require), per event, server-side.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import html
import json
import os
import secrets
import threading
import time
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from data import users
from webapp.context import LOCAL_ADMIN, AppContext

COOKIE = "cw_session"
SESSION_SECONDS = 12 * 3600
STATIC = Path(__file__).parent / "static"


def session_key(data_dir: Path) -> bytes:
    """The cookie-signing key: created once (mode 0600) so that sessions survive a restart."""
    path = Path(data_dir) / "session.key"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip())
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex())
    return key


def sign(key: bytes, name: str, *, ttl: float = SESSION_SECONDS, now: float | None = None) -> str:
    payload = base64.urlsafe_b64encode(json.dumps({"u": name, "exp": (now or time.time()) + ttl}).encode())
    mac = hmac.new(key, payload, hashlib.sha256).hexdigest()
    return payload.decode() + "." + mac


def unsign(key: bytes, token: str | None, *, now: float | None = None) -> str | None:
    """The user name in a valid, unexpired token; None for anything else."""
    if not token or "." not in token:
        return None
    payload, mac = token.rsplit(".", 1)
    if not hmac.compare_digest(hmac.new(key, payload.encode(), hashlib.sha256).hexdigest(), mac):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload.encode()))
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("exp", 0) < (now or time.time()) or not isinstance(data.get("u"), str):
        return None
    return data["u"]


class LoginLimiter:
    """At most `limit` failed attempts per (user, client address) in `window` seconds, in memory. While the
    limit is reached every attempt is refused, the right password too."""

    def __init__(self, limit: int = 5, window: float = 60.0):
        self.limit, self.window = limit, window
        self._fails: dict[tuple[str, str], collections.deque] = {}
        self._lock = threading.Lock()

    def _recent(self, key: tuple[str, str], t: float) -> collections.deque:
        q = self._fails.setdefault(key, collections.deque())
        while q and q[0] <= t - self.window:
            q.popleft()
        return q

    def blocked(self, user: str, ip: str, *, now: float | None = None) -> bool:
        t = now if now is not None else time.monotonic()
        with self._lock:
            return len(self._recent((user, ip), t)) >= self.limit

    def failed(self, user: str, ip: str, *, now: float | None = None) -> None:
        t = now if now is not None else time.monotonic()
        with self._lock:
            self._recent((user, ip), t).append(t)
            if len(self._fails) > 100_000:  # bound memory under a spray of names
                self._fails = {k: v for k, v in self._fails.items() if v and v[-1] > t - self.window}


def _safe_next(target: str | None) -> str:
    """Only same-site paths: '/x' yes, '//evil' or 'http://evil' no."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_page(message: str = "", next_url: str = "/", status: int = 200) -> HTMLResponse:
    page = (STATIC / "login.html").read_text()
    page = page.replace("{{message}}", html.escape(message)).replace("{{next}}", html.escape(_safe_next(next_url)))
    return HTMLResponse(page, status_code=status, headers={"Cache-Control": "no-store"})


class Auth:
    """The session logic of one app: who a request belongs to, and the login/logout routes."""

    def __init__(self, ctx: AppContext, *, limiter: LoginLimiter | None = None):
        self.ctx = ctx
        self.required = ctx.settings.auth_required
        self.key = session_key(ctx.settings.data_dir)
        self.limiter = limiter or LoginLimiter()

    def user_name(self, request: Request) -> str | None:
        """Gradio's `auth_dependency`: the logged-in user's name, or None (Gradio then answers 401)."""
        if not self.required:
            return LOCAL_ADMIN
        name = unsign(self.key, request.cookies.get(COOKIE))
        if name is None:
            return None
        return name if self.ctx.user_by_name(name) is not None else None

    def install(self, app: FastAPI) -> None:
        @app.get("/login", include_in_schema=False)
        def login_form(next: str = "/") -> Response:  # noqa: A002 - the query parameter's name
            if not self.required:
                return RedirectResponse(_safe_next(next), status_code=303)
            return login_page(next_url=next)

        @app.post("/login", include_in_schema=False)
        async def login_submit(request: Request) -> Response:
            form = await request.form()
            name = str(form.get("username") or "").strip()
            password = str(form.get("password") or "")
            next_url = _safe_next(str(form.get("next") or "/"))
            if not self.required:
                return RedirectResponse(next_url, status_code=303)
            ip = request.client.host if request.client else "?"
            if self.limiter.blocked(name, ip):
                return login_page("Too many attempts: wait a minute and try again.", next_url, status=429)
            import anyio

            user = await anyio.to_thread.run_sync(lambda: users.verify(self.ctx.db(), name, password))
            if user is None:
                self.limiter.failed(name, ip)
                return login_page("Wrong user name or password.", next_url, status=401)
            resp = RedirectResponse(next_url, status_code=303)
            resp.set_cookie(COOKIE, sign(self.key, user["name"]), max_age=SESSION_SECONDS, httponly=True,
                            samesite="lax", path="/")
            return resp

        @app.get("/logout", include_in_schema=False)
        def logout() -> Response:
            resp = RedirectResponse("/login", status_code=303)
            resp.delete_cookie(COOKIE, path="/")
            return resp

        @app.middleware("http")
        async def login_redirect(request: Request, call_next):
            # The app page itself: send people without a session to the login form instead of a bare 401.
            if self.required and request.method == "GET" and request.url.path == "/" \
                    and self.user_name(request) is None:
                target = "/" + (("?" + request.url.query) if request.url.query else "")
                return RedirectResponse("/login?next=" + quote(target, safe=""), status_code=303)
            return await call_next(request)
