"""Serving N simulated replicas on one event loop: one uvicorn server and listening socket per replica.

`FleetSpec` says what to serve; the CLI, the test harness and the launcher all describe a fleet with it.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from serving.simfleet.app import build_app
from serving.simfleet.knobs import Knobs
from serving.simfleet.probe import ProbeCache
from serving.simfleet.replica import SimReplica

DEFAULT_MODEL = "Qwen/Qwen3-VL-8B-Instruct"


@dataclass(frozen=True)
class FleetSpec:
    """A simulated fleet: `replicas` replicas on ports port..port+N-1 (ephemeral ports if port is 0), serving
    clips under `root` (vLLM's --allowed-local-media-path), each starting with `knobs` (see knobs.FLAGS)."""

    replicas: int
    port: int
    root: str | Path
    host: str = "127.0.0.1"
    model: str = DEFAULT_MODEL
    seed: int = 0  # of the error-rate dice
    knobs: dict[str, Any] = field(default_factory=dict)


def _bind(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP, and
    # without it every response (headers, then body) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve_fleet(
    spec: FleetSpec,
    *,
    on_ready: Callable[[list[str]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the fleet of `spec` until `stop` is set or every replica has died; `on_ready(urls)` once all
    replicas listen."""
    import uvicorn

    root = Path(spec.root).resolve()
    if not root.is_dir():
        raise SystemExit(f"--allowed-local-media-path {root} is not a directory")
    probe = ProbeCache()
    stop = stop or asyncio.Event()
    servers, tasks, reps = [], [], []
    host = spec.host
    for i in range(spec.replicas):
        k = Knobs()
        k.update(dict(spec.knobs))
        rep = SimReplica(i, root=root, model=spec.model, knobs=k, probe=probe, seed=spec.seed)
        sock = _bind(host, spec.port + i if spec.port else 0)
        bound = sock.getsockname()[1]
        rep.url = f"http://{host if ':' not in host else '[' + host + ']'}:{bound}"
        config = uvicorn.Config(
            build_app(rep),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=75,
            timeout_graceful_shutdown=1,
            http="h11",
        )
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # we handle signals
        rep.on_die = _killer(server)
        servers.append(server)
        reps.append(rep)
        tasks.append(asyncio.ensure_future(server.serve(sockets=[sock])))
    for _ in range(200):
        if all(s.started for s in servers) or any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.01)
    for t in tasks:
        if t.done() and t.exception():
            raise t.exception()
    if on_ready:
        on_ready([r.url for r in reps])
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopper, asyncio.gather(*tasks, return_exceptions=True)], return_when=asyncio.FIRST_COMPLETED)
    for r in reps:
        r.die()
    await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()


def _killer(server: Any) -> Callable[[], None]:
    """Stop listening at once and drop every open connection, like a process that died."""

    def kill() -> None:
        server.should_exit = True
        server.force_exit = True
        for srv in getattr(server, "servers", []) or []:
            srv.close()
        for conn in list(getattr(server.server_state, "connections", [])):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()

    return kill
