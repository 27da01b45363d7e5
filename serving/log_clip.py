"""Every log line a process writes is bounded, whatever a request put in it (issue 46, point 1).

A request can make a process log what it sent: Gradio's check of an event's inputs raised a ValueError that quoted
every value received (up to the 4 MiB request limit), and the app logged it with its traceback, 4 MiB a request,
for an annotator's read events that cost no write budget. `install()` puts a LogRecord factory in place for the whole
process, so every logger and every handler (ours, Gradio's, uvicorn's, httpx's) gets records already bounded:

- each argument of the message whose text is longer than VALUE_CHARS is cut to that, followed by its length
  ("xxxx… [4,194,304 characters]"); a message without arguments is cut the same way at MESSAGE_CHARS;
- the traceback is formatted once, at the record's making, with each of its lines cut at VALUE_CHARS;
- a traceback already written in full (the same exception type raised along the same lines of code) within
  REPEAT_S is written as one line: where it was written in full, how often it came since, and its exception's
  first line. A flood of one malformed request costs a line or two per request, not a traceback each.

The bytes that reach a log file are bounded once more by serving.log_sink (line length, file size, free space):
that also holds for what a library prints without logging and for processes that are not ours (vLLM, the router).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import traceback

VALUE_CHARS = 300  # a value in a log line, or a line of a traceback, longer than this is cut (its length said)
MESSAGE_CHARS = 2000  # a message logged as one ready-made string
REPEAT_S = 600.0  # a traceback written in full is summarised in one line for this long
SEEN_MAX = 512  # tracebacks remembered for that


def clip(text: str, limit: int = VALUE_CHARS) -> str:
    """`text` cut to `limit` characters, followed by its length when it was longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text):,} characters]"


class _Clipped:
    """An argument of a log message, cut: shown as the cut text by %s and by %r alike."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def _clip_arg(value):
    if value is None or isinstance(value, (bool, int, float)):
        return value  # %d, %.1f and the like need the number; a number's text is short
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # a value that cannot be shown: logging would say so when formatting; leave it to that
        return value
    if len(text) <= VALUE_CHARS and len(repr(text)) <= VALUE_CHARS + 2:
        return value
    return _Clipped(clip(text))


class _Tracebacks:
    """The traceback text of a record: in full the first time within REPEAT_S, then one line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[tuple, list] = collections.OrderedDict()  # key -> [at, times since]

    @staticmethod
    def _key(exc: BaseException) -> tuple:
        key: list = []
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen and len(key) < 16:
            seen.add(id(exc))
            frames = tuple((f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__, limit=64))
            key.append((type(exc).__qualname__, frames))
            exc = exc.__cause__ or exc.__context__
        return tuple(key)

    def text(self, exc_info) -> str:
        exc = exc_info[1]
        now = time.time()
        key = self._key(exc) if isinstance(exc, BaseException) else None
        with self._lock:
            seen = self._seen.get(key) if key is not None else None
            if seen is not None and now - seen[0] < REPEAT_S:
                seen[1] += 1
                first, times = seen
            else:
                first, times = None, 0
                if key is not None:
                    self._seen[key] = [now, 0]
                    self._seen.move_to_end(key)
                    while len(self._seen) > SEEN_MAX:
                        self._seen.popitem(last=False)
        if first is None:
            lines = "".join(traceback.format_exception(*exc_info)).rstrip("\n").split("\n")
            return "\n".join(clip(line) for line in lines)
        head = next(iter(traceback.format_exception_only(exc_info[0], exc)), "").split("\n", 1)[0]
        at = time.strftime("%H:%M:%S", time.localtime(first))
        return f"(the traceback written in full at {at}, again: {times} times since) {clip(head)}"


_TRACEBACKS = _Tracebacks()
_installed = False
_install_lock = threading.Lock()


def bound(record: logging.LogRecord) -> logging.LogRecord:
    """Cut what `record` carries (the module docstring); never raises."""
    try:
        if record.args:
            if isinstance(record.args, dict):
                if isinstance(record.msg, str) and "%(" in record.msg:  # named: each value is used on its own
                    record.args = {k: _clip_arg(v) for k, v in record.args.items()}
                else:  # the one argument was a mapping, shown whole
                    record.args = (_clip_arg(record.args),)
            elif isinstance(record.args, tuple):
                record.args = tuple(_clip_arg(a) for a in record.args)
        elif isinstance(record.msg, str) and len(record.msg) > MESSAGE_CHARS:
            record.msg = clip(record.msg, MESSAGE_CHARS)
        elif not isinstance(record.msg, str):
            record.msg = _clip_arg(record.msg)
        if record.exc_info and not record.exc_text and record.exc_info[0] is not None:
            record.exc_text = _TRACEBACKS.text(record.exc_info)
        if record.stack_info and len(record.stack_info) > MESSAGE_CHARS * 4:
            record.stack_info = clip(record.stack_info, MESSAGE_CHARS * 4)
    except Exception:  # bounding must never stop a line from being logged
        pass
    return record


def install() -> None:
    """Bound every log record this process makes from now on (idempotent)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        make = logging.getLogRecordFactory()

        def factory(*args, **kwargs) -> logging.LogRecord:
            return bound(make(*args, **kwargs))

        logging.setLogRecordFactory(factory)
        _installed = True
