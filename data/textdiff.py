"""Word-level differences between two texts: the opcodes (for the review history's diff, webapp.render) and
an edit ratio (how much a reviewer changed a caption, for quality metrics).

The bound (R11, docs/RELIABILITY.md): difflib's SequenceMatcher is quadratic in the worst case (two long
captions cost tens of seconds of CPU on every view). So, as in git's patience diff: cut the common head and
tail (linear), anchor on words that occur once in each side (longest increasing subsequence, n log n), and give
difflib only the gaps between anchors, within a total budget of word pairs. What is left over the budget is one
coarse "replace", and the result says it was cut. 250,000 pairs of difflib's worst input (a two-word
vocabulary) take ~60 ms.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from typing import NamedTuple

DIFF_MAX_PAIRS = 250_000
DIFF_MAX_DEPTH = 3

Opcode = tuple[str, int, int, int, int]  # difflib's (tag, i1, i2, j1, j2): a[i1:i2] becomes b[j1:j2]


class WordDiff(NamedTuple):
    """The words of both texts (split on whitespace), the opcodes turning `a` into `b`, and whether the bound
    cut the diff short."""

    a: list[str]
    b: list[str]
    ops: list[Opcode]
    cut: bool


def word_diff(old: str | None, new: str | None) -> WordDiff:
    """The word-level diff of two texts (None is empty), in bounded time."""
    a, b = (old or "").split(), (new or "").split()
    ops, cut = opcodes(a, b)
    return WordDiff(a, b, ops, cut)


def edit_ratio(old: str | None, new: str | None) -> float:
    """How much of the text changed, word by word: 1 - kept / max(len(old), len(new)), where `kept` is the
    number of words the diff matches (its "equal" runs). 0.0: the same words (or both empty); 1.0: no word
    kept. Changing one word of ten, or adding one to nine, gives 0.1. Whitespace does not count. Past the bound
    the diff matches fewer words than it could, so the ratio is then an upper bound."""
    d = word_diff(old, new)
    longest = max(len(d.a), len(d.b))
    if not longest:
        return 0.0
    kept = sum(i2 - i1 for tag, i1, i2, _, _ in d.ops if tag == "equal")
    return 1.0 - kept / longest


def describe(old: str | None, new: str | None) -> str:
    """What changed from `old` to `new`, in words, for a person deciding what to keep: "12 words added at the
    end; 1 word changed at the start" (by kind and place, in the text's order), "" when the words are the same,
    "rewritten (90 words, now 120)" when no word was kept. Places are those of `old`: the start (before its
    first word), the end (after its last), else the middle."""
    d = word_diff(old, new)
    if d.a == d.b:
        return ""
    if not d.a:
        return f"{_words(len(d.b))} written"
    if not d.b:
        return "the text removed"
    if not any(op[0] == "equal" for op in d.ops):
        return f"rewritten ({_words(len(d.a))}, now {len(d.b)})"
    groups: dict[tuple[str, str], int] = {}
    for op, i1, i2, j1, j2 in d.ops:
        if op == "equal":
            continue
        where = "at the start" if i1 == 0 else "at the end" if i2 == len(d.a) else "in the middle"
        kind, n = {"insert": ("added", j2 - j1), "delete": ("removed", i2 - i1)}.get(
            op, ("changed", max(i2 - i1, j2 - j1))
        )
        groups[(kind, where)] = groups.get((kind, where), 0) + n
    return "; ".join(f"{_words(n)} {kind} {where}" for (kind, where), n in groups.items())


def _words(n: int) -> str:
    return f"{n:,} word{'' if n == 1 else 's'}"


def _unique_anchors(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """(i, j) of words unique in a and in b, in an order increasing on both sides (LIS over j)."""
    ca, cb = Counter(a), Counter(b)
    once_b = {w for w, n in cb.items() if n == 1}
    once = {w for w, n in ca.items() if n == 1 and w in once_b}
    where_b = {w: j for j, w in enumerate(b) if w in once}
    pairs = [(i, where_b[w]) for i, w in enumerate(a) if w in once]
    tails: list[int] = []  # patience sorting: tails[k] = smallest j ending an increasing run of length k+1
    tail_idx: list[int] = []
    prev: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = bisect.bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            tail_idx.append(k)
        else:
            tails[pos], tail_idx[pos] = j, k
        prev[k] = tail_idx[pos - 1] if pos else -1
    out, k = [], tail_idx[-1] if tail_idx else -1
    while k >= 0:
        out.append(pairs[k])
        k = prev[k]
    return out[::-1]


def opcodes(a: list[str], b: list[str]) -> tuple[list[Opcode], bool]:
    """difflib-style opcodes turning word list `a` into `b`, in bounded time; (ops, whether the bound cut the
    diff short: the rest is then one coarse "replace", so fewer words are matched than could be)."""
    budget = [DIFF_MAX_PAIRS]
    cut = [False]
    ops: list[Opcode] = []

    def equal(i, j, n):  # one op per run of equal words, not one per word
        if ops and ops[-1][0] == "equal" and ops[-1][2] == i and ops[-1][4] == j:
            ops[-1] = ("equal", ops[-1][1], i + n, ops[-1][3], j + n)
        else:
            ops.append(("equal", i, i + n, j, j + n))

    def coarse(alo, ahi, blo, bhi):
        if alo < ahi or blo < bhi:
            ops.append(
                ("replace" if alo < ahi and blo < bhi else "delete" if alo < ahi else "insert", alo, ahi, blo, bhi)
            )

    def rec(alo, ahi, blo, bhi, depth):
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        if head:
            equal(alo, blo, head)
            alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
            tail += 1
        mid_a, mid_b = ahi - tail, bhi - tail
        pairs = (mid_a - alo) * (mid_b - blo)
        if pairs == 0:
            coarse(alo, mid_a, blo, mid_b)
        elif pairs <= min(budget[0], DIFF_MAX_PAIRS // 4) or (pairs <= budget[0] and depth >= DIFF_MAX_DEPTH):
            budget[0] -= pairs
            sm = difflib.SequenceMatcher(a=a[alo:mid_a], b=b[blo:mid_b], autojunk=False)
            for op, i1, i2, j1, j2 in sm.get_opcodes():
                if op == "equal":
                    equal(i1 + alo, j1 + blo, i2 - i1)
                else:
                    ops.append((op, i1 + alo, i2 + alo, j1 + blo, j2 + blo))
        elif depth < DIFF_MAX_DEPTH and (anchors := _unique_anchors(a[alo:mid_a], b[blo:mid_b])):
            pa, pb = alo, blo
            for i, j in anchors:
                if alo + i != pa or blo + j != pb:  # most gaps between anchors are empty: no call for those
                    rec(pa, alo + i, pb, blo + j, depth + 1)
                equal(alo + i, blo + j, 1)
                pa, pb = alo + i + 1, blo + j + 1
            rec(pa, mid_a, pb, mid_b, depth + 1)
        else:
            cut[0] = True
            coarse(alo, mid_a, blo, mid_b)
        if tail:
            equal(mid_a, mid_b, tail)

    rec(0, len(a), 0, len(b), 0)
    return ops, cut[0]
