"""A release's options (`Options`): what it holds and how it is split, checked before anything is read
(data.release.make says what is released and how)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from data.clips import Filter
from data.errors import DataError
from data.release import stratify

DEFAULT_GROUP_BY = "route"
DEFAULT_NAME = "release"
NEVER = ("rejected", "broken")  # review states never released
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FIELD = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,4}")
# a licence as the Hugging Face header names it (its identifiers: apache-2.0, cc-by-4.0, mit, other, ...)
_LICENSE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")
DEFAULT_LICENSE = "other"  # without --license: the team's own terms (the card says so)
MEDIA = ("none", "copy", "link")  # --media: the clips stay where they are, or are copied or linked in


@dataclass(frozen=True)
class Options:
    """What a release holds and how it is split: the clip filter, the sidecar field that groups clips, the
    split shares (name -> share, in file order), the seed, the release's name, and whether simulated text is
    released (flagged); whether every group is placed anew instead of where the release before placed it
    (`reshuffle`); the licence the card's header names (None: not given); and what is done with the clips'
    files (`media`: none, copy or link)."""

    filter: Filter = Filter()
    group_by: str = DEFAULT_GROUP_BY
    shares: tuple[tuple[str, float], ...] = tuple(stratify.parse(stratify.DEFAULT).items())
    seed: int = 0
    name: str = DEFAULT_NAME
    include_simulated: bool = False
    reshuffle: bool = False
    license: str | None = None
    media: str = "none"

    def checked(self) -> Options:
        """These options made explicit (review status approved unless another is asked; ingest ok; a current
        caption), or a DataError saying what to ask instead."""
        f = self.filter.checked()
        status = f.review_status or "approved"
        if status in NEVER:
            raise DataError(
                f"Rejected and broken clips are never released (the filter asks for {status} ones): choose "
                "approved (the default) or unreviewed."
            )
        if f.failed:
            raise DataError("Clips whose ingest failed are never released: leave out --ingest-failed yes.")
        if f.include_missing:
            raise DataError("A release lists files a trainer reads: clips whose file is gone are never released.")
        if f.has_caption is False:
            raise DataError("A release is captions: --has-caption no would select nothing.")
        if not _FIELD.fullmatch(str(self.group_by or "")):
            raise DataError(
                "--group-by: a sidecar field, such as route, vehicle or drive_id (letters, digits, _ or -; "
                f"a.b for a nested field), not {str(self.group_by)[:40]!r}."
            )
        if not _NAME.fullmatch(str(self.name or "")):
            raise DataError(
                "--name: letters, digits, '.', '_' or '-', at most 64, starting with a letter or digit "
                f"(for example av-hazard), not {str(self.name)[:40]!r}."
            )
        shares = dict(self.shares)
        if len(shares) != len(self.shares) or abs(sum(shares.values()) - 1) > 1e-6 or not shares:
            raise DataError(f"--splits: shares that add up to 1, for example {stratify.DEFAULT}.")
        try:
            seed = int(self.seed)
        except (TypeError, ValueError):
            raise DataError(f"--seed: a whole number, not {str(self.seed)[:20]!r}.") from None
        if not 0 <= seed < 2**63:
            raise DataError("--seed: a whole number of 0 or more.")
        license = str(self.license).strip() if self.license not in (None, "") else None
        if license is not None and not _LICENSE.fullmatch(license):
            raise DataError(
                "--license: a licence identifier as Hugging Face names it, such as cc-by-4.0, apache-2.0 or other "
                f"(lower-case letters, digits, '.', '+' and '-'), not {license[:40]!r}."
            )
        media = str(self.media or "none").strip()
        if media not in MEDIA:
            raise DataError(
                f"--media: none (the default: paths point into the clip root), copy or link, not {media[:20]!r}."
            )
        f = dataclasses.replace(f, review_status=status, failed=False, has_caption=True)
        return dataclasses.replace(
            self, filter=f, seed=seed, reshuffle=bool(self.reshuffle), license=license, media=media
        )

    def to_dict(self) -> dict:
        return {
            "filter": self.filter.to_dict(),
            "group_by": self.group_by,
            "splits": dict(self.shares),
            "seed": self.seed,
            "name": self.name,
            "include_simulated": self.include_simulated,
            "reshuffle": self.reshuffle,
            "license": self.license,
            "media": self.media,
        }
