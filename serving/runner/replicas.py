"""Where the runner's requests go: each replica's bound, what it has in flight, and its health.

Dispatch is least-loaded over the replicas that are not cooling down, avoiding those a clip already failed on.
A replica that answers with a retryable error (unreachable, 5xx, 503) cools down with a growing, jittered
backoff and then gets one probe request at a time until one succeeds (docs/RELIABILITY.md R6). While every
replica fails, the fleet is down: the runner does not count those attempts against the clips, for at most
`fleet_down_budget` seconds since the last answer.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Iterable

from serving.errors import FleetError

COOL_MIN_S = 0.2  # shortest cool-down of a replica after a retryable error
COOL_MAX_S = 15.0
FLEET_DOWN_BUDGET_S = 600.0  # while every replica fails, retries are free for this long (then they count)


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

    def capacity(self, t: float) -> int:
        if t < self.cool_until:
            return 0
        # after failures, one probe request at a time until one succeeds
        return (1 if self.fails else self.limit) - self.inflight

    def start(self, t: float) -> None:
        if self.inflight == 0:
            self.busy_since = t
        self.inflight += 1
        self.sent += 1

    def finish(self, t: float) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self.busy_since is not None:
            self.busy_s += t - self.busy_since
            self.busy_since = None

    def info(self, t: float) -> dict:
        return {
            "url": self.url,
            "limit": self.limit,
            "inflight": self.inflight,
            "sent": self.sent,
            "ok": self.ok,
            "errors": self.errors,
            "cooling": t < self.cool_until,
            "fails": self.fails,
        }


class ReplicaHealth:
    """The replicas of one runner and what their answers say about them (all on the runner's event loop)."""

    def __init__(
        self,
        urls: Iterable[str],
        per_replica: int,
        *,
        behind_router: int = 1,
        backoff_base: float = 0.5,
        fleet_down_budget: float = FLEET_DOWN_BUDGET_S,
        rng: random.Random | None = None,
    ):
        urls = list(urls)
        per = max(1, per_replica)
        # a single URL is a router (or one replica): it gets the bound of the replicas behind it
        self.replicas = (
            [Replica(urls[0], per * max(1, behind_router))] if len(urls) == 1 else [Replica(u, per) for u in urls]
        )
        self.per_replica = per
        self.backoff_base = backoff_base
        self.fleet_down_budget = fleet_down_budget
        self.rng = rng or random.Random()
        self.last_ok = time.monotonic()  # the last answer from any replica (fleet-down budget)

    def behind_router(self, n: int) -> None:
        """The single URL turned out to be a router with `n` workers: bound it as `n` replicas."""
        if len(self.replicas) == 1:
            self.replicas[0].limit = self.per_replica * max(1, n)

    @property
    def capacity(self) -> int:
        return sum(r.limit for r in self.replicas)

    @property
    def inflight(self) -> int:
        return sum(r.inflight for r in self.replicas)

    def pick(self, avoid: set[str] | None, t: float) -> Replica | None:
        """The least-loaded replica with a free slot, preferring those not in `avoid`."""
        best, best_key = None, None
        for r in self.replicas:
            if r.capacity(t) <= 0:
                continue
            key = (r.url in (avoid or ()), r.inflight / r.limit, self.rng.random())
            if best_key is None or key < best_key:
                best, best_key = r, key
        return best

    def free_slots(self, t: float) -> int:
        return sum(max(0, r.capacity(t)) for r in self.replicas)

    def finished(self, rep: Replica, error: FleetError | None, t: float) -> None:
        """A request to `rep` ended at `t`, answered or with `error`."""
        rep.finish(t)
        if error is None:
            rep.ok += 1
            rep.fails = 0
            self.last_ok = t
            return
        rep.errors += 1
        if error.retryable:
            rep.fails += 1
            cool = min(COOL_MAX_S, max(COOL_MIN_S, self.backoff_base * 2 ** min(rep.fails - 1, 8)))
            rep.cool_until = max(rep.cool_until, t + cool * (0.5 + self.rng.random() / 2))

    def fleet_down(self, t: float | None = None) -> bool:
        """Every replica is failing, for less than `fleet_down_budget` seconds since the last answer."""
        t = time.monotonic() if t is None else t
        return all(r.fails > 0 for r in self.replicas) and t - self.last_ok < self.fleet_down_budget

    def cooling_ends(self, t: float) -> list[float]:
        """Seconds until each replica cooling down at `t` may be tried again."""
        return [r.cool_until - t for r in self.replicas if r.cool_until > t]

    def info(self, t: float) -> list[dict]:
        return [r.info(t) for r in self.replicas]
