"""Issue 46's fault runs, one after another on one running workbench, with figures (point 6; docs/RELIABILITY.md,
"Issue 46").

The workbench as launch.sh runs it, on a small real filesystem (tests/support/small_filesystem.py) holding the data
dir, the database and every log: the simulated fleet, the runner under its supervisor, the web app, each process's
output through its log sink (serving.procs.start), the sinks' free-space floor at 16 MiB. Three annotators save
through the page's path (tests/support/reliability_fixtures.AnnotatorLoad) and a lead's job is always queued
(job_feeder) while, in turn:

1. the runner is SIGKILLed (the supervisor restarts it);
2. the runner is frozen (SIGSTOP) outside any write transaction, then 3. inside its own write transaction (caught
   when the kernel's lock table names it as the holder: tests/support/freeze.py): the supervisor kills and
   replaces it; after an inside freeze, the time until another writer gets the lock is measured;
4. the app is SIGKILLed and started again on the same port and data dir;
5. the filesystem is filled to the last byte for a while, then freed;
6. the first annotator sends malformed read events of 4 MiB (too few inputs, one huge value) from 3 connections.

Then the load stops, the last job is finished, and the database is checked: every acknowledged save is there once
with the parent its form was loaded from (check_oracle), no caption is written twice for one clip of one job, every
finished job captioned each clip once, integrity_check ok, the audit trail complete. Errors an annotator got are
only the sentences of a busy database (during an inside freeze) or a full disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

from data import db as dbmod, heartbeats, prompts
from data.jobs import queries as job_queries
from data.library import clip_root
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import procs, simfleet
from serving.launch import commands as fleet_commands
from tests.support.audit_checks import assert_audit_complete, check_oracle
from tests.support.freeze import freeze_inside_a_write, freeze_outside_a_write
from tests.support.reliability_fixtures import (
    AnnotatorLoad,
    AppProcess,
    GradioError,
    GradioSession,
    add_annotators,
    dependencies,
    job_feeder,
    login_cookie,
    pct,
)
from tests.support.small_filesystem import CannotMount, SmallFilesystem
from webapp import budget, failures, guard

REPO = Path(__file__).resolve().parents[2]
BUSY, FULL = "database is busy", "disk is full"
FLOOR = "16M"


@dataclasses.dataclass
class Counts:
    runner_kills: int = 3
    freezes_outside: int = 2
    freezes_inside: int = 2
    app_kills: int = 3
    full_disk_s: float = 15.0
    flood_events: int = 1000
    clips: int = 40
    filesystem_mb: int = 192


def _live_runner(db_path, not_pid=None, timeout=120.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = dbmod.connect(db_path)
        try:
            for b in heartbeats.heartbeats(d, "runner"):
                if b["pid"] != not_pid and procs.pid_alive(b["pid"]) and b["age_s"] < 5:
                    return b["pid"]
        except sqlite3.Error:
            pass
        finally:
            d.close()
        time.sleep(0.2)
    raise AssertionError(f"no live runner within {timeout} s (other than {not_pid})")


def _gone(pid: int, timeout: float = 120.0) -> float:
    t = time.monotonic()
    while procs.pid_alive(pid):
        assert time.monotonic() - t < timeout, f"pid {pid} still alive after {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - t


def _lock_within(db_path, seconds: float) -> float | None:
    t = time.monotonic()
    other = sqlite3.connect(str(db_path), timeout=seconds)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.rollback()
        return time.monotonic() - t
    except sqlite3.OperationalError:
        return None
    finally:
        other.close()


def _logs_bytes(logs: Path) -> int:
    return sum(p.stat().st_size for p in logs.rglob("*") if p.is_file())


def _flood(url: str, cookie: str, deps: dict, dep: dict, n: int, value: str, out: list) -> None:
    tab = GradioSession(url, cookie, deps, timeout=120)
    try:
        for _ in range(n):
            try:
                tab.call_raw(dep, [value])
                out.append("answered")
            except GradioError as e:
                out.append(str(e)[:120])
    finally:
        tab.close()


def run_faults(tmp_path: Path, counts: Counts, *, say=print) -> dict:
    """Run the faults of the module docstring; returns the figures. AssertionError on a lost save, a duplicated
    caption or an error that is neither a busy database nor a full disk."""
    tmp_path = Path(tmp_path)
    fs = SmallFilesystem(tmp_path / "disk", counts.filesystem_mb)
    try:
        fs.__enter__()
        base = fs.path
    except (CannotMount, FileNotFoundError) as e:
        say(f"cannot mount a small filesystem here ({e}): no full disk in this run")
        fs, base = None, tmp_path
    old_floor = os.environ.get("CW_LOG_FREE_FLOOR")
    os.environ["CW_LOG_FREE_FLOOR"] = FLOOR  # every log sink started below reads it
    settings = Settings.load(
        {"data_dir": str(base / "var"), "clip_root": str(tmp_path / "clips"), "fleet_mode": "sim"}, environ={}
    )
    logs = settings.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, counts.clips)
    clip_root.record_root(db, settings.clip_root)  # the clips off the small filesystem, where the runner finds them
    prompt = prompts.latest(db)["id"]
    db.close()
    names = add_annotators(settings.db, 3)
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=0.2)
    runner_cmd = fleet_commands.runner_command(
        settings, fleet.urls, ["--backoff-base", "0.05", "--log-level", "WARNING"]
    )
    sup_cmd = [sys.executable, "-m", "serving.supervisor", "--name", "runner", "--data-dir", str(settings.data_dir)]
    supervisor = procs.start("runner", [*sup_cmd, "--", *runner_cmd], log=logs / "runner.log", cwd=REPO)
    # three people at a human pace make 20-40 writes a minute each; the first also floods: a budget they keep
    app = AppProcess(settings, logs / "app.log", extra=["--write-budget", "100000", "--write-burst", "10000"])
    figures: dict = {"filesystem_mib": counts.filesystem_mb if fs else None}
    phases: dict[str, dict] = {}
    stop = threading.Event()
    t_all = time.monotonic()
    try:
        with job_feeder(settings.db, ids, stop, prompt_id=prompt) as made:
            app.start(timeout=180)
            with AnnotatorLoad(lambda: app.url, names, ids, think=(0.2, 0.6), seed=46) as load:
                load.wait_saved(10, timeout=300)

                @contextlib.contextmanager
                def phase(name: str):
                    n0, t0 = len(load.answers), time.monotonic()
                    out: dict = {}
                    yield out
                    got = load.answers[n0:]
                    out.update(
                        seconds=round(time.monotonic() - t0, 1),
                        saved=sum(a.kind == "saved" for a in got),
                        busy=sum(a.kind == "error" and BUSY in a.message for a in got),
                        full=sum(a.kind == "error" and FULL in a.message for a in got),
                        other_errors=sum(
                            a.kind == "error" and BUSY not in a.message and FULL not in a.message for a in got
                        ),
                    )
                    phases[name] = out
                    say(f"{name}: {out}")

                with phase("runner SIGKILL") as out:
                    back = []
                    for _ in range(counts.runner_kills):
                        pid = _live_runner(settings.db)
                        os.kill(pid, signal.SIGKILL)
                        t = time.monotonic()
                        _live_runner(settings.db, not_pid=pid)
                        back.append(round(time.monotonic() - t, 1))
                    out["back_s"] = back
                with phase("runner SIGSTOP outside a transaction") as out:
                    killed, back = [], []
                    for _ in range(counts.freezes_outside):
                        pid = _live_runner(settings.db)
                        freeze_outside_a_write(pid, settings.db)
                        t = time.monotonic()
                        killed.append(round(_gone(pid), 1))
                        _live_runner(settings.db, not_pid=pid)
                        back.append(round(time.monotonic() - t, 1))
                    out.update(killed_s=killed, back_s=back)
                with phase("runner SIGSTOP inside its write transaction") as out:
                    killed, lock, back, tries = [], [], [], []
                    for _ in range(counts.freezes_inside):
                        pid = _live_runner(settings.db)
                        tries.append(freeze_inside_a_write(pid, settings.db))
                        t = time.monotonic()
                        killed.append(round(_gone(pid), 1))
                        got = _lock_within(settings.db, 10.0)
                        lock.append(None if got is None else round(got, 3))
                        _live_runner(settings.db, not_pid=pid)
                        back.append(round(time.monotonic() - t, 1))
                    out.update(stops_to_catch=tries, killed_s=killed, next_write_lock_s=lock, back_s=back)
                with phase("app SIGKILL") as out:
                    restart = []
                    for _ in range(counts.app_kills):
                        time.sleep(3)
                        app.kill()
                        restart.append(round(app.start(timeout=180), 1))
                    time.sleep(3)
                    out["restart_to_serving_s"] = restart
                if fs is not None:
                    with phase("full disk") as out:
                        db = dbmod.connect(settings.db)
                        before = db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
                        db.close()
                        out["filled_mib"] = round(fs.fill() / 2**20, 1)
                        time.sleep(counts.full_disk_s)
                        fs.free()
                        saved = sum(a.kind == "saved" for a in load.answers)
                        load.wait_saved(saved + 10, timeout=300)
                        deadline = time.monotonic() + 300
                        while time.monotonic() < deadline:
                            db = dbmod.connect(settings.db)
                            after = db.execute("SELECT COUNT(*) FROM captions WHERE source = 'model'").fetchone()[0]
                            db.close()
                            if after > before + 10:
                                break
                            time.sleep(1)
                        out["machine_captions"] = f"{before} -> {after}"
                with phase("log flood") as out:
                    cookie = login_cookie(app.url, names[0])  # the first annotator, who is saving meanwhile
                    deps = dependencies(app.url, cookie)
                    dep = next(d for n, d in sorted(deps.items()) if not budget.writes(n) and len(d["inputs"]) > 1)
                    value = "x" * (guard.MAX_BODY - 2048)
                    grew0 = _logs_bytes(logs)
                    answers: list = []
                    share = [counts.flood_events // 3 + (i < counts.flood_events % 3) for i in range(3)]
                    threads = [
                        threading.Thread(target=_flood, args=(app.url, cookie, deps, dep, n, value, answers))
                        for n in share
                    ]
                    for th in threads:
                        th.start()
                    for th in threads:
                        th.join(3600)
                    out.update(
                        events=len(answers),
                        of_bytes=len(value),
                        refused=sum(a != "answered" for a in answers),
                        logs_grew_bytes=_logs_bytes(logs) - grew0,
                    )
                    assert out["logs_grew_bytes"] <= 1_000_000, out
            stop.set()
        # the feeder stopped: the runner finishes the jobs it made
        deadline = time.monotonic() + 600
        db = dbmod.connect(settings.db)
        try:
            while any(job_queries.get(db, j)["state"] != "done" for j in made):
                assert time.monotonic() < deadline, [job_queries.progress(db, j) for j in made[-2:]]
                time.sleep(1)
            oracle = check_oracle(db, load.answers)
            audit = assert_audit_complete(db)
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            twice = db.execute(
                "SELECT COUNT(*) FROM (SELECT job_id, clip_id FROM captions WHERE job_id IS NOT NULL "
                "GROUP BY job_id, clip_id HAVING COUNT(*) > 1)"
            ).fetchone()[0]
            short = [
                j
                for j in made
                if db.execute("SELECT COUNT(DISTINCT clip_id) FROM captions WHERE job_id = ?", [j]).fetchone()[0]
                != len(ids)
            ]
            sup = next((b for b in heartbeats.heartbeats(db, "supervisor")), {"info": {}})["info"]
        finally:
            db.close()
        others = [a for a in load.answers if a.kind == "error" and BUSY not in a.message and FULL not in a.message]
        saves_ms = [a.ms for a in load.answers if a.kind == "saved"]
        figures.update(
            phases=phases,
            oracle=oracle,
            audit=audit,
            jobs=len(made),
            captions_duplicated=twice,
            jobs_missing_a_clip=len(short),
            answers=load.summary(),
            save_p50_ms=round(pct(saves_ms, 50)),
            supervisor=sup,
            logs={str(p.relative_to(logs)): p.stat().st_size for p in sorted(logs.rglob("*")) if p.is_file()},
            minutes=round((time.monotonic() - t_all) / 60, 1),
        )
        assert twice == 0, f"{twice} captions written twice for one clip of one job"
        assert not short, f"jobs {short} did not caption every clip"
        assert not others, f"{len(others)} errors that are neither a busy database nor a full disk: {others[:3]}"
        assert failures.BUSY[1].startswith("the database is busy") and FULL in failures.FULL[1]
        return figures
    finally:
        stop.set()
        app.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor.pgid, signal.SIGCONT)  # a runner left frozen by a failure takes the SIGTERM
        procs.stop_group(supervisor.pgid, supervisor.pid, grace=15, popen=supervisor.popen)
        fleet.stop()
        if old_floor is None:
            os.environ.pop("CW_LOG_FREE_FLOOR", None)
        else:
            os.environ["CW_LOG_FREE_FLOOR"] = old_floor
        if fs is not None:
            fs.free()
            fs.__exit__(None, None, None)
