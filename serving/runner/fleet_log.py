"""What the runner's log says about the fleet: a line when something changes, and a summary now and then.

An idle runner logged every read of the router and of each replica's `/health` (httpx's own line per request, 7
a look, 28-53 lines a minute with nothing happening), and nothing when the fleet started failing. Now httpx's
per-request lines are off (serving/runner/__main__.py) and this says, from the runner's heartbeat info (its
report on the fleet and its counts per replica, serving.runner.replicas):
- at once, when the fleet's state changes (up, failing every request, down, idle after failures) with the cause,
  and when a look at `/health` finds another count of healthy replicas, or other replicas unhealthy;
- every SUMMARY_S, one line: the looks since the last summary and what they found, the requests sent, answered
  and failed.
Every value taken from the fleet is clipped (VALUE_CHARS; at most LISTED replicas named): a line stays a few
hundred bytes whatever a replica answers.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("serving.runner")

SUMMARY_S = 600.0  # a summary line this often (and the first one this long after the start)
VALUE_CHARS = 160  # of an error or a URL in a line
LISTED = 4  # unhealthy replicas named in a line; the rest are counted


def _clip(value, n: int = VALUE_CHARS) -> str:
    text = " ".join(str(value).split())  # one line, whatever the fleet put in it
    return text if len(text) <= n else text[: n - 1] + "…"


def _state_line(report: dict) -> str:
    """The fleet's state in the words of the Jobs tab's runner line."""
    state = report.get("state")
    errors = [r.get("last_error") for r in report.get("replicas") or [] if isinstance(r.get("last_error"), dict)]
    cause = _clip(max(errors, key=lambda e: e.get("at") or 0).get("message")) if errors else ""
    if state == "failing":
        return "fleet failing every request: each failure uses one of the clip's attempts" + (
            f" ({cause})" if cause else ""
        )
    if state == "down":
        return "fleet down: one request at a time, no clip uses an attempt" + (f" ({cause})" if cause else "")
    if state == "idle" and report.get("last_failed_at"):
        return "fleet: nothing sent since its last requests failed" + (f" ({cause})" if cause else "")
    if state == "up":
        return "fleet answering again" if report.get("recovered_at") else "fleet answering"
    return f"fleet {state}"


def _look_line(look: dict) -> str:
    bad = [r for r in look.get("replicas") or [] if not r.get("healthy")]
    named = "; ".join(f"{_clip(r.get('url'), 80)}: {_clip(r.get('error') or 'not healthy')}" for r in bad[:LISTED])
    more = f"; and {len(bad) - LISTED} more" if len(bad) > LISTED else ""
    router = look.get("router_healthy")
    return (
        f"fleet: {look.get('healthy', 0)} of {look.get('total', 0)} replicas healthy by /health"
        + (f" (the router admits {router})" if isinstance(router, int) else "")
        + (f"; not healthy: {named}{more}" if bad else "")
    )


def _look_key(look: dict) -> tuple:
    bad = tuple(
        sorted(
            (str(r.get("url")), str(r.get("error"))[:60]) for r in look.get("replicas") or [] if not r.get("healthy")
        )
    )
    return look.get("healthy"), look.get("total"), look.get("router_healthy"), bad


class FleetLog:
    """Feed it the runner's heartbeat info every period (`check`); it logs what changed, and a summary every
    `summary_s`. `clock`: time.monotonic (tests move it)."""

    def __init__(self, *, summary_s: float = SUMMARY_S, clock=time.monotonic):
        self.summary_s = summary_s
        self.clock = clock
        self._state: str | None = None
        self._look_at = None  # the latest look already counted
        self._look_key: tuple | None = None
        self._looks = 0
        self._found: dict[str, int] = {}  # what the looks since the last summary found, counted
        self._counts = {"sent": 0, "ok": 0, "errors": 0}  # the replicas' counters at the last summary
        self._next_summary = clock() + summary_s

    def check(self, info: dict) -> None:
        report = info.get("fleet") or {}
        # a state, not its cause: a fleet whose every error differs (a request id in it) is one change
        state = f"{report.get('state')}{' after failures' if report.get('last_failed_at') else ''}"
        if report and state != self._state:
            if self._state is not None or report.get("state") not in ("idle", "up"):
                log.info("%s", _state_line(report))
            self._state = state
        look = report.get("look")
        if isinstance(look, dict) and look.get("at") != self._look_at:
            self._look_at = look.get("at")
            self._looks += 1
            found = f"{look.get('healthy', 0)} of {look.get('total', 0)} healthy"
            self._found[found] = self._found.get(found, 0) + 1
            key = _look_key(look)
            if key != self._look_key:
                log.info("%s", _look_line(look))
                self._look_key = key
        if self.clock() >= self._next_summary:
            self._summary(info)

    def _summary(self, info: dict) -> None:
        now = {k: sum(int(r.get(k) or 0) for r in info.get("replicas") or []) for k in self._counts}
        sent, ok, errors = (max(0, now[k] - self._counts[k]) for k in ("sent", "ok", "errors"))
        found = ", ".join(f"{n} x {what}" for what, n in sorted(self._found.items(), key=lambda kv: -kv[1])[:LISTED])
        log.info(
            "fleet, the last %.0f min: %d look(s) at /health (%s); %d request(s) sent, %d answered, %d failed",
            self.summary_s / 60,
            self._looks,
            found or "none",
            sent,
            ok,
            errors,
        )
        self._counts, self._looks, self._found = now, 0, {}
        self._next_summary = self.clock() + self.summary_s
