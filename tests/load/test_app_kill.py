"""R4: the web app can die at any moment. SIGKILL the real `python -m webapp` process (its whole process
group) again and again under R1's load (20 annotators saving through the Gradio queue, a runner writing
machine captions), restart it each time on the same port and data dir: 0 acknowledged saves lost, no silent
overwrite, `PRAGMA integrity_check` ok, and serving again within seconds (restart-to-serving p50/max).

Fast form: 5 kills. Long form (>= 20 kills): `python tests/reliability_long.py r4 --kills 25`.
"""

from __future__ import annotations

import pytest

from tests.support.reliability_runs import run_r4


@pytest.mark.load
def test_r4_sigkill_the_app_under_load(settings, tmp_path):
    out = run_r4(settings, tmp_path, kills=5)
    print("R4 fast:", out)
    # 0 acknowledged saves lost is asserted inside run_r4; these guard that saves happened between the kills and
    # that the app came back each time (start() raises past START_DEADLINE_S; the restart time is a printed figure)
    assert out["acknowledged"] >= 10, out
    assert len(out["restart_s"]) == 5, out


@pytest.mark.slow
def test_r4_sigkill_the_app_25_times(settings, tmp_path):
    out = run_r4(settings, tmp_path, kills=25, seed=44)
    print("R4 long:", out)
    assert out["restart_to_serving_max_s"] < 20
