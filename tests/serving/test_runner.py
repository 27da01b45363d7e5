"""The job runner's loop against a fake fleet client (the HTTP boundary): bounds, retries, pause, shutdown."""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from data import captions, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.settings import Settings
from serving import runner as runmod
from serving.client import POOL_SLOTS, CaptionRequest, FleetClient
from serving.errors import ClipRejected, Overloaded, Unreachable
from serving.launch import record as fleet_record
from tests.support.fleet_fixtures import PROMPT
from tests.support.runner_fixtures import LABELS, FakeClient, add_clips, default_prompt
from tests.support.waiting import wait_until

URLS = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]


def make_job(db, n, **kw):
    ids = add_clips(db, n, probe_errors=kw.pop("probe_errors", None))
    p = default_prompt(db)
    params = kw.pop("params", JobParams())
    return (
        jobs.create(
            db, name="t", created_by="lead", selection=Selection.of_clips(ids), prompt_id=p["id"], params=params
        ),
        ids,
        p,
    )


def test_runner_captions_every_clip_within_per_replica_bound(settings, db):
    settings = settings.replace(per_replica_inflight=4)
    job_id, ids, p = make_job(db, 60, params=JobParams(frames=8, max_tokens=200))
    client = FakeClient(latency=0.01)
    prog = runmod.run_job(settings, job_id, URLS, client=client)
    assert prog["state"] == "done" and prog["counts"]["done"] == 60
    assert max(client.peak.values()) <= 4
    assert {u for u, _ in client.calls} == set(URLS)  # spread over every replica
    assert len(client.calls) == 60
    cap = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id=?", [ids[0]]).fetchone()[0])
    assert (cap["prompt_id"], cap["prompt_name"], cap["prompt_version"]) == (
        p["id"],
        "av-hazard",
        2,
    )  # the newest preset version
    assert cap["job_id"] == job_id and cap["source"] == "model" and cap["simulated"] == 1


def test_clips_with_a_probe_error_fail_without_being_sent(settings, db):
    job_id, ids, _ = make_job(db, 10, probe_errors={3: "no video stream", 7: "moov atom not found"})
    client = FakeClient()
    prog = runmod.run_job(settings, job_id, URLS, client=client)
    assert prog["counts"] == {"pending": 0, "leased": 0, "done": 8, "failed": 2}
    assert len(client.calls) == 8
    reasons = sorted(f["last_error"] for f in job_queries.failures(db, job_id))
    assert reasons == ["ingest: moov atom not found", "ingest: no video stream"]


def test_rejected_clips_fail_at_once_and_retryable_errors_go_elsewhere(settings, db):
    job_id, ids, _ = make_job(db, 30)
    bad_replica = URLS[0]

    def script(url, req, n):
        if req.clip_path.endswith("00005.mp4"):
            raise ClipRejected("HTTP 400: decode budget overrun", status=400, replica=url)
        if url == bad_replica:
            raise Unreachable("connection refused", replica=url, kind="connect")

    client = FakeClient(script=script)
    prog = runmod.run_job(settings, job_id, URLS, client=client, backoff_base=0.01)
    assert prog["counts"]["done"] == 29 and prog["counts"]["failed"] == 1
    f = job_queries.failures(db, job_id)[0]
    assert f["attempts"] == 1 and "decode budget" in f["last_error"] and f["error_kind"] == "rejected"
    # every clip that failed on the bad replica was answered by another one, never twice by the bad one
    per_clip_bad = [p for u, p in client.calls if u == bad_replica]
    assert len(per_clip_bad) == len(set(per_clip_bad))
    attempts = [r[0] for r in db.execute("SELECT attempts FROM job_items WHERE job_id=?", [job_id])]
    assert max(attempts) <= 2


def test_retryable_errors_give_up_after_max_attempts(settings, db):
    settings = settings.replace(max_attempts=3)
    job_id, ids, _ = make_job(db, 3)

    def script(url, req, n):
        raise Overloaded("HTTP 503: busy", status=503, replica=url)

    # /health finds every replica up, so a 503 on every request is not an outage: the attempts count (a fleet
    # that is down keeps them: tests/serving/test_fleet_down.py)
    healthy = {"healthy": len(URLS), "looked": len(URLS), "total": len(URLS), "replicas": [], "router": None}
    prog = runmod.run_job(
        settings, job_id, URLS, client=FakeClient(script=script), backoff_base=0.01, look=lambda urls: healthy
    )
    assert prog["counts"]["failed"] == 3
    for f in job_queries.failures(db, job_id):
        assert f["attempts"] == 3 and "gave up after 3 attempts" in f["last_error"]


def test_machine_result_never_replaces_a_human_caption(settings, db):
    job_id, ids, _ = make_job(db, 2)
    human = captions.save_human(
        db, ids[0], text="a human wrote this", labels=LABELS, author="ann", base_caption_id=None
    )
    runmod.run_job(settings, job_id, URLS, client=FakeClient())
    clip = db.execute("SELECT current_caption_id FROM clips WHERE id=?", [ids[0]]).fetchone()[0]
    assert clip == human["id"]
    assert len(captions.history(db, ids[0])) == 2  # the machine one is kept as a candidate


def test_pause_stops_claiming_and_hands_inflight_items_back(settings, db):
    settings = settings.replace(per_replica_inflight=2)
    job_id, ids, _ = make_job(db, 200)
    client = FakeClient(latency=0.02)
    out = {}

    def run():
        out["prog"] = runmod.run_job(settings, job_id, URLS, client=client)

    t = threading.Thread(target=run)
    t.start()
    wait_until(
        lambda: db.execute("SELECT done FROM jobs WHERE id=?", [job_id]).fetchone()[0] >= 20,
        timeout=60,
        what="20 items done",
        step=0.01,
    )
    jobs.change_state(db, job_id, "pause", "lead")
    t.join(timeout=20)
    assert not t.is_alive()
    c = job_queries.counts(db, job_id)
    assert c["leased"] == 0 and 20 <= c["done"] < 200
    # requests in flight at the pause were aborted and their items handed back (issue 10: a paused job
    # shows what was really captioned, and resuming sends those items again)
    assert c["done"] <= len(client.calls) and c["pending"] == 200 - c["done"]
    assert job_queries.get(db, job_id)["state"] == "paused" and job_queries.get(db, job_id)["done"] == c["done"]


def test_stop_event_drains_and_leaves_nothing_leased(settings, db):
    settings = settings.replace(per_replica_inflight=5)
    job_id, ids, _ = make_job(db, 300)
    client = FakeClient(latency=0.05)
    stop = threading.Event()
    th = threading.Thread(
        target=lambda: runmod.run_job(settings, job_id, URLS, client=client, stop_event=stop, drain_seconds=5)
    )
    th.start()
    time.sleep(0.5)
    stop.set()
    th.join(timeout=20)
    c = job_queries.counts(db, job_id)
    assert c["leased"] == 0 and c["done"] == len(client.calls) and c["pending"] == 300 - c["done"]


def test_stop_releases_requests_that_outlive_the_drain_deadline(settings, db):
    job_id, ids, _ = make_job(db, 6)

    class Hang(FakeClient):
        async def caption(self, url, req):
            self.calls.append((url, req.clip_path))
            await asyncio.sleep(60)

    stop = threading.Event()
    client = Hang()
    th = threading.Thread(
        target=lambda: runmod.run_job(settings, job_id, URLS, client=client, stop_event=stop, drain_seconds=0.3)
    )
    th.start()
    wait_until(lambda: len(client.calls) >= 6, timeout=60, what="6 requests in flight", step=0.01)
    stop.set()
    th.join(timeout=20)
    assert not th.is_alive()
    rows = list(db.query("SELECT state, attempts FROM job_items WHERE job_id=?", [job_id]))
    assert all(r["state"] == "pending" and r["attempts"] == 0 for r in rows)


def test_fleet_urls_are_parsed_once_by_the_settings_and_refuse_a_mode_word(settings):
    s = Settings.load({"data_dir": str(settings.data_dir), "fleet_urls": "127.0.0.1:8000, http://h:9/"}, environ={})
    assert s.fleet_urls == ("http://127.0.0.1:8000", "http://h:9")
    with pytest.raises(ValueError, match="--fleet-mode sim"):
        Settings.load({"fleet_urls": "sim"}, environ={})
    with pytest.raises(ValueError, match="URLs go to --fleet-urls"):
        Settings.load({"fleet_mode": "http://h:9"}, environ={})


def test_without_urls_the_runner_sends_to_what_the_launcher_of_its_data_dir_started(settings):
    assert runmod.fleet_targets(settings) == [f"http://127.0.0.1:{settings.router_port}"]  # nothing recorded
    fleet_record.save_record(settings, {"router_url": None, "replica_urls": ["http://127.0.0.1:8101/", "h:8102"]})
    try:
        assert runmod.fleet_targets(settings) == ["http://127.0.0.1:8101", "http://h:8102"]
        assert runmod.fleet_targets(settings.replace(fleet_urls=("http://a:1",))) == ["http://a:1"]  # the setting wins
    finally:
        fleet_record.record_path(settings).unlink()


def test_the_runner_refuses_a_url_given_as_the_fleet_mode_with_a_message(settings):
    r = subprocess.run(
        [sys.executable, "-m", "serving.runner", "--data-dir", str(settings.data_dir), "--fleet-mode", "http://h:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "URLs go to --fleet-urls" in r.stderr and "Traceback" not in r.stderr


class _FakeRouter:
    """A loopback HTTP server answering GET /workers with `n` workers, counting the calls."""

    def __init__(self, n: int):
        outer = self
        self.calls = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.calls += 1
                body = json.dumps({"workers": [f"http://w{i}:8000" for i in range(n)]}).encode()
                self.send_response(200 if self.path == "/workers" else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_router_is_asked_for_its_workers_when_the_runner_starts_not_when_it_is_built(settings, db):
    router = _FakeRouter(5)
    try:
        r = runmod.Runner(
            settings.replace(per_replica_inflight=3), router.url, client=FakeClient(), exit_when_idle=True
        )
        assert router.calls == 0 and r.capacity == 3  # building a runner makes no network call
        asyncio.run(r.run())  # no job: it starts, asks, finds nothing to do and stops
        assert router.calls == 1 and r.capacity == 15
    finally:
        router.close()


def test_single_router_url_gets_bound_times_replicas(settings):
    r = runmod.Runner(settings.replace(per_replica_inflight=7), "http://127.0.0.1:9", replicas=8, client=FakeClient())
    assert r.capacity == 56
    r._db.close()


def test_the_fleet_client_keeps_at_most_pool_slots_requests_in_each_connection_pool(fleet_settings, sim):
    """The runner's only connection pooling is FleetClient's own: per replica, as many pools as the requests in
    flight need at POOL_SLOTS each (httpcore's cost per request grows with the connections in a pool)."""
    url, n = sim.urls[0], 2 * POOL_SLOTS + 4

    async def go():
        client = FleetClient(fleet_settings)
        try:
            reqs = [CaptionRequest(f"many/{i % 6:02d}.mp4", PROMPT) for i in range(n)]
            results = await asyncio.gather(*(client.caption(url, r) for r in reqs))
            return results, [inflight for _, inflight in client._pools[url]]
        finally:
            await client.aclose()

    results, pools = asyncio.run(go())
    assert len(results) == n and all(r.text for r in results)
    assert len(pools) == 3 and pools == [0, 0, 0]  # 20 at once: 8 + 8 + 4, all given back


def test_the_runner_process_gives_its_database_thread_the_gil_back_promptly(settings, db):
    """A statement of the database thread gives up the GIL; with Python's 5 ms switch interval a busy event loop
    kept it away for 5 ms each time, and a result batch held SQLite's write lock for hundreds of ms (dbthread)."""
    from serving.runner import dbthread

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # Python's default
    try:
        job_id, _, _ = make_job(db, 3)
        prog = runmod.run_job(settings, job_id, URLS, client=FakeClient())
        assert prog["state"] == "done"
        assert sys.getswitchinterval() <= dbthread.GIL_SWITCH_S < 0.005
        sys.setswitchinterval(0.0001)  # never lengthened: a process that chose a shorter one keeps it
        dbthread.prompt_gil()
        assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05)  # kept in whole microseconds
    finally:
        sys.setswitchinterval(before)
