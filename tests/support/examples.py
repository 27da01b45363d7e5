"""How many examples a property test draws (hypothesis), in the two runs of the suite (docs/TESTING.md).

- The full run (`tests/run.sh`, which .ci/run makes under the first Python): every property test draws its full
  number, the one its comment justifies (the mutants it was seen to catch, the seeds tried).
- The quick run (`tests/run.sh --quick`, CW_TEST_QUICK=1, which .ci/run makes under every other Python): a quarter of
  it, never fewer than FLOOR (nor more than the full number). The same properties, on the same code paths: what a
  second Python can break (an import, a changed library default) breaks them on the first examples; what takes
  hundreds of examples to find is found by the full run.

    @hsettings(max_examples=examples(300), deadline=None)

The same two runs for a test that loops over many inputs (every event of the page, every write path, the roles
matrix): `quick_share(items)` is every item in the full run, and in the quick run every SHARE-th of them from a stable
offset (never none). A test that crosses two lists keeps the one it must cover whole and rotates the other, so that
each kind is still met at least once: every event with one of the wrong inputs in turn, every endpoint as one of
the roles in turn,

    for i, event in enumerate(events):
        for variant in quick_share(VARIANTS, share=len(VARIANTS), offset=i): ...

Deterministic: the same items on every quick run (a failure there reruns as it was), and the full run sees them all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

QUICK = os.environ.get("CW_TEST_QUICK") == "1"
SHARE = 4  # the quick run draws 1/SHARE of the full number
FLOOR = 10


def examples(full: int) -> int:
    """The number of examples to draw: `full` in the full run, its quick share in the quick one."""
    if not QUICK:
        return full
    return min(full, max(FLOOR, full // SHARE))


def quick_share(items: Sequence[T], share: int = SHARE, offset: int = 0) -> list[T]:
    """Every item in the full run; in the quick one every `share`-th, the first at `offset` (taken modulo the
    number it can be, so that a short list still gives one item and never none)."""
    items = list(items)
    if not QUICK or share <= 1 or not items:
        return items
    start = offset % min(share, len(items))
    return items[start::share]
