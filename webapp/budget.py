"""One write budget per person: every write a user can make the server do costs one, and past the budget the next
one is refused with the wait (issue 27; docs/RELIABILITY.md, "Issue 27").

Why one budget and not a limit per action: each write path had its own rule or none (saves per clip and per
minute, re-captions per hour, nothing for drafts and lease pings), and a script simply took the path without one
(1,134 drafts of 20 KB in 10 s). So the budget sits where every write comes in (webapp.guard): a join of a
Gradio event that writes, `PUT /drafts/...`, `POST /leases/...`. A refused write costs no queue slot, no
thread and no SQLite transaction: the middleware answers 429 with `Retry-After` and a sentence.

- **A token bucket per person**: `burst` writes at once (a page pushing the drafts it kept while signed out,
  a quick run of `n`), refilled at `per_minute`. A person working fast makes 20-40 writes a minute (an open,
  a few drafts, a decision per clip); the defaults (data.settings: `write_budget`, `write_burst`) leave 3x
  room.
- **Which events write**: every Gradio event whose api_name is not a read (READS) costs one: an event added
  later is budgeted unless someone declares it a read, and tests/webapp/test_write_budget.py checks that each read
  really writes nothing.
- What a person can make the server *keep* is bounded where it is stored: drafts (data.drafts, the oldest
  dropped past `drafts_per_person`), sessions (data.sessions, `sessions_per_person`), caption versions
  (data.limits.SaveRate).
In memory, one bucket per signed-in person (bounded by the accounts); a restart refills them.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass

# Gradio events that write nothing (filters, pages, tab switches, timers, the history's pages, reports): they
# cost no write. Anything else (opening a clip takes its review lease; saves, decisions, drafts, flags,
# re-captions, samples, assignments, jobs, prompt versions) costs one.
READS = re.compile(
    r"apply(_\d+)?|browse_(search|assignee|next|prev|refresh)|history_(older|newest)"
    r"|jobs_(refresh|show|list)|refresh|job_(preview|preview_tick|select)|job_(pause|resume|cancel|retry)_refresh"
    r"|team_stats|start_(busy|ready)|quality_(show|refresh|compare|estimate)|fleet_(refresh|show)"
    r"|timers_\w+|prompt_load|second_show"
)


def writes(api_name: str | None) -> bool:
    """Does the Gradio event named `api_name` write (cost one from the budget)? Unnamed events do."""
    return not (api_name and READS.fullmatch(api_name))


@dataclass(frozen=True)
class Budget:
    """`burst` writes at once, refilled at `per_minute` writes a minute."""

    per_minute: float
    burst: int

    def __post_init__(self) -> None:
        if self.per_minute <= 0 or self.burst < 1:
            raise ValueError("a write budget needs a positive rate and a burst of at least 1")


class WriteBudget:
    """The buckets of one app (see the module docstring). `take(person)` is 0.0 when the write may go on (it
    is counted), or the seconds until it may."""

    def __init__(self, budget: Budget, *, clock=time.monotonic):
        self.budget = budget
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # person -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, person: str, cost: float = 1.0) -> float:
        rate = self.budget.per_minute / 60.0
        with self._lock:
            t = self._clock()
            tokens, at = self._buckets.get(person, (float(self.budget.burst), t))
            tokens = min(float(self.budget.burst), tokens + (t - at) * rate)
            if tokens >= cost:
                self._buckets[person] = (tokens - cost, t)
                return 0.0
            self._buckets[person] = (tokens, t)
            return (cost - tokens) / rate

    def message(self, wait: float) -> str:
        """What the person reads when a write is refused: why, how long, and that nothing they typed is lost."""
        return (
            f"Too many changes in a short time: wait {max(1, math.ceil(wait))} s, then do it again (what you typed "
            f"is still on the page). Each person may make {self.budget.per_minute:g} changes a minute "
            f"({self.budget.burst} at once), so that no script can flood the workbench."
        )
