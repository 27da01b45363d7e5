"""R12 (issue 11): a stalled database is waited out, a fleet outage is not the clips' fault, and attempts never
exceed the limit after runner kills."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from data import db as dbmod, jobs
from data.job_params import JobParams
from data.jobs import items as job_items, queries as job_queries
from data.jobs.selection import Selection
from serving import runner as runmod
from serving.errors import ReplicaError
from tests.support.runner_fixtures import FakeClient, add_clips, default_prompt
from tests.support.waiting import wait_until

pytestmark = pytest.mark.waits  # minutes of the product's clocks: started first (tests/conftest.py)

URLS = ["http://127.0.0.1:1", "http://127.0.0.1:2"]


def test_runner_survives_a_foreign_write_lock_longer_than_the_busy_timeout(settings, db):
    settings = settings.replace(per_replica_inflight=4)
    n = 120
    ids = add_clips(db, n)
    job_id = jobs.create(
        db,
        name="r12",
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=default_prompt(db)["id"],
        params=JobParams(),
    )
    hold_s = dbmod.BUSY_TIMEOUT_MS / 1000 + 5  # 15 s: past the busy timeout
    held = threading.Event()

    def foreign_writer():
        # another process's long write (a multi-megabyte save did this): a raw connection holding the lock
        conn = sqlite3.connect(str(settings.db), timeout=30, isolation_level=None)
        wait_until(
            lambda: conn.execute("SELECT done FROM jobs WHERE id = ?", [job_id]).fetchone()[0] >= 20,
            timeout=60,
            what="20 clips done before the foreign write",
        )
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(hold_s)
        conn.execute("COMMIT")
        conn.close()

    t = threading.Thread(target=foreign_writer)
    t.start()
    started = time.monotonic()
    prog = runmod.run_job(settings, job_id, URLS, client=FakeClient(latency=0.05), backoff_base=0.01)
    took = time.monotonic() - started
    t.join()
    assert held.is_set()
    counts = prog["counts"]
    print(
        f"R12: runner waited out a {hold_s:.0f} s foreign write lock; job {prog['state']}, "
        f"{counts['done']} of {n} done in {took:.1f} s"
    )
    assert prog["state"] == "done" and counts["done"] == n and counts.get("failed", 0) == 0
    assert took >= hold_s - 1  # it really was blocked, and waited instead of exiting
    assert db.execute("SELECT COUNT(*) FROM captions").fetchone()[0] == n  # nothing lost, nothing twice
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_45_second_fleet_outage_fails_no_clip(settings, db):
    settings = settings.replace(max_attempts=4)
    n = 40
    ids = add_clips(db, n)
    job_id = jobs.create(
        db,
        name="outage",
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=default_prompt(db)["id"],
        params=JobParams(),
    )
    outage_s = 6.0  # scaled down from 45 s: with backoff_base 0.01 the old code spent its 4 attempts in < 1 s
    t0 = time.monotonic()

    def script(url, req, n_calls):
        if time.monotonic() - t0 < outage_s:
            raise ReplicaError("connection refused", replica=url, kind="unreachable")

    client = FakeClient(script=script)
    prog = runmod.run_job(settings, job_id, URLS, client=client, backoff_base=0.01)
    attempts = [r[0] for r in db.execute("SELECT attempts FROM job_items WHERE job_id = ?", [job_id])]
    print(
        f"R12: {outage_s:.0f} s whole-fleet outage: {prog['counts']['done']} of {n} done, "
        f"{prog['counts'].get('failed', 0)} failed; {len(client.calls)} requests, max counted attempts "
        f"{max(attempts)}"
    )
    assert prog["counts"]["done"] == n and prog["counts"].get("failed", 0) == 0
    assert max(attempts) <= settings.max_attempts


def test_attempts_never_exceed_the_limit_after_runner_kills(db):
    ids = add_clips(db, 3)
    job_id = jobs.create(
        db, name="kills", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    job_items.claim(db, job_id, "r0", 10, lease_seconds=600, max_attempts=3)
    for i in ids:  # one real failed attempt each
        job_items.fail(db, job_id, i, error="HTTP 503", kind="overloaded", retryable=True, max_attempts=3)
    for round_ in range(6):  # each round: a runner leases, is SIGKILLed mid-request, the next one recovers
        job_items.claim(db, job_id, f"host:999999{round_}:1", 10, lease_seconds=600, max_attempts=3)
        job_items.recover(db, alive=lambda holder: False)
    rows = [dict(r) for r in db.query("SELECT attempts, state FROM job_items WHERE job_id = ?", [job_id])]
    assert all(r["attempts"] == 1 and r["state"] == "pending" for r in rows), rows  # kills are not attempts
    # and an item already at the limit (an older database) is failed, never sent again
    db.execute("UPDATE job_items SET attempts = 3")
    db.conn.commit()
    assert job_items.claim(db, job_id, "r1", 10, lease_seconds=600, max_attempts=3) == []
    rows = [dict(r) for r in db.query("SELECT attempts, state FROM job_items WHERE job_id = ?", [job_id])]
    assert all(r["attempts"] == 3 and r["state"] == "failed" for r in rows), rows
    assert job_queries.get(db, job_id)["state"] == "failed"  # not one clip captioned
