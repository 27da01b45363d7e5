"""The statistics the quality view reports, as plain functions of counts (no SQL, no rows).

- `wilson(k, n)`: the 95 % Wilson score interval of a proportion (what scipy's `binomtest(k, n).proportion_ci(
  method="wilson")` and statsmodels' `proportion_confint(k, n, method="wilson")` give); with `population=N` the
  finite-population correction: n reviews of a batch of N drawn without replacement weigh as n (N - 1) / (N - n),
  and n = N is the exact value (an interval of width 0).
- `stratified(strata)`: the stratified estimate of a proportion, sum of W_h p_h with W_h = N_h / N, its variance
  sum of W_h^2 p_h (1 - p_h) / n_h (1 - n_h / N_h) (the finite-population correction) and a normal 95 % interval.
- `more_reviews(...)`: how many more random reviews bring an interval's half-width under a margin; with a
  population, n = n0 / (1 + (n0 - 1) / N) of the n0 an infinite one needs (`finite_n`), never more than is left.
- `spread(extra, sizes, room)`: how more reviews are shared among strata (in proportion to their sizes, never
  past what a stratum has left, each share growing with `extra`): the plan and the draw of further clips both use
  it.
- `kappa(table, categories, weights)`: Cohen's kappa of two raters from their contingency table, unweighted or
  with linear weights for an ordered label (what `sklearn.metrics.cohen_kappa_score` gives).
An undefined figure (no data, a zero denominator) is None, never 0 or NaN: a view shows it as "no data".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Hashable, Iterable, Mapping, Sequence

Z95 = 1.959963984540054  # the 97.5 % point of the standard normal (scipy.stats.norm.ppf(0.975))
MAX_REVIEWS = 10_000_000  # `more_reviews` searches up to this many; past it the answer is "more than that"


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95 % interval: `p` the point estimate, `low`/`high` the bounds, `n` the reviews it
    rests on; `exact` when every clip of the population was reviewed (low = p = high)."""

    p: float
    low: float
    high: float
    n: int
    exact: bool = False

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def z_for(confidence: float) -> float:
    """The two-sided normal quantile for a confidence level (0.95 -> 1.96)."""
    if not 0 < confidence < 1:
        raise ValueError(f"a confidence level is between 0 and 1, not {confidence!r}")
    return NormalDist().inv_cdf((1 + confidence) / 2)


def _effective_n(n: float, population: int | None) -> float:
    """n reviews drawn without replacement from `population` clips weigh as n (N - 1) / (N - n) drawn with
    replacement: the variance of their proportion is p (1 - p) / n times (N - n) / (N - 1)."""
    if population is None:
        return n
    if n > population:
        raise ValueError(f"{n} reviews of a population of {population}")
    return n * (population - 1) / (population - n) if n < population else math.inf


def wilson(k: int, n: int, z: float = Z95, population: int | None = None) -> Interval | None:
    """The Wilson score interval of k successes in n trials (None when n is 0). Unlike p +/- z SE it never
    leaves [0, 1] and does not collapse to a point at 0 or n successes, so a small perfect sample still shows
    how little it proves. With `population` (N, the clips the n were drawn from without replacement) the score
    test uses the finite-population correction, and n = N gives the exact value."""
    if n <= 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"{k} successes in {n} trials")
    p = k / n
    m = _effective_n(n, population)
    if math.isinf(m):
        return Interval(p, p, p, n, exact=True)
    z2 = z * z
    centre = (p + z2 / (2 * m)) / (1 + z2 / m)
    half = z / (1 + z2 / m) * math.sqrt(p * (1 - p) / m + z2 / (4 * m * m))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


@dataclass(frozen=True)
class Stratum:
    """One stratum of a stratified sample: `size` clips in the population (N_h), `reviewed` of them reviewed
    (n_h), `correct` of those right (k_h)."""

    size: int
    reviewed: int
    correct: int


def stratified(strata: Sequence[Stratum], z: float = Z95) -> Interval | None:
    """The stratified estimate of a proportion over the whole population: sum of W_h p_h (W_h = N_h / N), with
    variance sum of W_h^2 p_h (1 - p_h) / n_h (1 - n_h / N_h) and the normal interval p +/- z sqrt(var),
    clipped to [0, 1]. None when a stratum with clips in it has no review yet: its p_h is unknown, and
    leaving it out would silently re-weight the others."""
    total = sum(s.size for s in strata)
    if total <= 0:
        return None
    p = var = 0.0
    n = 0
    exact = all(s.reviewed >= s.size for s in strata)
    for s in strata:
        if s.size <= 0:
            continue
        if s.reviewed <= 0:
            return None
        w = s.size / total
        ph = s.correct / s.reviewed
        p += w * ph
        fpc = max(0.0, 1 - s.reviewed / s.size)
        var += w * w * ph * (1 - ph) / s.reviewed * fpc
        n += s.reviewed
    half = z * math.sqrt(var)
    return Interval(p, max(0.0, p - half), min(1.0, p + half), n, exact=exact)


def _planning_p(k: int, n: int) -> float:
    """The proportion a plan for more reviews assumes: Agresti-Coull's (k + 2) / (n + 4), never 0 or 1, so
    that 5 right out of 5 does not claim that no more reviews are needed (p (1 - p) would be 0)."""
    return (k + 2) / (n + 4)


def finite_n(n0: int, population: int) -> int:
    """The reviews of a batch of N clips drawn without replacement that are worth n0 drawn with replacement:
    n = n0 / (1 + (n0 - 1) / N), rounded up; never more than N (reviewing every clip gives the exact value)."""
    if population <= 0:
        return 0
    return min(population, math.ceil(n0 / (1 + (n0 - 1) / population) - 1e-9))


def more_reviews(k: int, n: int, margin: float, z: float = Z95, population: int | None = None) -> int | None:
    """How many more random reviews (beyond n, with the proportion seen so far) bring the Wilson interval's
    half-width to at most `margin`. 0 when it already is; None when even MAX_REVIEWS would not (only without a
    population). With `population` (N) the count is `finite_n` of what an infinite population needs, so never
    more than the N - n clips left: asking for all of them means only the exact value is that precise."""
    if not 0 < margin < 0.5:
        raise ValueError("the margin must be between 0 and 0.5 (for example 0.05 for +/- 5 points)")
    p = _planning_p(k, n)

    def half(m: int) -> float:
        return z / (1 + z * z / m) * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))

    current = wilson(k, n, z, population)
    if current is not None and current.half_width <= margin:
        return 0
    lo, hi = max(n, 1), MAX_REVIEWS
    if half(hi) > margin:
        return None if population is None else population - n
    while lo < hi:  # the half-width shrinks as m grows: the smallest m that fits
        mid = (lo + hi) // 2
        if half(mid) <= margin:
            hi = mid
        else:
            lo = mid + 1
    if population is None:
        return max(0, lo - n)
    return max(0, finite_n(lo, population) - n)


def spread(extra: int, sizes: Sequence[int], room: Sequence[int]) -> list[int]:
    """`extra` more reviews shared among strata of `sizes` (N_h) with `room` clips left each, in proportion to N_h
    among the strata with room, never past a stratum's room (what a full stratum cannot take goes to the others);
    sum(room) at most.

    The shares are Sainte-Lague's (Webster's divisor method): the j-th further review of stratum h ranks by
    N_h / (j - 1/2), and `extra` takes the best ranked (ties to the earlier stratum). Unlike sharing by largest
    remainders, one review more never takes one from a stratum (the "Alabama paradox"): each stratum's share
    grows with `extra`, so the bounds after K more, at a given rate, narrow as K grows, and "the smallest K that
    decides" can be searched for (data.quality.sequential). Exact integer comparisons: from the proportional shares
    (capped, the rest shared again), a few seats are moved until every seat taken ranks before every seat not."""
    h_n = len(sizes)
    caps = [max(0, min(int(r), int(n))) for r, n in zip(room, sizes)]
    extra = max(0, min(int(extra), sum(caps)))
    got = [0] * h_n
    open_ = [h for h in range(h_n) if caps[h]]
    left = extra
    while left > 0 and open_:  # proportional shares, rounded; a capped stratum's surplus shared among the rest
        total = sum(sizes[h] for h in open_)
        for h in open_:
            got[h] = min(caps[h], got[h] + (2 * left * sizes[h] + total) // (2 * total))
        taken = sum(got)
        if taken >= extra or all(got[h] < caps[h] for h in open_):
            break
        left = extra - taken
        open_ = [h for h in open_ if got[h] < caps[h]]

    def before(a: tuple[int, int], b: tuple[int, int]) -> bool:
        """Does seat a = (stratum, j) rank before seat b: N_h / (2j - 1) larger, or equal and h earlier?"""
        (h, j), (g, i) = a, b
        x, y = sizes[h] * (2 * i - 1), sizes[g] * (2 * j - 1)
        return x > y or (x == y and h < g)

    while True:
        nexts = [(h, got[h] + 1) for h in range(h_n) if got[h] < caps[h]]
        lasts = [(h, got[h]) for h in range(h_n) if got[h] > 0]
        best = nexts[0] if nexts else None
        for a in nexts[1:]:
            best = a if before(a, best) else best
        worst = lasts[0] if lasts else None
        for a in lasts[1:]:
            worst = a if before(worst, a) else worst
        taken = sum(got)
        if taken < extra:
            got[best[0]] += 1
        elif taken > extra:
            got[worst[0]] -= 1
        elif best is not None and worst is not None and before(best, worst):
            got[best[0]] += 1
            got[worst[0]] -= 1
        else:
            return got


def more_reviews_stratified(strata: Sequence[Stratum], margin: float, z: float = Z95) -> int | None:
    """How many more reviews, spread over the strata in proportion to their sizes (and never past a stratum's
    size), bring the stratified interval's half-width to at most `margin`. Each stratum's proportion is taken
    as `_planning_p`. 0 when it already is; None when reviewing every clip would not (it always does: the
    finite-population correction is then 0) or no stratum has clips."""
    if not 0 < margin < 0.5:
        raise ValueError("the margin must be between 0 and 0.5 (for example 0.05 for +/- 5 points)")
    live = [s for s in strata if s.size > 0]
    total = sum(s.size for s in live)
    if not live:
        return None
    now = stratified(live, z)
    if now is not None and now.half_width <= margin:
        return 0

    def plan(extra: int) -> list[int]:
        return [min(s.size, s.reviewed + math.ceil(extra * s.size / total)) for s in live]

    def half(extra: int) -> float:
        var = 0.0
        for s, m in zip(live, plan(extra)):
            if m <= 0:
                return math.inf
            w = s.size / total
            p = _planning_p(s.correct, s.reviewed)
            var += w * w * p * (1 - p) / m * max(0.0, 1 - m / s.size)
        return z * math.sqrt(var)

    remaining = sum(s.size - s.reviewed for s in live)
    lo, hi = 0, max(0, remaining)
    if half(hi) > margin:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if half(mid) <= margin:
            hi = mid
        else:
            lo = mid + 1
    return sum(plan(lo)) - sum(s.reviewed for s in live)


def kappa(
    table: Mapping[tuple[Hashable, Hashable], int],
    categories: Iterable[Hashable] | None = None,
    weights: str | None = None,
) -> float | None:
    """Cohen's kappa of two raters from `table[(a, b)]` = how many items rater A put in a and rater B in b.
    `categories`: their order (needed for weights; default: every value seen, in first-seen order).
    `weights`: None (agreement or not) or "linear" (for an ordered label: a near miss counts as partly agreed,
    disagreement weight |i - j| / (k - 1)). None when there are no items, or when chance alone would agree on
    every item (one category used by both raters: kappa is undefined there)."""
    cats = list(categories) if categories is not None else []
    for a, b in table:
        for v in (a, b):
            if v not in cats:
                cats.append(v)
    index = {c: i for i, c in enumerate(cats)}
    k = len(cats)
    n = sum(table.values())
    if n <= 0 or k == 0:
        return None
    rows = [0] * k
    cols = [0] * k
    for (a, b), count in table.items():
        rows[index[a]] += count
        cols[index[b]] += count
    if weights is None:

        def w(i: int, j: int) -> float:
            return 0.0 if i == j else 1.0

    elif weights == "linear":

        def w(i: int, j: int) -> float:
            return abs(i - j) / (k - 1) if k > 1 else 0.0

    else:
        raise ValueError(f"unknown weights {weights!r}; expected None or 'linear'")
    observed = sum(count * w(index[a], index[b]) for (a, b), count in table.items()) / n
    expected = sum(rows[i] * cols[j] * w(i, j) for i in range(k) for j in range(k)) / (n * n)
    if expected == 0:
        return None
    return 1 - observed / expected
