"""Secrets out of the text the fleet sends back: what a replica, a router or a node says is stored, logged and
shown (a job item's `last_error`, the runner's heartbeat and log, `serving.caption`'s output, the Jobs and Fleet
tabs), and a replica may say anything, our own request included: a refusal that repeats the `Authorization`
header carries the fleet key, and an error that repeats the clip's signed URL carries its `sig=`.

`Redactor(secrets)` removes, from any text:
- each secret it was given (the data dir's fleet key: serving.fleet_key), anywhere, and a prefix of one (8
  characters or more) that ends the text, as a cut-off excerpt leaves it;
- any 10 characters in a row of a secret in any shape (issue 46: the key echoed split by a newline, a zero-width
  space or across two JSON fields was stored and shown, 25 of its 34 10-character windows): the text is
  normalised (JSON `\\uXXXX`, URL `%XX` and HTML `&#...;` escapes decoded, NFKC, every character outside the
  key's alphabet dropped, case ignored) and every place where a WINDOW-character piece of a secret appears is
  replaced, whatever stood between its characters;
- any bearer token (`Bearer <token>`), and the value of an `Authorization` or `api-key` header or field however
  it is quoted (`"authorization": "..."`, `Authorization: Basic ...`);
- the value of any `sig` URL parameter (`sig=...`, also percent-encoded once or twice: `sig%3D...`).

It is applied once, where the text enters the workbench: the fleet client (serving.client) for every error it
raises, the fleet reader (serving.fleet.reader) for every text it returns, and the runner's log handler (the
status line httpx logs is the server's). Work is linear in the text (no nested quantifiers); it keeps the rest
of the text as it was, so that a lead still reads what the replica said.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from typing import Iterable

HIDDEN = "[redacted]"
KEY_HIDDEN = "[fleet key]"
MIN_PREFIX = 8  # a cut-off secret is removed from the end of a text down to this many characters
WINDOW = 10  # any this many characters in a row of a secret, in any shape, are removed
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|%([0-9a-fA-F]{2})|&#(?:x([0-9a-fA-F]{1,6})|([0-9]{1,7}));")
_NOT_KEY = re.compile(r"[^0-9a-z_-]+")  # outside a fleet key's alphabet (serving.fleet_key: URL-safe base64)


def _unescaped(m: re.Match) -> str:
    hexa = m.group(1) or m.group(2) or m.group(3)
    code = int(hexa, 16) if hexa else int(m.group(4))
    return chr(code) if code < 0x110000 else ""


def _squeezed(text: str) -> str:
    """`text` as the window search reads it: escapes decoded, NFKC, lower case, only the key alphabet's characters."""
    return _NOT_KEY.sub("", unicodedata.normalize("NFKC", _ESCAPE.sub(_unescaped, text)).lower())


def _positions(text: str) -> tuple[str, list[tuple[int, int]]]:
    """`_squeezed(text)` with, for each of its characters, the span of `text` it came from."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(text):
        m = _ESCAPE.match(text, i)
        end = m.end() if m else i + 1
        for c in unicodedata.normalize("NFKC", _unescaped(m) if m else text[i]).lower():
            if not _NOT_KEY.match(c):
                out.append(c)
                spans.append((i, end))
        i = end
    return "".join(out), spans


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
        # every WINDOW-character piece of each secret, as `_squeezed` spells it
        self._windows = frozenset(
            w
            for s in self.secrets
            for k in [_squeezed(s)]
            for w in (k[i : i + WINDOW] for i in range(len(k) - WINDOW + 1))
        )

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
        return self._scrub_windows(text)

    def _scrub_windows(self, text: str) -> str:
        """`text` with every place a WINDOW-character piece of a secret appears in any shape replaced (the module
        docstring). A search over the squeezed text first (C-speed finds); positions only when one is there."""
        if not self._windows:
            return text
        squeezed = _squeezed(text)
        if len(squeezed) < WINDOW or not any(w in squeezed for w in self._windows):
            return text
        squeezed, spans = _positions(text)
        hidden = bytearray(len(text))
        for i in range(len(squeezed) - WINDOW + 1):
            if squeezed[i : i + WINDOW] in self._windows:
                for start, end in spans[i : i + WINDOW]:
                    hidden[start:end] = b"\x01" * (end - start)
        out, i = [], 0
        while i < len(text):
            if hidden[i]:
                j = i
                while j < len(text) and (hidden[j] or _gap(text, j, hidden)):
                    j += 1
                out.append(KEY_HIDDEN)
                i = j
            else:
                out.append(text[i])
                i += 1
        return "".join(out)

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


def _gap(text: str, j: int, hidden: bytearray) -> bool:
    """Whether text[j] (not hidden) lies between hidden characters with at most 3 others: a zero-width space or a
    quote inside the key is hidden with it, so that no piece of the key is left between two markers."""
    k = j
    while k < len(text) and k - j < 4 and not hidden[k]:
        k += 1
    return k < len(text) and bool(hidden[k])


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
