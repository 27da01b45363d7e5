"""The in-process API for tests and benchmarks: start a fleet, control it, stop it.

    with start_fleet(2, 0, clip_root, speed=0) as fleet:   # ephemeral ports, a child process
        fleet.urls; fleet.set_knobs(0, hang=True); fleet.kill_replica(1); fleet.stats(0)
    start_fleet(1, 0, root, api_key="k")     # /v1 then needs `Authorization: Bearer k` (fleet.headers has it)

Every fleet started here has a knobs token of its own (random, unless given), which the handle sends: the
controls take no change from anyone else.

Like vLLM's `RemoteOpenAIServer` test helper: the fleet runs in a child process in its own process group (or on
an event loop in a daemon thread, `mode="thread"`), readiness is every replica listening, with a deadline, and a
child that died is reported with its stderr instead of waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from serving.simfleet.cli import command, secret_env
from serving.simfleet.server import DEFAULT_MODEL, FleetSpec, serve_fleet


class FleetHandle:
    """A running simulated fleet (in a thread or a child process) and its controls."""

    def __init__(
        self,
        urls: list[str],
        stop: Callable[[], None],
        *,
        knob_urls: list[str] | None = None,
        knobs_token: str | None = None,
        api_key: str | None = None,
    ):
        self.urls = urls
        self.knob_urls = knob_urls or urls  # where each replica's controls answer (loopback only)
        self._knobs_auth = {"authorization": f"Bearer {knobs_token}"} if knobs_token else {}
        # what a client of this fleet sends on /v1 requests ({} for a fleet without an API key)
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._stop = stop

    def _post_knobs(self, i: int, knobs: dict) -> dict:
        r = httpx.post(
            self.knob_urls[i] + "/sim/knobs", json=knobs, headers=self._knobs_auth, timeout=5, trust_env=False
        )
        r.raise_for_status()
        return r.json()

    def set_knobs(self, i: int, **knobs: Any) -> dict:
        """Change replica i's failure knobs now (error_rate, unavailable_for, hang, die_after, slow, ...)."""
        return self._post_knobs(i, knobs)

    def kill_replica(self, i: int) -> None:
        """Make replica i stop listening and drop its connections (as if its process died)."""
        with contextlib.suppress(httpx.HTTPError):
            self._post_knobs(i, {"die": True})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                httpx.get(self.urls[i] + "/health", timeout=0.5, trust_env=False)
            except httpx.HTTPError:
                return
            time.sleep(0.02)
        raise RuntimeError(f"replica {i} still answers after kill")

    def stats(self, i: int) -> dict:
        return httpx.get(self.knob_urls[i] + "/sim/stats", timeout=5, trust_env=False).json()

    def stop(self) -> None:
        self._stop()

    def __enter__(self) -> "FleetHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_fleet(
    replicas: int,
    port: int,
    root: str | Path,
    *,
    host: str = "127.0.0.1",
    model: str = DEFAULT_MODEL,
    mode: str = "process",
    timeout: float = 30.0,
    seed: int = 0,
    api_key: str | None = None,
    **knobs: Any,
) -> FleetHandle:
    """Start a simulated fleet and wait until every replica answers /health.

    `port=0` picks free ephemeral ports (what tests want). `mode="process"` runs it in a child process in
    its own process group (real parallelism, killable); `mode="thread"` runs it on an event loop in a
    daemon thread of this process (cheaper to start). `api_key`: /v1 requests then need it, as on vLLM."""
    spec = FleetSpec(
        replicas,
        port,
        root,
        host=host,
        model=model,
        seed=seed,
        knobs=knobs,
        api_key=api_key,
        knobs_token=secrets.token_urlsafe(16),
    )
    if mode == "thread":
        return _start_thread(spec, timeout)
    return _start_process(spec, timeout)


def _start_process(spec: FleetSpec, timeout: float) -> FleetHandle:
    ready = Path(tempfile.mkstemp(prefix="simfleet-", suffix=".json")[1])
    ready.unlink()
    # the child imports serving from this checkout, whatever the caller's working directory
    repo = str(Path(__file__).resolve().parents[2])
    inherited = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "SIMFLEET_KNOBS_TOKEN")}
    env = {**inherited, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", ""), **secret_env(spec)}
    proc = subprocess.Popen(
        command(spec, ["--ready-file", str(ready)]),
        start_new_session=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def stop() -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if proc.stderr:
            proc.stderr.close()
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            stop()
            raise RuntimeError(f"simulated fleet exited with {proc.returncode}: {err}")
        if ready.exists():
            try:
                got = json.loads(ready.read_text())
                urls, knob_urls = got["urls"], got["knob_urls"]
            except (ValueError, KeyError):
                time.sleep(0.02)
                continue
            handle = FleetHandle(urls, stop, knob_urls=knob_urls, knobs_token=spec.knobs_token, api_key=spec.api_key)
            handle.process = proc  # type: ignore[attr-defined]
            return handle
        time.sleep(0.02)
    stop()
    raise TimeoutError(f"simulated fleet not ready within {timeout} s")


def _start_thread(spec: FleetSpec, timeout: float) -> FleetHandle:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}
    stop_event: asyncio.Event | None = None

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            nonlocal stop_event
            stop_event = asyncio.Event()

            def on_ready(urls: list[str], knob_urls: list[str]) -> None:
                box["urls"], box["knob_urls"] = urls, knob_urls
                ready.set()

            try:
                await serve_fleet(spec, on_ready=on_ready, stop=stop_event)
            except BaseException as e:  # reported to the starting thread
                box["error"] = e
                ready.set()

        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=run, name="simfleet", daemon=True)
    thread.start()
    if not ready.wait(timeout):
        raise TimeoutError(f"simulated fleet not ready within {timeout} s")
    if "error" in box:
        raise RuntimeError(f"simulated fleet failed to start: {box['error']!r}")

    def stop() -> None:
        if thread.is_alive() and stop_event is not None:
            loop.call_soon_threadsafe(stop_event.set)
            thread.join(10)

    handle = FleetHandle(
        box["urls"], stop, knob_urls=box["knob_urls"], knobs_token=spec.knobs_token, api_key=spec.api_key
    )
    handle.thread = thread  # type: ignore[attr-defined]
    return handle
