"""A copy of the committed work-per-clip table with gaps a test controls: the cost estimate and the job form must
say "not yet measured" and "failed on the GPU" whatever the table of the day holds (by 2026-12-03 every bf16 point
the form offers was measured)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNMEASURED = (8, 4_718_592)  # frames, pixels: a point nobody has measured
FAILED = (32, 9_437_184)  # a point whose clips ran the replica out of GPU memory
FAILED_NOTE = (
    "the replica ran out of GPU memory decoding and preparing the frames (46 of 48 clips done); fewer frames or "
    "pixels per clip"
)


def table_with_gaps(folder: Path) -> Path:
    table = json.loads((ROOT / "docs" / "work-per-clip.json").read_text())
    for p in table["points"]:
        where = (p["frames"], p["max_pixels"])
        if p["precision"] != "bf16" or where not in (UNMEASURED, FAILED):
            continue
        keep = {k: p[k] for k in ("frames", "max_pixels", "precision")}
        p.clear()
        if where == UNMEASURED:
            p.update(keep, status="not yet measured", clips_per_s=None)
        else:
            p.update(keep, status="failed", clips_per_s=None, note=FAILED_NOTE, date="2026-12-03")
    path = folder / "work-per-clip.json"
    path.write_text(json.dumps(table))
    return path
