"""Bounds on a batch's accuracy that stay valid however often the lead looks, and the fewest more reviews that
could move them past a target (data.quality.decision decides from both).

Why not the Wilson interval: a 95 % interval holds for one look at a sample size fixed in advance. A lead who
looks after every round of reviews and stops once it clears the target is wrong far more often than 5 % of the
time (tests/data/test_decision.py measures it). So the decision uses a **confidence sequence**: a band that holds at
every look at once, with the stated confidence, whatever the rule for stopping.

The one used is the prior-posterior ratio confidence sequence for sampling without replacement (Waudby-Smith and
Ramdas, "Confidence sequences for sampling without replacement", NeurIPS 2020): a batch of N clips, M of them
right; n drawn at random without replacement, k of those right. With a beta-binomial prior on M (PRIOR = (a, b)),
the chance of the draws seen, mixed over the prior, is B(a + k, b + n - k) / B(a, b); given M it is
[M]_k [N - M]_{n-k} / [N]_n (falling factorials). Their ratio is a martingale under the true M, so by Ville's
inequality

    C_n = { M : [M]_k [N - M]_{n-k} / [N]_n  >  alpha * B(a + k, b + n - k) / B(a, b) }

holds the true M at every n with probability at least 1 - alpha, whatever the prior, as long as it is fixed before
the first look. The prior only decides where the bounds are narrow: PRIOR is a beta with mean 0.9 and the weight
of 10 clips, because the labels of a model worth measuring are right most of the time and the targets sit there;
in simulated batches of 5,000 and 50,000 clips a decision against 0.90 took 20-49 % fewer reviews (median) than
with a uniform prior at accuracies 0.80, 0.93 and 0.97, and 2-19 % fewer at 0.87 (benchmarks/bench_decision.py
with and without `--prior 1,1`). The log of the left side is concave in M, so C_n is an interval found by
bisection (O(log N) log-gamma evaluations); and reviewing every clip (n = N) leaves only M = k: the exact value.

A stratified sample gets one sequence per stratum at alpha / H (Bonferroni over its H strata), and the bounds
on sum(M_h) / N are the sums of the strata's bounds: valid at every look too, wider than one stratum's.

Planning: `more_to_decide` is the smallest number of further reviews after which the bounds would decide, either
way, if the clips still to review are right as often as those reviewed so far (per stratum; a stratum with no
review yet at the rate of the others, and with none at all, every one right); `could_decide` the smallest after
which they could, were every one of them right (for accept) or wrong (for fix): fewer cannot decide. Both are at
most the clips left: reviewing all of them gives the exact value, which always decides. `plan` puts them
together with what the bounds would then say, and, where only the whole rest decides at this rate, how many of
it must be right for the batch to reach the target. A plan is not a promise: after the reviews the lead looks
again, which the sequence allows as often as they like.

Where the draws are not a random part of the batch, nothing here holds: members still waiting for review when
the lead looks may be the hard ones (the review queue puts likely mistakes first), so data.quality.decision
decides only on a sample whose drawn clips are all reviewed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from data.quality.stats import Stratum, spread

PRIOR = (9.0, 1.0)  # beta(a, b) on the batch's accuracy: mean 0.9, the weight of 10 clips (see above)


@dataclass(frozen=True)
class Bounds:
    """Bounds on a batch's accuracy valid at every look: `low` and `high` (shares of the population), `exact`
    when every clip was reviewed (low = high)."""

    low: float
    high: float
    exact: bool = False


def _lbeta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def count_bounds(
    k: float, n: int, size: int, alpha: float, prior: tuple[float, float] | None = None
) -> tuple[float, float]:
    """The confidence sequence C_n for M, the right clips of a population of `size`, after k right of n drawn
    without replacement: (smallest M, largest M) in it. A plan's k may be fractional (an assumed rate); every
    clip reviewed (n = size) gives (k, k), the exact count."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha is between 0 and 1, not {alpha!r}")
    if not 0 <= k <= n <= size:
        raise ValueError(f"{k} right of {n} drawn from {size}")
    if n == size:
        return k, k
    wrong = n - k
    # M is neither below the k seen right nor above N less the ones seen wrong; a plan's fractional k widens the
    # range to the whole numbers around it (a bound never rounds in the plan's favour)
    first, last = math.floor(k), math.ceil(size - wrong)

    const = math.lgamma(size - n + 1) - math.lgamma(size + 1)

    def log_l(m: int) -> float:  # log of [m]_k [N - m]_{n-k} / [N]_n
        return (
            math.lgamma(m + 1) - math.lgamma(m - k + 1) + math.lgamma(size - m + 1) - math.lgamma(size - m - wrong + 1)
        ) + const

    a, b = prior or PRIOR  # read at the call: benchmarks/bench_decision.py compares priors
    threshold = math.log(alpha) + _lbeta(a + k, b + wrong) - _lbeta(a, b)
    # the peak: the first m whose step up is not positive (log_l is concave). The step log_l(m + 1) - log_l(m) is
    # log((m + 1) (N - m - wrong) / ((m - k + 1) (N - m))): its sign from the products, without a logarithm
    lo, hi = first, last
    while lo < hi:
        mid = (lo + hi) // 2
        if (mid + 1) * (size - mid - wrong) > (mid - k + 1) * (size - mid):
            lo = mid + 1
        else:
            hi = mid
    peak = lo
    if log_l(peak) <= threshold:  # never for whole counts (a mixture never exceeds its peak); a plan's rounding
        return peak, peak
    lo, hi = first, peak  # the smallest m in the set: log_l rises up to the peak
    while lo < hi:
        mid = (lo + hi) // 2
        if log_l(mid) > threshold:
            hi = mid
        else:
            lo = mid + 1
    low = lo
    lo, hi = peak, last  # the largest m in the set: log_l falls after the peak
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if log_l(mid) > threshold:
            lo = mid
        else:
            hi = mid - 1
    return low, lo


def bounds(strata: Sequence[Stratum], alpha: float) -> Bounds | None:
    """Bounds on the population's accuracy, sum(M_h) / N, valid at every look with confidence 1 - alpha: each
    stratum's sequence at alpha / H (H strata with clips), the sums of their ends over N. None for an empty
    population. A stratum nobody reviewed yet spans 0 to N_h."""
    live = [s for s in strata if s.size > 0]
    total = sum(s.size for s in live)
    if not total:
        return None
    low = high = 0
    for s in live:
        lo, hi = count_bounds(s.correct, s.reviewed, s.size, alpha / len(live))
        low += lo
        high += hi
    return Bounds(low / total, high / total, exact=all(s.reviewed >= s.size for s in live))


def _planned(strata: Sequence[Stratum], extra: int) -> list[Stratum]:
    """The strata after `extra` more reviews spread over them (stats.spread), each right at its stratum's rate
    so far (a stratum not reviewed yet: at the rate of all; nothing reviewed: every one right)."""
    n, k = sum(s.reviewed for s in strata), sum(s.correct for s in strata)
    pooled = k / n if n else 1.0
    more = spread(extra, [s.size for s in strata], [s.size - s.reviewed for s in strata])
    return [
        Stratum(s.size, s.reviewed + m, s.correct + m * (s.correct / s.reviewed if s.reviewed else pooled))
        for s, m in zip(strata, more)
    ]


def estimate(strata: Sequence[Stratum]) -> float | None:
    """The point estimate sum(N_h p_h) / N, p_h = k_h / n_h (None while a stratum with clips has no review)."""
    live = [s for s in strata if s.size > 0]
    total = sum(s.size for s in live)
    if not total or any(s.reviewed == 0 for s in live):
        return None
    return sum(s.size * s.correct / s.reviewed for s in live) / total


def could_decide(strata: Sequence[Stratum], target: float, alpha: float) -> int:
    """The fewest more reviews (spread by stats.spread) after which the bounds could decide against `target`:
    the lower bound reach it were all of them right, or the upper bound fall below it were all wrong. 0 when
    they decide already; at most the clips left."""
    live = [s for s in strata if s.size > 0]
    if not live:
        return 0

    def decides(extra: int) -> bool:
        more = spread(extra, [s.size for s in live], [s.size - s.reviewed for s in live])
        up = bounds([Stratum(s.size, s.reviewed + m, s.correct + m) for s, m in zip(live, more)], alpha)
        down = bounds([Stratum(s.size, s.reviewed + m, s.correct) for s, m in zip(live, more)], alpha)
        return up.low >= target or down.high < target

    return _smallest(decides, sum(s.size - s.reviewed for s in live))


def _smallest(decides, left: int) -> int:
    """The smallest extra in 0..left for which `decides` holds (it holds at `left`, and from where it first
    holds on)."""
    if decides(0):
        return 0
    lo, hi = 1, left
    while lo < hi:
        mid = (lo + hi) // 2
        if decides(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


PLAN_EPS = 1e-9  # a plan's fractional counts: an exact value of 0.8 may come out as 0.7999999999999999


def _decides(b: Bounds, target: float) -> str | None:
    """What bounds from a plan's counts decide against `target`: accept, fix, or None."""
    if b.low >= target - PLAN_EPS:
        return "accept"
    if b.high < target - PLAN_EPS:
        return "fix"
    return None


def more_to_decide(strata: Sequence[Stratum], target: float, alpha: float) -> int:
    """The fewest more reviews (spread over the strata by stats.spread) after which the bounds would decide
    against `target`, either way, if the clips still to review were right as often as so far (`_planned`). 0 when
    the bounds decide already; at most the clips left, after which the exact value decides. Each stratum's share
    grows with the reviews (stats.spread) and its bounds narrow around the rate, so once K decides every larger
    number does too, and a bisection finds the smallest (tests/data/test_decision.py checks it one by one)."""
    live = [s for s in strata if s.size > 0]
    left = sum(s.size - s.reviewed for s in live)
    now = bounds(live, alpha)
    if now is None or _decides(now, target):
        return 0
    return _smallest(lambda extra: _decides(bounds(_planned(live, extra), alpha), target) is not None, left)


@dataclass(frozen=True)
class Plan:
    """What more reviews would do, at the rate so far (`rate`: the estimate, or the pooled rate while a stratum
    has no review; None with no review at all, planned as every one right): `more` the smallest number after which
    the bounds decide, `verdict` what they then decide (accept or fix) and `after` those bounds; `could` the fewest
    that could decide at all (were every one right, or every one wrong); `left` the clips not reviewed. `more ==
    left` means that no sample short of the whole rest decides at this rate: only the exact value does, and
    `needed` says how many of the `left` must be right for it to reach the target (more than `left`: none can)."""

    more: int
    verdict: str
    after: Bounds
    could: int
    left: int
    rate: float | None
    needed: int

    @property
    def exact_only(self) -> bool:
        return self.more > 0 and self.more >= self.left


def plan(strata: Sequence[Stratum], target: float, alpha: float) -> Plan | None:
    """The plan for more reviews against `target` (None for an empty population)."""
    live = [s for s in strata if s.size > 0]
    if not live:
        return None
    left = sum(s.size - s.reviewed for s in live)
    more = more_to_decide(live, target, alpha)
    after = bounds(_planned(live, more), alpha)
    n, k = sum(s.reviewed for s in live), sum(s.correct for s in live)
    rate = estimate(live)
    if rate is None and n:
        rate = k / n
    total = sum(s.size for s in live)
    needed = max(0, math.ceil(target * total - k - PLAN_EPS))
    return Plan(more, _decides(after, target) or "review", after, could_decide(live, target, alpha), left, rate, needed)
