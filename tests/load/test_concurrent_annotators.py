"""R1 (with R5 folded in): 20 annotators edit shared clips through the app's real HTTP endpoints (Gradio's
queue, a logged-in cookie, one session per annotator) while a runner process writes machine captions to the
same clips from the simulated fleet. An oracle log of every answer is compared with the database:
0 acknowledged saves lost, 0 silent overwrites, every stale save answered with an explicit conflict, and
no "database is locked" (nor any other error) reaches a user. Reports save p50/p99.

Long form: `python tests/reliability_long.py r1 --seconds 120`.
"""

from __future__ import annotations

import pytest

from tests.support.reliability_runs import run_r1


@pytest.mark.load
def test_r1_twenty_annotators_and_a_job_lose_nothing(settings, tmp_path):
    out = run_r1(settings, tmp_path, seconds=15)
    print("R1 fast:", out)
    # the promise (0 lost, 0 silent overwrites, every stale save an explicit conflict) is asserted inside run_r1;
    # this only guards that the run exercised it (the load runs on until 10 saves were acknowledged: 4-130 fit in
    # 15 s on the same 2-core VM, old code included, the low end under a load average of 10). Save throughput is a
    # printed figure, not a timed assertion.
    assert out["acknowledged"] >= 10, out
    assert out["conflicts"] >= 1, "the load should produce stale saves (it did not: too little overlap)"
    assert out["machine_captions"] >= 40, out


@pytest.mark.slow
def test_r1_long(settings, tmp_path):
    out = run_r1(settings, tmp_path, seconds=120)
    print("R1 long:", out)
