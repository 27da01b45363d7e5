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
