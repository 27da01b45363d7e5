"""Sizes as close as the groups allow, where a few heavy groups decide them (data.release.stratify places the rest).

The greedy of data.release.stratify places groups one at a time, largest first, each where it helps most at that
moment. With many small groups that lands within a group or two of every asked size. With a few heavy groups it
can miss by far where a near-exact split exists: 76.4 / 16.7 / 6.9 % for an asked 80 / 10 / 10 that was
reachable, because the first heavy groups are placed before the greedy knows what the later ones will need.

So the heavy groups (at most SEARCHED of them, the largest) are placed by a search over every way of placing them
(branch and bound, `search`), keeping the placement whose sizes miss least once the lighter groups fill in what is
left. What is minimised is the **largest relative miss**, max over splits of |n - share x N| / (share x N): a test
split of 6.9 % for an asked 10 % is a 31 % miss, and that is what a trainer notices. Lighter groups are counted
as if they could be divided at will (`fluid_miss`), which is exact when there are none and a lower bound
otherwise, so a branch whose bound already misses more than the best placement found is cut. The search stops
after NODES steps (keeping the best found, the greedy's choices are tried first); with up to 14 groups over 2-4
splits it finishes (tests/data/release/test_release_splits.py compares it with an exhaustive search).

`repair` then tries moving any one group, or swapping two, while that lowers the miss (or keeps it and lowers the
hazard-level distance): the cheap fix for what the greedy leaves among a few dozen groups.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

SEARCHED = 14  # the heavy groups searched over at most
NODES = 200_000  # search steps at most (each a partial placement)
TIE = 1e-9  # two misses closer than this are the same


def miss(sizes: Sequence[float], targets: Sequence[float]) -> float:
    """The largest relative miss of `sizes` from `targets` (clips per split, in the same order)."""
    return max((abs(n - t) / t for n, t in zip(sizes, targets) if t > 0), default=0.0)


def fluid_miss(sizes: Sequence[float], targets: Sequence[float], free: float) -> float:
    """The least largest relative miss reachable from `sizes` when `free` more clips can go anywhere, in any
    fractions: clips placed cannot be taken back, so a split over its target stays over it, and the free clips
    fill the deficits (the largest relative ones first)."""
    over = max(((n - t) / t for n, t in zip(sizes, targets) if t > 0), default=0.0)
    m = max(0.0, over)

    def deficit(x: float) -> float:
        return sum(max(0.0, t * (1 - x) - n) for n, t in zip(sizes, targets))

    if deficit(m) <= free + 1e-9:
        return m
    # between breakpoints (where a split stops being short) the deficit is linear in the miss
    points = sorted({1 - n / t for n, t in zip(sizes, targets) if t > 0 and 1 - n / t > m})
    low = m
    for high in points:
        if deficit(high) <= free + 1e-9:
            # short all through (low, high): those whose own breakpoint is not below `high` (one whose breakpoint is
            # `low` itself stops being short there, and counting it by `n < t * (1 - low)`, true by a rounding,
            # gave a miss below what any placement reaches)
            short = [(n, t) for n, t in zip(sizes, targets) if t > 0 and 1 - n / t >= high - 1e-12]
            s = sum(t - n for n, t in short)
            w = sum(t for _, t in short)
            return max(low, (s - free) / w) if w else low
        low = high
    return low


def search(
    base: Sequence[int], targets: Sequence[float], groups: Sequence[int], free: float, budget: int = NODES
) -> tuple[list[int] | None, float]:
    """The split (an index into `targets`) of each of `groups` (clip counts, in the order to try them; the
    largest first prunes soonest) that minimises `fluid_miss` of the final sizes, from `base` (clips already
    placed per split), with `free` lighter clips still to come. Returns (choices, their miss); choices is None
    when nothing beat infinity (no groups: ([], miss))."""
    k, n = len(targets), len(groups)
    suffix = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + groups[i]
    sizes = list(base)
    best: list = [math.inf, None]
    chosen = [0] * n
    seen: set[tuple] = set()
    steps = [0]

    def dfs(i: int) -> None:
        steps[0] += 1
        if steps[0] > budget:
            return
        bound = fluid_miss(sizes, targets, suffix[i] + free)
        if bound >= best[0] - TIE:
            return
        if i == n:
            best[0], best[1] = bound, chosen[:]
            return
        key = (i, *sizes)
        if key in seen:
            return
        seen.add(key)
        g = groups[i]
        tried = set()
        # the split whose size after this group stays furthest below its target first (the greedy's choice)
        for s in sorted(range(k), key=lambda s: ((sizes[s] + g) / targets[s] if targets[s] > 0 else math.inf, s)):
            if targets[s] <= 0 or (sizes[s], targets[s]) in tried:
                continue
            tried.add((sizes[s], targets[s]))
            sizes[s] += g
            chosen[i] = s
            dfs(i + 1)
            sizes[s] -= g

    dfs(0)
    return best[1], best[0]


def level_cost(counts: Sequence[Mapping[str, int]], shares: Sequence[float], totals: Mapping[str, int]) -> float:
    """The squared distance of each split's clips per hazard level from its share of that level's clips."""
    levels = sorted(totals)  # one order, whatever order the groups came in (the same sum to the last bit)
    return sum((c.get(level, 0) - r * totals[level]) ** 2 for c, r in zip(counts, shares) for level in levels)


def repair(
    hists: Sequence[Mapping[str, int]],
    placed: list[int],
    fixed: Sequence[Mapping[str, int]],
    shares: Sequence[float],
    rounds: int = 50,
) -> list[int]:
    """Move one group, or swap two, while it lowers (miss, level distance), comparing misses to TIE; `placed[i]`
    is the split of `hists[i]`, `fixed` the clips per split and level that no move touches (groups kept where an
    earlier release placed them). Returns the improved placement (a new list)."""
    placed = list(placed)
    k = len(shares)
    counts = [dict(f) for f in fixed]
    for h, s in zip(hists, placed):
        for level, g in h.items():
            counts[s][level] = counts[s].get(level, 0) + g
    totals: dict[str, int] = {}
    for c in counts:
        for level, g in c.items():
            totals[level] = totals.get(level, 0) + g
    total = sum(totals.values())
    targets = [r * total for r in shares]
    size = [sum(c.values()) for c in counts]
    sizes = [sum(h.values()) for h in hists]

    def key() -> tuple[float, float]:
        return round(miss(size, targets) / TIE) * TIE, level_cost(counts, shares, totals)

    def shift(i: int, to: int, sign: int = 1) -> None:
        src, dst = (placed[i], to) if sign > 0 else (to, placed[i])
        for level, g in hists[i].items():
            counts[src][level] -= g
            counts[dst][level] = counts[dst].get(level, 0) + g
        size[src] -= sizes[i]
        size[dst] += sizes[i]

    current = key()
    for _ in range(rounds):
        improved = False
        for i in range(len(hists)):
            for to in range(k):
                if to == placed[i] or shares[to] <= 0:
                    continue
                frm = placed[i]
                shift(i, to)
                placed[i] = to
                now = key()
                if now < current:
                    current, improved = now, True
                    break
                placed[i] = frm
                shift(i, to, -1)
        for i in range(len(hists)):
            for j in range(i + 1, len(hists)):
                a, b = placed[i], placed[j]
                if a == b or sizes[i] == sizes[j] and hists[i] == hists[j]:
                    continue
                shift(i, b)
                placed[i] = b
                shift(j, a)
                placed[j] = a
                now = key()
                if now < current:
                    current, improved = now, True
                    continue
                placed[j] = b
                shift(j, a, -1)
                placed[i] = a
                shift(i, b, -1)
        if not improved:
            break
    return placed
