"""A replica that was idle fills its window over WINDOW_FILL_SECONDS instead of taking it all at once
(serving/runner/replicas.py): the rule on its own clock, then the runner's loop against a fake fleet client."""

from __future__ import annotations

import time

import pytest

from data import jobs
from data.job_params import JobParams
from data.jobs.selection import Selection
from serving import runner as runmod
from serving.runner.replicas import FILL_AFTER_IDLE_S, ReplicaHealth
from tests.support.runner_fixtures import FakeClient, add_clips, default_prompt


def _fill(health: ReplicaHealth, t: float) -> list[int]:
    """Send to every free slot at `t`; the requests in flight afterwards, per replica."""
    while (rep := health.pick(None, t)) is not None:
        rep.start(t)
    return [r.inflight for r in health.replicas]


def test_an_idle_replica_gets_one_more_slot_every_fill_over_limit_seconds():
    health = ReplicaHealth(["http://a:1", "http://b:2"], 8, fill_seconds=4.0)
    assert _fill(health, 100.0) == [1, 1]  # one request each at once, not the window
    assert health.slot_waits(100.0) == [0.5, 0.5]  # the next slot in 4 s / 8
    assert _fill(health, 100.49) == [1, 1]
    assert _fill(health, 100.5) == [2, 2]
    assert _fill(health, 102.0) == [5, 5]
    assert _fill(health, 103.99) == [8, 8]
    assert _fill(health, 104.0) == [8, 8]  # never past the bound
    assert health.slot_waits(104.0) == []
    assert [r["allowed"] for r in health.info(102.0)] == [5, 5]


def test_without_a_fill_the_whole_window_goes_at_once():
    health = ReplicaHealth(["http://a:1"], 8)
    assert _fill(health, 100.0) == [8]
    assert health.slot_waits(100.0) == []


def test_a_router_url_fills_the_window_of_all_its_replicas_in_the_same_time():
    health = ReplicaHealth(["http://router:30000"], 8, behind_router=4, fill_seconds=4.0)
    assert _fill(health, 10.0) == [1]
    assert _fill(health, 12.0) == [17]  # 1 + 32 x 2 / 4
    assert _fill(health, 14.0) == [32]


def test_the_fill_starts_again_only_after_the_replica_was_idle():
    health = ReplicaHealth(["http://a:1"], 8, fill_seconds=4.0)
    rep = health.replicas[0]
    assert _fill(health, 0.0) == [1]
    assert _fill(health, 10.0) == [8]  # filled
    for _ in range(8):
        rep.finish(11.0)
    # a moment's gap (the runner's next claim) is not idleness: the window stays open
    assert _fill(health, 11.0 + FILL_AFTER_IDLE_S / 2) == [8]
    for _ in range(8):
        rep.finish(20.0)
    # idle long enough: the engine's batch emptied, so the window fills again
    assert _fill(health, 20.0 + FILL_AFTER_IDLE_S) == [1]


def test_a_cooling_replica_waits_for_its_cool_down_not_its_fill():
    health = ReplicaHealth(["http://a:1"], 8, fill_seconds=4.0)
    rep = health.replicas[0]
    rep.cool_until = 3.0
    assert _fill(health, 1.0) == [0]
    assert health.slot_waits(1.0) == [2.0]


@pytest.mark.parametrize("fill", [0.0, 1.2])
def test_the_runner_spreads_the_first_window_over_the_fill_and_captions_every_clip(settings, db, fill):
    settings = settings.replace(per_replica_inflight=6, window_fill_seconds=fill)
    ids = add_clips(db, 18)
    p = default_prompt(db)
    job_id = jobs.create(
        db,
        name="t",
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=p["id"],
        params=JobParams(frames=8, max_tokens=200),
    )
    sent: list[float] = []

    class Timed(FakeClient):
        async def caption(self, url, req):
            sent.append(time.monotonic())
            return await super().caption(url, req)

    client = Timed(latency=1.0)
    prog = runmod.run_job(settings, job_id, ["http://127.0.0.1:1"], client=client)
    assert prog["state"] == "done" and prog["counts"]["done"] == 18
    assert max(client.peak.values()) <= 6
    first = [s - sent[0] for s in sent[:6]]
    if fill:
        # request k of the window no sooner than k x 1.2 s / 6 after the first (the loop's claim may add a little)
        assert all(f >= k * fill / 6 - 0.02 for k, f in enumerate(first)), first
        assert first[-1] < fill + 0.5  # and the window is full within the fill
    else:
        assert first[-1] < 0.15, first  # all six at once
