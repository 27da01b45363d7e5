"""Every log of the stack `./launch.sh` starts is bounded (issue 46, point 1; R21): each file under DATA_DIR/logs is
written by a log sink (serving.log_sink) and by nothing else, opened to append, and rotated at half of `--log-cap`.

Before, launch.sh redirected the app's and the runner's output to their files (`> app.log`: no O_APPEND, never
rotated, kept open by the process, so that deleting it freed nothing until a restart), and the launcher opened
each fleet process's log itself.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.support.launched_stack import LaunchedStack
from tests.support.reliability_fixtures import GradioError, GradioSession, dependencies, login_cookie
from webapp import budget

pytestmark = pytest.mark.serial  # it reads every process's open files

CAP = 64 << 10


def writers(logs) -> dict[str, list[tuple[int, str, int]]]:
    """log file name -> [(pid, command line, open flags)] of every process with it open for writing."""
    out: dict[str, list[tuple[int, str, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.startswith(str(logs) + "/"):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
            except (OSError, StopIteration):
                continue
            if flags & (os.O_WRONLY | os.O_RDWR):
                out.setdefault(os.path.relpath(target, logs), []).append((pid, cmd, flags))
    return out


@pytest.mark.timeout(900)
def test_every_log_of_the_launched_stack_is_written_by_a_sink_appended_and_rotated(tmp_path):
    with LaunchedStack(tmp_path / "var", demo_count=4, extra=("--log-cap", str(CAP))) as stack:
        logs = stack.data_dir / "logs"
        found = writers(logs)
        names = sorted(found)
        print("logs and their writers:", {n: [(pid, cmd[:60]) for pid, cmd, _ in w] for n, w in found.items()})
        for expected in ("app.log", "runner.log", "router.log", "router-gate.log", "simfleet.log"):
            assert expected in names, names
        for name, procs in found.items():
            for pid, cmd, flags in procs:
                assert "serving.log_sink" in cmd, f"{name} is written by pid {pid}: {cmd[:200]}"
                assert flags & os.O_APPEND, f"{name}: pid {pid} has it open without O_APPEND ({oct(flags)})"
            assert len(procs) == 1, f"{name} has {len(procs)} writers"
        # the app's log rotates at half the cap: malformed read events, each a line or two of it
        cookie = login_cookie(stack.url, "ann")
        deps = dependencies(stack.url, cookie)
        dep = next(d for n, d in sorted(deps.items()) if not budget.writes(n) and len(d["inputs"]) > 1)
        tab = GradioSession(stack.url, cookie, deps, timeout=60)
        try:
            for _ in range(400):
                try:
                    tab.call_raw(dep, ["v" * 200_000])
                except GradioError:
                    pass
        finally:
            tab.close()
        time.sleep(1)
        app_log, older = logs / "app.log", logs / "app.log.1"
        sizes = [app_log.stat().st_size, older.stat().st_size if older.exists() else None]
        print(f"app.log after 400 malformed events with --log-cap {CAP}: {sizes}")
        assert older.exists(), "app.log never rotated"
        assert max(sizes) <= CAP // 2
        for f in logs.rglob("*"):
            if f.is_file():
                assert f.stat().st_size <= CAP // 2, f
