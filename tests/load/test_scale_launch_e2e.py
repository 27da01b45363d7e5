"""The whole deployment of docs/SCALE.md through launch.sh itself, on loopback: a GPU-node role (simulated
replicas on 127.0.0.2, holding the head's fleet key) and a head role (router over its worker URLs behind the
router gate, supervised runner, app). The README's terminal command, run on the head with only --data-dir and
--fleet-urls, captions every clip over signed URLs while the head's supervised runner runs too (issue 23); then
a job from the database, the runner SIGKILLed and restarted, everything stopped.
Marked slow (~1 min: demo library, ingest, the app's start-up); the fast rehearsals are test_scale_multinode.py
and test_deployment.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from data import db as dbmod, heartbeats, jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from serving import procs
from serving.launch import addresses as fleet_addresses

ROOT = Path(__file__).resolve().parents[2]


def sh(*args: str, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(ROOT / "launch.sh"), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


@pytest.mark.slow
def test_node_and_head_roles_caption_a_job_over_signed_urls(tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    base.update(PYTHONPATH=str(ROOT), CW_AUTH="off")
    app_port = procs.free_port()
    fleet_port = fleet_addresses.free_block("127.0.0.2", 2, procs.free_port("127.0.0.2"))
    node, head = tmp_path / "node", tmp_path / "head"
    # the docs' order: the head's key first (made once), stored on the node, then the node, then the head
    key = subprocess.run(
        [sys.executable, "-m", "serving.fleet_key", "show", "--data-dir", str(head)],
        capture_output=True,
        text=True,
        env=base,
        cwd=ROOT,
        check=True,
    ).stdout
    subprocess.run(
        [sys.executable, "-m", "serving.fleet_key", "set", "--data-dir", str(node)],
        input=key,
        text=True,
        env=base,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        r = sh(
            "--role",
            "node",
            "--fleet-mode",
            "sim",
            "--replica-host",
            "127.0.0.2",
            "--media-url-base",
            f"http://127.0.0.1:{app_port}",
            "--detach",
            "--no-install",
            "--data-dir",
            str(node),
            env={**base, "CW_FLEET_PORT": str(fleet_port)},
        )
        line = [ln for ln in r.stdout.splitlines() if "worker URLs for the head" in ln][0]
        workers = line.split(": ", 1)[1].strip()
        assert all(u.startswith("http://127.0.0.2:") for u in workers.split(","))
        sh(
            "--role",
            "head",
            "--port",
            str(app_port),
            "--media-url-base",
            f"http://127.0.0.1:{app_port}",
            "--worker-urls",
            workers,
            "--detach",
            "--no-install",
            "--demo-count",
            "6",
            "--data-dir",
            str(head),
            env={**base, "CW_ROUTER_PORT": str(procs.free_port()), "CW_ROUTER_PROMETHEUS_PORT": str(procs.free_port())},
        )
        # the interpreter this launch ran with, for `stop` and `status` from another shell (tests/test_launch_shell.py)
        recorded = (head / "run" / "python").read_text().strip()
        assert Path(recorded).is_absolute() and os.access(recorded, os.X_OK), recorded
        router = json.loads((head / "run" / "fleet.json").read_text())["router_url"]
        # the README's terminal command on the head, from a shell without the launch's variables
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "serving.caption",
                "--data-dir",
                str(head),
                "--fleet-urls",
                router,
                "--has-caption",
                "no",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=base,
            cwd=ROOT,
            timeout=240,
        )
        assert cli.returncode == 0, cli.stderr[-3000:]
        d = dbmod.connect(head / "workbench.db")
        try:
            n_good = d.execute("SELECT COUNT(*) FROM clips WHERE probe_error IS NULL").fetchone()[0]
            n_bad = d.execute("SELECT COUNT(*) FROM clips WHERE probe_error IS NOT NULL").fetchone()[0]
            # every clip that can be captioned is; the demo's broken files fail for their ingest reason alone
            assert f"{n_good} captioned, {n_bad} failed" in cli.stderr, cli.stderr[-2000:]
            errors = [r[0] for r in d.execute("SELECT last_error FROM job_items WHERE state = 'failed'")]
            assert len(errors) == n_bad and all(e.startswith("ingest: ") for e in errors), errors
            beats = heartbeats.heartbeats(d, "runner")
            assert any(b["name"] == "runner" and procs.pid_alive(b["pid"]) for b in beats), beats  # it ran too
        finally:
            d.close()
        stats = [httpx.get(u + "/sim/stats", timeout=5).json()["media_fetches"] for u in workers.split(",")]
        assert sum(s["http"] for s in stats) >= n_good and sum(s["file"] for s in stats) == 0, stats
        d = dbmod.connect(head / "workbench.db")
        try:
            ids = [r[0] for r in d.execute("SELECT id FROM clips WHERE probe_error IS NULL")]
            job = jobs.create(
                d,
                name="e2e",
                created_by="test",
                selection=Selection.of_clips(ids),
                prompt_id=prompts.latest(d)["id"],
                params=JobParams(),
            )
            deadline = time.monotonic() + 90
            while job_queries.progress(d, job)["state"] in ("queued", "running") and time.monotonic() < deadline:
                time.sleep(0.5)
            prog = job_queries.progress(d, job)
            assert prog["state"] == "done" and prog["counts"]["done"] == len(ids) >= 6, prog
            stats = [httpx.get(u + "/sim/stats", timeout=5).json()["media_fetches"] for u in workers.split(",")]
            assert sum(s["http"] for s in stats) >= len(ids) and sum(s["file"] for s in stats) == 0, stats
            first = [b for b in heartbeats.heartbeats(d, "runner")][0]["pid"]
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                beats = [
                    b for b in heartbeats.heartbeats(d, "runner") if b["pid"] != first and procs.pid_alive(b["pid"])
                ]
                if beats:
                    break
                time.sleep(0.3)
            assert beats, "the runner was not restarted"
        finally:
            d.close()
    finally:
        for dd in (head, node):
            subprocess.run(
                [str(ROOT / "launch.sh"), "stop", "--data-dir", str(dd)],
                capture_output=True,
                env=base,
                cwd=ROOT,
                timeout=120,
            )
    for dd in (head, node):
        for pidfile in (dd / "run").glob("*.pid"):
            pytest.fail(f"left behind: {pidfile}")
        assert not (dd / "run" / "fleet.json").exists()
