"""Issue 12: one runner keeps 64 simulated replicas behind the real vllm-router >= 95 % busy while work is
queued. Busy share comes from each replica's own /metrics (the simulated fleet's exact busy-time integral),
over a window that ends while the job still has unclaimed items. The longer run with printed figures is
`python benchmarks/bench_scale.py busy` (docs/BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from benchmarks.bench_scale import measure_busy


@pytest.mark.load
def test_64_replicas_behind_the_router_stay_busy_while_work_is_queued():
    r = measure_busy(64, seconds=8.0, latency_s=3.0, warmup_s=4.0)
    assert r["items_left_at_end"] > 0, r  # the window ended with work still queued: the figure is honest
    assert r["busy_mean"] >= 0.95, r
    assert r["busy_min"] >= 0.90, r  # no replica was left idle for long
    # the runner held no more than its bound: the rest stayed queued in the database, not in the replicas
    assert r["counts_at_end"]["leased"] <= 64 * r["inflight_per_replica"], r
