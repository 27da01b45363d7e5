"""Login: a password form, a server-side session, and a rate limit on attempts that cannot be bypassed.

Why our own login and not Gradio's `auth=`: Gradio's login has no rate limiting and keeps its tokens in
process memory (a restart logs everyone out). Ours is a FastAPI route that checks `data.users`, then sets a
cookie (`cw_session`) naming a server-side session (data.sessions): logout, a password/role change and
disabling a user end it at once, and idle and absolute lifetimes are enforced (S6). Gradio reads the user
through `auth_dependency`, so `gr.Request.username` is set in every handler and roles are checked there
(AppContext.require), per event, server-side.

The limiter (S7, webapp.login.throttle): delays that grow with the failures, never a lockout, counted so that
nobody else's failures hold back a person at a browser or address they signed in from before (trust kept
per account in data.sessions), and, from a new browser on a network that never failed on the account, a
turn in line within throttle.CLEAN_CAP while someone keeps failing on it from elsewhere (the request waits
here for it, asking again every POLL_S); an attempt takes its place *before* the password is checked, under
one lock, so parallel attempts cannot race past it; the client address is the socket's (uvicorn believes
X-Forwarded-For only from --trusted-proxies). Password hashing runs on its own small thread pools with
bounded queues (one kept for trusted browsers): a flood of logins waits there (or gets 429) instead of
taking the threads that serve pages. Unknown and known users cost one scrypt run each (data.users.verify).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from data import review_queue, sessions, users
from data.db import immediate
from webapp import failures, render_page
from webapp.context import LOCAL_ADMIN, AppContext
from webapp.login import throttle
from webapp.login.throttle import LoginThrottle

COOKIE = "cw_session"
STATIC = Path(__file__).parents[1] / "static"  # webapp/static
HASH_THREADS = 1  # scrypt at ~50 ms: 20 checks/s, and at most one core of the machine on logins
HASH_QUEUE = 32  # checks waiting beyond this are answered 429 at once
TRUSTED_QUEUE = 8  # the same for browsers that signed the account in before (their own lane)
DEVICE_COOKIE = "cw_device"  # a random id of this browser: the limiter trusts it for the accounts it signed in
DEVICE_DAYS = 365
POLL_S = 0.5  # how often an attempt held in its account's line asks for its turn (webapp.login.throttle)


class HashPool:
    """Password checks on their own threads, with bounded queues (see the module docstring): one lane for
    anyone, one for browsers this account signed in from before, so a flood of guesses cannot fill the way
    of the person who knows the password."""

    def __init__(self, threads: int = HASH_THREADS, queue: int = HASH_QUEUE, trusted_queue: int = TRUSTED_QUEUE):
        self._lanes = {
            False: (
                concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="cw-login-hash"),
                threading.BoundedSemaphore(threads + queue),
            ),
            True: (
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cw-login-hash-trusted"),
                threading.BoundedSemaphore(1 + trusted_queue),
            ),
        }

    async def run(self, fn, *, trusted: bool = False):
        """(fn() on a pool, True); (None, False) if its queue is full (the caller answers 429)."""
        import asyncio

        pool, slots = self._lanes[bool(trusted)]
        if not slots.acquire(blocking=False):
            return None, False
        try:
            return await asyncio.wrap_future(pool.submit(fn)), True
        finally:
            slots.release()


def _safe_next(target: str | None) -> str:
    """Only same-site paths: '/x' yes, '//evil' or 'http://evil' no."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_page(message: str = "", next_url: str = "/", status: int = 200, headers: dict | None = None) -> HTMLResponse:
    page = (STATIC / "login.html").read_text()
    page = render_page.sign_in(page, message, _safe_next(next_url))
    return HTMLResponse(page, status_code=status, headers={"Cache-Control": "no-store", **(headers or {})})


class Auth:
    """The session logic of one app: who a request belongs to, and the login/logout routes."""

    def __init__(self, ctx: AppContext, *, limiter: LoginThrottle | None = None):
        self.ctx = ctx
        self.required = ctx.settings.auth_required
        self.limiter = limiter or LoginThrottle()
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

    async def _take_turn(self, request: Request, keys: list[tuple], known: bool = False) -> float:
        """0 once this attempt has its place for a check, or the seconds to wait (the caller answers 429). An
        attempt the limiter holds in its account's line (webapp.login.throttle: a clean network) waits here, asking
        again every POLL_S, for at most throttle.HOLD_S: the person's browser simply takes a little longer."""
        ticket = secrets.token_hex(8)
        deadline = time.monotonic() + throttle.HOLD_S
        while True:
            wait = self.limiter.attempt(keys, ticket=ticket, known=known)
            if wait <= 0:
                return 0.0
            held = self.limiter.in_line(keys, ticket) and time.monotonic() + min(wait, POLL_S) < deadline
            if not held or await request.is_disconnected():
                self.limiter.leave(keys, ticket)
                return wait
            await asyncio.sleep(min(wait, POLL_S))

    def install(self, app: FastAPI) -> None:
        @app.get("/login", include_in_schema=False)
        def login_form(next: str = "/") -> Response:  # the query parameter's name
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
            device = request.cookies.get(DEVICE_COOKIE) or None
            net = throttle.network(ip)
            try:
                trust = sessions.trusted(self.ctx.db(), name, device=device, address=ip, network=net)
            except sqlite3.OperationalError as e:
                return login_page(failures.describe(e)[1], next_url, status=failures.describe(e)[0])
            keys = self.limiter.keys(name, ip, trust, device)
            wait = await self._take_turn(request, keys, known=bool(trust & {"known", "network"}))
            if wait > 0:
                return login_page(
                    f"Too many failed sign-ins for this account or from this network: wait {math.ceil(wait)} s "
                    "and try again. (A browser you signed in from before is not held back.)",
                    next_url,
                    status=429,
                    headers={"Retry-After": str(math.ceil(wait))},
                )
            db_path = self.ctx.settings.db

            def check():
                from data import db as dbmod

                db = dbmod.connect(db_path, migrate=False)  # the hash thread's own connection
                try:
                    return users.verify(db, name, password)
                finally:
                    db.close()

            user, ran = await self.hashes.run(check, trusted=bool(trust & set(sessions.TRUST_KINDS)))
            if not ran:
                self.limiter.not_checked(keys)
                return login_page("The server is busy with logins: try again in a few seconds.", next_url, status=429)
            if user is None:
                return login_page("Wrong user name or password.", next_url, status=401)
            self.limiter.succeeded(keys)
            device = device or sessions.new_device_token()
            try:
                with immediate(self.ctx.db()):
                    token = sessions.create(self.ctx.db(), user["name"], keep=self.ctx.settings.sessions_per_person)
                    sessions.remember(self.ctx.db(), user["name"], device=device, address=ip, network=net)
            except sqlite3.OperationalError as e:  # a full disk, a write lock held past the busy timeout
                status, message = failures.describe(e)
                return login_page(f"Your password is right, but you cannot sign in now: {message}", next_url, status)
            sessions.prune(self.ctx.db(), idle=self.idle, absolute=self.absolute)  # best-effort: others' old rows
            resp = RedirectResponse(next_url, status_code=303)
            secure = request.url.scheme == "https"
            resp.set_cookie(
                COOKIE, token, max_age=int(self.absolute), httponly=True, samesite="lax", path="/", secure=secure
            )
            resp.set_cookie(
                DEVICE_COOKIE,
                device,
                max_age=DEVICE_DAYS * 86400,
                httponly=True,
                samesite="lax",
                path="/login",
                secure=secure,
            )
            return resp

        @app.get("/login/link/{token}", include_in_schema=False)
        def login_link(request: Request, token: str) -> Response:
            # a one-time sign-in link an admin issued (python -m webapp.accounts sign-in-link): this browser then
            # counts as one the account signed in from, so nobody's failures hold it back; the password is asked
            if not self.required:
                return RedirectResponse("/", status_code=303)
            try:
                used = sessions.use_link(self.ctx.db(), token)
            except sqlite3.OperationalError as e:
                status, message = failures.describe(e)
                return login_page(message, status=status)
            if used is None:
                return login_page(
                    "This sign-in link cannot be used: it was used already, is over an hour old, or is mistyped. "
                    "Ask an admin for a new one, or sign in here."
                )
            user, device = used
            resp = login_page(
                f"This browser is now one {user} signed in from: sign in with your password (others' failed "
                "attempts do not hold it back)."
            )
            resp.set_cookie(
                DEVICE_COOKIE,
                device,
                max_age=DEVICE_DAYS * 86400,
                httponly=True,
                samesite="lax",
                path="/login",
                secure=request.url.scheme == "https",
            )
            return resp

        @app.get("/logout", include_in_schema=False)
        def logout_page() -> Response:
            # A GET changes nothing: a link or an image on another site (a cross-site navigation carries the
            # Lax cookie) must not end a session. Signing out is the POST below, from this page or the app's.
            return HTMLResponse(render_page.LOGOUT_PAGE, headers={"Cache-Control": "no-store"})

        @app.post("/logout", include_in_schema=False)
        def logout(request: Request) -> Response:
            # the Guard refuses a POST whose Origin names another site (S8)
            name = self.user_name(request) if self.required else None
            if name:  # a live session: it is dead now, not just dropped (a cookie naming none writes nothing)
                sessions.revoke(self.ctx.db(), request.cookies.get(COOKIE))
                # the clip they were on is free for the others' "next" at once, not when its lease runs out
                review_queue.release(self.ctx.db(), name)
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
