"""The login limiter: slow a password guesser down without locking out the person who knows the password.

Why not a lockout: a hard limit per address (say 20 failures, then ~10 min of refusals for everyone) locks out
every user behind one proxy or tunnel, admin included, and a per-account limit (5 failures, from anywhere) lets
anyone keep a named user out by failing on purpose now and then (issue 21, class 5). docs/RELIABILITY.md, S7, has the
design with its figures; in short:

- **Delays, not lockouts.** Each key counts the failed checks in its window. Past `free` failures, the next
  check must wait `first` x 2^(failures past free) seconds after the last failure, at most `cap` (60 s). A
  refused attempt (HTTP 429, "wait N s") costs no password hash and is not counted: hammering does not
  lengthen the wait, only a checked failure does.
- **Keys by trust.** An attempt from a browser that signed this account in before (its `cw_device` cookie,
  remembered per account in data.sessions) is counted only on that browser's own key: nobody else's failures
  slow it down. From an address the account signed in from before, only on the (account, address) key: a
  spray over other accounts from a shared proxy does not touch it. Anything else is counted per account and
  per address (a guesser spreading over addresses meets the account key; one spraying accounts, the address
  key).
- **Atomic.** An attempt takes its place (a provisional failure on each of its keys) before the password is
  checked, under one lock, so parallel attempts cannot all pass while the count is low; a right password
  gives the place back (and clears the failures of a trusted key: they were its owner's typos).
In memory, bounded; a restart forgets the counts (not the trust, which is in SQLite).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """`free` failures within `window` seconds, then a delay of `first` seconds doubling per failure, at most
    `cap` seconds, counted from the last failure."""

    free: int
    window: float
    first: float = 5.0
    cap: float = 60.0

    def delay(self, failures: int) -> float:
        if failures < self.free:
            return 0.0
        return min(self.cap, self.first * 2 ** min(failures - self.free, 30))


ACCOUNT = Backoff(free=5, window=900.0)  # an account, from browsers and addresses it never signed in from
ADDRESS = Backoff(free=20, window=600.0)  # an address, over accounts it never signed in to
PAIR = Backoff(free=5, window=900.0)  # an account at an address it signed in from before
DEVICE = Backoff(free=5, window=900.0)  # an account at a browser it signed in from before
MAX_KEYS = 100_000  # keys kept before the idle ones are dropped (a spray of names must not grow memory)


class LoginThrottle:
    """See the module docstring. Keys are tuples whose first item names the Backoff (`kinds`)."""

    def __init__(self, kinds: dict[str, Backoff] | None = None):
        self.kinds = kinds or {"account": ACCOUNT, "address": ADDRESS, "pair": PAIR, "device": DEVICE}
        self._failures: dict[tuple, collections.deque] = {}
        self._lock = threading.Lock()

    @staticmethod
    def keys(user: str, address: str, trust: set[str], device: str | None = None) -> list[tuple]:
        """The keys one attempt counts on, given what `trust` (data.sessions.trusted) says about it."""
        user = user.lower()
        if "device" in trust and device:
            return [("device", user, device)]
        if "address" in trust:
            return [("pair", user, address)]
        return [("account", user), ("address", address)]

    def _recent(self, key: tuple, t: float) -> collections.deque:
        q = self._failures.setdefault(key, collections.deque())
        window = self.kinds[key[0]].window
        while q and q[0] <= t - window:
            q.popleft()
        return q

    def _wait(self, key: tuple, t: float) -> float:
        q = self._recent(key, t)
        if not q:
            return 0.0
        return max(0.0, q[-1] + self.kinds[key[0]].delay(len(q)) - t)

    def wait(self, keys: list[tuple], *, now: float | None = None) -> float:
        """Seconds before an attempt on `keys` may be checked (0: now)."""
        t = now if now is not None else time.monotonic()
        with self._lock:
            return max((self._wait(k, t) for k in keys), default=0.0)

    def attempt(self, keys: list[tuple], *, now: float | None = None) -> float:
        """Take a place for one check, counted as a failure unless `succeeded` is called: 0.0. Or, nothing
        taken, the seconds to wait first."""
        t = now if now is not None else time.monotonic()
        with self._lock:
            wait = max((self._wait(k, t) for k in keys), default=0.0)
            if wait > 0:
                return wait
            for k in keys:
                self._recent(k, t).append(t)
            self._prune(t)
            return 0.0

    def succeeded(self, keys: list[tuple]) -> None:
        """The password was right: the attempt's place is given back; a trusted key's failures are cleared."""
        self._give_back(keys, clear_trusted=True)

    def not_checked(self, keys: list[tuple]) -> None:
        """The attempt was not checked after all (the server was busy): its place is given back."""
        self._give_back(keys, clear_trusted=False)

    def _give_back(self, keys: list[tuple], *, clear_trusted: bool) -> None:
        with self._lock:
            for k in keys:
                q = self._failures.get(k)
                if not q:
                    continue
                if clear_trusted and k[0] in ("device", "pair"):
                    q.clear()
                else:
                    q.pop()

    def _prune(self, t: float) -> None:
        if len(self._failures) > MAX_KEYS:
            for k in [k for k, q in self._failures.items() if not q or q[-1] <= t - self.kinds[k[0]].window]:
                del self._failures[k]
