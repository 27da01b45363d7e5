"""Child processes in their own process groups: start with a log file, wait for health, stop by group.

Used by the fleet launcher and by tests that run real servers (simulated fleet, router, runner). Nothing
here ever looks a process up by name: a process is stopped through the process group recorded when it
was started (`start_new_session=True` makes the child the leader of a new group, so the group id is its pid).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import httpx

from serving import bounded

if TYPE_CHECKING:  # the type only: procs starts what the reader reads, not the other way round
    from serving.fleet.reader import FleetReader

REPO = Path(__file__).resolve().parents[1]  # where `python -m serving.log_sink` is found
HEALTH_BYTES = 64 << 10  # a health answer is a status and a few bytes; a started server may still be anything


class StartupError(RuntimeError):
    """A child died or did not become healthy before its deadline."""


@dataclasses.dataclass
class Child:
    name: str
    pid: int
    pgid: int
    cmd: list[str]
    log: str
    url: str | None = None
    health: str | None = None
    popen: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)
    sink: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)

    def record(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("popen", "sink")}

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the process exits, then until its log sink has written the last lines (a log read after this
        is whole); returns its exit status. subprocess.TimeoutExpired after `timeout` seconds."""
        assert self.popen is not None, "wait() is for a process started here"
        code = self.popen.wait(timeout=timeout)
        _end_sink(self.pgid)
        return code

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_alive(self.pid)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours still "exists": look at its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def start(
    name: str,
    cmd: Sequence[str],
    *,
    log: str | Path,
    env: Mapping[str, str] | None = None,
    url: str | None = None,
    health: str | None = None,
    cwd: str | Path | None = None,
    cpus: Sequence[int] | None = None,
) -> Child:
    """Start `cmd` in a new session (own process group), its stdout and stderr piped into `log` through a log sink
    (serving.log_sink: the file appended to, rotated at the `log_cap` setting, long lines cut, nothing written below
    the free-space floor); with `cpus`, pinned to those CPUs (its children inherit the affinity). The sink runs in
    a session of its own, so that stopping the child's group leaves it to write the child's last lines; it exits
    when the child and whatever inherited its output have exited."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    sink = log_sink(log, env=full_env)
    try:
        p = subprocess.Popen(
            list(cmd),
            stdout=sink.stdin,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    finally:
        sink.stdin.close()  # the child holds the pipe now: the sink ends when the child (and its children) do
    _SINKS[p.pid] = sink
    return Child(
        name=name, pid=p.pid, pgid=p.pid, cmd=list(cmd), log=str(log), url=url, health=health, popen=p, sink=sink
    )


# The log sink of each process group this process started (pgid -> sink): stopping a group waits for its sink to have
# written the last lines and exited, so that a log read after a stop is whole and no sink outlives its writer.
# Process-wide on purpose, as the children are.
_SINKS: dict[int, subprocess.Popen] = {}


def _end_sink(pgid: int, wait: float = 5.0) -> None:
    sink = _SINKS.pop(pgid, None)
    if sink is not None:
        try:
            sink.wait(timeout=wait)
        except subprocess.TimeoutExpired:  # a process that left the group still holds the pipe: it ends with that
            _SINKS[pgid] = sink


def log_sink(log: str | Path, *, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """A serving.log_sink process appending to `log`, its own session; write to its `stdin` (a pipe)."""
    return subprocess.Popen(
        [sys.executable, "-m", "serving.log_sink", "--log", str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**(env if env is not None else os.environ), "PYTHONPATH": _importable(env)},
        cwd=REPO,
        start_new_session=True,
    )


def _importable(env: Mapping[str, str] | None) -> str:
    path = (env if env is not None else os.environ).get("PYTHONPATH", "")
    return os.pathsep.join([str(REPO), *[p for p in path.split(os.pathsep) if p]])


def tail(path: str | Path, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 16384))
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_healthy(
    children: Sequence[Child],
    *,
    timeout: float,
    interval: float = 0.25,
    ok: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
    reader: FleetReader | None = None,
) -> None:
    """Poll each child's `health` URL until it answers; raise StartupError at the deadline or as soon as a
    child has exited (with the end of its log). A fleet's children are polled through `reader` (the fleet
    reader of its data dir: the fleet key goes with every poll, which the router gate requires); None only for a
    process that is not part of a fleet (the app, a test's server)."""
    deadline = time.monotonic() + timeout
    pending = [c for c in children if c.health]
    with contextlib.ExitStack() as stack:
        if reader is None:
            http = stack.enter_context(httpx.Client(timeout=2.0, trust_env=False))

            def get(url: str) -> httpx.Response | BaseException:
                try:
                    return bounded.fetch_sync(http, "GET", url, max_bytes=HEALTH_BYTES, seconds=2.0)
                except (httpx.HTTPError, bounded.ReadRefused) as e:
                    return e
        else:

            def get(url: str) -> httpx.Response | BaseException:
                return reader.get(url, max_bytes=HEALTH_BYTES, timeout=2.0)

        while pending:
            for c in list(pending):
                if not c.alive():
                    _end_sink(c.pgid, wait=2.0)  # its last lines, the ones that say why, are in the log
                    raise StartupError(f"{c.name} exited during start-up; last lines of {c.log}:\n{tail(c.log)}")
                answer = get(c.health)
                if isinstance(answer, httpx.Response) and ok(answer):
                    pending.remove(c)
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                raise StartupError(
                    f"{names} not healthy within {timeout:.0f} s (logs: {', '.join(c.log for c in pending)})"
                )
            time.sleep(interval)


def stop_group(
    pgid: int, pid: int | None = None, *, grace: float = 10.0, popen: subprocess.Popen | None = None
) -> bool:
    """SIGTERM the process group, SIGKILL it after `grace` seconds. Returns True if it was running."""
    if pid is not None and pid_alive(pid):
        try:
            if os.getpgid(pid) != pgid:  # the pid was reused by someone else: leave it alone
                return False
        except ProcessLookupError:
            pass
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        _reap(popen)
        _end_sink(pgid)
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(popen)
        if not _group_alive(pgid):
            _end_sink(pgid)
            return True
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(popen, wait=5)
    _end_sink(pgid)
    return True


def kill_group(pgid: int, popen: subprocess.Popen | None = None) -> None:
    """SIGKILL a process group at once (tests of crash safety)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(popen, wait=5)
    _end_sink(pgid)


def _reap(popen: subprocess.Popen | None, wait: float = 0) -> None:
    if popen is None:
        return
    try:
        popen.wait(timeout=wait) if wait else popen.poll()
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # only zombies left? (children not yet reaped by a parent)
    return bool(group_pids(pgid))


# ---- who listens on a port (R14: is the server answering there the one we started?) ---------------------------
def _listening_inodes(port: int) -> set[str]:
    """Socket inodes of TCP listeners on `port` (any address), from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(parts[9])
        except OSError:
            continue
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    out: set[str] = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group `pgid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def listener_pids(port: int) -> set[int]:
    """Processes (that we may inspect) holding a listening socket on `port`."""
    want = _listening_inodes(port)
    if not want:
        return set()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _socket_inodes(int(entry)) & want:
            found.add(int(entry))
    return found


def group_listens(pgid: int, port: int) -> bool:
    """Whether a process of group `pgid` holds a listening socket on `port`."""
    want = _listening_inodes(port)
    return bool(want) and any(_socket_inodes(pid) & want for pid in group_pids(pgid))
