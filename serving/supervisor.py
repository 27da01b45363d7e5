"""Keep one child process running: restart it when it dies or hangs, stop it when told to.

    python -m serving.supervisor --name runner --data-dir var -- python -m serving.runner --data-dir var

launch.sh runs the job runner under this, so a runner killed by the kernel, a bug or a database error is
back within seconds (issue 11; R12) instead of leaving jobs queued until someone notices. The child stays in
the supervisor's process group, so `./launch.sh stop` (which signals the group) stops both; on SIGTERM or
SIGINT the supervisor stops restarting, passes the signal on and waits for the child.

A child that hangs is restarted too: one whose heartbeat (data.heartbeats, written under its pid) is older than
`--stale-after` (data.heartbeats.STALE_S, a few heartbeat periods), or that wrote none within FIRST_S of its
start, is killed (SIGKILL: a process that stopped beating cannot drain) and restarted. The supervisor writes its
own heartbeat every period; a child's silence counts only while those writes succeed, so a database that takes
no writes (a foreign write lock, a full disk) never gets a waiting runner killed. A hung runner is back within
`stale_after + CHECK_S + the backoff` (10 + 1 + 1 s with the defaults).

Restarts back off (1, 2, 4 ... 30 s) while the child keeps dying young, and reset once it has lived
`--healthy-after` seconds. Each restart is logged and recorded in the supervisor's heartbeat (kind
"supervisor", name "<name>-supervisor", info: restarts, last exit code, why), next to the runner's own
heartbeats, which the app shows as runner liveness.

Nothing the supervisor writes can stop it supervising: its output is best-effort (serving.console: the log sits
on the data dir's filesystem, which may be full), and a heartbeat it cannot write is skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

from data import heartbeats
from data.settings import add_arguments, from_args
from serving import console

CHECK_S = 1.0  # how often the child's heartbeat is read


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
    _writable_since: float | None = dataclasses.field(default=None, init=False, repr=False)
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
            from data import db as dbmod

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
        """Write the supervisor's heartbeat (restarts, the last exit, the child's pid). A write that fails (the
        database locked by another program, a full disk) is skipped, and the child's silence stops counting
        until the writes succeed again."""
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
                wait=min(heartbeats.PERIOD_S, 1.0),
            )
        except Exception as e:  # a locked, full or missing database must not stop the supervision
            if self._writable_since is not None or not self._unwritable_said:
                self._say(f"the database takes no writes ({e}): a silent child is not restarted meanwhile")
                self._unwritable_said = True
            self._writable_since = None
            self._drop_database()
            return
        if self._writable_since is None:
            self._writable_since = t
            self._unwritable_said = False

    def _last_beat(self, pid: int) -> float | None:
        try:
            return heartbeats.last_beat_of(self._database(), pid)
        except Exception:  # unreadable: nothing is known, so nothing is judged
            self._drop_database()
            return None

    # ---- one child ------------------------------------------------------------------------------------------
    def _watch(self, child: subprocess.Popen) -> tuple[int | None, str | None]:
        """Wait until `child` exits (its code, None) or hangs (killed: its code, why)."""
        started = time.monotonic()
        seen_at: float | None = None  # the newest heartbeat time read from the child
        heard = started  # when the child last showed a newer heartbeat (its start, before the first)
        while True:
            try:
                return child.wait(timeout=CHECK_S), None
            except subprocess.TimeoutExpired:
                pass
            if self.stopping:
                continue
            t = time.monotonic()
            if self.db_path is None:
                continue
            if t >= self._next_record:
                self._record(t)
            if not self.stale_after:
                continue
            at = self._last_beat(child.pid)
            if at is not None and (seen_at is None or at > seen_at):
                seen_at, heard = at, t
            allowed = self.stale_after if seen_at is not None else max(self.stale_after, self.first_beat_within)
            silent = t - heard
            # judged only once the database has taken writes for as long as the child may stay silent
            writable = self._writable_since is not None and t - self._writable_since >= allowed
            if silent > allowed and writable:
                why = (
                    f"its heartbeat is {silent:.0f} s old (restarted past {self.stale_after:.0f} s)"
                    if seen_at is not None
                    else f"no heartbeat {silent:.0f} s after it started"
                )
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
            if lived >= self.healthy_after:
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
        help="restart the child when its heartbeat is this old, while the database takes writes "
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
