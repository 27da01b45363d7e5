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
- **The owner's turn comes** (issue 27). Before, someone failing on an account every 5 s from rotating addresses
  kept its owner out of every new browser on a new address: whoever asked first when the account's wait ended
  took the check, and each failure renewed the wait. Now the account key remembers the networks (an IPv4 /24,
  an IPv6 /64) its failures came from. An attempt from a network with no failure on the account ("clean") waits
  at most CLEAN_CAP after the account's last failure, while one from a network that failed waits the full
  delay (up to 60 s): when the clean slot opens, only clean attempts can take it. And a clean attempt is held
  (the login request waits in the server, HOLD_S at most) in a line per account, first come first served, so
  a script asking more often cannot take the turn of the person who came before it. Attempts from networks
  that failed get their 429 at once and never take a turn while someone clean waits. The cost to a guesser:
  one check per CLEAN_CAP per account from networks it never failed from, one a minute from the others.
- **Known networks first** (issue 46). An attacker with a fresh network per attempt (200 /24s, or an IPv6 /64
  each, which cost nothing) is "clean" every time: its attempts filled the account's line and the owner's
  browser, new and on a new address, got 429 after a 25 s hold on every try. Now an attempt from a network the
  account signed in from before (remembered in data.sessions like browsers and addresses) is counted only on
  its own (account, network) key and the address's: nobody's failures from elsewhere hold it back. And in the
  line, an attempt from a network that any account signed in from ("known") takes the turn before every attempt
  from a network none did, and has its own places (MAX_LINE each): networks never seen signing in wait behind
  known ones. An owner on a network nobody ever used gets a one-time sign-in link from an admin
  (`python -m webapp.accounts sign-in-link NAME`): the browser that opens it counts as one the account signed in
  from.
In memory, bounded; a restart forgets the counts (not the trust, which is in SQLite).
"""

from __future__ import annotations

import collections
import ipaddress
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
PAIR = Backoff(free=5, window=900.0)  # an account at an address (or a network) it signed in from before
DEVICE = Backoff(free=5, window=900.0)  # an account at a browser it signed in from before
NETWORK = Backoff(free=2**62, window=ACCOUNT.window)  # failures of an account from one network: never a wait itself
MAX_KEYS = 100_000  # keys kept before the idle ones are dropped (a spray of names must not grow memory)
CLEAN_CAP = 20.0  # the longest an attempt from a network with no failure on the account waits after the last one
HOLD_S = 25.0  # the longest a clean attempt is held in the account's line (CLEAN_CAP + room for the check)
LIVE_S = 2.0  # a place in line whose request has not asked again this long is given up (the browser left)
MAX_LINE = 16  # attempts held per account; more are answered 429 at once
MAX_HELD = 512  # attempts held over all accounts


def network(address: str) -> str:
    """The network an address belongs to, as one party holds it: an IPv4 /24, an IPv6 /64 (anything else: itself)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ipaddress.ip_network(f"{ip}/{24 if ip.version == 4 else 64}", strict=False))


class LoginThrottle:
    """See the module docstring. Keys are tuples whose first item names the Backoff (`kinds`)."""

    def __init__(self, kinds: dict[str, Backoff] | None = None):
        self.kinds = kinds or {
            "account": ACCOUNT,
            "address": ADDRESS,
            "pair": PAIR,
            "netpair": PAIR,
            "device": DEVICE,
            "net": NETWORK,
        }
        self._failures: dict[tuple, collections.deque] = {}
        self._lines: dict[str, collections.OrderedDict] = {}  # account -> {ticket: last asked}, first come first
        self._lock = threading.Lock()

    @staticmethod
    def keys(user: str, address: str, trust: set[str], device: str | None = None) -> list[tuple]:
        """The keys one attempt counts on, given what `trust` (data.sessions.trusted) says about it."""
        user = user.lower()
        if "device" in trust and device:
            return [("device", user, device)]
        if "address" in trust:
            return [("pair", user, address)]
        if "network" in trust:
            return [("netpair", user, network(address)), ("address", address)]
        return [("account", user), ("address", address), ("net", user, network(address))]

    def _recent(self, key: tuple, t: float) -> collections.deque:
        q = self._failures.setdefault(key, collections.deque())
        window = self.kinds[key[0]].window
        while q and q[0] <= t - window:
            q.popleft()
        return q

    def _wait(self, key: tuple, t: float, cap: float | None = None) -> float:
        q = self._recent(key, t)
        if not q:
            return 0.0
        delay = self.kinds[key[0]].delay(len(q))
        return max(0.0, q[-1] + (delay if cap is None else min(delay, cap)) - t)

    def _waits(self, keys: list[tuple], t: float) -> tuple[float, tuple | None, bool]:
        """(the wait, the attempt's network key or None when trusted, whether that network is clean)."""
        net = next((k for k in keys if k[0] == "net"), None)
        clean = net is not None and not self._recent(net, t)
        caps = {"account": CLEAN_CAP} if clean else {}
        return max((self._wait(k, t, caps.get(k[0])) for k in keys), default=0.0), net, clean

    def _line(self, account: str, t: float) -> collections.OrderedDict:
        """The account's line of held attempts, those whose request stopped asking dropped."""
        line = self._lines.setdefault(account, collections.OrderedDict())
        for ticket in [k for k, (seen, _) in line.items() if seen <= t - LIVE_S]:
            del line[ticket]
        return line

    @staticmethod
    def _first(line: collections.OrderedDict) -> str | None:
        """Whose turn it is: the first attempt from a known network, else the first of all."""
        return next((k for k, (_, known) in line.items() if known), next(iter(line), None))

    def _held(self, t: float) -> int:
        """Attempts held over all accounts (lines whose requests all stopped asking are dropped)."""
        for account in list(self._lines):
            if not self._line(account, t):
                del self._lines[account]
        return sum(len(line) for line in self._lines.values())

    def wait(self, keys: list[tuple], *, now: float | None = None) -> float:
        """Seconds before an attempt on `keys` may be checked (0: now)."""
        t = now if now is not None else time.monotonic()
        with self._lock:
            return self._waits(keys, t)[0]

    def attempt(
        self, keys: list[tuple], *, now: float | None = None, ticket: str | None = None, known: bool = False
    ) -> float:
        """Take a place for one check, counted as a failure unless `succeeded` is called: 0.0. Or, nothing
        taken, the seconds to wait first. A clean attempt (see the module docstring) with a `ticket` that must
        wait takes a place in its account's line, if there is room (`in_line`); while it asks again, the slot
        that opens is its own, before anyone who came after it and before any attempt from a network that
        failed on the account. `known`: its network is one some account signed in from; it goes before every
        attempt from a network that none did."""
        t = now if now is not None else time.monotonic()
        with self._lock:
            wait, net, clean = self._waits(keys, t)
            if net is not None:
                held = self._held(t)
                line = self._line(net[1], t)
                first = self._first(line)
                if wait <= 0 and first not in (None, ticket):
                    wait = LIVE_S  # the slot belongs to the attempt whose turn it is; it takes it at its next ask
                if wait > 0:
                    same = sum(1 for _, k in line.values() if k == known)
                    room = same < MAX_LINE and held < MAX_HELD  # known and never-seen networks: MAX_LINE each
                    # the line is for the account's slot: an attempt that another key holds back (its address,
                    # spraying many accounts) is not held to wait that out, it gets its 429 at once
                    own = all(self._wait(k, t) <= 0 for k in keys if k[0] != "account")
                    if clean and own and ticket is not None and (ticket in line or room):
                        line[ticket] = (t, known)
                    elif not line:
                        del self._lines[net[1]]
                    return wait
                line.pop(ticket, None)
                if not line:
                    del self._lines[net[1]]
            elif wait > 0:
                return wait
            for k in keys:
                self._recent(k, t).append(t)
            self._prune(t)
            return 0.0

    def in_line(self, keys: list[tuple], ticket: str) -> bool:
        """Is the attempt `ticket` held in its account's line (it may wait for its turn)?"""
        net = next((k for k in keys if k[0] == "net"), None)
        with self._lock:
            return net is not None and ticket in self._lines.get(net[1], {})

    def leave(self, keys: list[tuple], ticket: str) -> None:
        """The attempt `ticket` stops waiting (answered 429, or its browser left): its place in line is free."""
        net = next((k for k in keys if k[0] == "net"), None)
        with self._lock:
            line = self._lines.get(net[1]) if net is not None else None
            if line is not None:
                line.pop(ticket, None)
                if not line:
                    del self._lines[net[1]]

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
