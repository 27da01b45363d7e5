"""Ingest throughput on 10 s 1080p H.264 clips: probe only, and with thumbnail + filmstrip.

    python benchmarks/bench_ingest.py --clips 8 --workers 2

Generates (or reuses) --clips realistic clips (1080p, 30 fps, 10 s, H.264, 4-8 Mb/s) with data.demo, then
ingests them twice into fresh databases: once with --no-media (hash + probe), once with media (decoding the
16 model frames, writing the thumbnail and filmstrip). Prints clips/s and clips/s per worker process.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.library import (
    demo,
    ingest,
)
from data.settings import Settings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/bench-ingest-clips", help="where the generated clips are kept")
    ap.add_argument("--decoder", default="auto", choices=("auto", "pyav", "nvdec"))
    args = ap.parse_args(argv)
    t = time.perf_counter()
    demo.make_library(
        args.dir,
        args.clips,
        seed=42,
        realistic=True,
        height=1080,
        min_seconds=10,
        max_seconds=10,
        hevc_share=0.0,
        broken=False,
    )
    print(f"clips ready in {time.perf_counter() - t:.1f} s: {args.clips} x 1080p30 10 s H.264 in {args.dir}")
    for label, media in (("probe only (hash + probe)", False), ("probe + thumbnail + filmstrip", True)):
        work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
        s = Settings.load({"data_dir": str(work), "clip_root": args.dir}, environ={})
        summary = ingest.ingest(s, workers=args.workers, media=media, decoder=args.decoder)
        rate = summary["ok"] / summary["seconds"]
        print(
            f"{label:32s} {summary['ok']} ok in {summary['seconds']:.2f} s: {rate:.2f} clips/s, "
            f"{rate / args.workers:.2f} clips/s per worker ({args.workers} workers, decoder "
            f"{summary['decoder']})"
        )
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
