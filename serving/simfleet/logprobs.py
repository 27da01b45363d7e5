"""The token logprobs a simulated replica returns with an answer, in vLLM 0.25's shape (docs/CONFIDENCE.md).

The answer's text is cut into tokens the way Qwen's pre-tokenizer cuts text (`TOKEN`: a word with the one
punctuation or space before it, runs of punctuation, single digits), each entry
`{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}` with the sampled token first
in `top_logprobs` (at temperature 0 it is also the likeliest), exactly `k` alternatives, and -9999.0 for tokens the
grammar forbids there. Like real vLLM under a JSON schema:
- a token the grammar forces (keys, quotes, commas, the rest of a value once it is decided) has logprob 0.0 and
  k - 1 forbidden alternatives;
- where a label's allowed values part (the values' tokens form a tree: `night` then `_lit` | `_dark`), the
  alternatives are the other branches, and the sampled branch's probability is what the clip drew: most labels
  confident (0.9-0.999), about a third uncertain (0.34-0.75), deterministic per clip;
- a list label decides at each item (another item or `]`);
- caption words are free text with plausible alternatives.
`planned` is the confidence serving.logprobs should read back from these logprobs: the tests hold the two to
each other.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

FORBIDDEN = -9999.0
STOP_TOKEN = "<|im_end|>"  # Qwen3-VL's end of turn: the last logprobs entry of an answer that stopped
MAX_LOGPROBS = 20  # vLLM's --max-logprobs default: a request asking more is refused (vllm/sampling_params.py)
# Qwen2's pre-tokenizer pattern in Python's `re` (letters: [^\W\d_]; "not a letter or digit": [^\w]|_)
TOKEN = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|(?:[^\r\n\w]|_)?[^\W\d_]+|\d| ?(?:[^\s\w]|_)+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# what a forbidden alternative decodes to: the first ids of Qwen's vocabulary, where topk among -inf ties lands
FILLERS = ("!", '"', "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/", "0", "1", "2", "3", "4", "5")
WORDS = (" the", " a", " vehicle", " road", " lane", " car", " ahead", " slowly", " left", " right", " and", " is")
_END = object()  # a value's end in the tree of its tokens


def too_many(k: int) -> str | None:
    """vLLM's refusal of `top_logprobs` above --max-logprobs, word for word (vllm/sampling_params.py
    `_validate_logprobs`, with VLLMValidationError's parameter suffix), or None."""
    if k > MAX_LOGPROBS:
        return (
            f"Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS} "
            f"(parameter=logprobs, value={k})"
        )
    return None


@dataclass
class _Plan:
    """What is decided where: token index -> [(token text, probability)] with the sampled token first."""

    choices: dict[int, list[tuple[str, float]]] = field(default_factory=dict)
    planned: dict = field(default_factory=lambda: {"labels": {}, "items": {}, "end": {}})


def simulate(content: str, answer: dict, schema: dict, k: int, seed: bytes) -> tuple[dict, dict]:
    """(`choices[0].logprobs` for `content`, the confidence it carries) for an answer with `k` alternatives per
    token; `seed` makes it the same for the same clip."""
    spans = [m.span() for m in TOKEN.finditer(content)]
    starts = [s for s, _ in spans]
    rng = random.Random(hashlib.sha256(seed + b"logprobs").digest())
    plan = _Plan()
    props = (schema or {}).get("properties") or {}
    caption = (0, 0)
    pos = 0
    for name, value in answer.items():
        pos = content.index(json.dumps(name, ensure_ascii=False) + ": ", pos)
        start = pos + len(json.dumps(name, ensure_ascii=False)) + 2
        spec = props.get(name) if isinstance(props.get(name), dict) else {}
        literal = json.dumps(value, ensure_ascii=False)
        if name == "caption":
            caption = (start, start + len(literal))
        elif isinstance(spec.get("enum"), list) and isinstance(value, str):
            p = _value(plan, content, spans, starts, start, value, [str(v) for v in spec["enum"]], rng, k)
            plan.planned["labels"][name] = _r(p)
        elif isinstance(value, list) and isinstance((spec.get("items") or {}).get("enum"), list):
            _list(plan, name, content, spans, starts, start, value, [str(v) for v in spec["items"]["enum"]], rng, k)
        pos = start + len(literal)
    entries = []
    for i, (s, e) in enumerate(spans):
        if i in plan.choices:
            entries.append(_entry(tuple(plan.choices[i]), k))
        elif caption[0] < e and s < caption[1] - 1:
            entries.append(_free(content[s:e], k))
        else:
            entries.append(_entry(((content[s:e], 1.0),), k))
    return {"content": entries}, plan.planned


def _r(p: float | None) -> float | None:
    return None if p is None else round(p, 4)


def _draw(rng: random.Random, branches: int, uncertain: bool) -> float:
    """The sampled branch's probability among `branches`: the likeliest (temperature 0 takes the argmax)."""
    p = rng.uniform(0.34, 0.75) if uncertain else rng.uniform(0.9, 0.999)
    return max(p, 1.0 / branches + 0.02)


def _spread(rng: random.Random, rest: float, n: int, cap: float) -> list[float]:
    """`rest` shared by `n` alternatives, decreasing, none above `cap` (the sampled token stays the argmax)."""
    if n <= 0:
        return []
    weights = [0.6**j * rng.uniform(0.8, 1.0) for j in range(n)]
    shares = [rest * w / sum(weights) for w in weights]
    return shares if shares[0] <= cap else [rest / n] * n


def _visible(choice: list[tuple[str, float]], k: int) -> float | None:
    """P(sampled) as normalised over what the k listed alternatives show (what a reader can see; nothing when
    none are listed)."""
    shown = choice[:k]
    return shown[0][1] / sum(p for _, p in shown) if shown else None


def _times(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a * b


def _tree(values: list[str]) -> dict:
    tree: dict = {}
    for v in values:
        node = tree
        for tok in TOKEN.findall(v):
            node = node.setdefault(tok, {})
        node[_END] = {}
    return tree


def _value(plan, content, spans, starts, start, value, values, rng, k) -> float | None:
    """Plan the decisions of one enum value whose literal starts at `start`; returns its visible probability."""
    inner = TOKEN.findall(value)
    first = _index(starts, start + 1)
    close = _index(starts, start + len(value) + 1)  # the token holding the closing quote
    if first is None or close is None or [content[s:e] for s, e in spans[first:close]] != inner:
        return None  # tokens that do not line up with the value: left forced (no alternatives)
    uncertain = rng.random() < 0.3
    prob: float | None = 1.0
    node = _tree(values)
    path = [*inner, _END]
    for j, tok in enumerate(path):
        if len(node) > 1:
            at = first + j if tok is not _END else close
            closing = content[slice(*spans[close])]
            names = {key: (closing if key is _END else key) for key in node}
            p = _draw(rng, len(node), uncertain)
            others = [names[key] for key in node if key != tok]
            rng.shuffle(others)
            choice = [(names[tok], p), *zip(others, _spread(rng, 1 - p, len(others), p))]
            plan.choices[at] = choice
            prob = _times(prob, _visible(choice, k))
            uncertain = False  # later decisions of a value are confident
        node = node.get(tok, {})
    return prob


def _list(plan, name, content, spans, starts, start, items, values, rng, k) -> None:
    """Plan a list label: each item's value, and at each step another item or the end."""
    found: dict[str, float | None] = {}
    steps: list[float | None] = []
    pos = start + 1
    for n in range(len(items) + 1):
        more = '"' if n == 0 else ","
        here = content[pos]
        steps.append(_decide(plan, content, spans, starts, pos, here, more if here == "]" else "]", rng, k))
        if here == "]":
            break
        if n:
            pos += 2  # ", "
        literal = json.dumps(items[n], ensure_ascii=False)
        p = _value(plan, content, spans, starts, pos, items[n], values, rng, k)
        found.setdefault(items[n], _r(p))
        steps.append(p)
        pos += len(literal)
    plan.planned["items"][name] = found
    plan.planned["end"][name] = _r(steps[-1])
    plan.planned["labels"][name] = None if None in steps else _r(math.prod(steps))


def _decide(plan, content, spans, starts, pos, sampled, other, rng, k) -> float | None:
    """Plan the choice between two characters at `pos` (another item or the end of a list)."""
    i = _index(starts, pos)
    if i is None:
        return None
    s, e = spans[i]
    before, token = content[s:pos], content[s:e]
    p = _draw(rng, 2, rng.random() < 0.15)
    choice = [(token, p), (before + other, 1 - p)]
    plan.choices[i] = choice
    return _visible(choice, k)


def _index(starts: list[int], pos: int) -> int | None:
    """The token holding character `pos`."""
    i = bisect.bisect_right(starts, pos) - 1
    return i if i >= 0 else None


def _lp(p: float) -> float:
    return math.log(p) if p > 0 else FORBIDDEN


def _alt(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


@functools.lru_cache(maxsize=65536)
def _entry(choice: tuple[tuple[str, float], ...], k: int) -> dict:
    """A token entry: the sampled token (first of `choice`), then the other allowed ones, then forbidden ones.
    Cached (an answer repeats its forced tokens, and answers repeat words): callers never change an entry."""
    token, p = choice[0]
    top = [_alt(t, _lp(q)) for t, q in choice[:k]]
    fillers = (f for f in FILLERS if f not in {t for t, _ in choice})
    while len(top) < k:
        top.append(_alt(next(fillers), FORBIDDEN))
    return {**_alt(token, _lp(p)), "top_logprobs": top}


@functools.lru_cache(maxsize=65536)
def _free(token: str, k: int) -> dict:
    """A caption token: free text, the sampled token likeliest, a few plausible others; the same word gets the
    same numbers (cached: a caption's words repeat across answers)."""
    rng = random.Random(token)
    p = rng.uniform(0.3, 0.95)
    others = [w for w in WORDS if w != token][: max(0, k - 1)]
    return _entry(((token, p), *zip(others, _spread(rng, (1 - p) * 0.9, len(others), p))), k)


def answer_logprobs(content: str, answer: dict, schema: Any, k: int, seed: bytes, *, stopped: bool = True) -> dict:
    """`choices[0].logprobs` of a simulated answer (see `simulate`). `stopped` (finish_reason "stop"): the last
    entry is the stop token, forced by the grammar, as real vLLM 0.25 returned it (recorded: tokens spell the text,
    then `<|im_end|>` at logprob 0.0 with forbidden alternatives; one entry per completion token)."""
    lp = simulate(content, answer, schema if isinstance(schema, dict) else {}, k, seed)[0]
    if stopped:
        lp = {"content": [*lp["content"], _entry(((STOP_TOKEN, 1.0),), k)]}
    return lp
