"""Peak memory of the runner's client and the web app's Fleet tab when the fleet answers like an attacker
(issue 21, class 2): compression bombs, endless /metrics, a router listing 300 workers.

    python benchmarks/bench_hostile_fleet.py                       # this checkout
    git archive f3e5dc2 | tar -x -C /tmp/before && \\
        python benchmarks/bench_hostile_fleet.py --code /tmp/before  # the code before the fix

Each scenario runs in a fresh child process (PYTHONPATH = --code) against a hostile server on loopback
(tests/support/hostile_fleet.py, its own process). The child prints its RSS after its imports and its peak RSS
(ru_maxrss); the parent kills a child whose RSS passes --kill-mib and reports that instead.
Scenarios:
- runner/br, runner/gzip: 3 caption requests at once, each answered by a bomb (1 GiB of zeros in br, 256 MiB
  in gzip, a few KiB on the wire);
- app/router-300: one Fleet tab refresh of a router listing 300 workers whose /metrics are 64 MiB gzip bombs;
- app/huge-metrics: one refresh of 8 replicas each streaming 400 MiB of /metrics without a length.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if "--child" not in sys.argv:  # a child imports the code under test, from PYTHONPATH (--code)
    sys.path.insert(0, str(REPO))

SCENARIOS = {
    "runner/br": dict(mode="br", bomb_mib=1024, workers=0),
    "runner/gzip": dict(mode="gzip", bomb_mib=256, workers=0),
    "app/router-300": dict(mode="gzip", bomb_mib=64, workers=300),
    "app/huge-metrics": dict(mode="huge", huge_mib=400, workers=8),
}


def child(kind: str, url: str) -> None:
    """Runs in the child: one scenario, then its figures as JSON on stdout."""
    import asyncio
    import resource

    import psutil

    def rss() -> float:
        return psutil.Process().memory_info().rss / 2**20

    if kind == "runner":
        from data import examples
        from data.settings import Settings
        from serving.client import CaptionRequest, FleetClient

        root = Path(tempfile.mkdtemp())
        s = Settings.load({"data_dir": str(root / "var"), "clip_root": str(root)}, environ={})
        s = s.replace(request_timeout=60.0)
        before = rss()
        t = time.monotonic()

        async def go():
            async with FleetClient(s) as c:
                reqs = [c.caption(url, CaptionRequest("a.mp4", examples.PROMPT)) for _ in range(3)]
                return await asyncio.gather(*reqs, return_exceptions=True)

        out = [f"{type(r).__name__}: {str(r)[:90]}" for r in asyncio.run(go())]
    else:
        from data.settings import Settings
        from webapp.fleet import tab as fleet_tab

        s = Settings.load({"data_dir": tempfile.mkdtemp()}, environ={})
        before = rss()
        t = time.monotonic()
        try:
            from serving.fleet.reader import FleetReader
        except ImportError:  # the code before the fleet reader (--code): the tab's reads took the URLs alone
            rows, router = fleet_tab.snapshot([url], timeout=30.0)
        else:
            rows, router = fleet_tab.snapshot(FleetReader(s), [url], timeout=30.0)
        out = [f"{len(rows)} rows", str(rows[0].get("error"))[:120] if rows else ""]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {"rss_before_mib": round(before), "peak_rss_mib": round(peak), "s": time.monotonic() - t, "out": out}
        )
    )


def run(name: str, code: Path, kill_mib: int) -> dict:
    import psutil

    from benchmarks.child_env import child_env
    from tests.support.hostile_fleet import HostileFleet

    spec = dict(SCENARIOS[name])
    # the child's data dirs go under a folder removed afterwards, even when the child is killed
    with HostileFleet(spec.pop("mode"), **spec) as hf, tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        env = child_env(code, GRADIO_ANALYTICS_ENABLED="False", NO_PROXY="127.0.0.1", TMPDIR=tmp)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name.split("/")[0], "--url", hf.url]
        p = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watch, top = psutil.Process(p.pid), 0.0
        while p.poll() is None:
            try:
                top = max(top, watch.memory_info().rss / 2**20)
            except psutil.Error:
                break
            if top > kill_mib:
                p.kill()
                p.wait()
                return {"peak_rss_mib": f">{kill_mib} (killed)", "out": []}
            time.sleep(0.02)
        stdout, stderr = p.communicate()
        sent = hf.sent()
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"peak_rss_mib": "?", "out": [stderr.strip()[-300:]]}
    result["sent_mib"] = round(sent / 2**20)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose client and app are measured")
    ap.add_argument("--kill-mib", type=int, default=6144, help="kill a child past this RSS (the machine is shared)")
    ap.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="run only these scenarios")
    ap.add_argument("--child", choices=("runner", "app"), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.url)
        return 0
    print(f"code: {a.code}")
    print(f"{'scenario':18s} {'RSS before':>11s} {'peak RSS':>14s} {'MiB sent':>9s} {'s':>6s}  outcome")
    for name in a.only or SCENARIOS:
        r = run(name, a.code.resolve(), a.kill_mib)
        print(
            f"{name:18s} {str(r.get('rss_before_mib', '')):>11s} {str(r['peak_rss_mib']):>14s} "
            f"{str(r.get('sent_mib', '')):>9s} {r.get('s', 0):6.1f}  {'; '.join(r['out'])[:150]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
