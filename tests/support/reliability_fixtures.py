"""Helpers for the reliability and security suites (R1, R4, R5, R8, R9, S2, S4, S5).

- `AppProcess`: the real web app (`python -m webapp`) in its own process group on a free loopback port,
  SIGKILL-able and restartable on the same data dir (the session key there keeps cookies valid).
- `GradioSession`: one browser tab's worth of Gradio, spoken over raw HTTP (`/gradio_api/queue/join` +
  the SSE stream `/gradio_api/queue/data`) with a logged-in cookie and one session hash, so `gr.State`
  (the clip id and the caption version the form was loaded from) lives on the server exactly as for a
  browser.
- `AnnotatorLoad`: N annotator threads doing open clip -> edit -> save on shared clips through those
  sessions, keeping an oracle log of every answer; `check_oracle` (tests/support/audit_checks.py) compares
  it with the database, and `assert_audit_complete(db)` checks R9 there.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sqlite3
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from data import db as dbmod, examples, taxonomy, users
from data.job_params import JobParams
from data.jobs.selection import Selection
from serving import procs
from serving.launch import commands as fleet_commands

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery"
LABELS = examples.HAZARD_LABELS
VERSION_RE = re.compile(r'<table class="cw-prov" data-version="(\d+)"')
SAVED_RE = re.compile(r"Saved as version (\d+)")


def pct(xs, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def add_annotators(db_path, n: int, *, prefix: str = "ann") -> list[str]:
    db = dbmod.connect(db_path)
    names = []
    for i in range(n):
        name = f"{prefix}{i:02d}"
        if users.get(db, name) is None:
            users.create(db, name, role="annotator", password=PASSWORD)
        names.append(name)
    db.close()
    return names


# ---- the web app as a real process ----------------------------------------------------------------------------
class AppProcess:
    """`python -m webapp` on 127.0.0.1:free port, own process group; `kill()` is SIGKILL to the group."""

    def __init__(self, settings, log: Path, *, extra: list[str] | None = None):
        self.settings = settings
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.cmd = [
            sys.executable,
            "-m",
            "webapp",
            "--data-dir",
            str(settings.data_dir),
            "--db",
            str(settings.db),
            "--clip-root",
            str(settings.clip_root),
            "--port",
            str(self.port),
            "--fleet-mode",
            "sim",
            *(extra or []),
        ]
        self.child: procs.Child | None = None

    def start(self, timeout: float = 60.0) -> float:
        """Start and wait until it serves (GET /login 200). Returns seconds from spawn to serving."""
        t0 = time.monotonic()
        env = {
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "NO_PROXY": "localhost,127.0.0.1",
            "GRADIO_TEMP_DIR": str(Path(self.settings.data_dir) / "gradio-tmp"),
        }
        self.child = procs.start("webapp", self.cmd, log=self.log, env=env, cwd=REPO, health=self.url + "/login")
        procs.wait_healthy([self.child], timeout=timeout, interval=0.05)
        return time.monotonic() - t0

    def kill(self) -> None:
        if self.child is not None:
            procs.kill_group(self.child.pgid, self.child.popen)

    def stop(self) -> None:
        if self.child is not None:
            procs.stop_group(self.child.pgid, self.child.pid, grace=5, popen=self.child.popen)


def login_cookie(url: str, user: str, password: str = PASSWORD) -> str:
    r = httpx.post(
        url + "/login", data={"username": user, "password": password, "next": "/"}, timeout=30, trust_env=False
    )
    assert r.status_code == 303, (user, r.status_code, r.text[:200])
    return r.cookies["cw_session"]


# ---- Gradio over raw HTTP -------------------------------------------------------------------------------------
# what an error event must never carry to a person: an object's repr, Gradio's or Python's own error text, a
# traceback (issue 27, class 2)
LEAKS = re.compile(
    r"object at 0x|<[\w.]+ object|gradio\.|Traceback|\b\w+(Error|Exception)\b|has no attribute|not subscriptable|"
    r"Error binding|Wanted inputs|Could not preprocess|positional argument|keyword argument|NoneType|"
    r"not supported between|Returned dictionary"
)


def post_login(url: str, user: str, password: str = PASSWORD, headers=None) -> httpx.Response:
    """One POST of the login form, as a browser sends it (headers: a forged X-Forwarded-For, say)."""
    return httpx.post(
        url + "/login",
        data={"username": user, "password": password, "next": "/"},
        timeout=30,
        trust_env=False,
        headers=headers or {},
    )


class GradioError(Exception):
    """An event answered with an error (gr.Error, a crash) or an HTTP refusal."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class NoAnswer(GradioError):
    """An event that did not answer in time (GradioSession.call_raw's `within`)."""


def dependencies(url: str, cookie: str | None) -> dict[str, dict]:
    """api_name -> the dependency from /config (id, inputs, outputs)."""
    r = httpx.get(url + "/config", cookies={"cw_session": cookie} if cookie else None, timeout=30, trust_env=False)
    r.raise_for_status()
    cfg = r.json()
    return {d["api_name"]: d for d in cfg["dependencies"] if d.get("api_name")}


class GradioSession:
    """One tab: a cookie, a session hash, and calls through the queue like the browser's."""

    def __init__(self, url: str, cookie: str | None, deps: dict[str, dict], *, timeout: float = 30.0):
        self.url = url
        self.deps = deps
        self.hash = uuid.uuid4().hex[:11]
        self.http = httpx.Client(
            base_url=url, cookies={"cw_session": cookie} if cookie else None, timeout=timeout, trust_env=False
        )

    def close(self) -> None:
        self.http.close()

    def call(self, api_name: str, data: list | None = None, *, event_data=None) -> list:
        """Run one event; returns its output values. Raises GradioError for an error answer."""
        dep = self.deps[api_name]
        data = list(data or [])
        data += [None] * (len(dep["inputs"]) - len(data))
        return self.call_raw(dep, data, event_data=event_data)

    def call_raw(self, dep: dict, data: list, *, event_data=None, within: float | None = None) -> list:
        """Run the event of dependency `dep` with `data` exactly as given (too few values too). `within`: raise
        NoAnswer once that many seconds pass without its result (checked at each message of the stream, and
        at the client's read timeout)."""
        deadline = time.monotonic() + within if within is not None else None
        r = self.http.post(
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
            raise GradioError(f"HTTP {r.status_code}: {r.text[:200]}", r.status_code)
        event_id = r.json()["event_id"]
        with self.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": self.hash}) as resp:
            if resp.status_code != 200:
                raise GradioError(f"HTTP {resp.status_code} on the event stream", resp.status_code)
            for line in resp.iter_lines():
                if deadline is not None and time.monotonic() > deadline:
                    raise NoAnswer(f"no answer within {within} s")
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, event_id):
                    continue
                if msg.get("msg") == "process_completed":
                    if not msg.get("success", False):
                        out = msg.get("output") or {}
                        raise GradioError(str(out.get("error") or out or "error"))
                    return msg["output"]["data"]
                if msg.get("msg") == "unexpected_error":
                    raise GradioError(str(msg.get("message")))
        raise GradioError("the event stream ended without a result")


def output_of(session: GradioSession, api_name: str, outputs: list, elem_hint: str) -> list:
    """The values of outputs whose component's rendered value contains `elem_hint` (helper for asserts)."""
    return [v for v in outputs if isinstance(v, str) and elem_hint in v]


# ---- annotators with an oracle --------------------------------------------------------------------------------
@dataclass
class Answer:
    user: str
    clip_id: int
    text: str
    seen_version: int | None  # the current version shown when the form was loaded (None: no caption)
    kind: str  # saved | conflict | error | dropped (no answer: the connection dropped)
    ms: float
    message: str = ""


@dataclass
class AnnotatorLoad:
    """`n` annotators (threads), each a logged-in Gradio session editing random clips of `clip_ids`."""

    url_of: "callable"  # () -> current app URL (it changes when the app is restarted on a new port: it doesn't)
    names: list[str]
    clip_ids: list[int]
    think: tuple[float, float] = (0.0, 0.05)
    seed: int = 0
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)
    _login: dict = field(default_factory=dict)

    def _session(self, name: str) -> GradioSession:
        """A new tab (new session hash). The login cookie and the event table are kept across app restarts:
        the signing key lives in the data dir and the Blocks are the same, as for a browser that reloads."""
        url = self.url_of()
        if name not in self._login:
            cookie = login_cookie(url, name)
            self._login[name] = (cookie, dependencies(url, cookie))
        cookie, deps = self._login[name]
        return GradioSession(url, cookie, deps)

    def _worker(self, idx: int, name: str) -> None:
        rng = random.Random(self.seed * 1000 + idx)
        session = None
        n = 0
        down = 0  # consecutive failures to reach the app: back off, as a browser's reconnect does
        held: tuple[int, int | None] | None = None  # (clip, version) the session's form holds
        while not self.stop.is_set():
            try:
                if session is None:
                    session = self._session(name)
                    held = None
                cid = rng.choice(self.clip_ids)
                if held is not None and held[1] is None and held[0] == cid and len(self.clip_ids) > 1:
                    # the form holds this clip in a state the oracle did not follow (a conflict, an error)
                    cid = rng.choice([c for c in self.clip_ids if c != cid])
                out = session.call("open_clip", event_data={"clip": cid})
                m = VERSION_RE.search(" ".join(v for v in out if isinstance(v, str)))
                if m:
                    seen = int(m.group(1))
                elif held is not None and held[0] == cid and held[1] is not None:
                    seen = held[1]  # the clip already open: the answer changes nothing, the form keeps its version
                else:
                    seen = None
                held = (cid, seen)
                down = 0
            except (httpx.HTTPError, GradioError, AssertionError, OSError):
                if session is not None:
                    session.close()
                session = None
                down += 1
                # 20 threads retrying every 50 ms starve the app they wait for on a 2-core machine
                self.stop.wait(rng.uniform(0.5, 1.0) * min(1.0, 0.05 * 2 ** min(down, 5)))
                continue
            time.sleep(rng.uniform(*self.think))
            n += 1
            text = f"{name} edit {n} of clip {cid}: the pedestrian steps out {rng.random():.6f}"
            t = time.perf_counter()
            try:
                # the form's states (clip, caption version, review state) come from the session, as in a tab
                out = session.call("save_caption", [None, None, None, text, *[LABELS[k] for k in taxonomy.ENUMS]])
            except (httpx.HTTPError, OSError) as e:
                ans = Answer(name, cid, text, seen, "dropped", (time.perf_counter() - t) * 1000, repr(e)[:200])
                session.close()
                session = None
            except GradioError as e:
                ans = Answer(name, cid, text, seen, "error", (time.perf_counter() - t) * 1000, str(e)[:300])
                held = (cid, None)
            else:
                ms = (time.perf_counter() - t) * 1000
                msg = " ".join(v for v in out if isinstance(v, str) and "cw-msg" in v) or " ".join(
                    v for v in out if isinstance(v, str) and ("Saved as version" in v or "changed by" in v)
                )
                if "Saved as version" in msg:
                    ans = Answer(name, cid, text, seen, "saved", ms, msg[:200])
                    v = SAVED_RE.search(msg)
                    held = (cid, int(v.group(1))) if v else None  # the form now holds the version it saved
                elif "changed by" in msg and "after you opened it" in msg:
                    ans = Answer(name, cid, text, seen, "conflict", ms, msg[:300])
                    held = (cid, None)
                else:
                    ans = Answer(name, cid, text, seen, "error", ms, msg[:300])
                    held = (cid, None)
            with self.lock:
                self.answers.append(ans)
        if session is not None:
            session.close()

    def __enter__(self) -> "AnnotatorLoad":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Always stop the threads: left running after a failure they would slow every later test."""
        if exc_type is None:
            self.finish()
        else:
            self.stop.set()
            for th in self.threads:
                th.join(60)

    def start(self) -> None:
        for i, name in enumerate(self.names):
            th = threading.Thread(target=self._worker, args=(i, name), daemon=True, name=f"annotator-{name}")
            th.start()
            self.threads.append(th)

    def wait_saved(self, n: int, timeout: float) -> None:
        """Keep the load running until `n` saves were acknowledged (or `timeout` passes): the promises need saves
        to have happened, and how many fit in a fixed time varies 5x with the machine's load."""
        deadline = time.monotonic() + timeout
        while sum(a.kind == "saved" for a in self.answers) < n and time.monotonic() < deadline:
            time.sleep(0.2)

    def finish(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(60)
        assert not any(th.is_alive() for th in self.threads), "an annotator thread hung"

    def summary(self) -> dict:
        kinds = {}
        for a in self.answers:
            kinds[a.kind] = kinds.get(a.kind, 0) + 1
        saved_ms = [a.ms for a in self.answers if a.kind in ("saved", "conflict")]
        return {
            "answers": len(self.answers),
            **kinds,
            "save_p50_ms": round(pct(saved_ms, 50), 1),
            "save_p95_ms": round(pct(saved_ms, 95), 1),
            "save_p99_ms": round(pct(saved_ms, 99), 1),
            "save_max_ms": round(max(saved_ms, default=float("nan")), 1),
        }


@contextlib.contextmanager
def job_feeder(db_path, clip_ids: list[int], stop: threading.Event, *, prompt_id=None, period: float = 0.5):
    """Keeps a captioning job queued over `clip_ids` (a new one when the last is done) for a runner. Like a lead
    whose "Start job" was refused, it tries again a moment later when the database cannot take the write (a full
    disk): the runs that fill the disk test what happens once space is back, which needs a job to run."""
    from data import jobs
    from data.jobs import queries as job_queries

    created = []

    def loop():
        d = dbmod.connect(db_path)
        try:
            while not stop.is_set():
                try:
                    if not created or job_queries.get(d, created[-1])["state"] in ("done", "cancelled"):
                        created.append(
                            jobs.create(
                                d,
                                name=f"r1 machine pass {len(created) + 1}",
                                created_by="lead",
                                selection=Selection.of_clips(clip_ids),
                                prompt_id=prompt_id,
                                params=JobParams(),
                            )
                        )
                except sqlite3.OperationalError:  # refused, nothing written: try again next period
                    pass
                stop.wait(period)
        finally:
            d.close()

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        yield created
    finally:
        stop.set()
        th.join(10)


# ---- R1/R4/R5: annotators + a job through the real app, runner and simulated fleet ----------------------------
@dataclass
class Rig:
    settings: object
    clip_ids: list[int]
    app: AppProcess
    names: list[str]
    runner_cmd: list[str]
    log_dir: Path


@contextlib.contextmanager
def annotation_rig(settings, tmp_path, *, clips: int = 40, annotators: int = 20, fleet_speed: float = 0.2):
    """A clip library (tiny real clips), `annotators` users, the simulated fleet, a runner process working
    on job after job over the same clips, and the web app as a process. Yields a Rig; tears it all down."""
    from data import prompts
    from data.library.clipgen import tiny_library
    from serving import simfleet

    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, clips)
    pid = prompts.latest(db)["id"]
    db.close()
    names = add_annotators(settings.db, annotators)
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=fleet_speed)
    runner_cmd = fleet_commands.runner_command(
        settings,
        fleet.urls,
        ["--per-replica-inflight", "3", "--backoff-base", "0.05", "--log-level", "WARNING"],
    )
    runner = procs.start("runner", runner_cmd, log=tmp_path / "runner.log", cwd=REPO)
    stop = threading.Event()
    # these annotators open and save with no think time, several times a human's pace: what R1 and R4 test is
    # concurrency, so each gets a write budget (webapp.budget) they cannot run out of
    app = AppProcess(settings, tmp_path / "webapp.log", extra=["--write-budget", "1000000", "--write-burst", "100000"])
    try:
        with job_feeder(settings.db, ids, stop, prompt_id=pid):
            app.start()
            yield Rig(settings, ids, app, names, runner_cmd, tmp_path)
    finally:
        app.stop()
        procs.stop_group(runner.pgid, runner.pid, grace=10, popen=runner.popen)
        fleet.stop()


def machine_captions(db) -> int:
    return db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
