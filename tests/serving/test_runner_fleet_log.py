"""The runner's log says what changes in the fleet, and a summary now and then, never every read (issue 45: an idle
runner logged ~53 lines a minute, one per read of the router and of each replica's /health). The runner's
process, idle on the stack `./launch.sh` starts, is measured by benchmarks/bench_idle_runner.py."""

from __future__ import annotations

import logging

from serving.runner.fleet_log import FleetLog


def look(at: float, healthy: int, total: int = 4, error: str = "/health answered 503") -> dict:
    return {
        "at": at,
        "healthy": healthy,
        "total": total,
        "router_healthy": healthy,
        "replicas": [
            {"url": f"http://10.0.0.{i}:8000", "healthy": i < healthy, "error": None if i < healthy else error}
            for i in range(total)
        ],
    }


def info(state: str, the_look: dict, *, sent: int = 0, ok: int = 0, errors: int = 0, message: str = "") -> dict:
    failing = state in ("failing", "down")
    replicas = [{"url": "http://router", "last_error": {"message": message, "at": 1.0} if failing else None}]
    return {
        "fleet": {"state": state, "look": the_look, "replicas": replicas},
        "replicas": [{"sent": sent, "ok": ok, "errors": errors}],
    }


def test_the_log_says_changes_at_once_and_a_summary_now_and_then(caplog):
    clock = [0.0]
    fleet_log = FleetLog(summary_s=600, clock=lambda: clock[0])
    caplog.set_level(logging.INFO, logger="serving.runner")
    t = 0.0
    for _ in range(40):  # 10 minutes of an idle runner's heartbeats, a look every 15 s: one line, the first look
        t += 15
        clock[0] = t - 1
        fleet_log.check(info("idle", look(t, 4)))
    assert [r.getMessage() for r in caplog.records] == [
        "fleet: 4 of 4 replicas healthy by /health (the router admits 4)"
    ]
    caplog.clear()
    fleet_log.check(info("idle", look(t + 15, 3)))  # a replica goes: said at once, with why
    fleet_log.check(info("failing", look(t + 15, 3), sent=9, errors=9, message="HTTP 500: engine failure"))
    lines = [r.getMessage() for r in caplog.records]
    assert (
        lines[0].startswith("fleet: 3 of 4 replicas healthy by /health")
        and "10.0.0.3:8000: /health answered 503" in lines[0]
    )
    assert (
        lines[1]
        == "fleet failing every request: each failure uses one of the clip's attempts (HTTP 500: engine failure)"
    )
    for i in range(5):  # still failing, each error another: no new line (a state, not each cause)
        fleet_log.check(info("failing", look(t + 15, 3), sent=9, errors=9, message=f"HTTP 500: request {i} failed"))
    assert len(caplog.records) == 2
    caplog.clear()
    clock[0] = 700.0  # the summary: the looks, what they found, the requests since the last one
    fleet_log.check(info("up", look(t + 30, 4), sent=20, ok=11, errors=9))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-1].startswith(
        "fleet, the last 10 min: 42 look(s) at /health (41 x 4 of 4 healthy, 1 x 3 of 4 healthy)"
    )
    assert lines[-1].endswith("20 request(s) sent, 11 answered, 9 failed")


def test_a_line_stays_short_whatever_the_fleet_says(caplog):
    caplog.set_level(logging.INFO, logger="serving.runner")
    fleet_log = FleetLog()
    hostile = "x" * 100_000 + "\nFAKE LOG LINE"
    fleet_log.check(info("failing", look(1.0, 0, total=40, error=hostile), message=hostile))
    for r in caplog.records:
        assert len(r.getMessage()) < 1500 and "\n" not in r.getMessage(), len(r.getMessage())
    assert any("and 36 more" in r.getMessage() for r in caplog.records)
