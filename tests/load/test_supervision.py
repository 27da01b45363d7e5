"""Supervision that cannot die of reporting (issue 31, class 1; R12): the supervisor keeps the runner alive
through a log it cannot write and a full disk, restarts a runner that hangs (its heartbeat goes stale), and
leaves alone a runner that waits out a database that takes no writes.

The supervisor and the runner run as processes, as launch.sh starts them: `python -m serving.supervisor ... --
python -m serving.runner ...`, the supervisor's output (and the runner's) in DATA_DIR/logs/runner.log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data import db as dbmod, heartbeats, jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library import clip_root
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import procs, simfleet, supervisor
from serving.launch import commands as fleet_commands

pytestmark = pytest.mark.waits  # minutes of the product's clocks: started first (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]


def start_supervisor(settings, child: list[str], log, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "serving.supervisor",
        "--name",
        "runner",
        "--data-dir",
        str(settings.data_dir),
        *extra,
        "--",
        *child,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(cmd, start_new_session=True, env=env, stdout=log, stderr=log, cwd=REPO)


def stop_supervisor(sup: subprocess.Popen) -> None:
    try:
        os.killpg(sup.pid, signal.SIGCONT)  # a stopped runner must be able to take the SIGTERM
        os.killpg(sup.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        sup.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(sup.pid, signal.SIGKILL)
        sup.wait(5)
    procs.kill_group(sup.pid)  # whatever is left of the group (a runner the supervisor could not stop)


def beats(db_path) -> list[dict]:
    d = dbmod.connect(db_path)
    try:
        return heartbeats.heartbeats(d)
    finally:
        d.close()


def live_runner(db_path, *, not_pid=None, timeout=90.0, why="") -> dict:
    """The heartbeat of a live runner process (other than `not_pid`), waiting for one up to `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [
            b
            for b in beats(db_path)
            if b["kind"] == "runner" and b["pid"] != not_pid and procs.pid_alive(b["pid"]) and b["age_s"] < 5
        ]
        if got:
            return got[0]
        time.sleep(0.2)
    raise AssertionError(f"no live runner heartbeat within {timeout} s {why}")


def supervisor_beat(db_path) -> dict:
    return next((b for b in beats(db_path) if b["kind"] == "supervisor"), {"info": {}})


def test_a_supervisor_whose_log_cannot_be_written_keeps_restarting(settings, tmp_path):
    """Its output goes to /dev/full (every write: ENOSPC). Before, the first message killed it."""
    dbmod.connect(settings.db).close()
    child = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with open("/dev/full", "w") as full:
        sup = start_supervisor(
            settings, child, full, "--first-backoff", "0.05", "--backoff-cap", "0.2", "--stale-after", "0"
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and supervisor_beat(settings.db)["info"].get("restarts", 0) < 5:
            assert sup.poll() is None, f"the supervisor exited with {sup.returncode}"
            time.sleep(0.2)
        info = supervisor_beat(settings.db)["info"]
        assert info.get("restarts", 0) >= 5 and info["last_exit"] == 3, info
        assert sup.poll() is None
    finally:
        stop_supervisor(sup)


def test_the_best_effort_stream_drops_and_counts_what_the_disk_refuses(tmp_path):
    from serving import console

    r, w = os.pipe()
    with open("/dev/full", "wb", buffering=0) as full:
        stream = console.BestEffortStream(full.fileno())
        assert stream.write("lost line\n") == len("lost line\n")  # no OSError
        stream.write("another\n")
        assert stream.lost == 2
    ok = console.BestEffortStream(w)
    ok.lost, ok._why = 2, "No space left on device"
    ok.write("back\n")
    os.close(w)
    assert os.read(r, 1000).decode() == "[2 writes to this output were lost: No space left on device]\nback\n"
    os.close(r)


def _library(settings, n: int) -> tuple[list[int], int]:
    d = dbmod.connect(settings.db)
    try:
        ids = tiny_library(settings, d, n)
        clip_root.record_root(
            d, settings.clip_root
        )  # the clips sit off the small filesystem, where the runner finds them
        job = jobs.create(
            d,
            name="through a full disk",
            created_by="lead",
            selection=Selection.of_clips(ids),
            prompt_id=prompts.latest(d)["id"],
            params=JobParams(),
        )
    finally:
        d.close()
    return ids, job


def _progress(db_path, job_id) -> dict:
    d = dbmod.connect(db_path)
    try:
        return job_queries.progress(d, job_id)
    finally:
        d.close()


@pytest.mark.timeout(600)
@pytest.mark.serial  # the runner must reach a log write within the 15 s the disk is full: not on a crowded machine
def test_a_full_disk_mid_job_then_space_back_the_job_finishes_without_a_relaunch(small_filesystem, tmp_path):
    """The data dir (database, logs) on a 48 MiB filesystem, filled to the last byte mid-job for 15 s, then freed.
    Before: the runner died of "database or disk is full", the supervisor of its restart message, and the job
    stayed leased until a relaunch."""
    fs = small_filesystem(size_mb=48)
    settings = Settings.load({"data_dir": str(fs.path / "var"), "clip_root": str(tmp_path / "clips")}, environ={})
    ids, job_id = _library(settings, 60)
    logs = settings.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=0.5)
    runner = fleet_commands.runner_command(settings, fleet.urls, ["--backoff-base", "0.05"])
    with open(logs / "runner.log", "a") as log:
        sup = start_supervisor(settings, runner, log, "--first-backoff", "0.5")
    try:
        deadline = time.monotonic() + 120
        while _progress(settings.db, job_id)["done"] < 5:
            assert time.monotonic() < deadline, "the job did not start"
            assert sup.poll() is None, (logs / "runner.log").read_text()[-3000:]
            time.sleep(0.2)
        before = _progress(settings.db, job_id)
        took = fs.fill()
        assert fs.available() == 0
        full_until = time.monotonic() + 15
        while time.monotonic() < full_until:
            assert sup.poll() is None, f"the supervisor exited with {sup.returncode} on the full disk"
            time.sleep(0.5)
        during = _progress(settings.db, job_id)
        fs.free()
        deadline = time.monotonic() + 300
        while (prog := _progress(settings.db, job_id))["state"] != "done":
            assert time.monotonic() < deadline, f"the job did not finish after the space came back: {prog}"
            assert sup.poll() is None, f"the supervisor exited with {sup.returncode}"
            time.sleep(0.5)
        assert sup.poll() is None  # the same supervisor: nothing was relaunched
        text = (logs / "runner.log").read_text(errors="replace")
        d = dbmod.connect(settings.db)
        try:
            states = dict(d.execute("SELECT state, COUNT(*) FROM job_items WHERE job_id = ? GROUP BY state", [job_id]))
            per_clip = d.execute(
                "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM captions WHERE job_id = ? GROUP BY clip_id)", [job_id]
            ).fetchone()[0]
            assert d.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            d.close()
        restarts = supervisor_beat(settings.db)["info"].get("restarts", 0)
        print(
            f"filled {took / 2**20:.1f} MiB for 15 s: done {before['done']} before, {during['done']} at the end of "
            f"the full disk, {prog['done']} after; supervisor restarts {restarts}; items {states}"
        )
        assert states == {"done": len(ids)}, states  # nothing failed of the full disk
        assert per_clip == 1  # each clip written once
        # the runner did meet the full disk: its database writes waited (and the log's own writes were lost, when a
        # line did not fit in the log file's last block; a quiet runner may write none while the disk is full)
        assert "database or disk is full" in text or "writes to this output were lost" in text, text[-2000:]
    finally:
        stop_supervisor(sup)
        fleet.stop()


def test_a_hung_runner_is_restarted_within_the_stated_time(settings, tmp_path):
    """SIGSTOP freezes the runner as a catastrophic regular expression does (its heartbeat stops); the
    supervisor kills it once the heartbeat is `heartbeats.STALE_S` old and starts another."""
    dbmod.connect(settings.db).close()
    runner = fleet_commands.runner_command(settings, "http://127.0.0.1:9")
    with open(tmp_path / "runner.log", "a") as log:
        sup = start_supervisor(settings, runner, log, "--first-backoff", "0.2")
    try:
        first = live_runner(settings.db)["pid"]
        os.kill(first, signal.SIGSTOP)
        stopped = time.monotonic()
        while procs.pid_alive(first) and time.monotonic() - stopped < 120:
            time.sleep(0.1)
        killed_after = time.monotonic() - stopped
        second = live_runner(settings.db, not_pid=first, why="after the hung one")["pid"]
        back_after = time.monotonic() - stopped
        info = supervisor_beat(settings.db)["info"]
        stated = heartbeats.STALE_S + supervisor.CHECK_S
        print(
            f"hung runner killed {killed_after:.1f} s after SIGSTOP (stated: heartbeat older than "
            f"{heartbeats.STALE_S:.0f} s, checked every {supervisor.CHECK_S:.0f} s), a new one beating after "
            f"{back_after:.1f} s; {info}"
        )
        assert not procs.pid_alive(first) and second != first
        assert info["last_exit"] == -signal.SIGKILL and "heartbeat" in info["last_cause"], info
        # not before its heartbeat was STALE_S old (SIGSTOP came up to a period after its last beat), and within
        # the stated time, with room for a loaded machine's scheduling
        assert heartbeats.STALE_S - heartbeats.PERIOD_S <= killed_after <= stated + 5, killed_after
    finally:
        stop_supervisor(sup)


def test_a_runner_waiting_out_a_foreign_write_lock_is_not_killed(settings, tmp_path):
    """Another program holds the write lock past the stale time: the runner's heartbeat cannot be written, and
    neither can the supervisor's, so its silence says nothing: no restart."""
    dbmod.connect(settings.db).close()
    runner = fleet_commands.runner_command(settings, "http://127.0.0.1:9")
    with open(tmp_path / "runner.log", "a") as log:
        sup = start_supervisor(settings, runner, log, "--first-backoff", "0.2")
    try:
        first = live_runner(settings.db)["pid"]
        foreign = sqlite3.connect(str(settings.db), timeout=0)
        foreign.execute("BEGIN IMMEDIATE")
        held = heartbeats.STALE_S + 8
        try:
            time.sleep(held)
        finally:
            foreign.rollback()
            foreign.close()
        again = live_runner(settings.db, timeout=60)
        print(f"write lock held {held:.0f} s: runner pid {first} -> {again['pid']}")
        assert again["pid"] == first and procs.pid_alive(first)
        assert supervisor_beat(settings.db)["info"].get("restarts", 0) == 0
    finally:
        stop_supervisor(sup)


def _write_now(db_path, within: float) -> float | None:
    """Seconds a write by another connection took to get the write lock (None: not within `within` seconds)."""
    t = time.monotonic()
    other = sqlite3.connect(str(db_path), timeout=within)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.rollback()
        return time.monotonic() - t
    except sqlite3.OperationalError:
        return None
    finally:
        other.close()


@pytest.mark.timeout(600)
def test_a_runner_frozen_inside_its_write_transaction_is_restarted_and_writes_resume_at_once(settings, tmp_path):
    """Issue 46, point 2. The runner captions a job; it is SIGSTOPped the moment the kernel's lock table names it as
    the holder of the database's write lock (tests/support/freeze.py), so every other writer waits for it. The
    supervisor reads the runner's heartbeat (a read needs no lock) and sees that the lock holder is its own child:
    it kills it once the heartbeat is stale; the kill frees the lock. Before: the supervisor judged the silence only
    while its own heartbeat write succeeded, which the frozen child's lock forbade: never restarted, every write
    "database is busy" until someone sent SIGCONT."""
    from tests.support.freeze import freeze_inside_a_write

    ids, job_id = _library(settings, 120)
    fleet = simfleet.start_fleet(2, 0, settings.clip_root, speed=1.0)
    runner = fleet_commands.runner_command(settings, fleet.urls)
    with open(tmp_path / "runner.log", "a") as log:
        sup = start_supervisor(settings, runner, log, "--first-backoff", "1")
    try:
        first = live_runner(settings.db)["pid"]
        deadline = time.monotonic() + 120
        while _progress(settings.db, job_id)["done"] < 5:
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.2)
        tries = freeze_inside_a_write(first, settings.db)
        frozen = time.monotonic()
        blocked = _write_now(settings.db, within=1.0)  # the frozen child holds the lock: another writer waits
        while procs.pid_alive(first) and time.monotonic() - frozen < 60:
            time.sleep(0.05)
        killed_after = time.monotonic() - frozen
        alive = procs.pid_alive(first)
        wrote_in = _write_now(settings.db, within=5.0)  # the lock died with it
        second = live_runner(settings.db, not_pid=first, why="after the frozen one")["pid"] if not alive else None
        back_after = time.monotonic() - frozen
        info = supervisor_beat(settings.db)["info"]
        print(
            f"caught inside a write after {tries} stop(s); killed {killed_after:.1f} s after SIGSTOP (stated: "
            f"{heartbeats.STALE_S:.0f} s stale + {supervisor.CHECK_S:.0f} s check); a write then got the lock in "
            f"{wrote_in}s; a new runner beating after {back_after:.1f} s; {info}"
        )
        assert blocked is None, "the frozen runner did not hold the write lock"
        assert not alive, f"the runner frozen inside its transaction was not restarted within {killed_after:.0f} s"
        assert killed_after < 30  # the acceptance: stale time + check + backoff, under 30 s
        assert wrote_in is not None, "writes did not resume after the kill"
        assert second != first
        assert info["last_exit"] == -signal.SIGKILL and "frozen inside its write transaction" in info["last_cause"]
        deadline = time.monotonic() + 300
        while (prog := _progress(settings.db, job_id))["state"] != "done":
            assert time.monotonic() < deadline, f"the job did not finish: {prog}"
            time.sleep(0.5)
        d = dbmod.connect(settings.db)
        try:
            per_clip = d.execute(
                "SELECT COUNT(*), MAX(n) FROM (SELECT COUNT(*) AS n FROM captions WHERE job_id = ? GROUP BY clip_id)",
                [job_id],
            ).fetchone()
        finally:
            d.close()
        assert tuple(per_clip) == (len(ids), 1), per_clip  # every clip captioned, each once
    finally:
        for pid in (b["pid"] for b in beats(settings.db) if b["kind"] == "runner"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stop_supervisor(sup)
        fleet.stop()


CRASHES_THEN_HANGS = """
import sys, time
from pathlib import Path
from data import db as dbmod, heartbeats
count = Path(sys.argv[1])
n = int(count.read_text() or 0) + 1 if count.exists() else 1
count.write_text(str(n))
if n <= 3:
    sys.exit(1)  # dies young: the backoff doubles
d = dbmod.connect(sys.argv[2])
heartbeats.heartbeat(d, "hangs", "runner")
time.sleep(600)  # then never beats again
"""


def test_a_child_killed_for_hanging_is_restarted_after_the_first_backoff_not_the_crashes_doubled_one(
    settings, tmp_path
):
    """Three crashes in a row double the backoff to 8 s; the next child hangs. Before, its restart waited the 8 s
    too (in the fault run, a runner frozen after three kills was back 44 s after SIGSTOP); a hang is no crash loop
    (its silence spaced the restarts), so the wait starts again at the first backoff."""
    dbmod.connect(settings.db).close()
    child = [sys.executable, "-c", CRASHES_THEN_HANGS, str(tmp_path / "count"), str(settings.db)]
    log_path = tmp_path / "supervisor.log"
    with open(log_path, "a") as log:
        sup = start_supervisor(settings, child, log, "--first-backoff", "1", "--stale-after", "3")
    try:
        deadline = time.monotonic() + 120
        while "hangs:" not in log_path.read_text() or "restart #4" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            assert sup.poll() is None
            time.sleep(0.2)
    finally:
        stop_supervisor(sup)
    lines = log_path.read_text().splitlines()
    print("\n".join(lines))
    assert any("restart #3 in 4 s" in line for line in lines)  # the crashes doubled it: 1, 2, 4
    assert any("heartbeat" in line and "restart #4 in 1 s" in line for line in lines)


def test_the_write_lock_holder_is_read_from_the_kernels_lock_table(settings, tmp_path):
    """What the supervisor reads to tell a child frozen in its own transaction from one waiting on another program."""
    d = dbmod.connect(settings.db)
    try:
        assert dbmod.write_lock_holder(settings.db) is None
        with dbmod.immediate(d):
            assert dbmod.write_lock_holder(settings.db) == os.getpid()
        assert dbmod.write_lock_holder(settings.db) is None
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('BEGIN IMMEDIATE'); "
                "print('held', flush=True); time.sleep(60)",
                str(settings.db),
            ],
            stdout=subprocess.PIPE,
        )
        try:
            assert holder.stdout.readline().strip() == b"held"
            assert dbmod.write_lock_holder(settings.db) == holder.pid
            sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            try:
                assert not supervisor._of_child(holder.pid, sibling.pid)  # another program's: it excuses a silence
            finally:
                sibling.kill()
                sibling.wait()
            assert supervisor._of_child(holder.pid, os.getpid())  # a descendant of this process: it excuses nothing
        finally:
            holder.kill()
            holder.wait()
        assert dbmod.write_lock_holder(settings.db) is None  # the lock died with its holder
    finally:
        d.close()
