"""A team's load through the page's own path (issue 27): N annotators at a human pace, over HTTP, while a job
writes captions through the runner and the simulated fleet.

    python benchmarks/bench_team.py                              # 50 annotators, 10 minutes, job at 56 captions/s
    python benchmarks/bench_team.py --annotators 50 --seconds 60 # a short run
    python benchmarks/bench_team.py --flood 4                    # and one person flooding 20 KB drafts

What runs, each in its own process: the web app (`python -m webapp`, the real settings, login on), the job runner
(`python -m serving.runner`) and the simulated fleet (2 replicas), on a library of --clips tiny real clips that
each have a machine caption; a feeder keeps a captioning job over them queued, so the runner writes machine
captions all along (the rate reached is printed; --fleet-speed and --inflight set it). This process plays the
annotators, on one asyncio loop, speaking to the app exactly as the page does: POST /login, then for each
action a join of Gradio's queue (`/gradio_api/queue/join`) and its event stream (`/gradio_api/queue/data`) until
`process_completed`; the heartbeat stream held open per tab; `PUT /drafts/{clip}` as the page's script writes an
edit after the person stops typing; `POST /leases/{clip}` at most every 20 s of activity.

An annotator's cycle (seeded): `n` (the next unreviewed clip; a tile of Browse now and then instead: `open`),
watch 3-8 s, edit with probability 0.6 (1-3 drafts, 1.5-4 s apart; ctrl+s with probability 0.3: `save`),
then `a` (`approve`: saves an edit, approves, opens the next clip) or, one time in five, `n` again. A decision
refused as a conflict (the job wrote a new machine caption on the clip meanwhile: what R1 checks) is counted
apart, and the annotator reloads the clip (`reload`) and approves again.

Printed (and written as JSON with --out): per action, from the keypress (the request sent) to the answer (the
event's result read): count, p50, p95, p99, max, and for queue events the time until Gradio started the handler
(queue wait); errors (anything but an answer or an explicit conflict: must be 0); conflicts; the CPU of the app,
its busiest thread, the runner, the fleet and this process (cores, over the measured window); the job's
captions/s. The machine is named in the output: on a shared machine the figures say what it was.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import httpx  # noqa: E402
import psutil  # noqa: E402

from data import captions, db as dbmod, examples, prompts, users  # noqa: E402
from data.library.clipgen import tiny_library  # noqa: E402
from data.settings import Settings  # noqa: E402
from serving import procs, simfleet  # noqa: E402
from serving.launch import commands as fleet_commands  # noqa: E402

PASSWORD = "correct horse battery"
LABELS = examples.HAZARD_LABELS
LOADED = re.compile(r'data-loaded="(\d+):(\d*):')
LEASE_PING_S = 20.0  # webapp/static/drafts.js LEASE_PING_MS
WORDS = (
    "the ego vehicle slows as a pedestrian steps off the kerb while a cyclist passes on the left in light rain".split()
)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


class Stats:
    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = {}
        self.queue_ms: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.conflicts = 0
        self.measuring = False

    def add(self, action: str, ms: float, queue_ms: float | None = None) -> None:
        if self.measuring:
            self.ms.setdefault(action, []).append(ms)
            if queue_ms is not None:
                self.queue_ms.setdefault(action, []).append(queue_ms)

    def error(self, what: str) -> None:
        if self.measuring:
            self.errors.append(what[:300])


class Refused(Exception):
    """An answer that is not the action's result (an HTTP error, an error event)."""


class Tab:
    """One browser tab of one annotator: a cookie, a session hash, the form as the page holds it."""

    def __init__(self, http: httpx.AsyncClient, deps: dict, form_ids: list[int]):
        self.http = http
        self.deps = deps
        self.hash = uuid.uuid4().hex[:11]
        self.form_ids = form_ids  # the text box, then the 7 label fields (component ids)
        self.form: dict[int, object] = {}
        self.clip: int | None = None
        self.base: int | None = None

    async def call(self, api: str, data: list | None = None, event_data=None) -> tuple[list, float, float | None]:
        """(outputs, ms from the request to the result, ms until the handler started)."""
        dep = self.deps[api]
        data = list(data or [])
        data += [None] * (len(dep["inputs"]) - len(data))
        t0 = time.perf_counter()
        r = await self.http.post(
            "/gradio_api/queue/join",
            json={
                "data": data,
                "fn_index": dep["id"],
                "session_hash": self.hash,
                "event_data": event_data,
                "trigger_id": (dep.get("targets") or [[None]])[0][0],
            },
        )
        if r.status_code != 200:
            raise Refused(f"{api}: join HTTP {r.status_code}: {r.text[:200]}")
        event = r.json()["event_id"]
        started = None
        async with self.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": self.hash}) as resp:
            if resp.status_code != 200:
                raise Refused(f"{api}: stream HTTP {resp.status_code}")
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, event):
                    continue
                kind = msg.get("msg")
                if kind == "process_starts":
                    started = (time.perf_counter() - t0) * 1000
                elif kind == "process_completed":
                    ms = (time.perf_counter() - t0) * 1000
                    if not msg.get("success", False):
                        raise Refused(f"{api}: {str((msg.get('output') or {}).get('error'))[:200]}")
                    out = msg["output"]["data"]
                    self._track(dep, out)
                    return out, ms, started
                elif kind == "unexpected_error":
                    raise Refused(f"{api}: {msg.get('message')}")
        raise Refused(f"{api}: the event stream ended without a result")

    def _track(self, dep: dict, out: list) -> None:
        """Keep what the page would show: the form's values and the clip and version it was loaded from."""
        for cid, value in zip(dep["outputs"], out):
            if isinstance(value, dict) and value.get("__type__") == "update":
                if "value" not in value:
                    continue
                value = value["value"]
            if cid in self.form_ids:
                self.form[cid] = value
            elif isinstance(value, str) and "data-loaded=" in value:
                m = LOADED.search(value)
                if m:
                    self.clip, self.base = int(m.group(1)), int(m.group(2)) if m.group(2) else None

    def values(self) -> list:
        """The form's inputs as the page sends them: the states are the server's, then the text and labels."""
        return [None, None, None, *[self.form.get(cid) for cid in self.form_ids]]


# a browser drops an idle connection before the server's keep-alive timeout (uvicorn: 5 s) closes it, or retries
# a request that meets one closing; httpx does neither by itself
BROWSER_LIKE = httpx.Limits(keepalive_expiry=3.0)


async def annotator(i: int, name: str, url: str, stats: Stats, stop: asyncio.Event, clip_ids: list[int]) -> None:
    rng = random.Random(1000 + i)
    await asyncio.sleep(rng.uniform(0, 15))  # the team does not arrive in the same second
    async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False, limits=BROWSER_LIKE) as http:
        for _ in range(30):  # a 429 "busy with logins" (50 people signing in at once): try again, as a person does
            r = await http.post("/login", data={"username": name, "password": PASSWORD, "next": "/"})
            if r.status_code != 429:
                break
            await _sleep(stop, rng.uniform(1, 3))
        if r.status_code != 303:
            stats.errors.append(f"{name}: login HTTP {r.status_code}")
            return
        deps = {d["api_name"]: d for d in (await http.get("/config")).json()["dependencies"] if d.get("api_name")}
        tab = Tab(http, deps, deps["save_caption"]["inputs"][3:11])
        heartbeat = asyncio.create_task(_heartbeat(http, tab.hash, stop))
        last_ping = 0.0

        async def act(action: str, api: str, data=None, event_data=None) -> bool:
            """One keypress; False when it ended as a conflict."""
            try:
                out, ms, started = await tab.call(api, data, event_data)
            except (Refused, httpx.HTTPError) as e:
                stats.error(f"{name} {action}: {e!r}"[:300])
                return True
            stats.add(action, ms, started)
            text = " ".join(v for v in out if isinstance(v, str) and "cw-msg" in v)
            if "changed by" in text or "conflict" in text:
                stats.conflicts += stats.measuring
                return False
            if "cw-msg-error" in text:
                stats.error(f"{name} {action}: {re.sub('<[^>]+>', '', text)[:200]}")
            return True

        async def ping() -> None:
            nonlocal last_ping
            if tab.clip is None or time.monotonic() - last_ping < LEASE_PING_S:
                return
            last_ping = time.monotonic()
            await timed("lease", http.post(f"/leases/{tab.clip}"))

        async def timed(action: str, request) -> None:
            t = time.perf_counter()
            try:
                r = await request
            except httpx.HTTPError as e:
                stats.error(f"{name} {action}: {e!r}")
                return
            stats.add(action, (time.perf_counter() - t) * 1000)
            if r.status_code >= 400:
                stats.error(f"{name} {action}: HTTP {r.status_code} {r.text[:200]}")

        await act("open", "open_clip", event_data={"clip": rng.choice(clip_ids)})
        while not stop.is_set():
            if rng.random() < 0.1:
                await act("open", "open_clip", tab.values(), event_data={"clip": rng.choice(clip_ids)})
            else:
                await act("n", "next_unreviewed", tab.values())
            await _sleep(stop, rng.uniform(3, 8))  # watching the clip
            await ping()
            if tab.clip is not None and rng.random() < 0.6:
                text_id = tab.form_ids[0]
                for _ in range(rng.randint(1, 3)):  # typing, then a pause: the page writes a draft
                    words = rng.sample(WORDS, 8)
                    tab.form[text_id] = f"{tab.form.get(text_id) or ''} {' '.join(words)}".strip()[-1500:]
                    await _sleep(stop, rng.uniform(1.5, 4))
                    body = {"base": tab.base, "text": tab.form[text_id], "labels": dict(zip(LABELS, tab.values()[4:]))}
                    await timed("draft", http.put(f"/drafts/{tab.clip}", json=body))
                    await ping()
                if rng.random() < 0.3:
                    await act("save", "save_caption", tab.values())
                    await _sleep(stop, rng.uniform(0.5, 1.5))
            if stop.is_set():
                break
            if rng.random() < 0.8:
                if not await act("approve", "approve", tab.values()):
                    await act("reload", "reload_clip")
                    await act("approve", "approve", tab.values())
            await _sleep(stop, rng.uniform(0.5, 2))
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _heartbeat(http: httpx.AsyncClient, session: str, stop: asyncio.Event) -> None:
    """The page's heartbeat stream, held open as a tab holds it."""
    while not stop.is_set():
        with contextlib.suppress(httpx.HTTPError):
            async with http.stream("GET", f"/gradio_api/heartbeat/{session}", timeout=None) as r:
                async for _ in r.aiter_lines():
                    if stop.is_set():
                        return
        await _sleep(stop, 1)


async def flooder(k: int, url: str, name: str, stats: Stats, stop: asyncio.Event) -> None:
    """One connection of one person writing 20 KB drafts as fast as the app answers (issue 27, class 1)."""
    async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False) as http:
        for _ in range(60):  # the limiter lets 5 parallel sign-ins of one account through at once
            r = await http.post("/login", data={"username": name, "password": PASSWORD, "next": "/"})
            if r.status_code == 303:
                break
            await _sleep(stop, 1 + k)
        i = 0
        while not stop.is_set():
            i += 1
            body = {"base": None, "text": f"{k}:{i} " + "x" * 19_900, "labels": {}}
            with contextlib.suppress(httpx.HTTPError):
                r = await http.put(f"/drafts/{1 + i % 50}", json=body)
                if stats.measuring:
                    stats.ms.setdefault(f"flood {r.status_code}", []).append(0.0)


async def _pace_job(fleet, settings: Settings, rate: float, speed: float, stop: asyncio.Event) -> None:
    """Keep the job near `rate` captions/s: every 5 s, the simulated fleet's latency multiplier follows the rate
    measured (a slower fleet when the job runs ahead; speed 0, answers at once, is as fast as it goes)."""
    db = dbmod.connect(settings.db)
    try:
        count = db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
        t = time.monotonic()
        while not stop.is_set():
            await _sleep(stop, 5)
            now_count = db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
            now = time.monotonic()
            got = (now_count - count) / (now - t)
            count, t = now_count, now
            if got > 0:
                speed = min(5.0, max(0.0, speed * (got / rate) ** 0.7))
                if speed < 0.005:
                    speed = 0.0 if got < rate else 0.005
                for i in range(len(fleet.urls)):
                    with contextlib.suppress(httpx.HTTPError):
                        await asyncio.to_thread(fleet.set_knobs, i, speed=speed)
    finally:
        db.close()


def cpu_of(procs_: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs_:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def family(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def schedstat(pid: int) -> dict[int, tuple[float, float]]:
    """{thread id: (seconds on a CPU, seconds runnable but waiting for one)} from /proc (Linux schedstat)."""
    out = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                run, wait, _ = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                out[int(tid)] = (int(run) / 1e9, int(wait) / 1e9)
    return out


def busiest_thread(pid: int, before: dict[int, float]) -> tuple[float, dict[int, float]]:
    """(CPU seconds of the app thread that used most since `before`, the threads' times now)."""
    now = {}
    with contextlib.suppress(psutil.Error):
        now = {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
    used = max((v - before.get(k, 0.0) for k, v in now.items()), default=0.0)
    return used, now


def build_library(settings: Settings, clips: int, annotators: int, flood: int) -> tuple[list[int], int]:
    db = dbmod.connect(settings.db)
    try:
        ids = tiny_library(settings, db, clips)
        for k, cid in enumerate(ids):
            captions.add_machine(
                db,
                cid,
                job_id=None,
                text=f"The ego vehicle passes clip {k}: a pedestrian waits at the kerb.",
                labels=LABELS,
                provenance={"model": "sim/Qwen3-VL-8B-simulated", "simulated": True},
            )
        for i in range(annotators):
            users.create(db, f"ann{i:02d}", role="annotator", password=PASSWORD)
        if flood:
            users.create(db, "mallory", role="annotator", password=PASSWORD)
        pid = prompts.latest(db)["id"]
    finally:
        db.close()
    return ids, pid


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--annotators", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=600, help="the measured window (after a 20 s warm-up)")
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--clips", type=int, default=5000)
    ap.add_argument("--job-rate", type=float, default=56, help="machine captions per second the job aims at")
    ap.add_argument("--fleet-speed", type=float, default=0.15, help="the simulated fleet's latency multiplier")
    ap.add_argument("--inflight", type=int, default=0, help="runner requests in flight per replica (0: from rate)")
    ap.add_argument("--flood", type=int, default=0, help="connections of one person flooding 20 KB drafts")
    ap.add_argument("--app-arg", action="append", default=[], help="an extra argument of python -m webapp")
    ap.add_argument(
        "--cpu-per-action",
        type=int,
        default=0,
        metavar="K",
        help="instead: one annotator, no job, each action K times (at most 29: saves per clip are limited); "
        "prints the app's CPU ms per action",
    )
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data dir (printed)")
    args = ap.parse_args(argv)

    from tests.support.reliability_fixtures import AppProcess, job_feeder

    work = Path(tempfile.mkdtemp(prefix="bench-team-"))
    settings = Settings.load({"data_dir": str(work / "var"), "fleet_mode": "sim"}, environ={})
    t = time.monotonic()
    ids, prompt_id = build_library(settings, args.clips, args.annotators, args.flood)
    print(
        f"library: {len(ids)} clips with a machine caption, {args.annotators} annotators ({time.monotonic() - t:.0f} s)"
    )
    if args.cpu_per_action:
        return _cpu_per_action(args, settings, ids, work)
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=args.fleet_speed)
    inflight = args.inflight or max(4, round(args.job_rate * 0.5 / 2))
    runner_cmd = fleet_commands.runner_command(
        settings,
        fleet.urls,
        ["--per-replica-inflight", str(inflight), "--backoff-base", "0.05", "--log-level", "WARNING"],
    )
    runner = procs.start("runner", runner_cmd, log=work / "runner.log", cwd=REPO)
    app = AppProcess(settings, work / "webapp.log", extra=list(args.app_arg))
    feed_stop = threading.Event()
    stats = Stats()
    result: dict = {}
    try:
        with job_feeder(settings.db, ids, feed_stop, prompt_id=prompt_id, period=1.0):
            app.start(timeout=180)
            app_pid = app.child.pid
            print(f"app pid {app_pid} at {app.url}", flush=True)
            result = asyncio.run(_run(args, app.url, ids, stats, app_pid, runner.pid, fleet, settings))
    finally:
        feed_stop.set()
        app.stop()
        procs.stop_group(runner.pgid, runner.pid, grace=10, popen=runner.popen)
        fleet.stop()
    _report(args, stats, result)
    if args.keep:
        print(f"data dir kept: {work}")
    return 0 if not stats.errors else 1


def _cpu_per_action(args, settings: Settings, ids: list[int], work: Path) -> int:
    """The app's CPU time per action, one action at a time (CPU seconds do not depend on what else the machine
    runs, so this figure holds on a shared machine where latencies do not)."""
    from tests.support.reliability_fixtures import AppProcess

    # the app's work is measured here, not the write budget: one person makes every action in a row
    unlimited = ["--write-budget", "1000000", "--write-burst", "1000000"]
    app = AppProcess(settings, work / "webapp.log", extra=unlimited + list(args.app_arg))
    app.start(timeout=180)
    try:
        figures = asyncio.run(_serial(app.url, app.child.pid, ids, args.cpu_per_action))
    finally:
        app.stop()
    print(f"\nthe app's CPU per action, {args.cpu_per_action} of each in a row, one at a time (ms of CPU each):")
    for action, xs in figures.items():
        print(f"  {action:<8} {xs[0]:7.1f}")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "cpu_ms": figures}, indent=2))
    return 0


async def _serial(url: str, pid: int, ids: list[int], k: int) -> dict[str, list[float]]:
    proc = psutil.Process(pid)

    def cpu() -> float:
        t = proc.cpu_times()
        return t.user + t.system

    out: dict[str, list[float]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False) as http:
        r = await http.post("/login", data={"username": "ann00", "password": PASSWORD, "next": "/"})
        assert r.status_code == 303, r.text
        deps = {d["api_name"]: d for d in (await http.get("/config")).json()["dependencies"] if d.get("api_name")}
        tab = Tab(http, deps, deps["save_caption"]["inputs"][3:11])
        await tab.call("open_clip", event_data={"clip": ids[0]})

        idle_c, idle_t = cpu(), time.perf_counter()
        await asyncio.sleep(3)  # the app's CPU while nobody asks anything (Gradio's queue polls): subtracted
        idle = (cpu() - idle_c) / (time.perf_counter() - idle_t)

        async def measure(action: str, make) -> None:
            """`k` of one action in a row: the app's CPU over them, less its idle rate, per action."""
            c, t = cpu(), time.perf_counter()
            for i in range(k):
                await make(i)
            used = cpu() - c - idle * (time.perf_counter() - t)
            out[action] = [max(0.0, used) * 1000 / k]

        text_id = tab.form_ids[0]

        async def edit(i: int) -> None:
            tab.form[text_id] = f"an edit {i}: the pedestrian waits"
            await http.put(f"/drafts/{tab.clip}", json={"base": tab.base, "text": tab.form[text_id], "labels": {}})

        async def save(i: int) -> None:
            tab.form[text_id] = f"a saved edit {i}: the pedestrian waits"
            await tab.call("save_caption", tab.values())

        await measure("open", lambda i: tab.call("open_clip", tab.values(), event_data={"clip": ids[1 + i % 50]}))
        await measure("n", lambda i: tab.call("next_unreviewed", tab.values()))
        await measure("draft", edit)
        await measure("lease", lambda i: http.post(f"/leases/{tab.clip}"))
        await measure("save", save)
        await measure("approve", lambda i: tab.call("approve", tab.values()))
        await measure("history", lambda i: tab.call("history_newest", [tab.clip]))
    return out


async def _run(args, url: str, ids: list[int], stats: Stats, app_pid: int, runner_pid: int, fleet, settings) -> dict:
    stop = asyncio.Event()
    names = [f"ann{i:02d}" for i in range(args.annotators)]
    tasks = [asyncio.create_task(annotator(i, n, url, stats, stop, ids)) for i, n in enumerate(names)]
    tasks += [asyncio.create_task(flooder(k, url, "mallory", stats, stop)) for k in range(args.flood)]
    pace = asyncio.create_task(_pace_job(fleet, settings, args.job_rate, args.fleet_speed, stop))
    await asyncio.sleep(args.warmup)
    fleet_pids = [fleet.process.pid] if hasattr(fleet, "process") else []
    groups = {
        "app": lambda: family(app_pid),
        "runner": lambda: family(runner_pid),
        "fleet": lambda: [p for pid in fleet_pids for p in family(pid)],
        "annotators (this process)": lambda: [psutil.Process()],
    }
    cpu0 = {k: cpu_of(f()) for k, f in groups.items()}
    _, threads0 = busiest_thread(app_pid, {})
    sched0 = schedstat(app_pid)
    db = dbmod.connect(settings.db)
    model0 = db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
    t0 = time.monotonic()
    stats.measuring = True
    samples = []
    while time.monotonic() - t0 < args.seconds:
        await asyncio.sleep(min(10.0, args.seconds - (time.monotonic() - t0)))
        samples.append({"t": round(time.monotonic() - t0), "load": os.getloadavg()[0]})
    stats.measuring = False
    elapsed = time.monotonic() - t0
    cpu = {k: (cpu_of(f()) - cpu0[k]) / elapsed for k, f in groups.items()}
    busiest, _ = busiest_thread(app_pid, threads0)
    sched1 = schedstat(app_pid)
    loop = [b - a for a, b in zip(sched0.get(app_pid, (0, 0)), sched1.get(app_pid, (0, 0)))]
    waited = sum(v[1] - sched0.get(t, (0, 0))[1] for t, v in sched1.items())
    model1 = db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
    db.close()
    stop.set()
    await asyncio.wait([*tasks, pace], timeout=120)
    return {
        "elapsed": elapsed,
        "cpu": cpu,
        "app_busiest_thread": busiest / elapsed,
        # the event loop's thread: the share of the window it ran, and the share it was ready but had no CPU
        "app_loop_running": loop[0] / elapsed,
        "app_loop_waiting_for_cpu": loop[1] / elapsed,
        "app_threads_waiting_for_cpu": waited / elapsed,
        "captions_per_s": (model1 - model0) / elapsed,
        "load": samples,
    }


def _report(args, stats: Stats, result: dict) -> None:
    print(
        f"\n{args.annotators} annotators for {result.get('elapsed', 0):.0f} s (after {args.warmup:.0f} s warm-up), "
        f"job {result.get('captions_per_s', 0):.1f} captions/s; machine: {os.cpu_count()} cores, load average "
        f"{statistics.mean(s['load'] for s in result.get('load', [{'load': 0}])):.1f} during the run"
    )
    print(
        f"{'action':<10} {'count':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}   queue wait p50/p95 ms"
    )
    figures = {}
    for action in ("open", "n", "draft", "save", "approve", "reload", "lease"):
        xs = stats.ms.get(action, [])
        if not xs:
            continue
        q = stats.queue_ms.get(action, [])
        figures[action] = {
            "count": len(xs),
            "p50": pct(xs, 50),
            "p95": pct(xs, 95),
            "p99": pct(xs, 99),
            "max": max(xs),
            "queue_p50": pct(q, 50) if q else None,
            "queue_p95": pct(q, 95) if q else None,
        }
        f = figures[action]
        queue = f"{f['queue_p50']:.0f}/{f['queue_p95']:.0f}" if q else "-"
        print(
            f"{action:<10} {len(xs):>6} {f['p50']:>8.0f} {f['p95']:>8.0f} {f['p99']:>8.0f} {f['max']:>8.0f}   {queue}"
        )
    flood = {k: len(v) for k, v in stats.ms.items() if k.startswith("flood")}
    if flood:
        print("flood answers:", ", ".join(f"{k.split()[1]}: {v}" for k, v in sorted(flood.items())))
    cpu = result.get("cpu", {})
    print(
        "CPU (cores): "
        + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        + f"; the app's busiest thread {result.get('app_busiest_thread', 0):.2f}"
    )
    print(
        f"the app's event loop (main thread): running {result.get('app_loop_running', 0):.0%} of the window, "
        f"ready but waiting for a CPU {result.get('app_loop_waiting_for_cpu', 0):.0%}; all the app's threads "
        f"together waited {result.get('app_threads_waiting_for_cpu', 0):.2f} CPU-seconds per second for a CPU"
    )
    print(f"errors: {len(stats.errors)}; conflicts (the job wrote the clip meanwhile, explicit): {stats.conflicts}")
    for e in stats.errors[:10]:
        print("  ", e)
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"out": str(args.out)},
                    "figures": figures,
                    "flood": flood,
                    **result,
                    "errors": stats.errors,
                    "conflicts": stats.conflicts,
                },
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
