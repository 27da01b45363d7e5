"""The one way to read a fleet: every read of a data dir's fleet health, load and workers, with its fleet key.

The router gate in front of the router (serving.router_gate) answers nothing without the fleet key, `/health`
and `/workers` included: a read without it sees a healthy fleet as down (401 on every read) and the router as
one replica. So no reader makes an HTTP client of its own: a `FleetReader` is made from the settings, so from the
data dir and its key (serving.fleet_key), and every read goes through one: the runner's look
(serving.runner.watch) and its router count (so `serving.caption` too), the Fleet tab, the app's simulated-fleet
check and the Jobs tab's replica count, the launcher's health waits and `status` (so `./launch.sh status`).
tests/test_structure.py fails if a module of serving/ or webapp/ makes an HTTP client for the fleet elsewhere.

What it reads (serving.fleet.health says what the answers mean): a replica's `/health` and Prometheus `/metrics`, a
router's `/liveness`, `/readiness` and `/workers` (vllm-router's own `/health` is 503 as soon as one worker is
down). Every answer is read under its size bound as it streams (serving.bounded), each request within the
reader's timeout, at most MAX_SCRAPED replicas per read; and every text it returns (errors, a router's worker
fields, model names) has been through the data dir's redactor (serving.redact), since a fleet may say anything.

    reader = FleetReader(settings)
    reader.watch(urls)          # the Fleet tab: routers looked through, replicas scraped, one bounded refresh
                                # (with router_metrics=URL: the router's own Prometheus metrics too)
    reader.look(urls)           # the runner: how many replicas behind `urls` answer /health with 200
    reader.router_workers(url)  # how many workers a router has (None: not a router)
    reader.get(url)             # one bounded GET (the launcher's health waits and `status`)

Sync methods run their reads concurrently on an event loop of their own (or one after the other when called
from inside a running loop).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from dataclasses import replace
from typing import Any, Awaitable, Callable, Iterable

import httpx

from data.settings import Settings
from serving import bounded, fleet_key
from serving.fleet import tls as fleet_tls
from serving.fleet.health import (
    MAX_METRICS_BYTES,
    MAX_ROUTER_WORKERS,
    MAX_SCRAPED,
    MAX_STATUS_BYTES,
    MAX_WORKERS_BYTES,
    REFRESH_ROUNDS,
    SCRAPE_CONCURRENCY,
    Answer,
    ReplicaStatus,
    RouterStatus,
    parse_router_metrics,
    replica_from,
    router_from,
    summary,
    why,
    workers_of,
)
from serving.redact import redact_all

DEFAULT_TIMEOUT = 2.0
ERROR_CHARS = 300  # of a replica's error in a look (it goes out with the runner's heartbeat)


def _base(url: str) -> str:
    base = url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


class FleetReader:
    """Reads the fleet of `settings`' data dir, its fleet key on every request (see the module docstring).

    `timeout`: seconds per request (and per read of its answer), unless a call gives its own. `transport`: an
    httpx transport for every client it makes (tests)."""

    def __init__(
        self,
        settings: Settings,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ):
        self._settings = settings
        self._auth: tuple[tuple | None, fleet_key.FleetAuth] | None = None
        self.timeout = timeout
        self._transport = transport
        self._ssl: ssl.SSLContext | None = None  # made at the first read that connects, then kept: _client_args

    @property
    def auth(self) -> fleet_key.FleetAuth:
        """The data dir's fleet key and redactor, read again when the key file changes (a node's key stored, or
        made by a launch, after this reader was made)."""
        try:
            st = fleet_key.path(self._settings).stat()
            seen: tuple | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            seen = None
        if self._auth is None or self._auth[0] != seen:
            self._auth = (seen, fleet_key.auth(self._settings))
        return self._auth[1]

    def __repr__(self) -> str:
        return f"FleetReader({self.auth!r}, timeout={self.timeout})"

    # ---- clients: the only ones made for a fleet read, each with the key ---------------------------------------
    def _client_args(self, timeout: float, transport: object) -> dict:
        """What every client this reader makes shares: the key's headers, no proxies from the environment, the
        `transport` injected for tests (or None), and one TLS context for all of them, the captioning client's
        (serving.fleet.tls: SSL_CERT_FILE/DIR, else certifi's CAs), made at the first client that connects, as making
        it costs ~20 ms of CPU and the app and the runner read their fleet every few seconds. A client with an
        injected transport connects through it: nothing is made."""
        if transport is None and self._ssl is None:
            self._ssl = fleet_tls.context()
        verify = True if transport is not None else self._ssl
        return {
            "timeout": timeout,
            "trust_env": False,
            "headers": self.auth.headers,
            "transport": transport,
            "verify": verify,
        }

    def _client(self, timeout: float) -> httpx.Client:
        transport = self._transport if isinstance(self._transport, httpx.BaseTransport) else None
        return httpx.Client(**self._client_args(timeout, transport))

    def _async_client(self, timeout: float) -> httpx.AsyncClient:
        transport = self._transport if isinstance(self._transport, httpx.AsyncBaseTransport) else None
        return httpx.AsyncClient(
            **self._client_args(timeout, transport), limits=httpx.Limits(max_connections=2 * SCRAPE_CONCURRENCY)
        )

    def _run(self, go: Callable[[httpx.AsyncClient], Awaitable[Any]], timeout: float) -> Any:
        """`go(client)` on an event loop of its own; inside a running loop (no nested loops), `go` is run on a
        thread's loop instead, so that a caller in a coroutine gets the same answer."""

        async def main() -> Any:
            async with self._async_client(timeout) as client:
                return await go(client)

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(main())
        result: list = []

        def thread() -> None:
            try:
                result.append((True, asyncio.run(main())))
            except BaseException as e:  # handed to the caller
                result.append((False, e))

        t = threading.Thread(target=thread, name="fleet-read", daemon=True)
        t.start()
        t.join()
        ok, value = result[0]
        if not ok:
            raise value
        return value

    # ---- one read ----------------------------------------------------------------------------------------------
    async def _get(self, client: httpx.AsyncClient, url: str, max_bytes: int, timeout: float) -> Answer:
        """One bounded GET (size after decoding, whole-read time); an error is returned, not raised."""
        try:
            return await bounded.fetch(client, "GET", url, max_bytes=max_bytes, seconds=timeout)
        except (httpx.HTTPError, bounded.ReadRefused) as e:
            return e

    def get(self, url: str, *, max_bytes: int = MAX_STATUS_BYTES, timeout: float | None = None) -> Answer:
        """One bounded GET of `url` with the key: the answer, or the error that stood for it (never raised)."""
        t = self.timeout if timeout is None else timeout
        with self._client(t) as client:
            try:
                return bounded.fetch_sync(client, "GET", url, max_bytes=max_bytes, seconds=t)
            except (httpx.HTTPError, bounded.ReadRefused) as e:
                return e

    # ---- replicas ---------------------------------------------------------------------------------------------
    async def _replica(self, client: httpx.AsyncClient, url: str, timeout: float, metrics: bool) -> ReplicaStatus:
        base = _base(url)
        if not metrics:
            return replica_from(url, await self._get(client, base + "/health", MAX_STATUS_BYTES, timeout))
        health, scraped = await asyncio.gather(
            self._get(client, base + "/health", MAX_STATUS_BYTES, timeout),
            self._get(client, base + "/metrics", MAX_METRICS_BYTES, timeout),
        )
        return replica_from(url, health, scraped)

    async def _replicas(
        self, client: httpx.AsyncClient, urls: list[str], timeout: float, metrics: bool = True
    ) -> list[ReplicaStatus]:
        gate = asyncio.Semaphore(SCRAPE_CONCURRENCY)

        async def one(u: str) -> ReplicaStatus:
            async with gate:
                return self._redacted(await self._replica(client, u, timeout, metrics))

        return list(await asyncio.gather(*(one(u) for u in urls)))

    def scrape(self, url: str, *, timeout: float | None = None) -> ReplicaStatus:
        """Health and metrics of one replica; never raises for a replica that is down (healthy=False)."""
        t = self.timeout if timeout is None else timeout
        return self._run(lambda c: self._replicas(c, [url], t), t)[0]

    def fleet_status(self, urls: Iterable[str], *, timeout: float | None = None) -> list[ReplicaStatus]:
        """Health and metrics of each replica, read concurrently (at most SCRAPE_CONCURRENCY at a time)."""
        t = self.timeout if timeout is None else timeout
        url_list = list(urls)
        return self._run(lambda c: self._replicas(c, url_list, t), t) if url_list else []

    # ---- routers ----------------------------------------------------------------------------------------------
    async def _router(self, client: httpx.AsyncClient, url: str, timeout: float) -> tuple[RouterStatus, list[str]]:
        base = url.rstrip("/")
        live = await self._get(client, base + "/liveness", MAX_STATUS_BYTES, timeout)
        if not isinstance(live, httpx.Response):
            st, urls = router_from(url, live)
        else:
            ready, workers = await asyncio.gather(
                self._get(client, base + "/readiness", MAX_STATUS_BYTES, timeout),
                self._get(client, base + "/workers", MAX_WORKERS_BYTES, timeout),
            )
            st, urls = router_from(url, live, ready, workers)
        return self._redacted(st), urls

    def router_status(self, url: str, *, timeout: float | None = None) -> RouterStatus:
        """A vllm-router's liveness, readiness and its first workers (each part best effort, each answer bounded)."""
        t = self.timeout if timeout is None else timeout
        return self._run(lambda c: self._router(c, url, t), t)[0]

    def router_workers(self, url: str, *, timeout: float | None = None) -> int | None:
        """How many workers a vllm-router at `url` has (its `/workers`), or None if `url` is not a router."""
        r = self.get(url.rstrip("/") + "/workers", max_bytes=MAX_WORKERS_BYTES, timeout=timeout)
        if not isinstance(r, httpx.Response) or r.status_code != 200:
            return None
        try:
            n = workers_of(r.json())[2]
        except (ValueError, RecursionError):
            return None
        return n if isinstance(n, int) and 0 < n <= MAX_ROUTER_WORKERS else None

    async def _discover(
        self, client: httpx.AsyncClient, urls: list[str], timeout: float
    ) -> tuple[list[str], RouterStatus | None]:
        """(replica URLs, the first router found or None) behind the configured URLs: a URL that answers
        `/liveness` and lists workers is a router (its workers are the replicas), anything else a replica."""
        replicas: list[str] = []
        router: RouterStatus | None = None
        checked = await asyncio.gather(*(self._router(client, u, timeout) for u in urls))
        for url, (st, workers) in zip(urls, checked):
            if st.live and workers:
                router = router or st
                replicas += workers
            else:
                replicas.append(url)
        return list(dict.fromkeys(replicas)), router

    def discover(self, urls: Iterable[str], *, timeout: float | None = None) -> tuple[list[str], str | None]:
        """(replica URLs, router URL or None) behind what the operator configured (at most MAX_SCRAPED URLs
        checked; a router's list is returned whole)."""
        t = self.timeout if timeout is None else timeout
        url_list = list(dict.fromkeys(urls))[:MAX_SCRAPED]
        replicas, router = self._run(lambda c: self._discover(c, url_list, t), t)
        return replicas, (router.url if router else None)

    # ---- what the Fleet tab and the runner read ----------------------------------------------------------------
    def watch(
        self, urls: Iterable[str], *, timeout: float | None = None, router_metrics: str | None = None
    ) -> dict[str, Any]:
        """What the Fleet tab shows for the configured fleet URLs, in one bounded refresh
        (serving.fleet.health.summary's dict): routers found among them looked through, at most MAX_SCRAPED
        replicas scraped, and the whole refresh within REFRESH_ROUNDS x the timeout (what has not answered by then
        is reported as such).
        `router_metrics`: the base URL of the router's Prometheus metrics (its `--prometheus-port`), read in the
        same refresh into `router_metrics` (serving.fleet.health.parse_router_metrics, or {"error": why})."""
        t = self.timeout if timeout is None else timeout
        configured = list(dict.fromkeys(urls))[:MAX_SCRAPED]

        async def go(client: httpx.AsyncClient) -> dict[str, Any]:
            try:
                async with asyncio.timeout(REFRESH_ROUNDS * t):
                    (replicas, router), routed = await asyncio.gather(
                        self._discover(client, configured, t), self._router_metrics(client, router_metrics, t)
                    )
                    reps = await self._replicas(client, replicas[:MAX_SCRAPED], t)
            except TimeoutError:
                late = f"no answer within the refresh's {REFRESH_ROUNDS * t:g} s"
                return summary([ReplicaStatus(url=u, error=late) for u in configured], None, len(configured))
            return {**summary(reps, router.to_dict() if router else None, len(replicas)), "router_metrics": routed}

        return self._run(go, t)

    async def _router_metrics(self, client: httpx.AsyncClient, url: str | None, timeout: float) -> dict | None:
        """The router's Prometheus metrics at `url` (None: not asked), parsed and redacted; {"error": why} when
        they cannot be read."""
        if not url:
            return None
        got = await self._get(client, url.rstrip("/") + "/metrics", MAX_METRICS_BYTES, timeout)
        if not isinstance(got, httpx.Response):
            return {"error": self.auth.redact(f"/metrics: {why(got)}")}
        if got.status_code != 200:
            return {"error": f"/metrics answered {got.status_code}"}
        try:
            return redact_all(parse_router_metrics(got.text), self.auth.redact)
        except (ValueError, TypeError, RecursionError) as e:
            return {"error": self.auth.redact(f"/metrics unparseable: {why(e)}")}

    def look(self, urls: Iterable[str], *, timeout: float | None = None) -> dict[str, Any]:
        """{at (Unix time), router (URL or None), router_healthy, healthy, looked, total, replicas: [{url, healthy,
        error}]}: how many of the replicas behind `urls` (a router looked through) answer `/health` with 200, and no
        more than the router counts healthy; `/health` only, at most MAX_SCRAPED of them. Never raises for a fleet
        that is down (an unreachable replica is one not healthy)."""
        t = self.timeout if timeout is None else timeout
        configured = list(dict.fromkeys(urls))[:MAX_SCRAPED]

        async def go(client: httpx.AsyncClient) -> dict[str, Any]:
            replicas, router = await self._discover(client, configured, t)
            statuses = await self._replicas(client, replicas[:MAX_SCRAPED], t, metrics=False)
            healthy = sum(1 for s in statuses if s.healthy)
            # requests go through the router: a replica it has not (re)admitted yet serves nothing, so the router's
            # own count caps what /health says (it lags the replicas by its health-check interval when they return)
            if router is not None and isinstance(router.healthy_workers, int):
                healthy = min(healthy, max(0, router.healthy_workers))
            return {
                "at": time.time(),
                "router": router.url if router else None,
                "router_healthy": router.healthy_workers if router else None,
                "healthy": healthy,
                "looked": len(statuses),
                "total": len(replicas),
                "replicas": [
                    {"url": s.url, "healthy": bool(s.healthy), "error": (s.error or "")[:ERROR_CHARS] or None}
                    for s in statuses
                ],
            }

        return self._run(go, t)

    # ---- what the fleet says, redacted -------------------------------------------------------------------------
    def _redacted(self, st: ReplicaStatus | RouterStatus) -> Any:
        """`st` with every text the fleet wrote into it (its error, model, the router's worker fields) redacted."""
        redact = self.auth.redact
        if isinstance(st, ReplicaStatus):
            success = redact_all(st.success, redact)
            return replace(st, url=redact(st.url), error=redact(st.error), model=redact(st.model), success=success)
        return replace(st, url=redact(st.url), error=redact(st.error), workers=redact_all(st.workers, redact))


__all__ = ["DEFAULT_TIMEOUT", "FleetReader"]
