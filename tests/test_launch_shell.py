"""`./launch.sh status` and `stop` from another shell, one where the environment launch.sh ran in is not active: they
use the interpreter the launch recorded in DATA_DIR/run/python, and without one that can run the workbench they say
what to do instead of failing with a traceback (and stop still stops what needs no Python)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data.settings import Settings
from serving import procs
from serving.launch import record as fleet_record

pytestmark = pytest.mark.waits  # minutes of the product's clocks: started first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bare_shell(tmp_path) -> dict[str, str]:
    """The environment of a shell without the venv: its `python3` is a real Python without the project's
    packages (no site-packages, no PYTHON* variables)."""
    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    py = bin_dir / "python3"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} -S -E "$@"\n')
    py.chmod(0o755)
    r = subprocess.run([str(py), "-c", "import httpx"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "No module named 'httpx'" in r.stderr  # it really lacks the packages
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path))}


def launch_sh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "launch.sh"), *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


def sleeper(name: str, log_dir: Path) -> procs.Child:
    return procs.start(name, [sys.executable, "-c", "import time; time.sleep(120)"], log=log_dir / f"{name}.log")


@pytest.fixture
def workbench(tmp_path):
    """A data dir as a launch leaves it: the app's process group in run/app.pid, a fleet in run/fleet.json."""
    settings = Settings.load({"data_dir": str(tmp_path / "var")}, environ={})
    run = settings.data_dir / "run"
    run.mkdir(parents=True)
    app, replica = sleeper("app", tmp_path), sleeper("replica-0", tmp_path)
    (run / "app.pid").write_text(f"{app.pid}\n")
    fleet_record.save_record(
        settings, {"fleet": "sim", "mps": None, "procs": [replica.record()], "replica_urls": [], "router_url": None}
    )
    yield settings, app, replica
    for c in (app, replica):
        procs.stop_group(c.pgid, c.pid, grace=2, popen=c.popen)


def gone(child: procs.Child, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.popen.poll() is not None:
            return True
        time.sleep(0.1)
    return False


def test_status_and_stop_from_a_shell_without_the_venv_use_the_recorded_interpreter(bare_shell, workbench):
    settings, app, replica = workbench
    (settings.data_dir / "run" / "python").write_text(sys.executable + "\n")  # what `./launch.sh` (up) writes
    r = launch_sh(bare_shell, "status", "--data-dir", str(settings.data_dir))
    assert r.returncode == 0, r.stderr
    assert "app: running" in r.stdout and "replica-0" in r.stdout and f"pgid {replica.pgid}" in r.stdout
    assert "Traceback" not in r.stderr and "ModuleNotFoundError" not in r.stderr
    r = launch_sh(bare_shell, "stop", "--data-dir", str(settings.data_dir))
    assert r.returncode == 0, r.stderr
    assert gone(app) and gone(replica)  # the fleet too: its `down` needs the project's Python
    assert not (settings.data_dir / "run" / "fleet.json").exists()


def test_without_an_interpreter_that_can_run_the_workbench_they_say_what_to_do(bare_shell, workbench):
    settings, app, replica = workbench
    r = launch_sh(bare_shell, "status", "--data-dir", str(settings.data_dir))
    assert r.returncode == 1 and "app: running" in r.stdout
    assert "PYTHON=/path/to/its/python ./launch.sh status" in r.stderr and "tried: python3" in r.stderr
    assert "Traceback" not in r.stderr
    r = launch_sh(bare_shell, "stop", "--data-dir", str(settings.data_dir))
    assert r.returncode == 1 and "cannot stop the fleet recorded in" in r.stderr and "Traceback" not in r.stderr
    assert gone(app)  # what needs no Python is stopped all the same
    assert replica.alive() and (settings.data_dir / "run" / "fleet.json").exists()  # said, not silently left
    # the way out the message gives
    r = launch_sh({**bare_shell, "PYTHON": sys.executable}, "stop", "--data-dir", str(settings.data_dir))
    assert r.returncode == 0, r.stderr
    assert gone(replica)
