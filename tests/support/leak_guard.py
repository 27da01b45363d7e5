"""A test leaves nothing running: no process it spawned, no thread it started.

Why: one test that fails half-way can leave its load running (20 annotator threads retrying a dead app, a runner
thread retrying a stopped fleet, a child server). On a 2-core CI machine that starves every test after it, and
a single failure turns into a cascade of timeouts far from its cause. So, after each test's own teardown:

- a process the test's code spawned during its call and still alive is killed (its process group) and reported;
- a thread running the tests' own code (a load, a harness), started during the call and still alive after a
  grace period, is reported.

Either fails the test's teardown (an error on that test, naming what leaked), so the cause is found at the test
that leaked. Fixtures wider than a function (a module's app server, the browser) start in setup, not in the call;
what they start later (Chromium's renderers, the app's worker threads) is theirs, not the test's.
`CW_LEAK_GUARD=report` lists those threads too, in the terminal summary.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

GRACE_S = 10.0  # a thread told to stop at teardown may take this long to return
MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
REPORT_ONLY = os.environ.get("CW_LEAK_GUARD") == "report"
_KEY = "_cw_leak_baseline"
_REPORTS = pytest.StashKey[list]()


def _children() -> dict[int, psutil.Process]:
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _spawned_by_the_test(p: psutil.Process, pids_before: set[int]) -> bool:
    """Not a process that an older one started meanwhile (Chromium starts renderers for a new page, a module's
    server its workers): every ancestor up to pytest is new too. Nor multiprocessing's own helper, which the first
    spawned worker starts and which serves this process until it exits."""
    me = os.getpid()
    try:
        if any(helper in " ".join(p.cmdline()) for helper in MP_HELPERS):
            return False
        for parent in p.parents():
            if parent.pid == me:
                return True
            if parent.pid in pids_before:
                return False
    except psutil.Error:
        return False
    return False


def _started_by_tests(th: threading.Thread) -> bool:
    """A thread whose code is the tests' own (a load, a harness): the kind whose leak starved later tests.
    Threads that product code or a library starts inside a wider fixture (a module's in-process app starting its
    login-hash pool on the first login) are listed in the summary instead."""
    fn = getattr(th, "_target", None) or type(th).run
    fn = getattr(fn, "__func__", fn)
    top = str(getattr(fn, "__module__", "") or "").split(".")[0]
    return top.startswith("test") or top == "conftest"  # tests.support.*, test_*.py (imported by basename)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    setattr(item, _KEY, ({id(t) for t in threading.enumerate()}, set(_children())))
    return (yield)


def _kill(procs: list[psutil.Process]) -> list[str]:
    named = []
    for p in procs:
        try:
            named.append(f"pid {p.pid} {' '.join(p.cmdline())[:160]}")
            pgid = os.getpgid(p.pid)
            if pgid != os.getpgrp():
                os.killpg(pgid, signal.SIGKILL)
            else:
                p.kill()
        except (psutil.Error, ProcessLookupError, PermissionError):
            pass
    return named


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    before = getattr(item, _KEY, None)
    if before is None:  # the call never ran (a setup error or a skip)
        return result
    threads_before, pids_before = before
    new = [t for t in threading.enumerate() if id(t) not in threads_before]
    leaked = [t for t in new if _started_by_tests(t)]
    deadline = time.monotonic() + GRACE_S
    while leaked and time.monotonic() < deadline:
        time.sleep(0.1)
        leaked = [t for t in leaked if t.is_alive()]
    procs = [p for pid, p in _children().items() if pid not in pids_before and _spawned_by_the_test(p, pids_before)]
    killed = _kill([p for p in procs if _running(p)])
    if REPORT_ONLY:  # CW_LEAK_GUARD=report: also the threads that product code or libraries left
        others = [t.name for t in new if t.is_alive() and t not in leaked]
        if others:
            item.config.stash.setdefault(_REPORTS, []).append(f"{item.nodeid}: other threads {', '.join(others)}")
    if not (killed or leaked):
        return result
    lines = [f"process killed: {k}" for k in killed] + [f"thread still running: {t.name}" for t in leaked]
    pytest.fail(f"{item.nodeid} left work running after its teardown:\n  " + "\n  ".join(lines), pytrace=False)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    reports = config.stash.get(_REPORTS, [])
    if reports:
        terminalreporter.section("threads left running by product code or libraries (CW_LEAK_GUARD=report)")
        for line in reports:
            terminalreporter.write_line(line)
