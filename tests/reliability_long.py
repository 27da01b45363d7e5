"""Long forms of the reliability suite, one command each; prints the figures recorded in docs/RELIABILITY.md.

    python tests/reliability_long.py r1 --seconds 120      # 20 annotators + a job, through HTTP
    python tests/reliability_long.py r4 --kills 25         # SIGKILL the web app under that load
    python tests/reliability_long.py all                   # both
    python tests/reliability_long.py faults                # issue 46's faults, one after another (as root)

It runs the scenarios of tests/load/test_concurrent_annotators.py, tests/load/test_app_kill.py and
tests/load/test_fault_runs.py (tests/support/fault_run.py) with longer parameters, so it lives with them (it was
benchmarks/reliability.py: benchmarks do not import tests).

Each run uses a fresh temporary data dir (real SQLite file, simulated fleet, runner and app processes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tests.conftest  # noqa: E402,F401  (test environment: no analytics, offline, no proxy)
from data.settings import Settings  # noqa: E402


def fresh(name: str):
    tmp = Path(tempfile.mkdtemp(prefix=f"reliability-{name}-"))
    return Settings.load({"data_dir": str(tmp / "var")}, environ={}), tmp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", choices=["r1", "r4", "faults", "all"])
    ap.add_argument("--seconds", type=float, default=120.0, help="R1: seconds of load")
    ap.add_argument("--kills", type=int, default=25, help="R4: SIGKILLs of the web app")
    ap.add_argument("--flood", type=int, default=1000, help="faults: malformed read events of 4 MiB")
    a = ap.parse_args(argv)
    print("date:", dt.datetime.now().isoformat(timespec="seconds"))
    if a.which in ("r1", "all"):
        from tests.support.reliability_runs import run_r1

        s, tmp = fresh("r1")
        print("R1:", json.dumps(run_r1(s, tmp, seconds=a.seconds)), flush=True)
    if a.which in ("r4", "all"):
        from tests.support.reliability_runs import run_r4

        s, tmp = fresh("r4")
        print("R4:", json.dumps(run_r4(s, tmp, kills=a.kills, seed=44)), flush=True)
    if a.which == "faults":
        from tests.support.fault_run import Counts, run_faults

        tmp = Path(tempfile.mkdtemp(prefix="reliability-faults-"))
        out = run_faults(tmp, Counts(flood_events=a.flood), say=lambda m: print(m, flush=True))
        print("faults:", json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
