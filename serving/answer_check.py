"""Answer checks in bounded time: the runner reads each answer in a checker process, with a time budget.

Reading an answer (serving.answers.read_answer: its JSON, the prompt schema's checks, the labels' confidence) costs
what the answer and the schema make it cost, and both come from outside the runner: a lead writes the schema, the
fleet writes the answer. Python's regular expressions backtrack (a `pattern` of `(\\w+\\s?)*$` on a long caption
runs for hours), jsonschema compares unsortable list items pair by pair, a parser meets megabytes. Done in the
runner's own process, one such answer would freeze its event loop, its heartbeat and every other job. So:

- Each answer is read in a checker process (`python -m serving.answer_check`, started by the runner, up to
  `answer_checkers` of them, each reading one answer at a time), never on the runner's event loop.
- Each answer gets `answer_check_seconds` (the budget) of the checker's CPU time, from the moment a checker takes
  it (read from /proc/<pid>/schedstat, in nanoseconds), and at most WALL_FACTOR times that in wall time (at least
  MIN_WALL_S). A checker past either is killed and replaced; the answer fails as `check_timeout` (a BadAnswer: not
  retried, the item is failed and never leased again) with a message saying so. CPU time, because that failure is
  final: on a machine so loaded that a normal check (milliseconds) waits seconds for a core, the good answer must
  not fail, while a backtracking pattern burns its budget at full speed whenever it runs.
- A checker that dies while reading (killed, out of memory: each has an address-space limit) fails that answer
  as `unreadable`; the next answer gets a fresh checker.
- The checkers die with the runner (PR_SET_PDEATHSIG, and end of input on their pipe), so a SIGKILLed runner
  leaves none behind.
- **Each job gets its share of the checkers.** One job's answers that each cost the whole budget (a stored schema
  with a costly check, whatever it is) must not hold every checker while another job's answers, milliseconds
  each, wait behind them: before, a 24-clip hostile job held another lead's job at 0 done for 177 s. A free
  checker goes to the waiting job that holds the fewest (then to the one that used the least checker time), and a
  job holding fewer than its share (`workers` / the jobs using checkers, at least one) while every checker is
  taken by others starts a spare one (at most `spare` beyond `workers`; an idle spare is ended after
  SPARE_IDLE_S). So a normal job beside a hostile one always has a checker of its own within a checker's start.

As a side effect the runner's own process no longer parses the answers (about half of its CPU per answer with
logprobs: docs/BENCHMARKS.md, "Job runner"): a head with spare cores reads answers on them.

The wire, on each checker's stdin/stdout: a request is `len(header) header len(body) body` (lengths 4-byte big
endian, the header JSON: schema id, and the schema's JSON the first time a checker sees it; confidence; max
tokens; replica), an answer `len(result) result` (JSON: `{"ok": AnswerRead}` or `{"error": {...}}`).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

from serving.errors import BadAnswer, FleetError, ReplicaError

ROOT = Path(__file__).resolve().parents[1]
READY = b"R"
ADDRESS_SPACE_BYTES = 4 << 30  # per checker: an answer is at most a few MiB, its parse a few tens of MiB
PIPE_BYTES = 1 << 20  # a 220 KB answer goes down the pipe in one write (Linux's default pipe is 64 KiB)
WALL_FACTOR = 10  # a check ends after this many times its CPU budget in wall time, whatever its CPU
MIN_WALL_S = 60.0
SPARE_IDLE_S = 30.0  # a checker beyond `workers`, idle this long, is ended
_SPAWN = object()  # what a waiting read is granted when it may start a checker of its own
_LEN = struct.Struct(">I")
_ERRORS = {"BadAnswer": BadAnswer, "ReplicaError": ReplicaError}


def default_workers() -> int:
    """Checkers when the setting says 0: one per core beside the runner's own, at least one, at most 8."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


class _Checker:
    """One checker process and the schemas it has been sent."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.schemas: set[int] = set()

    async def call(self, header: bytes, body: bytes) -> bytes:
        w = self.proc.stdin
        w.write(_LEN.pack(len(header)) + header + _LEN.pack(len(body)))
        w.write(body)
        await w.drain()
        size = _LEN.unpack(await self.proc.stdout.readexactly(4))[0]
        return await self.proc.stdout.readexactly(size)

    def cpu_s(self) -> float | None:
        """CPU seconds the checker has run (Linux /proc/<pid>/schedstat), or None where that cannot be read."""
        try:
            with open(f"/proc/{self.proc.pid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        if self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass


class AnswerChecker:
    """Reads answers in checker processes with a time budget each, each job its share of them (the module
    docstring). One per event loop; `aclose()` ends the checkers."""

    def __init__(self, budget_s: float, workers: int = 0, spare: int | None = None):
        self.budget_s = float(budget_s)
        self.workers = workers or default_workers()
        self.spare = max(2, self.workers) if spare is None else spare
        self._idle: list[tuple[float, _Checker]] = []  # (idle since, checker)
        self._count = 0  # checkers alive or starting
        self._held: collections.Counter = collections.Counter()  # job -> checkers it holds
        self._used: collections.Counter = collections.Counter()  # job -> checker seconds it held
        self._waiting: dict[Any, collections.deque] = {}  # job -> (asked at, future) in order
        self._all: set[_Checker] = set()
        self._ended: list[_Checker] = []  # killed or told to end, not yet seen exit (waited for by aclose)
        self._schema_ids: dict[str, int] = {}
        self.stats = {"answers": 0, "timeouts": 0, "died": 0, "started": 0, "spares": 0}

    @classmethod
    def from_settings(cls, settings: Any) -> "AnswerChecker":
        return cls(settings.answer_check_seconds, settings.answer_checkers)

    async def _spawn(self) -> _Checker:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "serving.answer_check",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            cwd=str(ROOT),
        )
        checker = _Checker(proc)
        self._all.add(checker)
        try:
            pipe = proc.stdin.transport.get_extra_info("pipe")
            import fcntl

            fcntl.fcntl(pipe.fileno(), 1031, PIPE_BYTES)  # F_SETPIPE_SZ
        except (OSError, AttributeError, ValueError):
            pass
        try:  # its imports (jsonschema, orjson) are not part of any answer's budget
            if await asyncio.wait_for(proc.stdout.readexactly(1), timeout=60) != READY:
                raise OSError("the answer checker did not start")
        except BaseException:
            checker.kill()
            self._ending(checker)
            raise
        self.stats["started"] += 1
        return checker

    async def start(self) -> None:
        """Start every checker now (the runner does, before its first claim): a checker's start (its imports,
        about a second on a loaded machine) is then never on an answer's way."""
        need = self.workers - self._count
        self._count += need
        got = await asyncio.gather(*(self._spawn() for _ in range(need)), return_exceptions=True)
        for c in got:
            if isinstance(c, BaseException):
                self._count -= 1  # taken lazily later, when an answer needs it
            else:
                self._idle.append((time.monotonic(), c))
        self._pump()

    # ---- who gets the next checker ---------------------------------------------------------------------------
    def _share(self) -> int:
        active = {j for j, n in self._held.items() if n > 0} | {j for j, q in self._waiting.items() if q}
        return max(1, self.workers // max(1, len(active)))

    def _pump(self) -> None:
        """Hand free checkers (or places to start one) to waiting reads, fairest first (the module docstring)."""
        while True:
            waiting = [j for j, q in self._waiting.items() if q]
            if not waiting:
                break
            job = min(waiting, key=lambda j: (self._held[j], self._used[j], self._waiting[j][0][0]))
            entry = self._waiting[job].popleft()
            fut = entry[1]
            if fut.done():  # its read was cancelled while it waited
                continue
            if self._idle:
                fut.set_result(self._idle.pop()[1])
            elif self._count < self.workers or (
                self._count < self.workers + self.spare and self._held[job] < self._share()
            ):
                self.stats["spares"] += self._count >= self.workers
                self._count += 1
                fut.set_result(_SPAWN)
            else:
                self._waiting[job].appendleft(entry)
                break
            self._held[job] += 1
        for job in [j for j, q in self._waiting.items() if not q]:
            del self._waiting[job]
        t = time.monotonic()
        while self._count > self.workers and self._idle and self._idle[0][0] < t - SPARE_IDLE_S:
            _, spare = self._idle.pop(0)
            self._count -= 1
            self._ending(spare)
            try:
                spare.proc.stdin.close()  # it exits at the end of its input
            except (OSError, RuntimeError):
                spare.kill()

    def _ending(self, checker: _Checker) -> None:
        self._all.discard(checker)
        self._ended = [c for c in self._ended if c.proc.returncode is None] + [checker]

    async def _take(self, job: Any) -> _Checker:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(job, collections.deque()).append((time.monotonic(), fut))
        self._pump()
        try:
            got = await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as it was cancelled: give it back
                got = fut.result()
                self._give_back(job, got if isinstance(got, _Checker) else None, 0.0)
            fut.cancel()
            self._pump()
            raise
        if got is not _SPAWN:
            return got
        try:
            return await self._spawn()
        except BaseException:
            self._give_back(job, None, 0.0)
            raise

    def _give_back(self, job: Any, checker: _Checker | None, held_s: float) -> None:
        """`job` is done with a checker: `checker` back to the idle ones, or None (killed, dead, never started):
        its place is free, and a replacement is started when a read needs one."""
        self._held[job] -= 1
        self._used[job] += held_s
        if self._held[job] <= 0:
            del self._held[job]
        if checker is not None and checker.proc.returncode is None:
            self._idle.append((time.monotonic(), checker))
        else:
            self._count -= 1
        if not self._held and not self._waiting:
            self._used.clear()  # nobody is using the checkers: old usage gives no job an edge later
        self._pump()

    def _schema_header(self, checker: _Checker, schema: dict | None) -> dict:
        text = json.dumps(schema, sort_keys=True) if schema is not None else "null"
        sid = self._schema_ids.setdefault(text, len(self._schema_ids) + 1)
        if sid in checker.schemas:
            return {"schema_id": sid}
        checker.schemas.add(sid)
        return {"schema_id": sid, "schema": text}

    async def read(
        self,
        body: bytes,
        schema: dict | None,
        *,
        confidence: bool,
        max_tokens: Any = None,
        replica: str | None = None,
        job: Any = None,
    ):
        """`serving.answers.read_answer` of this answer, in a checker, within the budget, as one of `job`'s
        reads (each job gets its share of the checkers). Returns an AnswerRead; raises BadAnswer
        (`check_timeout`, `unreadable`, or what the answer's reading found) or ReplicaError."""
        from serving.answers import AnswerRead

        checker = await self._take(job)
        took = time.monotonic()
        keep: _Checker | None = None
        try:
            header = {
                **self._schema_header(checker, schema),
                "confidence": bool(confidence),
                "max_tokens": max_tokens,
                "replica": replica,
            }
            try:
                out = await self._within_budget(checker, checker.call(json.dumps(header).encode(), bytes(body)))
            except asyncio.TimeoutError:
                self.stats["timeouts"] += 1
                checker.kill()
                raise BadAnswer(
                    f"checking the answer took longer than its budget of {self.budget_s:g} s of CPU (the prompt's "
                    "schema or the answer costs too much to check); the clip is not sent again",
                    status=200,
                    replica=replica,
                    kind="check_timeout",
                ) from None
            except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
                self.stats["died"] += 1
                checker.kill()
                code = await self._exit_code(checker)
                raise BadAnswer(
                    f"the answer checker exited (code {code}) while reading this answer; the clip is not sent again",
                    status=200,
                    replica=replica,
                    kind="unreadable",
                ) from None
            keep = checker
        finally:
            if keep is None:  # killed, dead, or left mid-answer by a cancelled request: replaced on the next take
                checker.kill()
                self._ending(checker)
            self._give_back(job, keep, time.monotonic() - took)
        self.stats["answers"] += 1
        got = json.loads(out)
        if "ok" in got:
            return AnswerRead(**got["ok"])
        err = got["error"]
        cls = _ERRORS.get(err.get("cls"), BadAnswer)
        kw = {"raw": err.get("raw")} if cls is BadAnswer else {}
        raise cls(err["message"], status=err.get("status"), replica=replica, kind=err.get("kind"), **kw)

    async def _within_budget(self, checker: _Checker, call) -> bytes:
        """The checker's answer to `call`, or asyncio.TimeoutError once the checker has used the budget in CPU time
        (wall time where CPU time cannot be read), or WALL_FACTOR x the budget in wall time."""
        task = asyncio.ensure_future(call)
        try:
            t0, c0 = time.monotonic(), checker.cpu_s()
            wall_cap = max(MIN_WALL_S, WALL_FACTOR * self.budget_s)
            while True:
                elapsed = time.monotonic() - t0
                c = checker.cpu_s()
                used = elapsed if c is None or c0 is None else c - c0
                if used >= self.budget_s or elapsed >= wall_cap:
                    raise asyncio.TimeoutError
                # a check is done within a millisecond or two of CPU at the least, so look again no sooner
                done, _ = await asyncio.wait({task}, timeout=max(self.budget_s - used, 0.001))
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()

    @staticmethod
    async def _exit_code(checker: _Checker) -> int | None:
        try:
            return await asyncio.wait_for(checker.proc.wait(), timeout=5)
        except asyncio.TimeoutError:
            return None

    async def aclose(self) -> None:
        """End every checker: close their input (they exit at its end), then kill what is left."""
        checkers, self._all = list(self._all) + self._ended, set()
        self._ended = []
        for c in checkers:
            try:
                c.proc.stdin.close()
            except (OSError, RuntimeError):
                pass
        for c in checkers:
            try:
                await asyncio.wait_for(c.proc.wait(), timeout=2)
            except asyncio.TimeoutError:
                c.kill()
                await self._exit_code(c)
        self._idle = []
        self._count = 0
        self._held.clear()
        self._used.clear()


# ---- the checker process -----------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the runner that started it dies (even while it is busy reading)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the runner died before the call
            os._exit(0)
    except (OSError, AttributeError):
        pass


def _limit_memory() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    except (ValueError, OSError):
        pass


def _read_exactly(stream, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _error(e: FleetError) -> dict:
    return {
        "cls": type(e).__name__,
        "message": e.message,
        "kind": e.kind,
        "status": e.status,
        "raw": getattr(e, "raw", None),
    }


def serve(stdin=None, stdout=None) -> int:
    """The checker's loop: read a request, answer it, until the input ends."""
    from serving.answers import read_answer

    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    schemas: dict[int, Any] = {}
    stdout.write(READY)
    stdout.flush()
    while True:
        size = _read_exactly(stdin, 4)
        if size is None:
            return 0
        header = json.loads(_read_exactly(stdin, _LEN.unpack(size)[0]) or b"{}")
        body = _read_exactly(stdin, _LEN.unpack(_read_exactly(stdin, 4) or b"\0\0\0\0")[0]) or b""
        if "schema" in header:
            schemas[header["schema_id"]] = json.loads(header["schema"])
        try:
            read = read_answer(
                body,
                schemas.get(header["schema_id"]),
                confidence=header.get("confidence", False),
                max_tokens=header.get("max_tokens"),
                replica=header.get("replica"),
            )
            out = {"ok": read.to_dict()}
        except FleetError as e:
            out = {"error": _error(e)}
        data = json.dumps(out).encode()  # ASCII: a lone surrogate in a model name travels as its escape
        stdout.write(_LEN.pack(len(data)) + data)
        stdout.flush()


def _ignore_stop_signals() -> None:
    """A stop (launch.sh's SIGTERM to the runner's process group, a terminal's Ctrl-C) is the runner's to handle:
    it drains its requests, then closes the checkers' input. A checker ended by the signal mid-read would fail
    that clip for good as `unreadable`."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def main() -> int:
    _ignore_stop_signals()
    _die_with_parent()
    _limit_memory()
    return serve()


if __name__ == "__main__":
    sys.exit(main())
