"""Figures for R10/R11 (issue 11): the cost of the operations on user text at the input limits.

    python benchmarks/bench_bounds.py [--repeat 5]

Prints one line per operation: the word diff of two 12,000-word captions (a small edit, unrelated text, and
difflib's worst input) as HTML and as an edit ratio (data.textdiff), the review history of 10 versions at the
caption limit, a save at the limit (and the write-lock hold it costs), a full-text search with the longest
allowed query, and the sidecar depth scan of a 1 MiB file. Each figure is the best of --repeat runs (the
machine is shared: the best is the cost)."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data import (
    captions,
    clips,
    db as dbmod,
    errors,
    examples,
    limits,
    textdiff,
)
from webapp import render

LABELS = examples.LABELS


def prose(n: int, seed: int) -> str:
    rng = random.Random(seed)
    common = ["the", "a", "car", "pedestrian", "slows", "left", "lane", "and"]
    return " ".join(rng.choice(common) if rng.random() < 0.5 else f"w{rng.randrange(10**6)}" for _ in range(n))


def _parse_or_hint(q: str) -> clips.Filter | None:
    try:
        return clips.Filter(text=q)
    except errors.SearchSyntaxError:
        return None


def best(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out) * 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    a = prose(12_000, 1)
    cases = {
        "small edit": "start " + a.replace("car", "truck", 3) + " end",
        "unrelated": prose(12_000, 2),
        "two-word vocabulary": " ".join(["x", "y"][i % 2] for i in range(12_000)),
    }
    for name, b in cases.items():
        print(
            f"word diff, two 12,000-word captions ({name}): "
            f"{best(lambda b=b: render.word_diff(a, b), args.repeat):.1f} ms"
        )
        print(
            f"edit ratio, two 12,000-word captions ({name}): "
            f"{best(lambda b=b: textdiff.edit_ratio(a, b), args.repeat):.1f} ms (ratio {textdiff.edit_ratio(a, b):.4f})"
        )
    big = "w " * (limits.MAX_CAPTION_CHARS // 2)
    with tempfile.TemporaryDirectory() as d:
        db = dbmod.connect(Path(d) / "b.db")
        cid = db["clips"].insert({"path": "x.mp4", "size": 1, "ingested_at": 0}).last_pk
        base = None
        for v in range(10):
            text = (prose(limits.MAX_CAPTION_CHARS // 6, v))[: limits.MAX_CAPTION_CHARS]
            base = captions.save_human(
                db, cid, text=text, labels=LABELS, author="b", base_caption_id=base and base["id"]
            )
        hist = captions.history(db, cid)
        print(
            f"review history, 10 versions at {limits.MAX_CAPTION_CHARS:,} chars: "
            f"{best(lambda: render.history(hist), args.repeat):.1f} ms"
        )
        t = time.perf_counter()
        captions.save_human(
            db, cid, text=big[: limits.MAX_CAPTION_CHARS].strip(), labels=LABELS, author="b", base_caption_id=base["id"]
        )
        print(
            f"save of a caption at the limit: {(time.perf_counter() - t) * 1000:.1f} ms "
            f"(longest write-lock hold {dbmod.write_lock_stats(Path(d) / 'b.db')['max_ms']:.1f} ms)"
        )
        worst = {
            "words": "pedestrian " * 60,
            "OR": "a OR " * 99 + "b",
            "prefixes (the most allowed, then words)": "w1* w2* w3* w4* " + "w5 " * 160,
            "brackets": "(" * 8 + "a OR b " + ") NOT c" * 8 + " x" * 200,
            "unclosed quote (a hint)": '"' + "a " * 300,
        }
        for name, q in worst.items():
            q = q[: limits.MAX_SEARCH_CHARS]
            parse = best(lambda q=q: _parse_or_hint(q), args.repeat)
            f = _parse_or_hint(q)
            run = best(lambda f=f: clips.page(db, f), args.repeat) if f else 0.0
            print(f"full-text search, {len(q)}-char query ({name}): read {parse:.2f} ms, page {run:.1f} ms")
        db.close()
    side = ('{"a": "' + "[" * 1000 + '", "b": [' + ",".join(["1"] * 200_000) + "]}").encode()[
        : limits.MAX_SIDECAR_BYTES
    ]
    print(
        f"sidecar depth scan, {len(side) / 1024:.0f} KiB: "
        f"{best(lambda: limits.json_depth_ok(side), args.repeat):.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
