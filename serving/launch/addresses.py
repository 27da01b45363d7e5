"""Where the fleet's servers listen, and whether the ports are ours (beyond one node, issue 12; R14).

A second workbench on this machine (another data dir) must not collide with the first: `resolve_ports` replaces
a busy port with a free one and says so; `verify_owners` / `owns` check that the process answering on a port is
the one this launch started (a health check alone cannot tell our router from another workbench's).
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Sequence

import httpx

from data.settings import Settings
from serving import procs
from serving.launch.commands import choose_gpus, launch_mode


def advertised_host(bind: str) -> str:
    """The host others use to reach a server bound to `bind` (a wildcard bind is reached by our name)."""
    if bind in ("0.0.0.0", "::", ""):
        import socket

        return socket.getfqdn()
    return f"[{bind}]" if ":" in bind else bind


def local_host(bind: str) -> str:
    """The address this machine's health checks use for a server bound to `bind`."""
    if bind in ("0.0.0.0", ""):
        return "127.0.0.1"
    if bind == "::":
        return "[::1]"
    return f"[{bind}]" if ":" in bind else bind


def no_local_media(settings: Settings) -> Path:
    """An empty folder given to a GPU node's replicas as --allowed-local-media-path: no file:// URL reaches
    anything there, so clips come only over signed HTTP(S) URLs."""
    path = settings.data_dir / "no-local-media"
    path.mkdir(parents=True, exist_ok=True)
    return path


def remote_media_args(settings: Settings, *, sim: bool = False) -> list[str]:
    """`--allowed-media-domains` for replicas that fetch clips over http(s) ([] when clips go as file://).
    vLLM takes the hosts as separate arguments (nargs='+'); the simulated fleet one comma-separated value."""
    from serving import media_urls

    domains = media_urls.media_domains(settings)
    if not domains:
        return []
    return ["--allowed-media-domains", domains] if sim else ["--allowed-media-domains", *domains.split(",")]


def private_loopback() -> str:
    """A loopback address for a server only this machine's processes should find (vllm-router behind the router
    gate): 127.a.b.c at random, so that a web page cannot guess it (Linux answers all of 127/8); 127.0.0.1 on a
    system that answers only that one."""
    import random
    import socket

    rng = random.SystemRandom()
    for _ in range(20):
        host = f"127.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"
        with socket.socket() as sock:
            try:
                sock.bind((host, 0))
            except OSError:
                continue
        return host
    return "127.0.0.1"


def port_free(host: str, port: int) -> bool:
    import socket

    if not 0 < port < 65536:
        return False
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                raise SystemExit(f"launcher: {host} is not an address of this machine (--replica-host)") from None
            return False
    return True


def free_block(host: str, n: int, preferred: int, avoid: set[int] = frozenset()) -> int:
    """The first port of `n` consecutive free ports: `preferred` if they are all free, else another block."""

    def ok(base: int) -> bool:
        return all(p not in avoid and port_free(host, p) for p in range(base, base + n))

    if ok(preferred):
        return preferred
    rng = __import__("random").Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - n)
        if ok(base):
            return base
    raise SystemExit(f"launcher: no {n} consecutive free ports found on {host}")


def resolve_ports(settings: Settings, sim_replicas: int, *, dry_run: bool = False, say=print) -> Settings:
    """Ports this launch will really use. A second workbench on this machine (another data dir) must not
    collide with the first: a busy replica, router or router-metrics port is replaced by a free one (and
    said), since the runner and the app learn the URLs from this launch's record, not from the defaults.
    A GPU node keeps its ports (the head's worker list names them) and refuses to start instead."""
    # replica i of a GPU node listens on FLEET_PORT + its GPU index: the block runs up to the highest index
    n = (
        0
        if settings.role == "head"
        else (sim_replicas if launch_mode(settings.fleet_mode) == "sim" else max(choose_gpus(settings.gpus) or [0]) + 1)
    )
    if settings.role == "node":
        if dry_run:
            return settings  # printing commands for another machine: its ports are checked when it starts
        busy = [
            p for p in range(settings.fleet_port, settings.fleet_port + n) if not port_free(settings.replica_host, p)
        ]
        if busy:
            raise SystemExit(
                f"launcher: port(s) {', '.join(map(str, busy))} on {settings.replica_host} are in use; "
                "a GPU node keeps the ports the head's worker list names: stop what holds them or "
                "pass --fleet-port (and give the head the new URLs)"
            )
        return settings
    changes: dict = {}
    used: set[int] = set()
    if n:
        base = free_block(settings.replica_host, n, settings.fleet_port)
        if base != settings.fleet_port:
            say(
                f"[launcher] replica ports {settings.fleet_port}..{settings.fleet_port + n - 1} are in use (another "
                f"workbench?): using {base}..{base + n - 1}"
            )
            changes["fleet_port"] = base
        used |= set(range(base, base + n))
    for name, label in (("router_port", "router"), ("router_prometheus_port", "router metrics")):
        want = getattr(settings, name)
        got = free_block("127.0.0.1", 1, want, used)
        if got != want:
            say(f"[launcher] {label} port {want} is in use (another workbench?): using {got}")
            changes[name] = got
        used.add(got)
    return settings.replace(**changes) if changes else settings


def owns(pgid: int | None, port: int | None) -> int:
    """`launcher owns --pgid N --listen-port P`: 0 if group N listens on P, else 1 with a message saying who does."""
    if not pgid or not port:
        print("launcher: owns needs --pgid and --listen-port", file=sys.stderr)
        return 2
    if procs.group_listens(pgid, port):
        return 0
    who = sorted(procs.listener_pids(port))
    print(
        f"launcher: port {port} is answered by process(es) {who or 'unknown'}, not by the process group {pgid} "
        "this launch started: another workbench? Pick another --port (or stop the other one)",
        file=sys.stderr,
    )
    return 1


def verify_owners(children: Sequence[procs.Child]) -> None:
    """Each URL a started process should answer on is a port that process (its group) listens on.

    A health check alone cannot tell our router from another workbench's router on the same port (R14:
    the second launcher once said "fleet up" because the first one's router answered)."""
    for c in children:
        for url in [u for u in (c.url or "").split(",") if u]:
            u = httpx.URL(url)
            port = u.port or (443 if u.scheme == "https" else 80)
            if not procs.group_listens(c.pgid, port):
                owners = procs.listener_pids(port)
                raise procs.StartupError(
                    f"{c.name}: port {port} is answered by process(es) {sorted(owners) or 'unknown'}, not by the "
                    f"{c.name} this launcher started (pgid {c.pgid}): another workbench? Stop it, or start this one "
                    f"with other ports (see {c.log})"
                )
