"""R4: the web app can die at any moment. SIGKILL the real `python -m webapp` process (its whole process
group) again and again under R1's load (20 annotators saving through the Gradio queue, a runner writing
machine captions), restart it each time on the same port and data dir: 0 acknowledged saves lost, no silent
overwrite, `PRAGMA integrity_check` ok, and serving again within seconds (restart-to-serving p50/max).

Fast form: 5 kills. Long form (>= 20 kills): `python tests/reliability_long.py r4 --kills 25`.
"""

from __future__ import annotations

import random
import time

import pytest

from data import db as dbmod
from tests.support.audit_checks import assert_audit_complete, check_oracle
from tests.support.reliability_fixtures import AnnotatorLoad, annotation_rig, pct

# a deadline for "it came back", not the figure: restart-to-serving is printed (3-4 s on a quiet 2-core VM,
# 20-60 s on a CI machine whose cores are shared, with the 20 annotators reconnecting meanwhile)
START_DEADLINE_S = 180


def run_r4(settings, tmp_path, *, kills: int, seed: int = 4, up: tuple[float, float] = (2.0, 4.0)) -> dict:
    rng = random.Random(seed)
    restart_s = []
    with annotation_rig(settings, tmp_path) as rig:
        with AnnotatorLoad(lambda: rig.app.url, rig.names, rig.clip_ids, seed=seed) as load:
            for _ in range(kills):
                time.sleep(rng.uniform(*up))
                rig.app.kill()
                restart_s.append(rig.app.start(timeout=START_DEADLINE_S))
            time.sleep(up[1])  # let the annotators reconnect and save again after the last restart
            load.wait_saved(10, timeout=180)  # on a loaded machine few saves fit between kills: the guard needs some
    saved_after_last = [a for a in load.answers if a.kind == "saved"]
    db = dbmod.connect(settings.db)
    try:
        oracle = check_oracle(db, load.answers)
        audit = assert_audit_complete(db)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        errors = [a for a in load.answers if a.kind == "error"]
        assert not errors, f"{len(errors)} saves answered with an error (not a dropped connection): {errors[:3]}"
    finally:
        db.close()
    return {
        "kills": kills,
        **load.summary(),
        **oracle,
        "audit": audit,
        "restart_to_serving_p50_s": round(pct(restart_s, 50), 2),
        "restart_to_serving_max_s": round(max(restart_s), 2),
        "restart_s": [round(s, 1) for s in restart_s],
        "saved": len(saved_after_last),
    }


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
