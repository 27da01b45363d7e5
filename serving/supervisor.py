"""Keep one child process running: restart it when it dies, stop it when told to.

    python -m serving.supervisor --name runner --data-dir var -- python -m serving.runner --data-dir var

launch.sh runs the job runner under this, so a runner killed by the kernel, a bug or a database error is
back within seconds (issue 11; R12) instead of leaving jobs queued until someone notices. The child stays in
the supervisor's process group, so `./launch.sh stop` (which signals the group) stops both; on SIGTERM or
SIGINT the supervisor stops restarting, passes the signal on and waits for the child.

Restarts back off (1, 2, 4 ... 30 s) while the child keeps dying young, and reset once it has lived
`--healthy-after` seconds. Each restart is logged and recorded as a heartbeat of kind "supervisor"
(name "<name>-supervisor", info: restarts, last exit code) next to the runner's own heartbeats, which the app
already shows as runner liveness.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

from data.settings import add_arguments, from_args


@dataclasses.dataclass
class Supervisor:
    """Runs `cmd` until stopped, restarting it with a backoff whenever it exits."""

    cmd: list[str]
    _: dataclasses.KW_ONLY
    name: str = "runner"
    db_path: str | Path | None = None  # where restarts are recorded as heartbeats (None: not recorded)
    backoff_cap: float = 30.0
    healthy_after: float = 60.0
    first_backoff: float = 1.0
    restarts: int = dataclasses.field(default=0, init=False)
    stopping: bool = dataclasses.field(default=False, init=False)
    child: subprocess.Popen | None = dataclasses.field(default=None, init=False)

    def _say(self, msg: str) -> None:
        print(f"[supervisor {self.name}] {msg}", file=sys.stderr, flush=True)

    def _record(self, code: int | None) -> None:
        if self.db_path is None:
            return
        try:
            from data import db as dbmod, heartbeats

            d = dbmod.connect(self.db_path)
            try:
                heartbeats.heartbeat(
                    d,
                    f"{self.name}-supervisor",
                    "supervisor",
                    info={
                        "restarts": self.restarts,
                        "last_exit": code,
                        "child_pid": self.child.pid if self.child else None,
                    },
                )
            finally:
                d.close()
        except Exception as e:  # noqa: BLE001 - a locked or missing database must not stop the restarts
            self._say(f"could not record the restart: {e}")

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
            self.child = subprocess.Popen(self.cmd)
            self._say(f"started pid {self.child.pid}: {' '.join(self.cmd)}")
            code = self.child.wait()
            if self.stopping:
                return 0
            lived = time.monotonic() - started
            if lived >= self.healthy_after:
                delay = self.first_backoff
            self.restarts += 1
            self._say(
                f"pid {self.child.pid} exited with {code} after {lived:.0f} s; restart #{self.restarts} in "
                f"{delay:.0f} s"
            )
            self._record(code)
            deadline = time.monotonic() + delay
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
            delay = min(self.backoff_cap, delay * 2)
        return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m serving.supervisor",
        description="Run a command and restart it whenever it exits, until SIGTERM/SIGINT.",
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
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to keep running")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("supervisor: no command given (put it after --)", file=sys.stderr)
        return 2
    settings = from_args(args)
    options = {k: getattr(args, k) for k in ("name", "backoff_cap", "healthy_after", "first_backoff")}
    sup = Supervisor(cmd, db_path=settings.db, **options)
    signal.signal(signal.SIGTERM, sup.stop)
    signal.signal(signal.SIGINT, sup.stop)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
