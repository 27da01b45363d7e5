"""Issue 46, point 6: the faults again, one after another on one running workbench with its data dir and logs on a
small filesystem (tests/support/fault_run.py): runner SIGKILL, runner SIGSTOP outside and inside its write
transaction, app SIGKILL under 3 annotators, a full disk with the logs on it, the log flood. 0 acknowledged saves
lost, 0 captions duplicated, each job's clips captioned once.

Fast form: one of each, a 10 s full disk, 60 flood events. Long form (3 kills, 2 + 2 freezes, 3 app kills, 15 s,
1,000 events): `python tests/reliability_long.py faults`.
"""

from __future__ import annotations

import pytest

from tests.support.fault_run import Counts, run_faults


@pytest.mark.load
@pytest.mark.timeout(1800)
def test_the_faults_of_issue_46_one_after_another_lose_no_save_and_duplicate_no_caption(small_filesystem, tmp_path):
    small_filesystem(size_mb=8)  # skips, saying why, where no tmpfs can be mounted; run_faults mounts its own
    counts = Counts(
        runner_kills=1, freezes_outside=1, freezes_inside=1, app_kills=1, full_disk_s=10, flood_events=60, clips=24
    )
    out = run_faults(tmp_path, counts)
    print("faults, fast form:", out)
    phases = out["phases"]
    assert out["captions_duplicated"] == 0 and out["oracle"]["lost"] == 0  # also asserted inside, with details
    assert out["oracle"]["acknowledged"] >= 10
    inside = phases["runner SIGSTOP inside its write transaction"]
    assert inside["killed_s"][0] < 30 and inside["next_write_lock_s"][0] is not None, inside
    assert set(phases) == {
        "runner SIGKILL",
        "runner SIGSTOP outside a transaction",
        "runner SIGSTOP inside its write transaction",
        "app SIGKILL",
        "full disk",
        "log flood",
    }
    assert phases["log flood"]["refused"] == 60 and phases["log flood"]["logs_grew_bytes"] <= 60_000
