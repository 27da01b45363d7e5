"""Login: a password form, a server-side session, and a rate limit on attempts that cannot be bypassed.

Why our own login and not Gradio's `auth=`: Gradio's login has no rate limiting and keeps its tokens in
process memory (a restart logs everyone out). Ours is a FastAPI route that checks `data.users`, then sets a
cookie (`cw_session`) naming a server-side session (data.sessions): logout, a password/role change and
disabling a user end it at once, and idle and absolute lifetimes are enforced (S6). Gradio reads the user
through `auth_dependency`, so `gr.Request.username` is set in every handler and roles are checked there
(AppContext.require), per event, server-side.

The limiter (S7): failures are counted per account (any address) and per address (any account), so a
password sprayed over many users is limited too; an attempt takes its slot *before* the password is checked,
under one lock, so parallel attempts cannot race past the limit; the client address is the socket's
(uvicorn believes X-Forwarded-For only from --trusted-proxies). Password hashing runs on its own small thread
pool with a bounded queue: a flood of logins waits there (or gets 429) instead of taking the threads that
serve pages. Unknown and known users cost one scrypt run each (data.users.verify).
"""

from __future__ import annotations

import collections
import concurrent.futures
import html
import threading
import time
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from data import sessions, users
from webapp.context import LOCAL_ADMIN, AppContext

COOKIE = "cw_session"
STATIC = Path(__file__).parent / "static"
HASH_THREADS = 1  # scrypt at ~50 ms: 20 checks/s, and at most one core of the machine on logins
HASH_QUEUE = 32  # checks waiting beyond this are answered 429 at once
LOGOUT_FORM = (
    '<form method="post" action="/logout" class="cw-logout"><button type="submit" id="logout">Sign out</button></form>'
)
LOGOUT_PAGE = (
    '<!doctype html><html><head><meta charset="utf-8"><title>Sign out</title>'
    '<link rel="stylesheet" href="/cw-static/login.css"></head><body><main class="login">'
    f'<h1>Sign out?</h1>{LOGOUT_FORM}<p><a href="/">Back to the workbench</a></p></main></body></html>'
)


class LoginLimiter:
    """At most `per_account` failed attempts per user name in `window` seconds (from any address) and
    `per_address` per client address in `address_window` seconds (over any user names). While a limit is
    reached every attempt is refused, the right password too. In memory, bounded."""

    def __init__(
        self, per_account: int = 5, window: float = 60.0, per_address: int = 20, address_window: float = 600.0
    ):
        self.per_account, self.window = per_account, window
        self.per_address, self.address_window = per_address, address_window
        self._accounts: dict[str, collections.deque] = {}
        self._addresses: dict[str, collections.deque] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _recent(table: dict, key: str, t: float, window: float) -> collections.deque:
        q = table.setdefault(key, collections.deque())
        while q and q[0] <= t - window:
            q.popleft()
        return q

    def _prune(self, t: float) -> None:
        for table, window in ((self._accounts, self.window), (self._addresses, self.address_window)):
            if len(table) > 100_000:  # bound memory under a spray of names
                for k in [k for k, v in table.items() if not v or v[-1] <= t - window]:
                    del table[k]

    def attempt(self, user: str, ip: str, *, now: float | None = None) -> bool:
        """Take a slot for one attempt, counted as a failure unless `succeeded` is called. False (and
        nothing taken) when a limit is reached. Check and count are one step under the lock."""
        t = now if now is not None else time.monotonic()
        with self._lock:
            acc = self._recent(self._accounts, user.lower(), t, self.window)
            addr = self._recent(self._addresses, ip, t, self.address_window)
            if len(acc) >= self.per_account or len(addr) >= self.per_address:
                return False
            acc.append(t)
            addr.append(t)
            self._prune(t)
            return True

    def succeeded(self, user: str, ip: str) -> None:
        """The attempt was right: give its slot back (a user who logs in often is never locked out)."""
        with self._lock:
            for table, key in ((self._accounts, user.lower()), (self._addresses, ip)):
                q = table.get(key)
                if q:
                    q.pop()

    def blocked(self, user: str, ip: str, *, now: float | None = None) -> bool:
        t = now if now is not None else time.monotonic()
        with self._lock:
            return (
                len(self._recent(self._accounts, user.lower(), t, self.window)) >= self.per_account
                or len(self._recent(self._addresses, ip, t, self.address_window)) >= self.per_address
            )


class HashPool:
    """Password checks on their own threads, with a bounded queue (see the module docstring)."""

    def __init__(self, threads: int = HASH_THREADS, queue: int = HASH_QUEUE):
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="cw-login-hash")
        self._slots = threading.BoundedSemaphore(threads + queue)

    async def run(self, fn):
        """fn() on the pool; None if the queue is full (the caller answers 429)."""
        import asyncio

        if not self._slots.acquire(blocking=False):
            return None, False
        try:
            return await asyncio.wrap_future(self._pool.submit(fn)), True
        finally:
            self._slots.release()


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
        self.limiter = limiter or LoginLimiter()
        self.hashes = HashPool()
        self.idle = ctx.settings.session_idle_minutes * 60
        self.absolute = ctx.settings.session_hours * 3600

    def user_name(self, request: Request) -> str | None:
        """Gradio's `auth_dependency`: the logged-in user's name, or None (Gradio then answers 401)."""
        if not self.required:
            return LOCAL_ADMIN
        name = sessions.lookup(self.ctx.db(), request.cookies.get(COOKIE), idle=self.idle, absolute=self.absolute)
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
            name = str(form.get("username") or "").strip()[:200]
            password = str(form.get("password") or "")[:1024]  # scrypt cost grows with the input: bounded
            next_url = _safe_next(str(form.get("next") or "/"))
            if not self.required:
                return RedirectResponse(next_url, status_code=303)
            ip = request.client.host if request.client else "?"
            if not self.limiter.attempt(name, ip):
                return login_page("Too many attempts: wait a minute and try again.", next_url, status=429)
            db_path = self.ctx.settings.db

            def check():
                from data import db as dbmod

                db = dbmod.connect(db_path, migrate=False)  # the hash thread's own connection
                try:
                    return users.verify(db, name, password)
                finally:
                    db.close()

            user, ran = await self.hashes.run(check)
            if not ran:
                return login_page("The server is busy with logins: try again in a few seconds.", next_url, status=429)
            if user is None:
                return login_page("Wrong user name or password.", next_url, status=401)
            self.limiter.succeeded(name, ip)
            token = sessions.create(self.ctx.db(), user["name"])
            sessions.prune(self.ctx.db(), idle=self.idle, absolute=self.absolute)  # expired rows of others
            resp = RedirectResponse(next_url, status_code=303)
            resp.set_cookie(
                COOKIE,
                token,
                max_age=int(self.absolute),
                httponly=True,
                samesite="lax",
                path="/",
                secure=request.url.scheme == "https",
            )
            return resp

        @app.get("/logout", include_in_schema=False)
        def logout_page() -> Response:
            # A GET changes nothing: a link or an image on another site (a cross-site navigation carries the
            # Lax cookie) must not end a session. Signing out is the POST below, from this page or the app's.
            return HTMLResponse(LOGOUT_PAGE, headers={"Cache-Control": "no-store"})

        @app.post("/logout", include_in_schema=False)
        def logout(request: Request) -> Response:
            # the Guard refuses a POST whose Origin names another site (S8)
            sessions.revoke(self.ctx.db(), request.cookies.get(COOKIE))  # the cookie is dead, not just dropped
            resp = RedirectResponse("/login", status_code=303)
            resp.delete_cookie(COOKIE, path="/")
            return resp

        @app.middleware("http")
        async def login_redirect(request: Request, call_next):
            # The app page itself: send people without a session to the login form instead of a bare 401.
            if (
                self.required
                and request.method == "GET"
                and request.url.path == "/"
                and self.user_name(request) is None
            ):
                target = "/" + (("?" + request.url.query) if request.url.query else "")
                return RedirectResponse("/login?next=" + quote(target, safe=""), status_code=303)
            return await call_next(request)
