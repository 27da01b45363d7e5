"""Helpers for the runner's tests: clip rows without video files, and a fake fleet client at the HTTP
boundary (the only place fakes are allowed) for tests that are about the loop, not the protocol."""

from __future__ import annotations

import asyncio
import collections
import random

from data import examples, prompts
from serving.client import CaptionResult

LABELS = examples.LABELS


def add_clips(db, n: int, *, prefix: str = "clip", probe_errors: dict[int, str] | None = None) -> list[int]:
    """Insert `n` clip rows (paths only; the fake client never opens them). Returns their ids."""
    probe_errors = probe_errors or {}
    rows = [
        {
            "path": f"{prefix}/{i:05d}.mp4",
            "size": 1000,
            "duration": 5.0,
            "width": 1280,
            "height": 720,
            "frames": 150,
            "probe_error": probe_errors.get(i),
        }
        for i in range(n)
    ]
    with db.conn:
        db["clips"].insert_all(rows)
    return [r["id"] for r in db.query("SELECT id FROM clips WHERE path LIKE ? ORDER BY id", [prefix + "/%"])]


def default_prompt(db) -> dict:
    return prompts.latest(db)


class FakeClient:
    """Answers caption requests after `latency` seconds; `script(url, req, n)` may raise a FleetError.

    Records every request (replica, clip path) and the peak number in flight per replica."""

    def __init__(self, latency: float = 0.0, script=None, seed: int = 0):
        self.latency = latency
        self.script = script
        self.calls: list[tuple[str, str]] = []
        self.per_clip = collections.Counter()
        self.inflight = collections.Counter()
        self.peak = collections.Counter()
        self.rng = random.Random(seed)
        self.closed = False

    async def caption(self, url, req):
        self.calls.append((url, req.clip_path))
        self.per_clip[req.clip_path] += 1
        self.inflight[url] += 1
        self.peak[url] = max(self.peak[url], self.inflight[url])
        try:
            if self.latency:
                await asyncio.sleep(self.latency * (0.5 + self.rng.random()))
            if self.script is not None:
                self.script(url, req, self.per_clip[req.clip_path])
            return CaptionResult(
                text=f"caption of {req.clip_path}",
                labels=dict(LABELS),
                provenance={
                    "model": "fake-simulated",
                    "prompt_id": req.prompt["id"],
                    "prompt_name": req.prompt["name"],
                    "prompt_version": req.prompt["version"],
                    "params": req.params.to_dict(),
                    "frames": req.params.frames,
                    "replica": url,
                    "decode_backend": "none",
                    "latency_ms": 1.0,
                    "prompt_tokens": 10,
                    "completion_tokens": 20,
                    "finish_reason": "stop",
                    "simulated": True,
                },
            )
        finally:
            self.inflight[url] -= 1

    async def aclose(self):
        self.closed = True


# ---- real clips, a real simulated fleet, the real router ------------------------------------------------------
import contextlib  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from serving import procs  # noqa: E402


@contextlib.contextmanager
def real_router(worker_urls: list[str], tmp_path, *, timeout: float = 30.0):
    """The real vllm-router binary in front of `worker_urls`, on free loopback ports; yields its URL."""
    with real_router_metrics(worker_urls, tmp_path, timeout=timeout) as (url, _):
        yield url


@contextlib.contextmanager
def real_router_metrics(worker_urls: list[str], tmp_path, *, timeout: float = 30.0):
    """`real_router`, yielding (its URL, the URL of its Prometheus metrics). Its circuit breaker opens for as long
    as the launcher's (serving.launch.commands.ROUTER_BREAKER_OPEN_S)."""
    from serving.launch.commands import ROUTER_BREAKER_OPEN_S

    exe = shutil.which("vllm-router")
    assert exe, "vllm-router is not installed (pip install vllm-router): the end-to-end tests need it"
    port, metrics_port = procs.free_port(), procs.free_port()
    cmd = [
        exe,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        "round_robin",
        "--worker-startup-timeout-secs",
        "30",
        "--health-check-interval-secs",
        "1",
        "--request-timeout-secs",
        "60",
        "--retry-max-retries",
        "2",
        "--cb-timeout-duration-secs",
        str(ROUTER_BREAKER_OPEN_S),
        "--prometheus-port",
        str(metrics_port),
    ]
    child = procs.start("router", cmd, log=Path(tmp_path) / "router.log", health=f"http://127.0.0.1:{port}/readiness")
    try:
        procs.wait_healthy([child], timeout=timeout)
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"
    finally:
        procs.stop_group(child.pgid, child.pid, grace=5, popen=child.popen)
