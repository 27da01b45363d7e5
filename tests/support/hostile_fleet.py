"""A hostile fleet on loopback: a replica and a router that answer what an attacker (or a broken server) would,
for the bounded-read tests (issue 21, class 2) and benchmarks/bench_hostile_fleet.py.

One Starlette app, served by uvicorn in its own process (so that what it costs to send is not counted, nor
slows, the reader under test); `mode` says how it answers:
- `gzip` / `deflate` / `br`: every /metrics and chat answer is a compression bomb (`bomb_mib` MiB of zeros
  once decoded, a few KiB on the wire) in that Content-Encoding, whatever the request asked for;
- `huge`: /metrics and chat answers stream `huge_mib` MiB of plain bytes without a length;
- `trickle`: answers send their headers, then one byte every 0.2 s, for ever;
- `labels`: a valid /metrics whose model name (a label the Fleet tab shows) is `label_kib` KiB long;
- `ok`: a small, valid answer.
As a router it lists `workers` workers (`/workers`), each at a path of this same server (`/w{i}`), and counts
which of them were called (`called()`), so a test sees the fan-out of one refresh; `sent()` counts the bytes
it handed to the network.

    python -m tests.support.hostile_fleet --mode br --port 9100 --workers 300
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
import zlib
from pathlib import Path

import httpx

from serving.procs import free_port

REPO = Path(__file__).resolve().parents[2]

_BOMBS: dict[tuple[str, int], bytes] = {}


def bomb(encoding: str, mib: int) -> bytes:
    """`mib` MiB of zeros compressed with `encoding` (gzip, deflate, br): cached, built in a streaming way."""
    key = (encoding, mib)
    if key not in _BOMBS:
        zeros = b"\0" * (1 << 20)
        if encoding == "br":
            import brotli

            c = brotli.Compressor(quality=5)
            _BOMBS[key] = b"".join(c.process(zeros) for _ in range(mib)) + c.finish()
        else:
            c = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
            _BOMBS[key] = b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()
    return _BOMBS[key]


OK_METRICS = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="hostile"} 1.0\n'
    "# TYPE vllm:request_success_total counter\n"
    'vllm:request_success_total{finished_reason="stop",model_name="hostile"} 3.0\n'
)


class HostileFleet:
    """The server as a child process (see the module docstring); a context manager, `url` its base URL."""

    def __init__(
        self, mode: str = "gzip", *, workers: int = 0, bomb_mib: int = 64, huge_mib: int = 400, label_kib: int = 1024
    ):
        self.mode, self.port = mode, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [
            sys.executable,
            "-m",
            "tests.support.hostile_fleet",
            f"--mode={mode}",
            f"--port={self.port}",
            f"--workers={workers}",
            f"--bomb-mib={bomb_mib}",
            f"--huge-mib={huge_mib}",
            f"--label-kib={label_kib}",
        ]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "HostileFleet":
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, start_new_session=True, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60  # it builds its bomb first (~1 s per 256 MiB)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the hostile fleet exited: {self.proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(self.url + "/liveness", timeout=1, trust_env=False)
                return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the hostile fleet did not start within 60 s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            from serving import procs

            procs.stop_group(self.proc.pid, self.proc.pid, grace=5, popen=self.proc)
            self.proc.stderr.close()

    def _stats(self) -> dict:
        return httpx.get(self.url + "/_stats", timeout=10, trust_env=False).json()

    def called(self) -> set[int]:
        """The workers (`/w{i}`) called since the start or the last reset."""
        return set(self._stats()["called"])

    def sent(self) -> int:
        """Bytes handed to the network since the start or the last reset."""
        return self._stats()["sent"]

    def reset(self) -> None:
        httpx.post(self.url + "/_reset", timeout=10, trust_env=False)


class _Server:
    """The answers (runs in the child process)."""

    def __init__(self, mode: str, workers: int, bomb_mib: int, huge_mib: int, label_kib: int, url: str):
        self.mode, self.workers, self.bomb_mib, self.huge_mib = mode, workers, bomb_mib, huge_mib
        self.label_kib, self.url = label_kib, url
        self.called: set[int] = set()
        self.sent = 0

    def _body(self, ok: bytes, request):
        from starlette.responses import Response, StreamingResponse

        mode = self.mode
        if mode in ("gzip", "deflate", "br"):
            data = bomb(mode, self.bomb_mib)

            async def chunks():
                for i in range(0, len(data), 16384):
                    if await request.is_disconnected():
                        return
                    self.sent += len(data[i : i + 16384])
                    yield data[i : i + 16384]

            return StreamingResponse(chunks(), headers={"content-encoding": mode}, media_type="text/plain")
        if mode == "huge":

            async def plain():
                block = b"#" * (1 << 20)
                for _ in range(self.huge_mib):
                    if await request.is_disconnected():
                        return
                    self.sent += len(block)
                    yield block

            return StreamingResponse(plain(), media_type="text/plain")
        if mode == "trickle":

            async def slow():
                while not await request.is_disconnected():
                    self.sent += 1
                    yield b"#"
                    await asyncio.sleep(0.2)

            return StreamingResponse(slow(), media_type="text/plain")
        if mode == "labels":
            name = "m" * (self.label_kib << 10)
            text = OK_METRICS.replace('model_name="hostile"', f'model_name="{name}"')
            self.sent += len(text)
            return Response(text.encode(), media_type="text/plain")
        return Response(ok, media_type="text/plain")

    def app(self):
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        def hit(request: Request) -> None:
            worker = request.path_params.get("i")
            if worker is not None:
                self.called.add(int(worker))

        async def health(request: Request):
            hit(request)
            return Response(b"")

        async def metrics(request: Request):
            hit(request)
            return self._body(OK_METRICS.encode(), request)

        async def workers(request: Request):
            return JSONResponse(
                {"workers": [{"url": f"{self.url}/w{i}", "is_healthy": True, "load": 0} for i in range(self.workers)]}
            )

        async def readiness(request: Request):
            return JSONResponse({"healthy_workers": self.workers, "total_workers": self.workers})

        async def chat(request: Request):
            await request.body()
            answer = {"choices": [{"finish_reason": "stop", "message": {"content": "{}"}}]}
            return self._body(json.dumps(answer).encode(), request)

        async def stats(request: Request):
            return JSONResponse({"called": sorted(self.called), "sent": self.sent})

        async def reset(request: Request):
            self.called.clear()
            self.sent = 0
            return JSONResponse({})

        return Starlette(
            routes=[
                Route("/liveness", health),
                Route("/health", health),
                Route("/readiness", readiness),
                Route("/workers", workers),
                Route("/metrics", metrics),
                Route("/w{i:int}/health", health),
                Route("/w{i:int}/metrics", metrics),
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/_stats", stats),
                Route("/_reset", reset, methods=["POST"]),
            ]
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.hostile_fleet", description=__doc__)
    ap.add_argument("--mode", default="gzip", choices=("gzip", "deflate", "br", "huge", "trickle", "labels", "ok"))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--bomb-mib", type=int, default=64)
    ap.add_argument("--huge-mib", type=int, default=400)
    ap.add_argument("--label-kib", type=int, default=1024)
    a = ap.parse_args(argv)
    import uvicorn

    if a.mode in ("gzip", "deflate", "br"):
        bomb(a.mode, a.bomb_mib)
    server = _Server(a.mode, a.workers, a.bomb_mib, a.huge_mib, a.label_kib, f"http://127.0.0.1:{a.port}")
    uvicorn.run(server.app(), host="127.0.0.1", port=a.port, log_level="warning", lifespan="off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
