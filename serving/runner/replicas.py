"""Where the runner's requests go: each replica's bound, what it has in flight, and its health; and the rule
for a fleet that fails every request.

Dispatch is least-loaded over the replicas that are not cooling down, avoiding those a clip already failed on.
A replica that had nothing in flight for FILL_AFTER_IDLE_S fills its window over `fill_seconds` (the
WINDOW_FILL_SECONDS setting), one slot every `fill_seconds / limit`, instead of taking the whole window at once: a
window sent together to an idle vLLM engine is prefilled together and then decoded together, and with captions of
one length it stays in that lockstep; spread out, new requests' prefill runs in the same engine steps as the
others' decoding. On one H200 with dummy weights that ran 1.06x steady on a warm replica, and nothing on a freshly
launched one, whose first requests finished together anyway: the default is 0 (docs/GPU.md, 2026-12-04, second
session).
A replica that answers with a retryable error (unreachable, 5xx, 503) cools down with a growing, jittered
backoff and then gets one probe request at a time until one succeeds (docs/RELIABILITY.md R6).

The fleet is **down** when nothing can succeed, and that is the fleet's fault, not one clip's: the runner's
recent look at the replicas' `/health` (`observe`) found none healthy and no replica's latest request was
answered; or, with no recent look, every replica's latest request failed with a retryable error and those
failures span at least two clips. While it is down the runner backs off as a whole: one request at a time for
the whole fleet, each after a growing, jittered pause (from the backoff base up to FLEET_PROBE_MAX_S), and the
attempt is not counted against the clip (the runner's store refunds it), for as long as the outage lasts. The
first answer ends it. Nothing is silent: `report()` goes out with every heartbeat, and the Jobs tab shows the
cause while it lasts. Every replica failing while `/health` says some are up (or on one clip alone) is not an
outage: those attempts count, so a clip the fleet cannot caption fails after its attempts instead of being
retried for ever.

A fleet that **fails every request** while `/health` finds it up (an engine that answers 500 to everything, a
model the replicas cannot load) is not waited out: its clips use their attempts, so they must use them quickly,
and fail with the fleet's own error. While every replica fails, a replica cools down at most FAILING_COOL_MAX_S
(not the COOL_MAX_S meant for one bad replica among good ones: one request every 5-9 s took 7 minutes to end a
12-clip job), and a router URL probes with one request per replica behind it. The first answer ends it.
vllm-router's circuit breaker answers such a fleet with "503 No available workers" once it has counted enough
failures; that answer is named by the replicas' failure that opened the breaker (`explain`), not as an
overloaded fleet.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any, Iterable

from serving.errors import FleetError

COOL_MIN_S = 0.2  # shortest cool-down of a replica after a retryable error
COOL_MAX_S = 15.0
FAILING_COOL_MAX_S = 2.0  # a replica's longest cool-down while every replica fails (the module docstring)
# "failing every request" is a report of now while the newest failure is this recent (or a request is on its way);
# an idle runner whose last requests failed says when they did instead (a fleet fixed meanwhile is not "failing")
FAILING_FRESH_S = 20.0
# while every replica fails, a clip's next attempt waits at least this long, so that its attempts span more than the
# 10 s a router's circuit breaker stays open (serving.launch.commands.ROUTER_BREAKER_OPEN_S): a fleet fixed while a
# job runs is refused by the router for up to that long, and no clip uses all its attempts inside that window
FAILING_RETRY_S = 4.0
FLEET_PROBE_MAX_S = 30.0  # longest pause between two requests while the whole fleet is down
LOOK_FRESH_S = 30.0  # a look at the replicas' /health older than this no longer decides whether the fleet is down
FILL_AFTER_IDLE_S = 1.0  # a replica idle this long fills its window again over fill_seconds (not after a moment's gap)
OUTAGE_CLIPS = 2  # without a fresh look: failures on this many clips since the last answer make an outage
REPORT_MAX = 32  # replicas listed in a report (the heartbeat stays small; the rest are counted)
ERROR_CHARS = 300


def _error(error: FleetError, at: float) -> dict:
    return {
        "status": error.status,
        "kind": error.kind,
        "message": (str(error) or type(error).__name__)[:ERROR_CHARS],
        "at": at,
    }


@dataclasses.dataclass
class Replica:
    """One place requests go, with its own bound and health."""

    url: str
    limit: int
    inflight: int = 0
    fails: int = 0  # consecutive retryable failures
    cool_until: float = 0.0
    sent: int = 0
    ok: int = 0
    errors: int = 0
    busy_since: float | None = None
    busy_s: float = 0.0  # time with at least one request in flight
    last_sent: float = 0.0
    last_error: dict | None = None  # status, kind, message, at (Unix time) of the latest failure
    failing_since: float | None = None  # Unix time of the first of the current run of retryable failures
    fill_s: float = 0.0  # seconds over which the window fills after the replica was idle (0: all at once)
    fill_from: float | None = None  # when the current fill began (monotonic)
    idle_since: float | None = None  # when the last request in flight ended (monotonic)
    probes: int = 1  # requests at once after failures, until one succeeds (a router: one per replica behind it)
    cause: FleetError | None = None  # its latest failure of its own since its last answer (ReplicaHealth.explain)

    def allowed(self, t: float) -> int:
        """Requests the replica may have in flight at `t`: its limit, or while its window fills, one more every
        fill_s / limit seconds since the fill began."""
        if self.fill_s <= 0 or self.fill_from is None or t - self.fill_from >= self.fill_s:
            return self.limit
        return min(self.limit, 1 + int(self.limit * (t - self.fill_from) / self.fill_s))

    def next_fill(self, t: float) -> float | None:
        """Seconds until the filling window allows one more request (None: not filling)."""
        now = self.allowed(t)
        if now >= self.limit or self.fill_from is None:
            return None
        return max(0.0, self.fill_from + now * self.fill_s / self.limit - t)

    def capacity(self, t: float) -> int:
        if t < self.cool_until:
            return 0
        # after failures, one probe request at a time (one per replica behind a router) until one succeeds
        return (min(self.probes, self.allowed(t)) if self.fails else self.allowed(t)) - self.inflight

    def start(self, t: float) -> None:
        if self.inflight == 0:
            self.busy_since = t
            if self.fill_s > 0 and (self.idle_since is None or t - self.idle_since >= FILL_AFTER_IDLE_S):
                self.fill_from = t
        self.inflight += 1
        self.sent += 1
        self.last_sent = t

    def finish(self, t: float) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.idle_since = t
            if self.busy_since is not None:
                self.busy_s += t - self.busy_since
                self.busy_since = None

    def info(self, t: float) -> dict:
        return {
            "url": self.url,
            "limit": self.limit,
            "allowed": self.allowed(t),  # below limit while the window fills
            "inflight": self.inflight,
            "sent": self.sent,
            "ok": self.ok,
            "errors": self.errors,
            "cooling": t < self.cool_until,
            "fails": self.fails,
            "failing_since": self.failing_since,
            "last_error": self.last_error,
        }


class ReplicaHealth:
    """The replicas of one runner and what their answers say about them (all on the runner's event loop).
    Times passed in are `time.monotonic()`; times reported are Unix seconds (the app compares them with its
    own clock)."""

    def __init__(
        self,
        urls: Iterable[str],
        per_replica: int,
        *,
        behind_router: int = 1,
        backoff_base: float = 0.5,
        fill_seconds: float = 0.0,
        rng: random.Random | None = None,
    ):
        urls = list(urls)
        per = max(1, per_replica)
        fill = max(0.0, fill_seconds)
        # a single URL is a router (or one replica): it gets the bound of the replicas behind it, filled as fast
        self.replicas = (
            [Replica(urls[0], per * max(1, behind_router), fill_s=fill, probes=max(1, behind_router))]
            if len(urls) == 1
            else [Replica(u, per, fill_s=fill) for u in urls]
        )
        self.per_replica = per
        # replicas behind a single URL that is a router (None: one replica, or several URLs)
        self.behind = behind_router if len(self.replicas) == 1 and behind_router > 1 else None
        self.backoff_base = backoff_base
        self.rng = rng or random.Random()
        self.last_ok: float | None = None  # the last answer from any replica (monotonic)
        self.last_ok_at: float | None = None  # the same, Unix time
        self.recovered_at: float | None = None  # Unix time of the first answer after every replica failed
        self.outage_clips: set = set()  # clips that failed retryably since the last answer (at most a few)
        self.look: dict | None = None  # the latest look at the replicas' /health (`observe`)
        self.look_t: float | None = None
        self.down_since: float | None = None  # monotonic, while the fleet is down
        self.down_since_at: float | None = None
        self.probes = 0  # requests that failed while the fleet was down, since it went down
        self.next_probe = 0.0

    def behind_router(self, n: int) -> None:
        """The single URL turned out to be a router with `n` workers: bound it as `n` replicas."""
        if len(self.replicas) == 1:
            self.replicas[0].limit = self.per_replica * max(1, n)
            self.replicas[0].probes = max(1, n)
            self.behind = n if n > 1 else None

    @property
    def capacity(self) -> int:
        return sum(r.limit for r in self.replicas)

    @property
    def inflight(self) -> int:
        return sum(r.inflight for r in self.replicas)

    # ---- dispatch ------------------------------------------------------------------------------------------
    def pick(self, avoid: set[str] | None, t: float) -> Replica | None:
        """The least-loaded replica with a free slot, preferring those not in `avoid`; while the fleet is down,
        the one tried longest ago, once the next probe is due."""
        if self.fleet_down():
            if self.inflight or t < self.next_probe:
                return None
            return min(self.replicas, key=lambda r: (r.last_sent, self.rng.random()))
        best, best_key = None, None
        for r in self.replicas:
            if r.capacity(t) <= 0:
                continue
            key = (r.url in (avoid or ()), r.inflight / r.limit, self.rng.random())
            if best_key is None or key < best_key:
                best, best_key = r, key
        return best

    def free_slots(self, t: float) -> int:
        if self.fleet_down():
            return 1 if not self.inflight and t >= self.next_probe else 0
        return sum(max(0, r.capacity(t)) for r in self.replicas)

    def slot_waits(self, t: float) -> list[float]:
        """Seconds until each replica without a slot it will have may be sent to again: its cool-down ends, its
        filling window allows one more (or, while the fleet is down, the next probe is due)."""
        if self.fleet_down():
            return [max(0.0, self.next_probe - t)]
        waits = [r.cool_until - t for r in self.replicas if r.cool_until > t]
        return waits + [w for r in self.replicas if r.cool_until <= t and (w := r.next_fill(t)) is not None]

    # ---- what answers say -------------------------------------------------------------------------------
    def explain(self, rep: Replica, error: FleetError) -> FleetError:
        """`error` as it is recorded: a router's circuit-breaker answer ("503 No available workers", kind
        `no_workers`) is named by the failure that opened the breaker when `rep` (the router's URL) had one since
        its last answer: that failure's class, status and kind, its message followed by the router's. Any other
        error is itself."""
        cause = rep.cause
        if error.kind != "no_workers" or cause is None:
            return error
        then = f" · then the router's circuit breaker answered {error.message}"
        named = type(cause)(
            cause.message[:ERROR_CHARS] + then[:ERROR_CHARS],
            status=cause.status,
            replica=error.replica,
            kind=cause.kind,
        )
        named.breaker = True  # not a failure of its own: the cause stays the one that opened the breaker
        return named

    def finished(
        self, rep: Replica, error: FleetError | None, t: float, clip: Any = None, sent: float | None = None
    ) -> None:
        """A request to `rep` for `clip`, sent at `sent`, ended at `t` (monotonic), answered or with `error`."""
        rep.finish(t)
        if error is None:
            if self.fleet_down() or self.all_failing():
                self.recovered_at = time.time()  # the fleet's pace starts again here (the Jobs tab's clips/s)
            rep.ok += 1
            rep.fails = 0
            rep.failing_since = None
            rep.cause = None
            self.last_ok, self.last_ok_at = t, time.time()
            self.outage_clips.clear()
            self._judge(t)
            return
        rep.errors += 1
        rep.last_error = _error(error, time.time())
        if error.retryable:
            rep.fails += 1
            if error.kind != "no_workers" and not getattr(error, "breaker", False):
                rep.cause = error
            if rep.failing_since is None:
                rep.failing_since = rep.last_error["at"]
            # one bad replica among good ones waits long; a fleet that fails everywhere is tried at a pace that
            # fails its clips in minutes (the module docstring)
            longest = FAILING_COOL_MAX_S if self.all_failing() else COOL_MAX_S
            cool = min(longest, max(COOL_MIN_S, self.backoff_base * 2 ** min(rep.fails - 1, 8)))
            rep.cool_until = max(rep.cool_until, t + cool * (0.5 + self.rng.random() / 2))
            if len(self.outage_clips) < OUTAGE_CLIPS:
                self.outage_clips.add(clip)
            if self.down_since is not None and (sent is None or sent >= self.down_since):
                # a request sent while down failed (not one already on its way when it went down): wait longer
                self.probes += 1
                self.next_probe = t + self._probe_pause()
        self._judge(t)

    def observe(self, look: dict, t: float) -> None:
        """The result of a look at the replicas' `/health` (serving.runner.watch.look) taken at `t`."""
        self.look, self.look_t = look, t
        self._judge(t)

    def all_failing(self) -> bool:
        """Every replica's latest request failed with a retryable error."""
        return all(r.fails > 0 for r in self.replicas)

    def last_failed_at(self) -> float | None:
        """Unix time of the newest failure of any replica (None: none failed)."""
        times = [r.last_error["at"] for r in self.replicas if r.last_error]
        return max(times) if times else None

    def failing_now(self) -> bool:
        """Every replica fails, and that is news: a request is on its way, or the newest failure is at most
        FAILING_FRESH_S old (an idle runner's last failures say nothing of a fleet fixed since)."""
        if not self.all_failing():
            return False
        newest = self.last_failed_at()
        return bool(self.inflight) or (newest is not None and time.time() - newest <= FAILING_FRESH_S)

    def _looked_down(self, t: float) -> bool | None:
        """What a fresh look says: True when no replica was healthy, None without a fresh look."""
        if self.look is None or self.look_t is None or t - self.look_t > LOOK_FRESH_S:
            return None
        return self.look.get("healthy") == 0

    def _judge(self, t: float) -> None:
        looked = self._looked_down(t)
        if looked is None:
            down = self.all_failing() and len(self.outage_clips) >= OUTAGE_CLIPS
        else:  # replicas not tried yet count as /health says: a one-clip job must not spend its attempts finding out
            down = looked and not any(r.fails == 0 and r.ok > 0 for r in self.replicas)
        if down and self.down_since is None:
            self.down_since, self.down_since_at = t, time.time()
            self.probes = 0
            self.next_probe = t + self._probe_pause()
        elif not down and self.down_since is not None:
            self.down_since = self.down_since_at = None
            self.probes = 0

    def _probe_pause(self) -> float:
        pause = min(FLEET_PROBE_MAX_S, self.backoff_base * 2 ** min(self.probes, 16))
        return pause * (0.5 + self.rng.random() / 2)

    def fleet_down(self, t: float | None = None) -> bool:
        """The whole fleet is down (the module docstring): requests go one at a time, attempts are not counted."""
        return self.down_since is not None

    # ---- what the runner reports ----------------------------------------------------------------------------
    def info(self, t: float) -> list[dict]:
        return [r.info(t) for r in self.replicas[:REPORT_MAX]]

    def report(self, t: float) -> dict:
        """The fleet as this runner sees it, for its heartbeat (the Jobs tab reads it, never the fleet):
        `state` up | failing (every replica's latest request failed, lately: `failing_now`; attempts counted) |
        down (backing off as a whole, attempts not counted) | idle (nothing sent yet, or nothing lately after
        failures: `last_failed_at` says when); when the current run of failures began (`failing_since`) and the
        outage (`down_since`), the next request while down (`next_try_in`), the first answer after every replica
        failed (`recovered_at`), each replica's latest failure, the replicas behind a single router URL (`behind`,
        None otherwise), and the latest `/health` look (`look`: healthy of total, per replica)."""
        sent = any(r.sent for r in self.replicas)
        failing = self.failing_now()
        state = (
            "down"
            if self.fleet_down()
            else "failing"
            if failing
            else "idle"
            if not sent or self.all_failing()
            else "up"
        )
        starts = [r.failing_since for r in self.replicas if r.failing_since is not None]
        look = None
        if self.look is not None and self.look_t is not None:
            look = {**self.look, "age_s": round(t - self.look_t, 1)}
        return {
            "state": state,
            "failing_since": min(starts) if starts else None,
            "down_since": self.down_since_at,
            "last_ok_at": self.last_ok_at,
            "recovered_at": self.recovered_at,
            "last_failed_at": self.last_failed_at() if self.all_failing() else None,
            "next_try_in": round(max(0.0, self.next_probe - t), 1) if self.fleet_down() else None,
            "probes": self.probes,
            "attempts_counted": not self.fleet_down(),
            "replicas": [
                {
                    "url": r.url,
                    "ok": r.fails == 0 and r.ok > 0,
                    "fails": r.fails,
                    "failing_since": r.failing_since,
                    "last_error": r.last_error if r.fails else None,
                }
                for r in self.replicas[:REPORT_MAX]
            ],
            "total": len(self.replicas),
            "behind": self.behind,
            "look": look,
        }
