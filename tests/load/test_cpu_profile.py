"""benchmarks/cpu_profile.py: the roles it sorts a GPU node's processes into, its py-spy summary, and a run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import cpu_profile

# the profiler watches every process of the machine: another test's caption CLI would be counted
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]


def test_vllms_renamed_processes_and_ours_get_their_roles():
    assert cpu_profile.role_of("", "VLLM::EngineCor") == "engine core"
    assert cpu_profile.role_of("", "VLLM::APIServer") == "vllm api server"
    assert cpu_profile.role_of("python3 -m vllm.entrypoints.cli.main serve /m", "python3") == "vllm main"
    assert cpu_profile.role_of("python -m serving.caption --db x", "python") == "runner / caption cli"
    assert cpu_profile.role_of("vllm-router --port 30000", "vllm-router") == "router"
    assert cpu_profile.role_of("bash", "bash") == "other"


def test_a_raw_py_spy_profile_is_summarized_as_shares_of_the_samples(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text("main;step;sample 30\nmain;step;grammar 10\nmain;idle 60\n")
    s = cpu_profile.summarize_raw(raw)
    assert s["samples"] == 100
    assert s["leaf"][0] == ["idle", 0.6]
    assert dict(s["inclusive"])["main"] == 1.0 and dict(s["inclusive"])["step"] == 0.4


def test_a_run_reports_the_phase_while_the_runner_works(tmp_path):
    # a stand-in for the caption CLI: busy for a few seconds, "serving.caption" on its command line
    busy = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 6: pass", "serving.caption"]
    )
    out = tmp_path / "p.json"
    prof = subprocess.Popen(
        [sys.executable, "benchmarks/cpu_profile.py", "--out", str(out), "--interval", "0.5", "--pyspy-top", "0"],
        cwd=ROOT,
    )
    try:
        busy.wait(timeout=60)
        time.sleep(1.0)
    finally:
        prof.send_signal(signal.SIGTERM)
        prof.wait(timeout=60)
    r = json.loads(out.read_text())
    assert r["phase"] == "runner / caption cli" and r["phase_s"] >= 2
    assert r["by_role"]["runner / caption cli"]["cores"] > 0.2, r["by_role"]
    assert any(s["phase"] for s in r["samples"]) and not r["samples"][-1]["phase"]
