"""A fleet that fails every request (issue 18 point 10, issue 21 class 8): the runner backs off as a whole, one
request at a time, and no clip uses an attempt while nothing can succeed; one clip failing everywhere is not an
outage; and the runner's heartbeat says what the fleet answers, which is what the Jobs tab shows (the browser
side: tests/browser/test_browser_fleet_down.py). The fleet is faked at the HTTP boundary (FakeClient), and so is its
`/health` (the runner's `look`)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from data import heartbeats, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from serving import runner as runmod
from serving.errors import Overloaded, ReplicaError, Unreachable
from tests.support.runner_fixtures import FakeClient, add_clips, default_prompt
from tests.support.waiting import wait_until

pytestmark = pytest.mark.waits  # minutes of the product's clocks: started first (tests/conftest.py)

URLS = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]


def make_job(db, n: int, prefix: str = "clip") -> tuple[int, list[int]]:
    ids = add_clips(db, n, prefix=prefix)
    job_id = jobs.create(
        db,
        name="fleet down",
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=default_prompt(db)["id"],
        params=JobParams(),
    )
    return job_id, ids


def health(healthy: int, total: int = 4) -> dict:
    """What a look at the replicas' /health returns (serving.runner.watch.look)."""
    return {
        "at": time.time(),
        "router": None,
        "healthy": healthy,
        "looked": total,
        "total": total,
        "replicas": [
            {"url": f"http://10.0.0.{i}:8000", "healthy": i < healthy, "error": None if i < healthy else "/health: 503"}
            for i in range(total)
        ],
    }


class Switch:
    """The fleet's state for a script: down (every request fails) until `up()`; records each request sent while
    down with the number in flight when it started."""

    def __init__(self, error, up_after: int | None = None):
        self.error = error
        self.up_after = up_after  # comes back once this many requests failed while down (None: when told)
        self.down = True
        self.inflight = 0
        self.calls_while_down: list[tuple[float, int]] = []

    def after_first_wave(self) -> list[int]:
        """In flight at each request sent while down, but for those sent in the first half second (the requests
        already on their way when the outage began)."""
        if not self.calls_while_down:
            return []
        first = self.calls_while_down[0][0]
        return [n for t, n in self.calls_while_down if t > first + 0.5]

    def up(self) -> None:
        self.down = False

    def look(self, urls) -> dict:
        return health(0 if self.down else 4)

    def wrap(self, client: FakeClient) -> FakeClient:
        inner = client.caption

        async def caption(url, req):
            self.inflight += 1
            try:
                if self.down:
                    self.calls_while_down.append((time.monotonic(), self.inflight))
                    if self.up_after is not None and len(self.calls_while_down) >= self.up_after:
                        self.down = False  # this one still fails: the next one finds the fleet back
                    await asyncio.sleep(0.01)
                    raise self.error(url)
                return await inner(url, req)
            finally:
                self.inflight -= 1

        client.caption = caption
        return client


def test_a_fleet_that_is_down_gets_one_request_at_a_time_and_no_clip_uses_an_attempt(settings, db):
    settings = settings.replace(max_attempts=2, per_replica_inflight=4)
    job_id, ids = make_job(db, 30)
    fleet = Switch(lambda url: Overloaded("HTTP 503: Service Unavailable", status=503, replica=url))
    client = fleet.wrap(FakeClient(latency=0.01))
    timer = threading.Timer(6.0, fleet.up)
    timer.start()
    try:
        prog = runmod.run_job(settings, job_id, URLS, client=client, backoff_base=0.05, look=fleet.look)
    finally:
        timer.cancel()
    attempts = [r[0] for r in db.execute("SELECT attempts FROM job_items WHERE job_id = ?", [job_id])]
    later = fleet.after_first_wave()
    print(
        f"fleet down 6 s: {len(fleet.calls_while_down)} requests while down, {len(later)} after the first half "
        f"second, at most {max(later, default=0)} in flight then; attempts at most {max(attempts)}"
    )
    assert prog["state"] == "done" and prog["counts"]["done"] == 30 and prog["counts"]["failed"] == 0
    # backed off as a whole: after the requests in flight when it went down, one at a time with a growing pause
    # (0.05 s doubling: about 7 in 6 s), where each replica used to get its own probes
    assert len(later) >= 2 and max(later) == 1
    assert len(fleet.calls_while_down) <= 12 + 12
    # nothing could succeed, so nothing was counted: every clip was captioned at its first counted attempt
    assert max(attempts) == 1


def test_a_one_clip_job_waits_out_an_outage_that_health_confirms(settings, db):
    """One clip cannot tell an outage from a clip the fleet chokes on: /health can. The job keeps its attempt.
    The fleet comes back after the clip's fourth failed request, not after a time: on a loaded machine (CI's three
    suites on 2 cores) a timer once fired before the runner had sent its third (2 requests in 3.9 s)."""
    settings = settings.replace(max_attempts=2)
    job_id, _ = make_job(db, 1)
    fleet = Switch(
        lambda url: Unreachable(f"cannot connect to {url}: refused", replica=url, kind="connect"), up_after=4
    )
    stop = threading.Event()
    guard = threading.Timer(60.0, stop.set)
    guard.start()
    try:
        prog = runmod.run_job(
            settings,
            job_id,
            URLS,
            client=fleet.wrap(FakeClient()),
            backoff_base=0.05,
            look=fleet.look,
            stop_event=stop,
        )
    finally:
        guard.cancel()
    assert not stop.is_set(), f"the job did not end within 60 s: {len(fleet.calls_while_down)} requests while down"
    # 4 failures with 2 attempts allowed: the clip is done only if at most the first failure counted
    assert len(fleet.calls_while_down) == 4
    assert prog["counts"]["done"] == 1 and prog["counts"]["failed"] == 0, prog["counts"]
    assert db.execute("SELECT attempts FROM job_items WHERE job_id = ?", [job_id]).fetchone()[0] <= 2


def test_one_clip_failing_on_every_replica_is_not_an_outage(settings, db):
    """Behind one router URL a clip the fleet fails on (a retryable 500) makes "every replica" fail: that is the
    clip's problem, so its attempts count and it fails, instead of being retried for free forever."""
    settings = settings.replace(max_attempts=3)
    job_id, ids = make_job(db, 8)

    def script(url, req, n):
        if req.clip_path.endswith("00003.mp4"):
            raise ReplicaError("HTTP 500: engine failure on this clip", status=500, replica=url)

    stop = threading.Event()
    guard = threading.Timer(40.0, stop.set)  # the old rule retried this clip for ever: stop it, then say so
    guard.start()
    try:
        prog = runmod.run_job(
            settings, job_id, URLS[:1], client=FakeClient(script=script), backoff_base=0.01, stop_event=stop
        )
    finally:
        guard.cancel()
    assert not stop.is_set(), "the job did not end: the clip was retried without its attempts counting"
    assert prog["state"] == "done" and prog["counts"]["done"] == 7 and prog["counts"]["failed"] == 1
    f = job_queries.failures(db, job_id)[0]
    assert f["attempts"] == 3 and "gave up after 3 attempts" in f["last_error"]


def test_clips_failing_while_health_says_the_fleet_is_up_use_their_attempts(settings, db):
    """Every request failing while /health finds the replicas up is not an outage either (e.g. two clips the
    fleet chokes on, the last ones of a job): the attempts count."""
    settings = settings.replace(max_attempts=2)
    job_id, _ = make_job(db, 2)

    def script(url, req, n):
        raise ReplicaError("HTTP 500: engine failure on this clip", status=500, replica=url)

    prog = runmod.run_job(
        settings, job_id, URLS, client=FakeClient(script=script), backoff_base=0.01, look=lambda urls: health(4)
    )
    assert prog["counts"]["failed"] == 2


class RunnerThread:
    """The runner process's loop in a thread (every job), stopped at the end."""

    def __init__(self, settings, urls, **options):
        self.stop_event = threading.Event()
        self.runner = runmod.Runner(settings, urls, stop_event=self.stop_event, name="runner", **options)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.runner.run()), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(30)


def fleet_report(db) -> dict:
    beats = [b for b in heartbeats.heartbeats(db, "runner") if b["name"] == "runner"]
    return (beats[0]["info"].get("fleet") or {}) if beats else {}


def test_the_runner_heartbeat_says_why_the_fleet_is_down_and_when_it_is_back(settings, db):
    """What the Jobs tab shows comes from here: the state, the latest failure per replica (status and
    message), how long it has failed, when the next try is, and the look at /health (0 of 4 healthy)."""
    job_id, _ = make_job(db, 6)
    message = "Service Unavailable (simulated 503 window)"
    fleet = Switch(lambda url: Overloaded(f"HTTP 503: {message}", status=503, replica=url))
    t0 = time.monotonic()
    with RunnerThread(settings, URLS, client=fleet.wrap(FakeClient()), backoff_base=0.2, look=fleet.look):
        wait_until(
            lambda: (
                fleet_report(db).get("state") == "down"
                and all(r["last_error"] for r in fleet_report(db).get("replicas") or [{}])
            ),
            timeout=10,
            what="the heartbeat says down, with each replica's failure",
        )
        seen_after = time.monotonic() - t0
        report = fleet_report(db)
        assert report["attempts_counted"] is False and report["next_try_in"] is not None
        assert report["failing_since"] is not None and report["down_since"] is not None
        assert report["look"]["healthy"] == 0 and report["look"]["total"] == 4
        errors = [r["last_error"] for r in report["replicas"]]
        assert all(e and e["status"] == 503 and message in e["message"] for e in errors), errors
        assert max(r[0] for r in db.execute("SELECT attempts FROM job_items WHERE job_id = ?", [job_id])) <= 1
        fleet.up()
        wait_until(lambda: job_queries.get(db, job_id)["state"] == "done", timeout=60, what="the job done")
        wait_until(lambda: fleet_report(db).get("state") == "up", timeout=10, what="the heartbeat says up")
    print(f"the heartbeat said the fleet was down {seen_after:.1f} s after the runner started")
    assert job_queries.counts(db, job_id)["failed"] == 0


def test_an_idle_runner_knows_whether_a_job_could_run(settings, db):
    """With no job at all, the runner looks at /health anyway: a lead starting a job is warned at once."""
    with RunnerThread(settings, URLS, client=FakeClient(), look=lambda urls: health(0, 2)):
        wait_until(lambda: (fleet_report(db).get("look") or {}).get("total") == 2, timeout=10, what="a look")
    report = fleet_report(db)  # /health finds none up: a job started now would get one request at a time
    assert report["state"] == "down" and report["look"]["healthy"] == 0 and report["attempts_counted"] is False


def test_a_request_sent_into_an_outage_uses_no_attempt_when_it_fails_after_the_outage(settings, db):
    """The fleet comes back while a request sent during the outage is on its way: its failure is written after a
    look saw the fleet up (the Chromium test caught a clip at attempts 2), and it is still the outage's, not the
    clip's. The runner marks the outcome `in_outage`; the store refunds it whatever the fleet's state now."""
    from serving.runner.store import JobStore, Outcome

    job_id, _ = make_job(db, 2)
    store = JobStore(settings, "test-runner")
    ((_, items),) = store.claim(db, 2)
    assert [it["attempts"] for it in items] == [1, 1]
    outcomes = [
        Outcome(job_id, items[0]["clip_id"], 1, error=Overloaded("503 while down"), in_outage=True),
        Outcome(job_id, items[1]["clip_id"], 1, error=Overloaded("503 once up")),
    ]
    counts, written = store.write(db, outcomes, fleet_down=False)
    assert written == 2 and counts["refunded"] == 1
    attempts = dict(db.execute("SELECT clip_id, attempts FROM job_items WHERE job_id = ?", [job_id]).fetchall())
    assert attempts[items[0]["clip_id"]] == 0  # refunded: the outage's failure
    assert attempts[items[1]["clip_id"]] == 1  # counted: sent and failed while the fleet was up


# ---- a fleet that fails every request while /health finds it up (issue 45, point 5) ---------------------------
def breaker_503(url: str) -> Overloaded:
    """vllm-router 0.1.17's answer once every worker's circuit breaker is open (classified as the client does)."""
    from serving.answers import classify_status

    return classify_status(503, "No available workers (all circuits open or unhealthy)", url)


def test_a_routers_breaker_answer_is_named_by_the_failure_that_opened_it():
    from serving.runner.replicas import ReplicaHealth

    health = ReplicaHealth(["http://router:30000"], 4, behind_router=4)
    rep = health.replicas[0]
    t = time.monotonic()
    alone = health.explain(rep, breaker_503(rep.url))  # nothing seen before it: said as the router's own answer
    assert alone.kind == "no_workers" and alone.retryable and "No available workers" in str(alone)
    engine = ReplicaError("HTTP 500: simulated engine failure (error_rate knob)", status=500, replica=rep.url)
    rep.start(t)
    health.finished(rep, health.explain(rep, engine), t, "clip-1")
    for i in range(3):  # the breaker's answers after it: each named by the engine's failure, never "overloaded"
        named = health.explain(rep, breaker_503(rep.url))
        rep.start(t)
        health.finished(rep, named, t + 0.1 * i, f"clip-{i + 2}")
        assert isinstance(named, ReplicaError) and named.kind == "replica" and named.status == 500
        assert str(named).startswith("HTTP 500: simulated engine failure") and str(named).count("circuit breaker") == 1
        assert len(str(named)) <= 2 * 300 + 10
    rep.start(t)
    health.finished(rep, None, t + 1, "clip-9")  # an answer: what came before is no cause any more
    assert health.explain(rep, breaker_503(rep.url)).kind == "no_workers"


def test_a_fleet_failing_everywhere_is_tried_at_a_pace_that_ends_jobs():
    """Every replica failing: a replica cools at most FAILING_COOL_MAX_S (not 15 s), and a router URL probes with
    one request per replica behind it; one bad replica among good ones still waits long."""
    from serving.runner.replicas import COOL_MAX_S, FAILING_COOL_MAX_S, ReplicaHealth

    router = ReplicaHealth(["http://router:30000"], 4, behind_router=4, backoff_base=0.5)
    rep = router.replicas[0]
    t = time.monotonic()
    for i in range(12):
        router.observe(health(4), t)  # /health finds every replica up: not an outage
        rep.start(t)
        router.finished(rep, ReplicaError("HTTP 500: x", status=500, replica=rep.url), t, f"c{i}")
        assert rep.cool_until - t <= FAILING_COOL_MAX_S and not router.fleet_down()
        t = rep.cool_until
    assert router.free_slots(t) == 4  # four probes at once, one per replica behind the router
    mixed = ReplicaHealth(URLS, 4, backoff_base=0.5)
    bad, good = mixed.replicas[0], mixed.replicas[1]
    good.start(t)
    mixed.finished(good, None, t, "ok")
    for i in range(12):
        bad.start(t)
        mixed.finished(bad, ReplicaError("HTTP 500: x", status=500, replica=bad.url), t, f"c{i}")
    assert bad.cool_until - t > FAILING_COOL_MAX_S and bad.cool_until - t <= COOL_MAX_S


def test_failing_is_a_report_of_now_and_a_recovery_is_dated(monkeypatch):
    """The runner line said "failing every request" for ~1.5 min after a fix: an idle runner's last failures are
    not a state of now. Failing is reported while a request is on its way or the newest failure is recent; then
    the report is idle and says when the last requests failed; the first answer after dates the recovery."""
    from serving.runner import replicas as mod

    clock = [1_000_000.0]
    monkeypatch.setattr(mod, "time", SimpleNamespace(time=lambda: clock[0], monotonic=time.monotonic))
    health = mod.ReplicaHealth(["http://router:30000"], 4, behind_router=4)
    rep = health.replicas[0]
    t = 100.0
    rep.start(t)
    health.finished(rep, ReplicaError("HTTP 500: x", status=500, replica=rep.url), t, "c1")
    assert health.report(t)["state"] == "failing" and health.failing_now()
    clock[0] += mod.FAILING_FRESH_S + 1
    idle = health.report(t)
    assert idle["state"] == "idle" and idle["last_failed_at"] == 1_000_000.0 and not health.failing_now()
    rep.start(t)
    assert health.report(t)["state"] == "failing"  # a request on its way: news again
    clock[0] += 3
    health.finished(rep, None, t, "c2")
    up = health.report(t)
    assert up["state"] == "up" and up["recovered_at"] == clock[0] and up["last_failed_at"] is None
