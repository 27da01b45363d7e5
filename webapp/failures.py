"""What a person is told when the server itself fails: the database's write lock held by another program, a
full disk, anything unexpected. Always a message with a status code, never a traceback (issue 21, class 7).

`describe(exc)` maps the failures that have a meaning for the user to (status, message); `install(app)` makes
every route of the FastAPI app answer them so, and anything else as a 500 with a reference to the log line.
Gradio handlers get the same messages through webapp.context.shows_errors.
"""

from __future__ import annotations

import errno
import logging
import secrets
import sqlite3

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

log = logging.getLogger(__name__)

BUSY = (
    503,
    "the database is busy (another program holds its write lock): nothing was changed, try again in a few seconds.",
)
FULL = (507, "the server's disk is full: nothing was saved. Tell whoever runs the workbench.")
BROKEN = (503, "the database cannot be written just now: nothing was saved. Tell whoever runs the workbench.")


def describe(exc: BaseException) -> tuple[int, str] | None:
    """(HTTP status, a sentence for the person) for an infrastructure failure, or None for anything else."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            return BUSY
        if "full" in text:
            return FULL
        return BROKEN
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return FULL
    return None


def install(app: FastAPI) -> None:
    """Exception handlers for the app's own routes (login, logout, media, export): an infrastructure failure
    is its message and status; anything else a 500 naming the log line that holds the traceback."""

    @app.exception_handler(sqlite3.OperationalError)
    @app.exception_handler(OSError)
    async def infrastructure(request: Request, exc: Exception) -> JSONResponse:
        known = describe(exc)
        if known is None:
            return await unexpected(request, exc)
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": known[1][0].upper() + known[1][1:]}, status_code=known[0])

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        ref = secrets.token_hex(4)
        log.error("%s %s failed (reference %s)", request.method, request.url.path, ref, exc_info=exc)
        return JSONResponse(
            {"detail": f"The server failed on this request (reference {ref} in its log); nothing more is known."},
            status_code=500,
        )
