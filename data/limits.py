"""Bounds on every input a user, a file or the fleet can hand us (docs/RELIABILITY.md, R10 and R11).

One place for the numbers, so that docs/RELIABILITY.md, the tests and the error messages agree. Each check
raises `TooLarge` (a `DataError`: the web app shows its message) saying what the limit is and what to do.

Why these numbers: a caption is 100-200 words (the model's schema bounds it at 1,500 characters); a human may
write more or paste notes, so 20,000 characters (~3,000 words, 13x the model's bound) leaves room, while a
100,000-character paste is refused before it can be saved, approved and exported. One save at the limit stays
far below the busy timeout (a multi-megabyte save holds the write lock past it), and the word diff of two
captions at the limit stays fast.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from data.errors import DataError, TooLarge, UnreadableJson, Unstorable

_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_CAPTION_CHARS = 20_000
MAX_LABELS_BYTES = 8_192  # the taxonomy's longest valid label set is well under 1 KiB
MAX_JOB_NAME_CHARS = 200
MAX_NOTE_CHARS = 2_000
MAX_SEARCH_CHARS = 500  # full-text search box and filter strings
MAX_SQL_INT = 2**63 - 1  # SQLite INTEGER; a larger id is "no such row", not an OverflowError (500)
MAX_SIDECAR_BYTES = 1 << 20
MAX_SIDECAR_DEPTH = 32
MAX_ANSWER_BYTES = 1 << 20  # one chat completion from the fleet (a 4,096-token answer is ~20 KiB)
MAX_PROVENANCE_CHARS = 256  # model name, replica, decode backend, finish reason from a fleet answer


@dataclass(frozen=True)
class SaveRate:
    """Human caption versions one person may save per `window` seconds: on one clip, and over all clips.
    A person saves a clip a few times while editing it; a script saving in a loop must not grow one clip's
    history to hundreds of versions, each shipped when the clip is opened (issue 21, class 4). The web app
    passes SAVE_RATE; None (scripts, tests of the version rules) is no limit."""

    per_clip: int = 30
    per_person: int = 600
    window: float = 60.0


SAVE_RATE = SaveRate()
HISTORY_PAGE = 20  # caption versions one open or save shows; older ones come a page at a time, on demand
HISTORY_PAGE_CHARS = 250_000  # and at most this much of the page's HTML (20 versions at the caption limit)


def check_text(value: str, limit: int, what: str) -> str:
    if value is not None and len(value) > limit:
        raise TooLarge(f"{what} is {len(value):,} characters; the limit is {limit:,}. Shorten it and try again.")
    if value is not None and "\x00" in value:
        raise DataError(f"{what} contains a NUL character; remove it and try again.")
    if value is not None and _SURROGATE.search(value):
        # a lone UTF-16 surrogate (a JSON "\ud800" escape from a script; no keyboard types one) is not text
        # SQLite can store: refused with a message instead of an encoding error deep in the save
        raise DataError(f"{what} contains an invalid character (a lone UTF-16 surrogate); remove it and try again.")
    return value


# Characters a reader never sees but a terminal, a text renderer or a model acts on: C0 controls but tab, newline
# and NUL (NUL is refused by check_text, with a message), DEL, C1 controls (U+009B is CSI in some terminals); every
# Bidi_Control character (ALM U+061C, LRM/RLM U+200E-F, the embeddings and overrides U+202A-E, the isolates
# U+2066-9), which reorder what a reader sees (Trojan Source); the zero-width and invisible ones (U+200B-D, the
# word joiner and invisible operators U+2060-4, U+180E), the BOM U+FEFF, the soft hyphen U+00AD, the interlinear
# annotation marks U+FFF9-B, the line and paragraph separators U+2028-9 (a newline where text has lines:
# `plain_text`), and the tag block U+E0000-E007F (invisible text a model reads). ESC [ ... rewrites a terminal that
# prints an exported caption; BEL rings, BS erases.
CONTROLS = re.compile(
    "[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u2069\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
_LINE_BREAKS = re.compile("\r\n|[\r\u2028\u2029]")


def plain_text(value: str | None) -> str | None:
    """`value` without CONTROLS (line ends and line separators become newlines): what a caption, a note or a reason
    is stored as, whoever wrote it (a person's paste, a model's answer)."""
    if not value:
        return value
    return CONTROLS.sub("", _LINE_BREAKS.sub("\n", value))


def visible(value: Any) -> Any:
    """`value` with NUL and CONTROLS removed from every string in it (nested dicts and lists too): what leaves the
    workbench (an export's and a release's records) and what the fleet names (a model, a replica), whenever it was
    stored."""
    if isinstance(value, str):
        return CONTROLS.sub("", value.replace("\x00", ""))
    if isinstance(value, dict):
        return {visible(k): visible(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible(v) for v in value]
    return value


def check_labels(labels: Any) -> Any:
    size = len(json.dumps(labels, default=str))
    if size > MAX_LABELS_BYTES:
        raise TooLarge(f"The labels take {size:,} bytes; the limit is {MAX_LABELS_BYTES:,}.")
    return labels


def sql_int(value: Any, what: str = "id") -> int:
    """An integer that fits SQLite, or DataError (a huge id from a URL must not become a 500)."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise DataError(f"{what} must be a whole number, not {str(value)[:40]!r}.") from None
    if isinstance(value, float) and not value.is_integer():
        raise DataError(f"{what} must be a whole number.")
    if not -MAX_SQL_INT <= n <= MAX_SQL_INT:
        raise DataError(f"{what} {str(n)[:24]}... is out of range.")
    return n


# Escapes first (each `\x` pair, left to right), then plain `"..."` strings: both passes are linear. (One
# pattern for strings with escapes inside is quadratic on an unterminated string of many `\"`.)
_JSON_ESCAPE = re.compile(r"\\.", re.S)
_JSON_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth_ok(text: str | bytes, limit: int = MAX_SIDECAR_DEPTH) -> bool:
    """Whether JSON text nests at most `limit` deep, found in linear time without parsing (the stdlib
    parser recurses: 100,000 '[' raise RecursionError, and a depth just under the interpreter's limit can
    still crash a thread with a small stack). Strings are cut out first (brackets inside them do not
    count), then the running depth over the brackets left is computed by C-level iterators."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", _JSON_ESCAPE.sub("", text)))
    if not brackets:
        return True
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets))) <= limit


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (strict parsers reject it)")


_NONZERO_MANTISSA = re.compile(r"[1-9]")


def _finite_float(text: str) -> float:
    value = float(text)
    mantissa = re.split("[eE]", text, maxsplit=1)[0]
    if math.isinf(value) or (value == 0.0 and _NONZERO_MANTISSA.search(mantissa)):
        # 1e400 parses as inf and 1e-400 as 0.0: storing either would store another number than the file's
        raise Unstorable(f"the number {text[:40]} is out of range (it would be stored as {value})")
    return value


def strict_json_loads(text: str | bytes) -> Any:
    """json.loads that refuses NaN, Infinity and -Infinity (Python accepts them; JSONL readers do not), and
    numbers a double cannot hold (1e400 would become inf, 1e-400 would become 0.0)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def outside_json(text: str | bytes, what: str = "The JSON", *, depth: int = MAX_SIDECAR_DEPTH) -> Any:
    """Parse JSON a person typed (a filter, a schema, a URL's ?f=) or handed us (a file): its nesting is checked
    first, in linear time and without parsing (the stdlib parser recurses: 5,000 nested objects end in a
    RecursionError), then it is parsed strictly (`strict_json_loads`). Raises UnreadableJson saying why."""
    if not json_depth_ok(text, depth):
        raise UnreadableJson(f"{what} nests deeper than {depth} levels.")
    try:
        return strict_json_loads(text)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise UnreadableJson(f"{what} nests too deep.") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise UnreadableJson(f"{what} is not JSON: {str(e)[:120]}.") from None


def storable_json(value: Any) -> str:
    """`value` as the JSON text SQLite stores, guaranteed to read back (json.loads) as the same value.

    Raises Unstorable saying why not: a lone UTF-16 surrogate (a JSON "\\ud800" escape parses, but is not
    text SQLite can store: the INSERT fails), a non-finite number, or anything else that does not survive the
    round trip."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
    if _SURROGATE.search(text):
        raise Unstorable("it holds text that is not valid Unicode (a lone UTF-16 surrogate such as \\ud800)")
    if json.loads(text) != value:
        raise Unstorable("its values do not read back as written")
    return text


def finite(value: Any) -> bool:
    return not (isinstance(value, float) and (math.isnan(value) or math.isinf(value)))


def clip_text(value: Any, limit: int = MAX_PROVENANCE_CHARS) -> Any:
    """A provenance string from the fleet (a model name, a replica), `visible` and cut to `limit` characters (a
    5 MB model name is garbage; ESC or NUL in one would act on a terminal, a bidi override reorder a page)."""
    if isinstance(value, str):
        value = visible(value)
        if len(value) > limit:
            return value[: limit - 1] + "…"
    return value
