"""Which clips a job covers, in one shape whoever started it (the Jobs tab, `python -m serving.caption`, a
re-caption from Review, code).

A `Selection` is either the clips a `Filter` matches (at most `limit` of them, in id order) or a list of clip
ids, plus `origin`: what asked for it, in words ("current filter", "everything uncaptioned", "command line",
"re-caption"). A job row stores `to_dict()`, always these four keys:

    {"origin": str, "filter": Filter.to_dict(), "limit": int | None, "clip_ids": [int, ...] | None}

A filter that says nothing of ingest failures (`failed` unset) selects only clips whose ingest passed: the fleet
cannot caption a clip ingest could not read, so its item could only fail (`sent_filter`; `--ingest-failed yes`
asks for them). The Jobs tab's preview counts with the same rule, so it and `python -m serving.caption
--has-caption no` name the same clips.

`data.jobs.create` makes the job's items from `clip_ids_in(db)`, so what is recorded is what was captioned
(at the time it was started: a filter's matches change later). `from_dict` also reads the shapes jobs were
stored in before this one: the Jobs tab's {"source", "filter"}, the command line's flat filter fields with
"limit", a re-caption's {"clip_ids", "reason"}.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Iterable, Iterator, Mapping

import sqlite_utils

from data import clips, limits
from data.clips import Filter
from data.errors import DataError

_FILTER_FIELDS = {f.name for f in dataclasses.fields(Filter)}


@dataclasses.dataclass(frozen=True)
class Selection:
    """The clips of a job: `filter`'s matches (the first `limit` in id order), or exactly `clip_ids`."""

    filter: Filter = Filter()
    limit: int | None = None
    clip_ids: tuple[int, ...] | None = None
    origin: str = ""

    def __post_init__(self) -> None:
        if self.limit is not None:
            limit = limits.sql_int(self.limit, "limit")
            if limit < 1:
                raise DataError(f"The limit must be at least 1 clip (got {limit}).")
            object.__setattr__(self, "limit", limit)
        if self.clip_ids is not None:
            if self.filter != Filter() or self.limit is not None:
                raise DataError("A selection is either a filter (with a limit) or a list of clips, not both.")
            object.__setattr__(self, "clip_ids", tuple(limits.sql_int(c, "clip id") for c in self.clip_ids))

    @classmethod
    def of_clips(cls, clip_ids: Iterable[int], origin: str = "") -> "Selection":
        """Exactly these clips (duplicates are one job item)."""
        return cls(clip_ids=tuple(clip_ids), origin=origin)

    @property
    def sent_filter(self) -> Filter:
        """The filter whose clips a job sends: `filter`, and ingest passed unless it asks for failures."""
        return self.filter if self.filter.failed is not None else dataclasses.replace(self.filter, failed=False)

    def clip_ids_in(self, db: sqlite_utils.Database) -> Iterator[int]:
        """The clip ids this selection names now."""
        if self.clip_ids is not None:
            return iter(self.clip_ids)
        return itertools.islice(clips.iter_ids(db, self.sent_filter), self.limit)

    def count(self, db: sqlite_utils.Database) -> int:
        """How many clips `clip_ids_in` names now (a preview's count)."""
        if self.clip_ids is not None:
            return len(set(self.clip_ids))
        n = clips.count(db, self.sent_filter)
        return n if self.limit is None else min(n, self.limit)

    def to_dict(self) -> dict[str, Any]:
        """What a job row stores: always the four keys of the module docstring."""
        return {
            "origin": self.origin,
            "filter": self.filter.to_dict(),
            "limit": self.limit,
            "clip_ids": list(self.clip_ids) if self.clip_ids is not None else None,
        }

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any] | None) -> "Selection":
        """A stored selection, in today's shape or one of the earlier ones (the module docstring)."""
        d = dict(stored or {})
        fields = (
            d["filter"] if isinstance(d.get("filter"), dict) else {k: v for k, v in d.items() if k in _FILTER_FIELDS}
        )
        clip_ids = d.get("clip_ids")
        return cls(
            filter=Filter.from_dict(fields),
            limit=d.get("limit"),
            clip_ids=tuple(clip_ids) if clip_ids is not None else None,
            origin=str(d.get("origin") or d.get("source") or d.get("reason") or ""),
        )
