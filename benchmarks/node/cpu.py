"""Whole-machine CPU time over an interval, from psutil."""

from __future__ import annotations

import time


class CpuMeter:
    """Whole-machine CPU time (psutil): cores busy and core-seconds over an interval."""

    def __enter__(self):
        import psutil

        self.t, self.c = time.time(), psutil.cpu_times()
        return self

    def __exit__(self, *exc):
        import psutil

        c1 = psutil.cpu_times()
        self.wall = time.time() - self.t
        self.busy = _busy(c1) - _busy(self.c)
        return False


def _busy(t) -> float:
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def group_cpu_seconds(pgids) -> float:
    """CPU seconds (user + system, reaped children included) of every process in the process groups `pgids`:
    a vLLM replica's API servers, renderer workers and engine core."""
    import psutil

    from serving import procs

    total = 0.0
    for pgid in pgids:
        for pid in procs.group_pids(pgid):
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
    return total
