"""The runs of R1, R3 and R4 (docs/RELIABILITY.md), each one function with its length as a parameter: the fast
forms run them in tests/load/ (test_concurrent_annotators, test_runner_kill, test_app_kill), the long forms in
tests/reliability_long.py. Each asserts the promise inside and returns the figures it measured."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from data import db as dbmod, jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from serving import procs, simfleet
from serving.launch import commands as fleet_commands
from tests.support.audit_checks import assert_audit_complete, check_oracle
from tests.support.reliability_fixtures import AnnotatorLoad, annotation_rig, machine_captions, pct


def run_r1(settings, tmp_path, *, seconds: float, annotators: int = 20, clips: int = 40, min_saved: int = 10) -> dict:
    with annotation_rig(settings, tmp_path, clips=clips, annotators=annotators) as rig:
        with AnnotatorLoad(lambda: rig.app.url, rig.names, rig.clip_ids) as load:
            time.sleep(seconds)
            load.wait_saved(min_saved, timeout=180)
    db = dbmod.connect(settings.db)
    try:
        summary = load.summary()
        errors = [a for a in load.answers if a.kind in ("error", "dropped")]
        assert not errors, f"{len(errors)} saves answered with an error, e.g. {errors[:3]}"
        assert not [a for a in load.answers if "locked" in a.message]
        oracle = check_oracle(db, load.answers)
        audit = assert_audit_complete(db)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        out = {**summary, **oracle, "machine_captions": machine_captions(db), "audit": audit}
    finally:
        db.close()
    return out


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
