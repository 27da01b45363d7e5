"""Bytes and time of opening (and saving) a clip whose caption has many versions (issue 21, class 4).

    python benchmarks/bench_history.py --versions 1000 --chars 1500
    git archive f3e5dc2 | tar -x -C /tmp/before && \\
        python benchmarks/bench_history.py --code /tmp/before      # the code before the history was paged

A child process (PYTHONPATH = --code) builds a library whose clip 1 has --versions human versions of about
--chars characters each, serves the app on loopback, and opens the clip and saves an edit through Gradio's
queue as a browser does; it prints the size of each answer (the event's output, JSON) and its time.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if "--child" not in sys.argv:  # a child imports the code under test, from PYTHONPATH (--code)
    sys.path.insert(0, str(REPO))


def child(versions: int, chars: int) -> None:
    from data.settings import Settings

    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        s = Settings.load({"data_dir": tmp + "/var", "fleet_mode": "sim"}, environ={})
        out = measure(s, versions, chars)
    print(json.dumps(out))


def measure(s, versions: int, chars: int) -> dict:
    """The open and the save of a clip with `versions` versions of `chars` characters, in the app of `s`."""
    from data import captions, db as dbmod
    from tests.support.reliability_fixtures import GradioSession, dependencies
    from tests.support.webapp_fixtures import LABELS, AppServer, add_users, build_library

    build_library(s, n=3)
    add_users(s)
    db = dbmod.connect(s.db)
    rng = random.Random(7)
    words = ["car", "lane", "pedestrian", "slows", "the", "cyclist", "left", "turns"]
    base = db.execute("SELECT current_caption_id FROM clips WHERE id = 1").fetchone()[0]
    for _ in range(versions - 1):
        text = " ".join(rng.choice(words) for _ in range(chars // 6))
        base = captions.save_human(db, 1, text=text, labels=LABELS, author="ann", base_caption_id=base)["id"]
    db.close()
    out = {}
    with AppServer(s, fleet_urls=[]) as srv:
        cookie = srv.client("lead").cookies["cw_session"]
        tab = GradioSession(srv.url, cookie, dependencies(srv.url, cookie), timeout=600)
        try:
            for name, call in (
                ("open", lambda: tab.call("open_clip", event_data={"clip": 1})),
                ("save", lambda: tab.call("save_caption", [None, None, None, "an edit", *LABELS.values()])),
            ):
                t = time.perf_counter()
                answer = call()
                out[name] = {"bytes": len(json.dumps(answer).encode()), "s": round(time.perf_counter() - t, 3)}
        finally:
            tab.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose app is measured")
    ap.add_argument("--versions", type=int, default=1000)
    ap.add_argument("--chars", type=int, default=1500, help="characters per version (the model's bound: 1,500)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.versions, a.chars)
        return 0
    from benchmarks.child_env import child_env

    env = child_env(a.code, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", NO_PROXY="127.0.0.1,localhost")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--versions", str(a.versions)]
    r = subprocess.run(
        [*cmd, "--chars", str(a.chars)], cwd=a.code, env=env, capture_output=True, text=True, timeout=1800
    )
    if r.returncode != 0:
        print(r.stderr[-2000:], file=sys.stderr)
        return 1
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"code: {a.code}; clip with {a.versions:,} versions of ~{a.chars:,} characters")
    for name, f in figures.items():
        print(f"{name:5s} {f['bytes'] / 2**20:8.2f} MiB  {f['s'] * 1000:8.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
