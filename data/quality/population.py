"""The clips a random sample was drawn from, kept with the sample (table `sample_populations`, m022).

A further round of a sample (data.quality.rounds) must draw from the same batch as the first draw, or the
members are no longer one random sample of it: the batch is the filter's unreviewed machine captions *at the
draw*, and by the time the lead asks for more, some of those clips have been reviewed, re-captioned or moved out
of the filter. So the draw keeps, per stratum, the ids of its population's clips and the caption each had
(what is measured), and a later round reads them back.

Stored compactly: the ids ascending, both arrays as differences from the previous value, as 64-bit integers,
zlib-compressed. A population of a million clips is 16 MB as plain arrays; 84,000 clips of a 200,000-clip library
were stored in 0.1 MB, and a million ids spread over ten million take 1.3 MB an array (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import array
import zlib

import numpy as np
import sqlite_utils


def encode(values: array.array) -> bytes:
    """64-bit integers as the zlib of their differences (the first from 0). numpy does the differences: a
    population of a million clips is encoded in milliseconds, not the second a Python loop takes."""
    deltas = np.diff(np.frombuffer(values, dtype=np.int64), prepend=np.int64(0))
    return zlib.compress(deltas.tobytes(), 1)  # level 1: 5x faster than 6 on a million ids, 25 % larger


def decode(blob: bytes) -> array.array:
    """The integers `encode` stored."""
    out = array.array("q")
    out.frombytes(np.cumsum(np.frombuffer(zlib.decompress(blob), dtype=np.int64)).tobytes())
    return out


def store(db: sqlite_utils.Database, sample_id: int, rows: list[tuple[str, bytes, bytes, int]]) -> None:
    """Record a sample's population: per stratum (stratum, encoded clip ids, encoded caption ids, how many)."""
    db.conn.executemany(
        "INSERT INTO sample_populations (sample_id, stratum, clip_ids, caption_ids, clips) VALUES (?, ?, ?, ?, ?)",
        [(sample_id, *row) for row in rows],
    )


def load(db: sqlite_utils.Database, sample_id: int) -> dict[str, tuple[array.array, array.array]] | None:
    """Stratum -> (clip ids ascending, their caption ids at the draw) of sample `sample_id`; None for a sample
    drawn before populations were kept."""
    rows = db.execute(
        "SELECT stratum, clip_ids, caption_ids FROM sample_populations WHERE sample_id = ?", [sample_id]
    ).fetchall()
    if not rows:
        return None
    return {stratum: (decode(ids), decode(caps)) for stratum, ids, caps in rows}
