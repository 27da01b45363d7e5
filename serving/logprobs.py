"""Each label's confidence, read from the token logprobs vLLM returns with a structured answer.

What vLLM 0.25 returns, and why the reading below is sound, is in docs/CONFIDENCE.md (with file references). In
short: the grammar masks the logits before the sampler, so every logprob is already a probability over the tokens
the schema allows at that step; `top_logprobs` lists the sampled token first, then the most likely others; a token
the grammar forbids shows -9999.0; the sampled tokens' strings spell the message text exactly.

How a value's probability is read (`_probability`): the value's JSON literal (`"night_lit"`) starts at a known
character of the text. Walking the sampled tokens that overlap it, each step where more than one allowed literal
is still possible is a decision. There, every alternative token is set against the literals still possible:
those it is consistent with (its text continues or completes them). An alternative consistent with all of them
decides nothing (a bare `"`) and one consistent with none is off the path (other whitespace): both are left out,
which normalises over the allowed values. The step's probability is the mass of the alternatives consistent with
the generated value over the mass of all deciding ones, and the value's probability is the product over its
decisions (`night_lit` after `night_dark`'s shared `night`: two decisions). Tokens are matched to values by the
text they spell, in order, never by guessing: when the tokens do not spell the answer, there is no confidence.

A list label (road users) gets a confidence per item, one for "no more items" (the closing `]` against a `,`),
and as a whole the product of every decision in the list (the probability of exactly this list).

The result is what data.captions stores in `captions.confidence` (data.confidence reads it):
`{"labels": {label: p or null}, "items": {list label: {value: p}}, "end": {list label: p}}`, probabilities
rounded to 4 places, plus `"note"` saying why when the logprobs could not be read at all.

What a fleet sends is read, never trusted: `label_confidence` never raises. A logprob that is not a probability's
log (NaN, infinite, above 0, a 400-digit integer, a string), a token longer than any tokenizer's, or any shape
other than vLLM's makes the confidence unreadable (every label None and a `note`), never a failed caption. The
work is linear in the answer: each decision looks at one token's alternatives, and a token's text is at most
MAX_TOKEN_CHARS, so no step re-reads the answer (tests/serving/test_answers.py).
"""

from __future__ import annotations

import bisect
import json
import math
import re
from json.decoder import scanstring
from typing import Any

FORBIDDEN = -9999.0  # vLLM's stand-in for -inf: a token the grammar does not allow here
PLACES = 4
# Qwen's longest vocabulary entries are runs of ~100 spaces or dashes; a "token" far longer is not one, and each
# decision reads the text of the token it falls in: this bound keeps that reading linear in the answer
MAX_TOKEN_CHARS = 1024
# float32 rounding can put a certain token's logprob a hair above 0; anything further above is not a log-probability
LOGPROB_SLACK = 1e-3
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(strict=False)


class _Unreadable(ValueError):
    """The answer's text is not the JSON object its tokens should spell."""


class _BadLogprob(ValueError):
    """A listed logprob is not the log of a probability."""


def _logprob(value: Any) -> float | None:
    """A listed alternative's logprob as a float; None for a token the grammar forbids there (vLLM's -9999.0, or
    -inf); _BadLogprob for anything that is not the log of a probability (NaN, +inf, above 0, not a number, an
    integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadLogprob("a logprob is not a number")
    try:
        lp = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise _BadLogprob("a logprob is out of range") from None
    if lp != lp or lp > LOGPROB_SLACK:  # NaN, +inf, or a "probability" above 1
        raise _BadLogprob("a logprob is not the log of a probability")
    return None if lp <= FORBIDDEN else min(lp, 0.0)


def enum_labels(schema: dict) -> dict[str, tuple[tuple[str, ...], bool]]:
    """label -> (its allowed values, whether it is a list), for every property of `schema` that is an enum or a
    list of an enum: the labels a confidence can be read for."""
    out: dict[str, tuple[tuple[str, ...], bool]] = {}
    for name, spec in ((schema or {}).get("properties") or {}).items():
        if not isinstance(spec, dict):
            continue
        if isinstance(spec.get("enum"), list):
            out[name] = (tuple(str(v) for v in spec["enum"]), False)
        elif spec.get("type") == "array" and isinstance(spec.get("items"), dict):
            values = spec["items"].get("enum")
            if isinstance(values, list):
                out[name] = (tuple(str(v) for v in values), True)
    return out


def label_confidence(content: str, logprobs: Any, schema: dict) -> dict | None:
    """The confidence of every enum label of `schema` as generated in `content`, from the answer's
    `choices[0].logprobs` (`{"content": [...]}`). None when there are no logprobs (not asked for); a result with
    every label None and a `note` when they cannot be read (tokens that do not spell the text, a text that is
    not one JSON object). Labels whose decisions are missing from `top_logprobs` are None."""
    if logprobs is None:
        return None
    try:
        labels = enum_labels(schema)
    except Exception:  # a schema we were given, not the fleet's: read no label rather than fail the caption
        labels = {}
    empty = {"labels": dict.fromkeys(labels), "items": {}, "end": {}}
    try:
        return _label_confidence(content, logprobs, labels, empty)
    except _BadLogprob as e:
        return {**empty, "note": f"the answer's token logprobs are unreadable: {e}"}
    except Exception as e:  # never a failed caption for a confidence that cannot be read (the module docstring)
        return {**empty, "note": f"the answer's token logprobs are unreadable ({type(e).__name__})"}


def _label_confidence(content: Any, logprobs: Any, labels: dict, empty: dict) -> dict:
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list) or not entries:
        return {**empty, "note": "the answer carries no token logprobs"}
    tokens = [e.get("token") if isinstance(e, dict) else None for e in entries]
    if not all(isinstance(t, str) for t in tokens):
        return {**empty, "note": "a token of the answer has no text"}
    if any(len(t) > MAX_TOKEN_CHARS for t in tokens):
        return {**empty, "note": f"a token of the answer is longer than {MAX_TOKEN_CHARS} characters"}
    spelled = "".join(tokens)
    if not isinstance(content, str) or not spelled.startswith(content) or not content:
        return {**empty, "note": "the tokens do not spell the answer's text"}
    starts = [0]
    for t in tokens:
        starts.append(starts[-1] + len(t))
    reader = _Reader(content, starts, entries)
    try:
        return _read_labels(reader, content, labels)
    except _BadLogprob:
        raise
    except (ValueError, IndexError, RecursionError):
        return {**empty, "note": "the answer's text is not one JSON object of the schema's shape"}


def _read_labels(reader: "_Reader", content: str, labels: dict[str, tuple[tuple[str, ...], bool]]) -> dict:
    members = dict(_members(content))
    out: dict[str, dict] = {"labels": {}, "items": {}, "end": {}}
    for name, (values, multi) in labels.items():
        span = members.get(name)
        literals = [json.dumps(v, ensure_ascii=False) for v in values]
        if span is None:
            out["labels"][name] = None
        elif multi:
            items, end, whole = _list_confidence(reader, content, span, literals)
            out["labels"][name] = _round(whole)
            out["items"][name] = {}
            for literal, p in items:  # a value listed twice counts once, as data.taxonomy reads it
                out["items"][name].setdefault(json.loads(literal), _round(p))
            out["end"][name] = _round(end)
        else:
            start, stop = span
            out["labels"][name] = _round(reader.probability(start, content[start:stop], literals))
    return out


def _round(p: float | None) -> float | None:
    return None if p is None else round(min(1.0, max(0.0, p)), PLACES)


def _ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def _members(text: str):
    """(key, start, end) of each member value of the top-level JSON object in `text`, by character offset."""
    i = _ws(text, 0)
    if text[i] != "{":
        raise _Unreadable("not an object")
    i = _ws(text, i + 1)
    if text[i] == "}":
        return
    while True:
        if text[i] != '"':
            raise _Unreadable("a key is not a string")
        key, i = scanstring(text, i + 1, False)
        i = _ws(text, i)
        if text[i] != ":":
            raise _Unreadable("no colon after a key")
        start = _ws(text, i + 1)
        _, i = _DECODER.raw_decode(text, start)
        yield key, (start, i)
        i = _ws(text, i)
        if text[i] == "}":
            return
        if text[i] != ",":
            raise _Unreadable("no comma between members")
        i = _ws(text, i + 1)


def _list_confidence(
    reader: "_Reader", text: str, span: tuple[int, int], literals: list[str]
) -> tuple[list[tuple[str, float | None]], float | None, float | None]:
    """(each item's literal with its probability, the probability of the closing bracket where the list ended, the
    product of every decision in the list) for the JSON array at `span`."""
    start, _ = span
    if text[start] != "[":
        return [], None, None
    items: list[tuple[str, float | None]] = []
    decisions: list[float | None] = []
    i = _ws(text, start + 1)
    while True:
        # after "[" the choice is an item (") or the end (]); after an item, another (,) or the end (])
        more = "," if items else '"'
        if text[i] not in (more, "]"):
            raise _Unreadable("a list is not a list of strings")
        decisions.append(reader.probability(i, text[i], [more, "]"]))
        if text[i] == "]":
            break
        if items:
            i = _ws(text, i + 1)
        literal_start = i
        _, i = scanstring(text, i + 1, False)
        literal = text[literal_start:i]
        items.append((literal, reader.probability(literal_start, literal, literals)))
        i = _ws(text, i)
    steps = [p for _, p in items] + decisions
    whole = None if any(p is None for p in steps) else math.prod(steps)
    return items, decisions[-1], whole


class _Reader:
    """The sampled tokens of one answer laid over its text: which token holds a character, what was generated
    before it, and the alternatives vLLM listed there."""

    def __init__(self, text: str, starts: list[int], entries: list[dict]):
        self.text, self.starts, self.entries = text, starts, entries

    def _token_at(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos) - 1

    def probability(self, pos: int, generated: str, candidates: list[str]) -> float | None:
        """P(the text at `pos` continues with `generated`, one of `candidates`, rather than another candidate),
        from the alternatives of each sampled token that decides between candidates; None when a decision shows
        no deciding alternative (top_logprobs missing or empty there)."""
        if generated not in candidates:
            return None
        prob = 1.0
        end = pos + len(generated)
        i = self._token_at(pos)
        while i < len(self.entries) and self.starts[i] < end:
            offset = max(0, self.starts[i] - pos)  # characters of the literal generated before this token
            before = self.text[self.starts[i] : pos]  # what this token spells before the literal begins
            done = generated[:offset]
            alive = [c for c in candidates if c.startswith(done)]
            if len(alive) > 1:
                step = self._step(self.entries[i], before, offset, alive, generated)
                if step is None:
                    return None
                prob *= step
            i += 1
        return prob

    @staticmethod
    def _fits(token: str, before: str, offset: int, alive: list[str]) -> list[str] | None:
        """The candidates still alive that `token` (spelling `before`, then its part of the literal) is
        consistent with; None for a token that spells something else before the literal."""
        if not token.startswith(before):
            return None
        rest = token[len(before) :]
        return [c for c in alive if c[offset:].startswith(rest) or rest.startswith(c[offset:])]

    def _step(self, entry: dict, before: str, offset: int, alive: list[str], generated: str) -> float | None:
        """P(this token's choice among the live candidates goes the generated literal's way): 1.0 where the
        sampled token decides nothing (it spells only what every live candidate shares)."""
        sampled = self._fits(entry["token"], before, offset, alive)
        if sampled is None or len(sampled) == len(alive):
            return 1.0
        chosen = deciding = 0.0
        alternatives = entry.get("top_logprobs")
        for alt in alternatives if isinstance(alternatives, list) else ():
            token, raw = (alt.get("token"), alt.get("logprob")) if isinstance(alt, dict) else (None, None)
            if not isinstance(token, str):
                continue
            lp = _logprob(raw)
            if lp is None:
                continue  # the grammar forbids it here
            fits = self._fits(token, before, offset, alive)
            if not fits or len(fits) == len(alive):
                continue  # another spelling of what came before the literal, or deciding nothing yet
            p = math.exp(lp)
            deciding += p
            if generated in fits:
                chosen += p
        return chosen / deciding if deciding > 0 else None
