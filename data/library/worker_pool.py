"""A pool of worker processes that each run one task at a time under a deadline (used by data.ingest).

PyAV can crash or hang on hostile input, so the work on one clip runs in a worker process: a crash or an overrun
kills only that worker, and a fresh one replaces it. A crash is the task's recorded reason ("probe crashed
(SIGSEGV)"). A timeout is more often the machine's fault (a loaded GPU node) than the clip's, so it is retried
with a longer deadline, and the deadline also grows with the clip once the worker reports its size (duration x
resolution); only a task that overruns every attempt gets a reason ("probe timed out after 20 s, 60 s, 180 s (3
attempts)"). Each worker's address space is capped (R10) so that a decoder asked for gigabytes fails in that
worker instead of swapping the machine.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

# the work one worker does: (task, report(progress row)) -> result row; task and result carry the clip's "rel"
Task = Callable[[dict, Callable[[dict], None]], dict]

TIMEOUT_ATTEMPTS = 3  # a clip is recorded as timed out only after this many overruns
TIMEOUT_GROWTH = 3.0  # each retry waits this many times longer
# extra deadline per gigapixel of video (frames x width x height) once the probe knows it: the HEVC preview
# decodes every frame (1.3 s for a 10 s 1080p clip on an idle core, ~0.6 Gpx); x10 for a loaded machine
SECONDS_PER_GIGAPIXEL = 20.0
MAX_EXTRA_SECONDS = 600.0
TIMED_OUT = "probe timed out"
START_ALLOWANCE = 60.0  # a worker process that has not even started its task after this is stuck, not slow
# Address-space cap of one ingest worker. Python + PyAV + NumPy map ~0.3-0.6 GiB before decoding anything and a
# 4K clip's frame threads need ~0.5 GiB more; a decoder that wants more than this is decoding something hostile.
WORKER_MEMORY_MIB = 2048
# A worker's own footprint must not grow with the machine's cores, or the cap above fails every clip on a big
# node (on 16 cores, NumPy's OpenBLAS starts 16 threads and glibc gives each decoding thread its own 64 MiB
# malloc arena: 2.4 GiB of address space for one 1080p clip, and every clip reads as "corrupt"). The pool runs
# one clip per core already, so each worker's libraries get one thread and two malloc arenas.
WORKER_ENV = {
    "MALLOC_ARENA_MAX": "2",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# what a capped worker's allocation failure reads like (ENOMEM from FFmpeg or NumPy, EAGAIN from a thread
# start, the loader's mmap refused while a decoder's shared library loads lazily); recorded under OUT_OF_MEMORY,
# which the next ingest probes again, as it does a timeout
_RESOURCE_ERRORS = (
    "annot allocate memory",
    "Resource temporarily unavailable",
    "MemoryError",
    "failed to map segment from shared object",
)
OUT_OF_MEMORY = "out of memory in the ingest worker"
# an allocation refused by the cap does not always read as one: FFmpeg's demuxer may answer "Invalid data found
# when processing input" (PyAV 18.1.1, a 1080p clip under 250 MiB), which would call a sound clip corrupt, never to
# be probed again. A failure after the worker's address space reached this share of its cap is taken for memory
# (probed again by the next ingest); the suite's corrupt and hostile clips fail far below it under the default cap
NEAR_CAP = 0.75


def extra_seconds(row: dict) -> float:
    """Deadline allowance for a probed clip's media work: SECONDS_PER_GIGAPIXEL x frames x width x height."""
    try:
        pixels = float(row.get("frames") or 0) * float(row.get("width") or 0) * float(row.get("height") or 0)
    except (TypeError, ValueError):
        return 0.0
    return min(MAX_EXTRA_SECONDS, SECONDS_PER_GIGAPIXEL * pixels / 1e9)


def _cap_memory(mib: int) -> None:
    """Cap this process's address space (RLIMIT_AS): a hostile clip that makes the decoder allocate
    gigabytes gets a MemoryError (or an allocation failure FFmpeg reports) in this worker, recorded as the
    clip's reason, instead of pushing the machine into swap or the OOM killer (R10)."""
    import resource

    if mib > 0:
        limit = mib << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _peak_vm_mib() -> float:
    """This process's peak address space (VmPeak), what RLIMIT_AS caps; 0 where /proc is not there."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def out_of_memory(error: str, memory_mib: int) -> str:
    """The reason recorded for a clip whose worker ran out of its capped address space."""
    error = error.removeprefix("corrupt: ")  # FFmpeg's ENOMEM says nothing about the clip
    return (
        f"{OUT_OF_MEMORY} ({error}; workers are capped at {memory_mib} MiB of address space): a hostile stream "
        "or a machine limit; the next ingest tries it again"
    )


def _worker_main(conn, memory_mib: int, target: Task) -> None:  # pragma: no cover - runs in the child
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    _cap_memory(memory_mib)
    logging.basicConfig(level=logging.WARNING)
    try:
        import av

        # FFmpeg's chatter about hostile files off, *without* PyAV's Python log callback: with it installed, a
        # decoder thread logging while the main thread closes a frame-threaded decoder (an early break, e.g.
        # at a resolution change) deadlocks on the GIL and the worker hangs until its deadline.
        av.logging.set_level(None)
        av.logging.set_libav_level(av.logging.PANIC)
    except Exception:
        pass
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send({"started": True})  # the clip's deadline runs from here, not from the worker's start-up
        peak_before = _peak_vm_mib()  # a worker probes many clips: only a peak this clip raised is this clip's
        try:
            result = target(task, lambda info: conn.send({"progress": info}))
        except MemoryError:
            result = {"rel": task["rel"], "probe_error": "MemoryError"}
        except Exception as e:  # an unexpected failure is that clip's reason, not the run's end
            result = {"rel": task["rel"], "probe_error": f"probe failed: {type(e).__name__}: {e}"}
        error = str(result.get("probe_error") or "")
        peak_vm = _peak_vm_mib()
        near_cap = bool(error) and peak_vm > peak_before and peak_vm >= NEAR_CAP * memory_mib
        if memory_mib and (near_cap or any(r in error for r in _RESOURCE_ERRORS)):
            result["probe_error"] = out_of_memory(error, memory_mib)
        result["_peak_rss_mib"] = round(_peak_rss_mib(), 1)  # measured, not stored (R10's figures)
        result["_peak_vm_mib"] = round(peak_vm, 1)
        conn.send(result)


@contextlib.contextmanager
def _environment(overrides: dict[str, str]):
    """os.environ with `overrides` for the duration (a worker process's start), then as it was."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class WorkerPool:
    """N worker processes, one task each at a time, with a per-task deadline. A worker that crashes or
    overruns is killed and replaced. The deadline runs from when the worker starts the task (it says so), so a fresh
    worker's start-up on a loaded machine is not charged to the clip. A crash gives its task a reason at once; an
    overrun is retried with a TIMEOUT_GROWTH times longer deadline, up to `attempts` times, before it gives a reason. A
    worker may send `{"progress": row}` before its result: the deadline then grows by `extra_seconds(row)`.
    `target(task, report)` is the work: a module-level function (the spawned worker imports it by name), e.g.
    data.library.ingest.process_clip; tests pass their own."""

    def __init__(
        self,
        workers: int,
        timeout: float,
        memory_mib: int = WORKER_MEMORY_MIB,
        *,
        attempts: int = TIMEOUT_ATTEMPTS,
        target: Task,
    ):
        self.ctx = mp.get_context("spawn")  # never fork a parent that has threads (tqdm, sqlite)
        self.timeout = timeout
        self.memory_mib = memory_mib
        self.peak_rss_mib = 0.0
        self.peak_vm_mib = 0.0
        self.attempts = max(1, attempts)
        self.target = target
        self.size = max(1, workers)
        self.idle: list[tuple[Any, Any]] = []
        self.busy: dict[Any, tuple[Any, dict, float]] = {}
        self.retried = 0
        for _ in range(self.size):
            self.idle.append(self._spawn())

    def _spawn(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child, self.memory_mib, self.target), daemon=True)
        with _environment(WORKER_ENV):  # a spawned child starts with the environment of this moment
            proc.start()
        child.close()
        return proc, parent

    def _limit(self, task: dict) -> float:
        return self.timeout * TIMEOUT_GROWTH ** (task.get("_attempt", 1) - 1)

    def run(self, tasks: Iterator[dict]) -> Iterator[dict]:
        """Yield one result per task, in completion order."""
        queue = deque(tasks)
        while queue or self.busy:
            while queue and self.idle:
                proc, conn = self.idle.pop()
                task = queue.popleft()
                conn.send(task)
                # until the worker says it started (a fresh one is still importing PyAV), allow for start-up
                self.busy[conn] = (proc, task, time.monotonic() + self._limit(task) + START_ALLOWANCE)
            deadline = min(d for _, _, d in self.busy.values())
            ready = wait(list(self.busy), timeout=max(0.0, deadline - time.monotonic()))
            for conn in ready:
                proc, task, d = self.busy.pop(conn)
                try:
                    result = conn.recv()
                except (EOFError, OSError):
                    proc.join(1)
                    yield {"rel": task["rel"], "probe_error": f"probe crashed ({_exit_reason(proc.exitcode)})"}
                    conn.close()
                    self.idle.append(self._spawn())
                    continue
                if isinstance(result, dict) and "started" in result:
                    self.busy[conn] = (proc, task, time.monotonic() + self._limit(task))
                    continue
                if isinstance(result, dict) and "progress" in result:
                    self.busy[conn] = (proc, task, d + extra_seconds(result["progress"] or {}))
                    continue
                self.idle.append((proc, conn))
                self.peak_rss_mib = max(self.peak_rss_mib, result.pop("_peak_rss_mib", 0.0))
                self.peak_vm_mib = max(self.peak_vm_mib, result.pop("_peak_vm_mib", 0.0))
                yield result
            t = time.monotonic()
            for conn, (proc, task, d) in list(self.busy.items()):
                if d <= t:
                    del self.busy[conn]
                    proc.kill()
                    proc.join(5)
                    conn.close()
                    self.idle.append(self._spawn())
                    waited = [*task.get("_waited", []), self._limit(task)]
                    if len(waited) < self.attempts:
                        self.retried += 1
                        queue.append({**task, "_attempt": len(waited) + 1, "_waited": waited})
                        continue
                    yield {
                        "rel": task["rel"],
                        "probe_error": (
                            f"{TIMED_OUT} after {', '.join(f'{w:g} s' for w in waited)} ({len(waited)} attempts; "
                            "the machine may have been overloaded: the next ingest tries this clip again)"
                        ),
                    }

    def close(self) -> None:
        for _proc, conn in self.idle:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc, _conn, *_ in [(p, c) for c, (p, _, _) in self.busy.items()]:
            proc.kill()
        for proc, conn in self.idle:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
            conn.close()
        self.idle, self.busy = [], {}


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
