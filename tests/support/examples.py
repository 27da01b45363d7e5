"""How many examples a property test draws (hypothesis), in the two runs of the suite (docs/TESTING.md).

- The full run (`tests/run.sh`, which .ci/run makes under the first Python): every property test draws its full
  number, the one its comment justifies (the mutants it was seen to catch, the seeds tried).
- The quick run (`tests/run.sh --quick`, CW_TEST_QUICK=1, which .ci/run makes under every other Python): a quarter of
  it, never fewer than FLOOR (nor more than the full number). The same properties, on the same code paths: what a
  second Python can break (an import, a changed library default) breaks them on the first examples; what takes
  hundreds of examples to find is found by the full run.

    @hsettings(max_examples=examples(300), deadline=None)

A table of cases (an endpoint x role matrix) is drawn the same way with `cases(items, key)`: the full run takes
every case; the quick run one case of each group (`key`: the endpoint), a different member of each group in turn
(the role rotates from one endpoint to the next), so every group is still called and every member is used.
"""

from __future__ import annotations

import os
from typing import Callable, Hashable, Sequence, TypeVar

T = TypeVar("T")

QUICK = os.environ.get("CW_TEST_QUICK") == "1"
SHARE = 4  # the quick run draws 1/SHARE of the full number
FLOOR = 10


def examples(full: int) -> int:
    """The number of examples to draw: `full` in the full run, its quick share in the quick one."""
    if not QUICK:
        return full
    return min(full, max(FLOOR, full // SHARE))


def cases(items: Sequence[T], key: Callable[[T], Hashable]) -> list[T]:
    """Every item in the full run; in the quick one, one item per group of equal `key`, the group's n-th member
    for the n-th group (modulo its size): each group once, each position of a group in turn."""
    if not QUICK:
        return list(items)
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return [members[n % len(members)] for n, members in enumerate(groups.values())]
