"""What a person is told when the server itself fails: the database's write lock held by another program, a
full disk, anything unexpected. Always a message with a status code, never a traceback (issue 21, class 7).

`describe(exc)` maps the failures that have a meaning for the user to (status, message); `install(app)` makes
every route of the FastAPI app answer them so, and anything else as a 500 with a reference to the log line.

Gradio events get the same messages, mapped before Gradio's own error path sees anything (issue 31, class 3;
issue 27, class 2):
- `handler(fn)` wraps every event handler (`guard_events` wraps every event of the Blocks; `shows_errors` is the
  same wrapper where an event is wired): a refusal of data/ (DataError) and a gr.Error raised by our code are
  shown as they are, an infrastructure failure as its sentence, anything else as a fixed sentence with a
  reference to the log line that holds the traceback.
- `Blocks.process_api` maps what fails outside our handlers (Gradio checking the inputs the page sent, or
  the outputs a handler returned) to a fixed sentence: what reaches the browser is never an object's repr or a
  library's own text.
Every such error is marked not to be printed by Gradio (`print_exception=False`): Gradio printed a traceback
for every error into the app's log, and when that log sat on a full disk the print raised inside Gradio's error
path and the event never answered. The log line we write instead goes through logging, which never raises
(serving.console makes the process's output best-effort).
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import secrets
import sqlite3

import gradio as gr
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from data.errors import DataError

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


FAILED = (
    "The server failed on this action (reference {ref} in its log); nothing more is known. Reload the page and try "
    "again; if it keeps failing, tell whoever runs the workbench."
)


def shown(message: str, title: str) -> gr.Error:
    """A gr.Error for the person, marked as ours and not to be printed by Gradio."""
    e = gr.Error(message, title=title, print_exception=False)
    e.cw_shown = True
    return e


def as_message(exc: BaseException) -> gr.Error:
    """The gr.Error a person reads for `exc`, raised by an event handler of ours."""
    if isinstance(exc, gr.Error):
        exc.print_exception = False
        exc.cw_shown = True
        return exc
    if isinstance(exc, DataError):
        return shown(str(exc), "Not done")
    known = describe(exc)
    if known is not None:
        log.warning("an event failed: %s", exc)
        return shown("Not done: " + known[1], "Server problem")
    ref = secrets.token_hex(4)
    log.error("an event failed (reference %s)", ref, exc_info=exc)
    return shown(FAILED.format(ref=ref), "Server problem")


def handler(fn):
    """`fn` as an event handler whose every failure reaches the person as a message (`as_message`). The
    signature is kept (functools.wraps), so Gradio still passes gr.Request / gr.EventData. Idempotent."""
    if getattr(fn, "cw_handler", False):
        return fn
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except Exception as e:
                raise as_message(e) from None

    else:

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                raise as_message(e) from None

    wrapper.cw_handler = True
    return wrapper


def guard_events(demo: gr.Blocks) -> int:
    """Wrap every event handler of `demo` with `handler` (those wired without it too). Returns how many."""
    n = 0
    for block_fn in demo.fns.values():
        if block_fn.fn is not None and not getattr(block_fn.fn, "cw_handler", False):
            if inspect.isgeneratorfunction(block_fn.fn) or inspect.isasyncgenfunction(block_fn.fn):
                raise RuntimeError(f"{block_fn.name}: generator handlers are not wrapped; make it a plain function")
            block_fn.fn = handler(block_fn.fn)
            n += 1
    return n


class Blocks(gr.Blocks):
    """gr.Blocks whose events fail only with a message meant for a person: what our handlers raise passes as
    `handler` made it; anything raised around them (Gradio's checks of the inputs the page sent, of the outputs a
    handler returned) becomes an infrastructure sentence or FAILED, with the details in the log."""

    async def process_api(self, *args, **kwargs):
        try:
            return await super().process_api(*args, **kwargs)
        except Exception as e:
            if getattr(e, "cw_shown", False):
                raise
            known = describe(e)
            if known is not None:
                log.warning("an event failed: %s", e)
                raise shown("Not done: " + known[1], "Server problem") from None
            ref = secrets.token_hex(4)
            if isinstance(e, gr.Error):  # Gradio's own check of a value the page sent (a choice not offered ...)
                log.warning("an event was refused by Gradio (reference %s): %.300s", ref, e.message)
            else:
                log.error("an event failed around its handler (reference %s)", ref, exc_info=e)
            raise shown(FAILED.format(ref=ref), "Not done") from None
