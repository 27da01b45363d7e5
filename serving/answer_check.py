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

As a side effect the runner's own process no longer parses the answers (about half of its CPU per answer with
logprobs: docs/BENCHMARKS.md, "Job runner"): a head with spare cores reads answers on them.

The wire, on each checker's stdin/stdout: a request is `len(header) header len(body) body` (lengths 4-byte big
endian, the header JSON: schema id, and the schema's JSON the first time a checker sees it; confidence; max
tokens; replica), an answer `len(result) result` (JSON: `{"ok": AnswerRead}` or `{"error": {...}}`).
"""

from __future__ import annotations

import asyncio
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
    """Reads answers in checker processes with a time budget each (the module docstring). One per event loop;
    `aclose()` ends the checkers."""

    def __init__(self, budget_s: float, workers: int = 0):
        self.budget_s = float(budget_s)
        self.workers = workers or default_workers()
        self._idle: asyncio.Queue | None = None
        self._started = 0
        self._all: set[_Checker] = set()
        self._schema_ids: dict[str, int] = {}
        self.stats = {"answers": 0, "timeouts": 0, "died": 0, "started": 0}

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
            self._all.discard(checker)
            raise
        self.stats["started"] += 1
        return checker

    async def start(self) -> None:
        """Start every checker now (the runner does, before its first claim): a checker's start (its imports,
        about a second on a loaded machine) is then never on an answer's way."""
        if self._idle is None:
            self._idle = asyncio.Queue()
        need = self.workers - self._started
        self._started += need
        got = await asyncio.gather(*(self._spawn() for _ in range(need)), return_exceptions=True)
        for c in got:
            if isinstance(c, BaseException):
                self._started -= 1  # taken lazily later, when an answer needs it
            else:
                self._idle.put_nowait(c)

    async def _take(self) -> _Checker:
        if self._idle is None:
            self._idle = asyncio.Queue()
        if self._idle.empty() and self._started < self.workers:
            self._started += 1
            try:
                return await self._spawn()
            except BaseException:
                self._started -= 1
                raise
        got = await self._idle.get()
        if got is None:  # the place of a checker that was killed: start its replacement
            try:
                return await self._spawn()
            except BaseException:
                self._idle.put_nowait(None)
                raise
        return got

    def _schema_header(self, checker: _Checker, schema: dict | None) -> dict:
        text = json.dumps(schema, sort_keys=True) if schema is not None else "null"
        sid = self._schema_ids.setdefault(text, len(self._schema_ids) + 1)
        if sid in checker.schemas:
            return {"schema_id": sid}
        checker.schemas.add(sid)
        return {"schema_id": sid, "schema": text}

    async def read(
        self, body: bytes, schema: dict | None, *, confidence: bool, max_tokens: Any = None, replica: str | None = None
    ):
        """`serving.answers.read_answer` of this answer, in a checker, within the budget. Returns an AnswerRead;
        raises BadAnswer (`check_timeout`, `unreadable`, or what the answer's reading found) or ReplicaError."""
        from serving.answers import AnswerRead

        checker = await self._take()
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
                self._all.discard(checker)
            if self._idle is not None:
                self._idle.put_nowait(keep)
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
        checkers, self._all = list(self._all), set()
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
        self._idle = None
        self._started = 0


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


def main() -> int:
    _die_with_parent()
    _limit_memory()
    return serve()


if __name__ == "__main__":
    sys.exit(main())
