"""End to end on loopback: the simulated fleet behind the real vllm-router, the caption CLI and the runner
process caption a small library; broken clips fail with a reason; Ctrl-C pauses and --resume finishes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data import captions, heartbeats, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from serving import simfleet
from tests.support.runner_fixtures import real_router

REPO = Path(__file__).resolve().parents[2]
BROKEN = {"page.mp4": "not a video file (HTML page)", "empty.mp4": "zero-length file"}


@pytest.fixture
def fleet(settings):
    settings.clip_root.mkdir(parents=True, exist_ok=True)
    f = simfleet.start_fleet(4, 0, settings.clip_root, speed=0.05)
    yield f
    f.stop()


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=120, **kw)


def check_captioned(db, job_id, good_ids, replicas, broken=BROKEN):
    prog = job_queries.progress(db, job_id)
    assert prog["state"] == "done"
    assert prog["counts"] == {"pending": 0, "leased": 0, "done": len(good_ids), "failed": len(broken)}
    reasons = {f["path"].split("/")[-1]: f["last_error"] for f in job_queries.failures(db, job_id)}
    assert reasons == {k: f"ingest: {v}" for k, v in broken.items()}
    used = set()
    for cid in good_ids:
        cap = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id=?", [cid]).fetchone()[0])
        assert cap["source"] == "model" and cap["simulated"] == 1 and cap["text"].startswith("[SIMULATED]")
        assert cap["prompt_name"] == "av-hazard" and cap["prompt_version"] == 2 and cap["job_id"] == job_id
        assert cap["model"].endswith("(simulated)") and cap["finish_reason"] == "stop"
        assert cap["frames"] == 16 and cap["latency_ms"] > 0 and cap["completion_tokens"] > 0
        used.add(cap["replica"])
    assert used == set(replicas)  # the router spread the requests over every replica


def test_cli_captions_a_library_through_the_real_router(settings, db, fleet, tmp_path):
    good = tiny_library(settings, db, 40, broken=BROKEN)
    with real_router(fleet.urls, tmp_path) as url:
        r = cli(
            "serving.caption",
            "--db",
            str(settings.db),
            "--clip-root",
            str(settings.clip_root),
            "--fleet-urls",
            url,
            "--has-caption",
            "no",
            "--no-progress",
        )
    assert r.returncode == 0, r.stderr
    # --has-caption no leaves out the clips that failed ingest: the fleet could not caption them
    assert "40 clips" in r.stderr and "40 captioned, 0 failed" in r.stderr, r.stderr
    check_captioned(db, 1, good, fleet.urls, broken={})
    assert sum(fleet.stats(i)["chat_requests"] for i in range(4)) == 40  # broken clips never sent


def test_runner_process_runs_a_job_the_app_created(settings, db, fleet, tmp_path):
    good = tiny_library(settings, db, 30, broken=BROKEN)
    from data import prompts

    all_ids = [r[0] for r in db.execute("SELECT id FROM clips")]
    job_id = jobs.create(
        db,
        name="from the app",
        created_by="lead",
        selection=Selection.of_clips(all_ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(),
    )
    with real_router(fleet.urls, tmp_path) as url:
        r = cli(
            "serving.runner",
            "--db",
            str(settings.db),
            "--clip-root",
            str(settings.clip_root),
            "--fleet-urls",
            url,
            "--until-idle",
            "--name",
            "e2e",
        )
    assert r.returncode == 0, r.stderr
    check_captioned(db, job_id, good, fleet.urls)
    hb = heartbeats.heartbeats(db, "runner")
    assert hb[0]["name"] == "e2e" and hb[0]["info"]["state"] == "stopped" and hb[0]["info"]["capacity"] == 4 * 48


def test_ctrl_c_pauses_and_resume_finishes(settings, db, tmp_path):
    settings.clip_root.mkdir(parents=True, exist_ok=True)
    tiny_library(settings, db, 120)
    f = simfleet.start_fleet(2, 0, settings.clip_root, speed=1.0, capacity=2)  # slow: ~1 s per request
    try:
        fleet = ",".join(f.urls)
        args = [
            sys.executable,
            "-m",
            "serving.caption",
            "--db",
            str(settings.db),
            "--clip-root",
            str(settings.clip_root),
            "--fleet-urls",
            fleet,
            "--no-progress",
            "--per-replica-inflight",
            "4",
        ]
        p = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while (
            time.monotonic() < deadline
            and db.execute("SELECT COUNT(*) FROM job_items WHERE state='done'").fetchone()[0] < 4
        ):
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=60)[1]
        assert p.returncode == 130, err
        assert "Resume with" in err and "--resume 1" in err
        c = job_queries.counts(db, 1)
        assert job_queries.get(db, 1)["state"] == "paused" and c["leased"] == 0 and 4 <= c["done"] < 120
        sent = sum(f.stats(i)["chat_requests"] for i in range(2))
        assert sent == c["done"]  # in-flight requests were finished and recorded, nothing else was sent
        f.set_knobs(0, speed=0.01)
        f.set_knobs(1, speed=0.01)
        r = cli(
            "serving.caption",
            "--db",
            str(settings.db),
            "--clip-root",
            str(settings.clip_root),
            "--fleet-urls",
            fleet,
            "--resume",
            "1",
            "--no-progress",
        )
        assert r.returncode == 0, r.stderr
        assert job_queries.counts(db, 1)["done"] == 120
    finally:
        f.stop()


def test_cli_rejects_an_empty_selection_with_a_message(settings, db):
    r = cli("serving.caption", "--db", str(settings.db), "--fleet-urls", "http://127.0.0.1:9", "--text", "nothing")
    assert r.returncode == 2 and "No clips match" in r.stderr


@pytest.mark.parametrize(
    "module",
    [
        "serving.caption",
        "serving.runner",
        "serving.launcher",
        "serving.supervisor",
        "serving.cost",
        "serving.fleet_key",
        "serving.router_gate",
        "data.deployment",
        "serving.demo_job",
    ],
)
def test_every_command_has_help_with_an_example(module):
    r = cli(module, "--help")
    assert r.returncode == 0 and "example" in r.stdout and f"python -m {module}" in r.stdout
