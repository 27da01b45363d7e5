"""R3: the job runner can die at any moment. SIGKILL a real runner process at random points during jobs
against the simulated fleet, restart it each time: 0 missing, 0 duplicate captions, re-sent requests <= what
was in flight at the kills, `PRAGMA integrity_check` ok."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from data import jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from serving import procs, simfleet
from serving.launch import commands as fleet_commands

REPO = Path(__file__).resolve().parents[2]


def kill_loop(settings, db, tmp_path, *, kills: int, clips: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    ids = tiny_library(settings, db, clips)
    pid = prompts.latest(db)["id"]
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=0.2)  # ~0.2 s per request
    job_ids = [
        jobs.create(
            db, name="r3", created_by="test", selection=Selection.of_clips(ids), prompt_id=pid, params=JobParams()
        )
    ]
    inflight_at_kills = 0
    done_kills = 0
    cmd = fleet_commands.runner_command(
        settings, fleet.urls, ["--per-replica-inflight", "3", "--until-idle", "--backoff-base", "0.05"]
    )
    try:
        while done_kills < kills:
            if job_queries.get(db, job_ids[-1])["state"] == "done":  # re-caption the same clips: a new job
                job_ids.append(
                    jobs.create(
                        db,
                        name="r3",
                        created_by="test",
                        selection=Selection.of_clips(ids),
                        prompt_id=pid,
                        params=JobParams(),
                    )
                )
            child = procs.start("runner", cmd, log=tmp_path / "runner.log", cwd=REPO)
            time.sleep(rng.uniform(0.3, 1.5))
            procs.kill_group(child.pgid, child.popen)
            done_kills += 1
            inflight_at_kills += db.execute("SELECT COUNT(*) FROM job_items WHERE state = 'leased'").fetchone()[0]
        # the last restart runs every job to the end
        child = procs.start("runner", cmd, log=tmp_path / "runner.log", cwd=REPO)
        assert child.wait(timeout=120) == 0, procs.tail(tmp_path / "runner.log")
        received = sum(fleet.stats(i)["chat_requests"] for i in range(2))
    finally:
        fleet.stop()
    n_items = clips * len(job_ids)
    for j in job_ids:
        c = job_queries.counts(db, j)
        assert c == {"pending": 0, "leased": 0, "done": clips, "failed": 0}, (j, c)
        per_clip = dict(db.execute("SELECT clip_id, COUNT(*) FROM captions WHERE job_id = ? GROUP BY clip_id", [j]))
        assert sorted(per_clip) == ids, "missing captions"
        assert set(per_clip.values()) == {1}, "duplicate captions"
        assert job_queries.get(db, j)["done"] == clips
    attempts = db.execute("SELECT SUM(attempts) FROM job_items").fetchone()[0]
    # every request sent was counted as an attempt, or given back when its runner was found dead (data.jobs.recover:
    # a kill is not the clip's fault, so kills never use up a clip's attempts)
    recovered = sum(
        json.loads(r[0])["items"] for r in db.execute("SELECT detail FROM events WHERE action = 'job.recover'")
    )
    assert received <= attempts + recovered
    assert db.execute("SELECT MAX(attempts) FROM job_items").fetchone()[0] <= settings.max_attempts
    resent = received - n_items
    assert resent <= inflight_at_kills, (resent, inflight_at_kills)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # every clip shows exactly one version per job, and the events log has one per caption
    assert db.execute("SELECT COUNT(*) FROM captions").fetchone()[0] == n_items
    return {
        "kills": done_kills,
        "jobs": len(job_ids),
        "items": n_items,
        "received": received,
        "resent": resent,
        "inflight_at_kills": inflight_at_kills,
    }


@pytest.mark.load
def test_r3_sigkill_the_runner_50_times(settings, db, tmp_path):
    out = kill_loop(settings, db, tmp_path, kills=50, clips=60)
    print("R3 fast:", out)
    assert out["kills"] == 50


@pytest.mark.slow
def test_r3_sigkill_the_runner_200_times(settings, db, tmp_path):
    out = kill_loop(settings, db, tmp_path, kills=200, clips=300, seed=7)
    print("R3 long:", out)
