"""Keep one child process running: restart it when it dies or hangs, stop it when told to.

    python -m serving.supervisor --name runner --data-dir var -- python -m serving.runner --data-dir var

launch.sh runs the job runner under this, so a runner killed by the kernel, a bug or a database error is
back within seconds (issue 11; R12) instead of leaving jobs queued until someone notices. The child stays in
the supervisor's process group, so `./launch.sh stop` (which signals the group) stops both; on SIGTERM or
SIGINT the supervisor stops restarting, passes the signal on and waits for the child.

A child that hangs is restarted too: one whose heartbeat (data.heartbeats, written under its pid) is older than
`--stale-after` (data.heartbeats.STALE_S, a few heartbeat periods), or that wrote none within FIRST_S of its
start, is killed (SIGKILL: a process that stopped beating cannot drain) and restarted. The supervisor decides from
what it can read, never from whether it can write (issue 46): it reads the child's heartbeat (a read: under WAL it
never waits for the write lock), and it counts the child's silence only while nothing else can explain it. Two
things can: another program holding the database's write lock (the child waits for it; `data.db.write_lock_holder`
names the holder, and a holder that is neither the child nor one of its processes excuses the silence) and a disk
with less than FULL_BYTES free (no writer can beat). A child frozen inside its own write transaction (SIGSTOP, a
debugger, a swap storm, a stuck filesystem call) holds the lock itself: nothing excuses it, it is killed once its
heartbeat is stale, and the kill releases the lock, so every other writer goes on at once. A hung runner is back
within `stale_after + CHECK_S + the backoff` (10 + 1 + 1 s with the defaults), wherever it froze.

Restarts back off (1, 2, 4 ... 30 s) while the child keeps dying young, and reset once it has lived
`--healthy-after` seconds, or when it was killed for hanging (its silence already spaced the restarts, and a runner
frozen after a few crashes must not wait out the crashes' backoff). Each restart is logged and recorded in the
supervisor's heartbeat (kind "supervisor", name "<name>-supervisor", info: restarts, last exit code, why), next to
the runner's own heartbeats, which the app shows as runner liveness.

Nothing the supervisor writes can stop it supervising: its output is best-effort (serving.console: the log sits
on the data dir's filesystem, which may be full), and a heartbeat it cannot write is skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from data import db as dbmod, heartbeats
from data.settings import add_arguments, from_args
from serving import console

CHECK_S = 1.0  # how often the child's heartbeat is read
FULL_BYTES = 4 << 20  # a filesystem with less free: a child's heartbeat may not fit, its silence is not judged
RECORD_WAIT_S = 0.25  # the longest the supervisor waits for the write lock to record its own heartbeat


@dataclasses.dataclass
class Supervisor:
    """Runs `cmd` until stopped, restarting it with a backoff whenever it exits or its heartbeat goes stale."""

    cmd: list[str]
    _: dataclasses.KW_ONLY
    name: str = "runner"
    db_path: str | Path | None = None  # heartbeats: the supervisor's own, and the child's (None: neither)
    backoff_cap: float = 30.0
    healthy_after: float = 60.0
    first_backoff: float = 1.0
    stale_after: float = heartbeats.STALE_S  # 0: exits only, the child's heartbeat is not watched
    first_beat_within: float = heartbeats.FIRST_S
    restarts: int = dataclasses.field(default=0, init=False)
    stopping: bool = dataclasses.field(default=False, init=False)
    child: subprocess.Popen | None = dataclasses.field(default=None, init=False)
    last_exit: int | None = dataclasses.field(default=None, init=False)
    last_cause: str | None = dataclasses.field(default=None, init=False)
    _db: object = dataclasses.field(default=None, init=False, repr=False)
    _next_record: float = dataclasses.field(default=0.0, init=False, repr=False)
    _unwritable_said: bool = dataclasses.field(default=False, init=False, repr=False)

    def _say(self, msg: str) -> None:
        try:  # best-effort twice over: the stream drops what the disk refuses, and nothing here may raise
            print(f"[supervisor {self.name}] {msg}", file=sys.stderr, flush=True)
        except Exception:  # reporting must never stop the supervision
            pass

    # ---- the database: the supervisor's heartbeat and the child's ---------------------------------------
    def _database(self):
        if self._db is None:
            self._db = dbmod.connect(self.db_path)
        return self._db

    def _drop_database(self) -> None:
        try:
            if self._db is not None:
                self._db.close()
        except Exception:  # a connection that cannot even close is dropped all the same
            pass
        self._db = None

    def _record(self, t: float) -> None:
        """Write the supervisor's heartbeat (restarts, the last exit, the child's pid), best-effort: a write that
        fails (the lock held by the child or another program, a full disk) is skipped. Nothing is judged by it."""
        if self.db_path is None:
            return
        self._next_record = t + heartbeats.PERIOD_S
        try:
            heartbeats.heartbeat(
                self._database(),
                f"{self.name}-supervisor",
                "supervisor",
                info={
                    "restarts": self.restarts,
                    "last_exit": self.last_exit,
                    "last_cause": self.last_cause,
                    "child_pid": self.child.pid if self.child else None,
                },
                wait=RECORD_WAIT_S,
            )
        except Exception as e:  # a locked, full or missing database must not stop the supervision
            if not self._unwritable_said:
                self._say(f"its own heartbeat was not written ({e}); supervising on")
                self._unwritable_said = True
            self._drop_database()
            return
        self._unwritable_said = False

    def _last_beat(self, pid: int) -> float | None:
        """When `pid` last beat (None: never); OSError or sqlite3.Error when the database cannot be read."""
        try:
            return heartbeats.last_beat_of(self._database(), pid)
        except Exception:
            self._drop_database()
            raise

    def _excuse(self, child: subprocess.Popen) -> str | None:
        """Why the child may be silent without hanging (another program holds the write lock, the disk is full),
        or None: its silence counts."""
        try:
            holder = dbmod.write_lock_holder(self.db_path)
        except (OSError, ValueError):  # no lock table to read: the silence is judged as if the lock were free
            holder = None
        if holder is not None and not _of_child(holder, child.pid):
            return f"pid {holder}, not one of the child's processes, holds the database's write lock"
        try:
            st = os.statvfs(Path(self.db_path).parent)
        except OSError:
            return None
        free = st.f_bavail * st.f_frsize
        if free < FULL_BYTES:
            return f"the database's disk has {free / 2**20:.1f} MiB free"
        return None

    # ---- one child ------------------------------------------------------------------------------------------
    def _watch(self, child: subprocess.Popen) -> tuple[int | None, str | None]:
        """Wait until `child` exits (its code, None) or hangs (killed: its code, why)."""
        seen_at: float | None = None  # the newest heartbeat time read from the child
        silent = 0.0  # seconds the child has been silent with nothing to excuse it
        last = heard = time.monotonic()  # heard: when a newer heartbeat (or the start) was last seen
        excused = False  # an excuse was said in this silence (once: a busy app holds the lock often)
        while True:
            try:
                return child.wait(timeout=CHECK_S), None
            except subprocess.TimeoutExpired:
                pass
            t = time.monotonic()
            step, last = t - last, t
            if self.stopping or self.db_path is None:
                continue
            if t >= self._next_record:
                self._record(t)
            if not self.stale_after:
                continue
            try:
                at = self._last_beat(child.pid)
            except Exception:  # unreadable: nothing is known, so nothing is judged
                continue
            if at is not None and (seen_at is None or at > seen_at):
                seen_at, silent, heard, excused = at, 0.0, t, False
                continue
            why_not = self._excuse(child)
            if why_not is not None:
                if not excused and t - heard > self.stale_after:
                    self._say(f"pid {child.pid} is silent {t - heard:.0f} s, but {why_not}: not restarted")
                    excused = True
                continue
            silent += step
            allowed = self.stale_after if seen_at is not None else max(self.stale_after, self.first_beat_within)
            if silent > allowed:
                why = (
                    f"its heartbeat is {t - heard:.0f} s old, {silent:.0f} s of it with nothing else holding the "
                    f"lock (restarted past {self.stale_after:.0f} s)"
                    if seen_at is not None
                    else f"no heartbeat {t - heard:.0f} s after it started"
                )
                holder = _safe_holder(self.db_path)
                if holder is not None and _of_child(holder, child.pid):
                    why += ", frozen inside its write transaction"
                self._say(f"pid {child.pid} hangs: {why}; killing it")
                try:
                    child.kill()
                except ProcessLookupError:
                    pass
                return child.wait(), why

    def stop(self, signum: int = signal.SIGTERM, _frame=None) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        delay = self.first_backoff
        while not self.stopping:
            started = time.monotonic()
            try:
                self.child = subprocess.Popen(self.cmd)
            except OSError as e:  # out of processes or memory for a moment: try again after the backoff
                self.child, code, why = None, None, f"could not start: {e}"
            else:
                self._say(f"started pid {self.child.pid}: {' '.join(self.cmd)}")
                code, why = self._watch(self.child)
            if self.stopping:
                return 0
            lived = time.monotonic() - started
            if lived >= self.healthy_after or why is not None:
                # a hung child is no crash loop: the silence it took to see it already spaced the restarts
                delay = self.first_backoff
            self.restarts += 1
            self.last_exit, self.last_cause = code, why or f"exited with {code}"
            pid = self.child.pid if self.child else "-"
            self._say(f"pid {pid}: {self.last_cause} after {lived:.0f} s; restart #{self.restarts} in {delay:.0f} s")
            self._record(time.monotonic())
            deadline = time.monotonic() + delay
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
            delay = min(self.backoff_cap, delay * 2)
        return 0


def _safe_holder(db_path) -> int | None:
    try:
        return dbmod.write_lock_holder(db_path)
    except (OSError, ValueError):
        return None


def _of_child(pid: int, child: int) -> bool:
    """Whether `pid` is `child` or one of its descendants (read from /proc: its parents, up to init)."""
    for _ in range(64):
        if pid == child:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m serving.supervisor",
        description="Run a command and restart it whenever it exits or its heartbeat goes stale, until SIGTERM/SIGINT.",
        epilog="example: python -m serving.supervisor --name runner --data-dir var -- python -m serving.runner "
        "--data-dir var",
    )
    add_arguments(p, ("data_dir", "db"))
    p.add_argument("--name", default="runner", help="name in logs and in the supervisor heartbeat")
    p.add_argument("--backoff-cap", type=float, default=30.0, help="longest wait between restarts (s)")
    p.add_argument(
        "--healthy-after", type=float, default=60.0, help="a child that lived this long resets the backoff (s)"
    )
    p.add_argument("--first-backoff", type=float, default=1.0, help="first wait before a restart (s)")
    p.add_argument(
        "--stale-after",
        type=float,
        default=heartbeats.STALE_S,
        help="restart the child when its heartbeat is this old, unless another program holds the write lock or "
        "the disk is full "
        f"(default {heartbeats.STALE_S:.0f} s; 0 for a command that writes no heartbeat)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to keep running")
    return p


def main(argv: list[str] | None = None) -> int:
    console.install()  # the log may sit on a full disk: reporting must never stop the supervision
    args = build_parser().parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("supervisor: no command given (put it after --)", file=sys.stderr)
        return 2
    settings = from_args(args)
    options = {k: getattr(args, k) for k in ("name", "backoff_cap", "healthy_after", "first_backoff", "stale_after")}
    sup = Supervisor(cmd, db_path=settings.db, **options)
    signal.signal(signal.SIGTERM, sup.stop)
    signal.signal(signal.SIGINT, sup.stop)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
