"""Grouped, stratified splits: every clip of a group (a route, a vehicle, a drive) lands in one split, and each
split's mix of hazard levels is as close to the whole set's as the groups allow.

Splitting clips at random leaks: clips of one drive in train and in test make the test score measure memory of
the drive. So whole groups are placed, one at a time, each into the split where it brings the counts closest to
the asked shares of what has been placed so far, this group included, level by level and in size: the split whose
squared distance, the sum over levels of (count - share x that level's clips placed so far)^2 plus the same for the
split's size, grows least (ties: the first split named). Measured against the shares of what is placed so far, not
of the whole set: a greedy aiming at the final totals let the levels' terms outweigh the size's (11 clips at
0.8/0.1/0.1 all went to train, and 40 of 3,000 generated sets missed a split's size by more than two clips), and
one keeping splits to their final size stranded a level's last clips (24 of 3,000 missed a level by more than 1.5).
Larger groups go first, because
they are the hard ones to fit; among groups of like size (within a factor of two) the order is a seeded hash of
the group's name, so that the seed decides which of them go where. The same groups, shares and seed give the
same splits on any machine (the hash is BLAKE2b, not Python's salted `hash`). What that achieves, checked by
tests/data/release/test_release_splits.py over generated groups: every split's count of every level lies within 1.5
times the largest group's size of its asked share, and its size within twice that, however many groups there are.

Sizes with a few heavy groups: the greedy alone missed an asked 80 / 10 / 10 by 76.4 / 16.7 / 6.9 % where a
near-exact split existed. So with at most IN_MEMORY groups to place, the best of two placements is kept
(`place_all`): the greedy's, and a search over every placement of the SEARCHED heaviest with the greedy for the
rest (data.release.size_search), each then repaired by single moves and swaps; best means the smaller largest
relative size miss, then the smaller hazard-level distance. With more groups the heavy ones (each more than HEAVY
of the smallest split's clips) are searched over and the rest placed by the greedy (`place_heavy`). Up to 14
groups, the sizes are as close as an exhaustive search finds (tests/data/release/test_release_splits.py); over 300
libraries of 20 heavy-tailed groups the worst miss went from 123 % to 46 %, the best any placement reaches
(benchmarks/bench_split_sizes.py, docs/BENCHMARKS.md).

Groups an earlier release placed are kept where it put them (`assign`'s `kept`; data.release.placement), and
counted before the others, so the new groups make up the drift.

Memory: `Placer` keeps counts per split and level only; the release streams its groups to it in the order
`order_key` gives (data.release.placement sorts them in SQLite), so a million one-clip groups cost no more than
ten; at most IN_MEMORY groups, or SEARCHED heavy ones, are held at once. `assign` is the same for groups held in a
dict (tests, small callers).
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from typing import Iterable, Mapping

from data.errors import DataError
from data.release import size_search

DEFAULT = "train=0.8,val=0.1,test=0.1"
MAX_SPLITS = 10
IN_MEMORY = 64  # groups to place at most for the best-of placement (`place_all`); more stream (`place_heavy`)
HEAVY = 0.05  # a group holding more than this share of the smallest split's clips is searched over
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def parse(spec: str) -> dict[str, float]:
    """`train=0.8,val=0.1,test=0.1` -> {"train": 0.8, "val": 0.1, "test": 0.1}, in the order written; a DataError
    saying what to write for anything else (names are file names: lower-case letters, digits, - and _)."""
    shares: dict[str, float] = {}
    parts = [p.strip() for p in str(spec or "").split(",") if p.strip()]
    if not parts:
        raise DataError(f"--splits: name=share pairs, for example {DEFAULT}.")
    if len(parts) > MAX_SPLITS:
        raise DataError(f"--splits: at most {MAX_SPLITS} splits.")
    for part in parts:
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not _NAME.fullmatch(name):
            raise DataError(
                f"--splits: {part[:40]!r} is not name=share; a name is lower-case letters, digits, - or _ "
                f"(for example {DEFAULT})."
            )
        if name in shares:
            raise DataError(f"--splits names {name} twice.")
        try:
            share = float(value)
        except ValueError:
            raise DataError(f"--splits: the share of {name} is a number such as 0.1, not {value[:20]!r}.") from None
        if not 0 < share <= 1 or not math.isfinite(share):
            raise DataError(f"--splits: the share of {name} must be more than 0 and at most 1 (not {value[:20]}).")
        shares[name] = share
    total = sum(shares.values())
    if abs(total - 1) > 1e-6:
        raise DataError(f"--splits: the shares add up to {total:g}; they must add up to 1 (for example {DEFAULT}).")
    return shares


def rank(seed: int, key: str) -> int:
    """A group's place among groups of like size: a 63-bit hash of the seed and its name (fits SQLite's INTEGER)."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def band(size: int) -> int:
    """Groups within a factor of two share a band (1, 2-3, 4-7, ...): the larger band is placed first."""
    return int(size).bit_length()


def order_key(seed: int, key: str, size: int) -> tuple[int, int, str]:
    """The order groups are placed in: larger bands first, then the seeded hash, then the name (a hash tie)."""
    return (-band(size), rank(seed, key), key)


class Placer:
    """Places groups one at a time. `shares`: split -> share (data.release.stratify.parse); `totals`: level ->
    clips of that level in the whole set (a group of a level not in it is refused: the caller counted wrong).
    `counts[split][level]` is what has been placed so far, `placed[level]` the same over every split."""

    def __init__(self, shares: Mapping[str, float], totals: Mapping[str, int]):
        self.shares = dict(shares)
        self.totals = dict(totals)
        self.counts: dict[str, dict[str, int]] = {s: {} for s in self.shares}
        self.sizes: dict[str, int] = {s: 0 for s in self.shares}
        self.placed: dict[str, int] = {}  # level -> clips placed so far, every split together
        self.done = 0  # clips placed so far

    def cost(self, split: str, hist: Mapping[str, int]) -> float:
        """How much placing a group of `hist` (level -> clips) in `split` adds to the squared distance of the
        split's counts per level, and of its size, from its share of what has been placed so far, this group
        included (the module docstring)."""
        r, have = self.shares[split], self.counts[split]
        out = 0.0
        size = 0
        for level, g in hist.items():
            if g <= 0:
                continue
            miss = have.get(level, 0) - r * (self.placed.get(level, 0) + g)
            out += g * (2 * miss + g)  # (miss + g)^2 - miss^2
            size += g
        miss = self.sizes[split] - r * (self.done + size)
        return out + size * (2 * miss + size)

    def place(self, hist: Mapping[str, int]) -> str:
        """The split a group of `hist` goes to (recorded in `counts`)."""
        missing = [level for level, g in hist.items() if g > 0 and self.totals.get(level, 0) <= 0]
        if missing:
            raise ValueError(f"levels {missing} are not in the totals")
        best = min(self.shares, key=lambda s: self.cost(s, hist))  # min keeps the first of equals
        return self.put(best, hist)

    def put(self, split: str, hist: Mapping[str, int]) -> str:
        """Record a group of `hist` in `split`, chosen elsewhere (kept where an earlier release placed it, or
        by the search of data.release.size_search)."""
        placed = self.counts[split]
        for level, g in hist.items():
            placed[level] = placed.get(level, 0) + g
            self.placed[level] = self.placed.get(level, 0) + g
            self.sizes[split] += g
            self.done += g
        return split


def heavy(size: int, shares: Mapping[str, float], total: int) -> bool:
    """Whether a group is one the search places (data.release.size_search): more than HEAVY of the smallest
    split's asked clips."""
    return size > HEAVY * min(shares.values()) * total


def place_all(
    placer: Placer, groups: list[tuple[str, Mapping[str, int]]], shares: Mapping[str, float]
) -> dict[str, str]:
    """The groups not kept from an earlier release, when there are at most IN_MEMORY of them (in placing order),
    placed by the best of: the greedy alone, and the search over the heaviest SEARCHED groups with the greedy
    for the rest; each then repaired (size_search.repair). Best: the smaller largest relative miss of the
    sizes, then the smaller hazard-level distance. Records them in `placer`."""
    names = list(shares)
    fixed = [dict(placer.counts[s]) for s in names]
    hists = [h for _, h in groups]
    ratios = [shares[s] for s in names]
    total = sum(placer.totals.values())
    targets = [r * total for r in ratios]

    def greedy(start: Placer, skip: set[int]) -> list[int]:
        p = copy.deepcopy(start)
        return [-1 if i in skip else names.index(p.place(h)) for i, h in enumerate(hists)]

    candidates = [greedy(placer, set())]
    size = [sum(h.values()) for h in hists]
    base = [sum(f.values()) for f in fixed]
    if (
        size_search.miss(_sizes(candidates[0], size, base), targets)
        > size_search.fluid_miss(base, targets, sum(size)) + size_search.TIE
    ):  # the greedy may not be the best there is: search
        top = sorted(range(len(hists)), key=lambda i: -size[i])[: size_search.SEARCHED]
        rest = sum(size) - sum(size[i] for i in top)
        choice, _ = size_search.search(base, targets, [size[i] for i in top], rest)
        if choice is not None:
            p = copy.deepcopy(placer)
            for i, s in zip(top, choice):
                p.put(names[s], hists[i])
            searched = greedy(p, set(top))
            for i, s in zip(top, choice):
                searched[i] = s
            candidates.append(searched)
    best, best_key = None, None
    for c in candidates:
        c = size_search.repair(hists, c, fixed, ratios)
        counts = [dict(f) for f in fixed]
        for h, s in zip(hists, c):
            for level, g in h.items():
                counts[s][level] = counts[s].get(level, 0) + g
        key = (
            round(size_search.miss(_sizes(c, size, base), targets) / size_search.TIE),
            size_search.level_cost(counts, ratios, placer.totals),
        )
        if best_key is None or key < best_key:
            best, best_key = c, key
    return {k: placer.put(names[s], h) for (k, h), s in zip(groups, best)}


def _sizes(placed: list[int], size: list[int], base: list[int]) -> list[int]:
    out = list(base)
    for s, n in zip(placed, size):
        out[s] += n
    return out


def place_heavy(
    placer: Placer, groups: list[tuple[str, Mapping[str, int]]], rest: int, shares: Mapping[str, float]
) -> dict[str, str]:
    """The heavy groups of a release with more than IN_MEMORY groups to place (at most SEARCHED, the largest),
    placed by the search with `rest` lighter clips still to come (the greedy places those after)."""
    names = list(shares)
    total = sum(placer.totals.values())
    targets = [shares[s] * total for s in names]
    base = [placer.sizes[s] for s in names]
    choice, _ = size_search.search(base, targets, [sum(h.values()) for _, h in groups], rest)
    if choice is None:
        return {k: placer.place(h) for k, h in groups}
    return {k: placer.put(names[s], h) for (k, h), s in zip(groups, choice)}


def assign(
    groups: Mapping[str, Mapping[str, int]],
    shares: Mapping[str, float],
    seed: int,
    kept: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """group -> split for `groups` (group -> level -> clips), placed as the module docstring says; `kept`: group
    -> split of the groups that stay where an earlier release placed them. The release does the same over SQLite
    (data.release.placement), streaming what this holds in dicts."""
    kept = kept or {}
    totals: dict[str, int] = {}
    for hist in groups.values():
        for level, g in hist.items():
            totals[level] = totals.get(level, 0) + g
    placer = Placer(shares, totals)
    order = sorted(groups, key=lambda k: order_key(seed, k, sum(groups[k].values())))
    out = {k: placer.put(kept[k], groups[k]) for k in order if k in kept}
    new = [k for k in order if k not in kept]
    if len(new) <= IN_MEMORY:
        out.update(place_all(placer, [(k, groups[k]) for k in new], shares))
        return out
    total = sum(totals.values())
    by_size = sorted(new, key=lambda k: heavy_key(seed, k, sum(groups[k].values())))
    top = [k for k in by_size[: size_search.SEARCHED] if heavy(sum(groups[k].values()), shares, total)]
    rest = sum(sum(groups[k].values()) for k in new) - sum(sum(groups[k].values()) for k in top)
    out.update(place_heavy(placer, [(k, groups[k]) for k in top], rest, shares))
    out.update({k: placer.place(groups[k]) for k in new if k not in out})
    return out


def heavy_key(seed: int, key: str, size: int) -> tuple[int, int, str]:
    """The order the heavy groups are chosen in: the largest first, then as `order_key`."""
    return (-size, rank(seed, key), key)


def shares_of(counts: Mapping[str, Mapping[str, int]], levels: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per split, each level's share of the split's clips (what the dataset card shows as achieved)."""
    levels = list(levels)
    out = {}
    for split, hist in counts.items():
        n = sum(hist.values())
        out[split] = {level: (hist.get(level, 0) / n if n else 0.0) for level in levels}
    return out
