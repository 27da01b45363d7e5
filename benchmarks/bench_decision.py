"""What the decision costs in reviews, and how often it is wrong (issue 26): data.quality.decision run as a lead runs
it, on simulated batches whose accuracy is known.

    python benchmarks/bench_decision.py --runs 200

For each batch size N and true accuracy p (a share of right clips, shuffled), a lead draws a first sample of
--first clips, then, as long as the decision says "review K more", draws and reviews K more; this prints the
median and 90th percentile of the reviews made before it said accept or fix, the median rounds, and how often the
decision was wrong (accept with p under the target, fix with p at or over it), against a target of --target at
--confidence. Beside it, the lead who instead looks at the single-look Wilson interval after each round (the
same rounds, the same batches) and stops when its lower end reaches the target or its upper end falls under it:
how often that is wrong. And for scale, "one look": the reviews a single look at a size fixed in advance would need
to decide at the same confidence, were the batch's accuracy known when choosing the size (the Wilson interval with
the finite-population correction at the true accuracy): what the freedom to look again costs. `--prior 1,1` runs
the same with a uniform prior instead of data.quality.sequential.PRIOR (what the prior changes). No timing: the
figures are counts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.quality import decision, sequential, stats
from data.quality.stats import Stratum
from data.quality.targets import Target


def run(batch: list[int], target: Target, first: int) -> tuple[str, int, int, str | None]:
    """One lead on one shuffled batch: (verdict, reviews made, rounds, what a Wilson-peeking lead would have said
    at the first of those looks where its interval cleared the target, None if it never did)."""
    size, z = len(batch), stats.z_for(target.confidence)
    n, rounds, peek = min(first, size), 1, None
    while True:
        k = sum(batch[:n])
        w = stats.wilson(k, n, z, population=size)
        if peek is None and (w.low >= target.target or w.high < target.target):
            peek = "accept" if w.low >= target.target else "fix"
        d = decision.label_decision([Stratum(size, n, k)], [0], target)
        if d.verdict != "review":
            return d.verdict, n, rounds, peek
        n, rounds = min(size, n + d.round), rounds + 1


def one_look(size: int, p: float, target: Target) -> int:
    """The smallest n whose Wilson interval (finite population, at the true accuracy p) clears the target."""
    z = stats.z_for(target.confidence)
    for n in range(1, size + 1):
        w = stats.wilson(round(p * n), n, z, population=size)
        if w.low >= target.target or w.high < target.target:
            return n
    return size


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sizes", default="500,5000,50000")
    ap.add_argument("--accuracies", default="0.80,0.87,0.90,0.93,0.97")
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--first", type=int, default=50, help="the first sample's size")
    ap.add_argument("--prior", help="a, b of the beta prior (default: data.quality.sequential.PRIOR)")
    a = ap.parse_args(argv)
    if a.prior:
        sequential.PRIOR = tuple(float(x) for x in a.prior.split(","))
    rng = random.Random(26)
    target = Target("x", a.target, a.confidence)
    print(
        f"target {a.target} at {a.confidence:.0%}; first sample {a.first}; {a.runs} batches per row; "
        f"prior beta{sequential.PRIOR}"
    )
    print(
        f"{'N':>7} {'p':>5}  {'reviews p50':>11} {'p90':>7} {'rounds p50':>10}  {'wrong':>6}  {'one look':>8}"
        "  Wilson peeking wrong"
    )
    for size in (int(x) for x in a.sizes.split(",")):
        for p in (float(x) for x in a.accuracies.split(",")):
            right = round(p * size)
            used, rounds, wrong, peek_wrong = [], [], 0, 0
            for _ in range(a.runs):
                batch = [1] * right + [0] * (size - right)
                rng.shuffle(batch)
                verdict, n, r, peek = run(batch, target, a.first)
                used.append(n)
                rounds.append(r)
                truth = right / size >= a.target
                wrong += (verdict == "accept") != truth
                peek_wrong += peek is not None and (peek == "accept") != truth
            q90 = sorted(used)[int(0.9 * (len(used) - 1))]
            print(
                f"{size:>7,} {p:>5.2f}  {statistics.median(used):>11,.0f} {q90:>7,} {statistics.median(rounds):>10.0f}"
                f"  {wrong / a.runs:>6.1%}  {one_look(size, right / size, target):>8,}  {peek_wrong / a.runs:>19.1%}"
            )


if __name__ == "__main__":
    main()
