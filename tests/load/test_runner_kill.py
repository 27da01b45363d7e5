"""R3: the job runner can die at any moment. SIGKILL a real runner process at random points during jobs
against the simulated fleet, restart it each time: 0 missing, 0 duplicate captions, re-sent requests <= what
was in flight at the kills, `PRAGMA integrity_check` ok."""

from __future__ import annotations

import pytest

from tests.support.reliability_runs import kill_loop


@pytest.mark.load
def test_r3_sigkill_the_runner_50_times(settings, db, tmp_path):
    out = kill_loop(settings, db, tmp_path, kills=50, clips=60)
    print("R3 fast:", out)
    assert out["kills"] == 50


@pytest.mark.slow
def test_r3_sigkill_the_runner_200_times(settings, db, tmp_path):
    out = kill_loop(settings, db, tmp_path, kills=200, clips=300, seed=7)
    print("R3 long:", out)
