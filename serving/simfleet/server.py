"""Serving N simulated replicas on one event loop: one uvicorn server and listening socket per replica.

`FleetSpec` says what to serve; the CLI, the test harness and the launcher all describe a fleet with it. A fleet
bound to loopback serves its controls (/sim/knobs, /sim/stats) on each replica's port; one bound anywhere else (a
GPU node's address, 0.0.0.0) never does: each replica's controls get a listener of their own on 127.0.0.1, so
only this machine can reach them (`knob_urls`).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from serving.simfleet.app import build_app, build_controls
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
    # secrets: given to the process in its environment (VLLM_API_KEY, SIMFLEET_KNOBS_TOKEN), never as flags
    api_key: str | None = field(default=None, repr=False)
    knobs_token: str | None = field(default=None, repr=False)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: an address only this machine reaches."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    on_ready: Callable[[list[str], list[str]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the fleet of `spec` until `stop` is set or every replica has died; `on_ready(urls, knob_urls)`
    once all replicas listen (`knob_urls[i]`: where replica i's controls answer)."""
    import uvicorn

    root = Path(spec.root).resolve()
    if not root.is_dir():
        raise SystemExit(f"--allowed-local-media-path {root} is not a directory")
    probe = ProbeCache()
    stop = stop or asyncio.Event()
    reps: list[SimReplica] = []
    knob_urls: list[str] = []
    replicas: list[tuple[Any, asyncio.Future]] = []  # (uvicorn server, its task): the fleet lives as long as these
    controls: list[tuple[Any, asyncio.Future]] = []  # the control listeners of a fleet bound beyond loopback
    host = spec.host
    local = is_loopback(host)

    def serve(app: Any, sock: socket.socket) -> tuple[Any, asyncio.Future]:
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=75,
            timeout_graceful_shutdown=1,
            http="h11",
        )
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # we handle signals
        return server, asyncio.ensure_future(server.serve(sockets=[sock]))

    for i in range(spec.replicas):
        k = Knobs()
        k.update(dict(spec.knobs))
        rep = SimReplica(i, root=root, model=spec.model, knobs=k, probe=probe, seed=spec.seed)
        sock = _bind(host, spec.port + i if spec.port else 0)
        bound = sock.getsockname()[1]
        rep.url = f"http://{host if ':' not in host else '[' + host + ']'}:{bound}"
        replicas.append(serve(build_app(rep, api_key=spec.api_key, knobs_token=spec.knobs_token, controls=local), sock))
        rep.on_die = _killer(replicas[-1][0])
        reps.append(rep)
        if local:
            knob_urls.append(rep.url)
        else:  # the controls answer on this machine only
            csock = _bind("127.0.0.1", 0)
            controls.append(serve(build_controls(rep, knobs_token=spec.knobs_token), csock))
            knob_urls.append(f"http://127.0.0.1:{csock.getsockname()[1]}")
    everything = replicas + controls
    for _ in range(200):
        if all(s.started for s, _ in everything) or any(t.done() for _, t in everything):
            break
        await asyncio.sleep(0.01)
    for _, t in everything:
        if t.done() and t.exception():
            raise t.exception()
    if on_ready:
        on_ready([r.url for r in reps], knob_urls)
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait(
        [stopper, asyncio.gather(*(t for _, t in replicas), return_exceptions=True)],
        return_when=asyncio.FIRST_COMPLETED,
    )
    for r in reps:
        r.die()
    for server, _ in controls:
        _killer(server)()
    await asyncio.gather(*(t for _, t in everything), return_exceptions=True)
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
