"""Secrets out of the text the fleet sends back: what a replica, a router or a node says is stored, logged and
shown (a job item's `last_error`, the runner's heartbeat and log, `serving.caption`'s output, the Jobs and Fleet
tabs), and a replica may say anything, our own request included: a refusal that repeats the `Authorization`
header carries the fleet key, and an error that repeats the clip's signed URL carries its `sig=`.

`Redactor(secrets)` removes, from any text:
- each secret it was given (the data dir's fleet key: serving.fleet_key), anywhere, and a prefix of one (8
  characters or more) that ends the text, as a cut-off excerpt leaves it;
- any bearer token (`Bearer <token>`), and the value of an `Authorization` or `api-key` header or field however
  it is quoted (`"authorization": "..."`, `Authorization: Basic ...`);
- the value of any `sig` URL parameter (`sig=...`, also percent-encoded once or twice: `sig%3D...`).

It is applied once, where the text enters the workbench: the fleet client (serving.client) for every error it
raises, the fleet reader (serving.fleet_reader) for every text it returns, and the runner's log handler (the
status line httpx logs is the server's). Work is linear in the text (no nested quantifiers); it keeps the rest
of the text as it was, so that a lead still reads what the replica said.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

HIDDEN = "[redacted]"
KEY_HIDDEN = "[fleet key]"
MIN_PREFIX = 8  # a cut-off secret is removed from the end of a text down to this many characters

_HEADER = re.compile(
    r"""(?ix)
    (\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_]key)   # the name of the header or field
    (["']?\s*[:=]\s*["']?)                                   # its separator, quoted or not
    (?:(?:bearer|basic|token)\s+)?                           # a scheme
    [^\s"',;}&]+                                             # the value
    """
)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[^\s\"',;}&]+")
_SIG = re.compile(r"(?i)([?&;\s\"'/]|^|%26|%3F)(sig(?:=|%3D|%253D))[^&\s\"'<>#\\,;)]+")


class Redactor:
    """A callable that returns its text without the secrets it knows and without any bearer token or URL
    signature (the module docstring). Also a logging.Filter: every record it passes is redacted."""

    def __init__(self, secrets: Iterable[str | None] = ()):
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        if not isinstance(text, str) or not text:
            return text
        text = _HEADER.sub(lambda m: m.group(1) + m.group(2) + HIDDEN, text)
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + HIDDEN, text)
        text = _SIG.sub(lambda m: m.group(1) + m.group(2) + HIDDEN, text)
        for s in self.secrets:  # what is left of a secret: bare, or cut off at the end of the text
            text = text.replace(s, KEY_HIDDEN)
            for n in range(min(len(s) - 1, len(text)), MIN_PREFIX - 1, -1):
                if text.endswith(s[:n]):
                    text = text[:-n] + KEY_HIDDEN
                    break
        return text

    def install(self) -> None:
        """Redact every line this process logs: the filter on each handler of the root logger (set up first)."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        """As a logging.Filter: the record's message (and traceback) redacted, always passed on."""
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: logged as logging would say it
            return True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = self(message), None
        if record.exc_text:
            record.exc_text = self(record.exc_text)
        return True


def redact_all(value, redact: Redactor):
    """`value` (text, or a dict / list / tuple of them, nested) with every string in it redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_all(k, redact): redact_all(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_all(v, redact) for v in value)
    return value


__all__ = ["HIDDEN", "KEY_HIDDEN", "redact_all", "Redactor"]
