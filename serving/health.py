"""Fleet health and load: each replica's `/health` and Prometheus `/metrics`, and the router's status.

What the web app and the runner show per replica (vLLM's `/health` and `/metrics`):
healthy (`GET /health` is 200), running / waiting requests, KV-cache usage, successful requests by finish
reason, prompt and generation tokens, mean end-to-end latency and time to first token, and whether the
replica is simulated (a served model id containing "simulated" or an `x-simulated: 1` header), so the UI
can show a banner. `/health` passes while an engine hangs: compare `success_total` between two scrapes
(`rates`) to see progress.

Metrics are parsed with `prometheus_client.parser.text_string_to_metric_families`; series with several
label sets (engines, API servers) are summed. The router (vllm-router) is probed with `/liveness`,
`/readiness` and `/workers` (its `/health` is 503 as soon as any one worker is down).

Sync helpers (`scrape`, `fleet_status`, `router_status`, `snapshot`) take a short timeout for the web app;
async ones (`scrape_async`, `replica_status`) share one AsyncClient. Each takes `headers` for every request:
the fleet key (serving.fleet_key), which the router gate requires and the replicas accept.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

from data import limits
from serving import bounded

DEFAULT_TIMEOUT = 2.0
# Bounds on what one refresh reads, so that a hostile fleet cannot make it hold gigabytes, send hundreds of MB
# to the browser, or call every address a router lists (issue 21, class 2): answers by size after decoding
# (vLLM's own /metrics is 20-300 KiB), replicas scraped per refresh, requests in flight, and the refresh's time.
MAX_METRICS_BYTES = 2 << 20
MAX_STATUS_BYTES = 64 << 10  # /health, /liveness, /readiness
MAX_WORKERS_BYTES = 1 << 20  # a router's /workers (~100 bytes per worker)
MAX_SCRAPED = 32  # replicas scraped per refresh (4 nodes of 8 GPUs); the rest are counted, not called
MAX_LISTED_WORKERS = 32  # router worker entries kept for display
MAX_ROUTER_WORKERS = 100_000  # a worker count beyond this (a router's own "total") is not believed
SCRAPE_CONCURRENCY = 16  # answers held at once: at most 16 x 2 MiB of /metrics
REFRESH_ROUNDS = 5  # discovery (2 rounds of requests), the scrapes (2 rounds of 16), and one of room


@dataclass
class ReplicaStatus:
    url: str
    healthy: bool = False
    reachable: bool = False
    error: str | None = None
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    success: dict[str, float] = field(default_factory=dict)  # finished_reason -> count
    success_total: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    e2e_latency_mean: float | None = None  # seconds
    e2e_count: float = 0.0
    ttft_mean: float | None = None
    model: str | None = None
    simulated: bool = False
    scraped_at: float = 0.0

    @property
    def state(self) -> str:
        """'up', 'unhealthy' (answers, but /health is not 200) or 'down' (no answer)."""
        return "up" if self.healthy else ("unhealthy" if self.reachable else "down")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["state"] = self.state
        return d


@dataclass
class RouterStatus:
    url: str
    live: bool = False
    ready: bool = False
    healthy_workers: int | None = None
    total_workers: int | None = None
    workers: list[dict] = field(default_factory=list)  # url, is_healthy, load, ...
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def parse_metrics(text: str) -> dict[str, Any]:
    """The vLLM series we use from a Prometheus exposition, summed over label sets.

    Returns running, waiting, kv_cache_usage, success (by finished_reason), success_total, prompt_tokens,
    generation_tokens, e2e_sum/e2e_count/e2e_latency_mean, ttft_mean, model (the model_name label)."""
    out: dict[str, Any] = {
        "running": 0.0,
        "waiting": 0.0,
        "kv_cache_usage": 0.0,
        "success": {},
        "success_total": 0.0,
        "prompt_tokens": 0.0,
        "generation_tokens": 0.0,
        "e2e_sum": 0.0,
        "e2e_count": 0.0,
        "ttft_sum": 0.0,
        "ttft_count": 0.0,
        "model": None,
    }
    kv_values: list[float] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if labels.get("model_name") and out["model"] is None:
                out["model"] = labels["model_name"]
            if name == "vllm:num_requests_running":
                out["running"] += value
            elif name == "vllm:num_requests_waiting":
                out["waiting"] += value
            elif name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
                kv_values.append(value)
            elif name == "vllm:request_success_total":
                reason = labels.get("finished_reason", "unknown")
                out["success"][reason] = out["success"].get(reason, 0.0) + value
                out["success_total"] += value
            elif name == "vllm:prompt_tokens_total":
                out["prompt_tokens"] += value
            elif name == "vllm:generation_tokens_total":
                out["generation_tokens"] += value
            elif name == "vllm:e2e_request_latency_seconds_sum":
                out["e2e_sum"] += value
            elif name == "vllm:e2e_request_latency_seconds_count":
                out["e2e_count"] += value
            elif name == "vllm:time_to_first_token_seconds_sum":
                out["ttft_sum"] += value
            elif name == "vllm:time_to_first_token_seconds_count":
                out["ttft_count"] += value
    if kv_values:
        out["kv_cache_usage"] = max(kv_values)  # the fullest engine is the one that limits
    out["e2e_latency_mean"] = out["e2e_sum"] / out["e2e_count"] if out["e2e_count"] else None
    out["ttft_mean"] = out["ttft_sum"] / out["ttft_count"] if out["ttft_count"] else None
    return out


def _base(url: str) -> str:
    base = url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def _why(e: BaseException) -> str:
    return limits.clip_text(f"{type(e).__name__}: {e}")


def _apply(
    status: ReplicaStatus, health: httpx.Response | BaseException, metrics: httpx.Response | BaseException
) -> ReplicaStatus:
    errors = []
    if isinstance(health, httpx.Response):
        status.reachable = True
        status.healthy = health.status_code == 200
        if not status.healthy:
            errors.append(f"/health answered {health.status_code}")
        status.simulated = status.simulated or health.headers.get("x-simulated") == "1"
    else:
        errors.append(f"/health: {_why(health)}")
    if isinstance(metrics, httpx.Response):
        status.reachable = True
        status.simulated = status.simulated or metrics.headers.get("x-simulated") == "1"
        if metrics.status_code == 200:
            try:
                m = parse_metrics(metrics.text)
            except (ValueError, TypeError, RecursionError) as e:
                errors.append(f"/metrics unparseable: {_why(e)}")
            else:
                for key in (
                    "running",
                    "waiting",
                    "kv_cache_usage",
                    "success",
                    "success_total",
                    "prompt_tokens",
                    "generation_tokens",
                    "e2e_latency_mean",
                    "e2e_count",
                    "ttft_mean",
                    "model",
                ):
                    setattr(status, key, m[key])
                # what a replica names is shown to every user: bounded like any fleet provenance (R10)
                status.model = limits.clip_text(status.model) if status.model else status.model
                status.success = {limits.clip_text(k, 40): v for k, v in list(status.success.items())[:16]}
        else:
            errors.append(f"/metrics answered {metrics.status_code}")
    else:
        errors.append(f"/metrics: {_why(metrics)}")
    if status.model and "simulated" in status.model.lower():
        status.simulated = True
    status.error = limits.clip_text("; ".join(errors), 400) if errors else None
    status.scraped_at = time.time()
    return status


async def _get(client: httpx.AsyncClient, url: str, max_bytes: int, timeout: float) -> httpx.Response | BaseException:
    """One bounded GET (size after decoding, whole-read time); an error is returned, not raised."""
    try:
        return await bounded.fetch(client, "GET", url, max_bytes=max_bytes, seconds=timeout)
    except (httpx.HTTPError, bounded.ReadRefused) as e:
        return e


def _get_sync(client: httpx.Client, url: str, max_bytes: int, timeout: float) -> httpx.Response | BaseException:
    try:
        return bounded.fetch_sync(client, "GET", url, max_bytes=max_bytes, seconds=timeout)
    except (httpx.HTTPError, bounded.ReadRefused) as e:
        return e


def _async_client(timeout: float, headers: Mapping[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=timeout,
        trust_env=False,
        headers=headers,
        limits=httpx.Limits(max_connections=2 * SCRAPE_CONCURRENCY),
    )


async def scrape_async(client: httpx.AsyncClient, url: str, *, timeout: float = DEFAULT_TIMEOUT) -> ReplicaStatus:
    """Health and metrics of one replica; never raises for a replica that is down (healthy=False). Each answer
    is read under its bound (MAX_STATUS_BYTES, MAX_METRICS_BYTES, decoded) within `timeout` seconds."""
    base = _base(url)
    health, metrics = await asyncio.gather(
        _get(client, base + "/health", MAX_STATUS_BYTES, timeout),
        _get(client, base + "/metrics", MAX_METRICS_BYTES, timeout),
    )
    return _apply(ReplicaStatus(url=url), health, metrics)


async def replica_status(
    client_or_urls: httpx.AsyncClient | Iterable[str],
    urls: Iterable[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> list[ReplicaStatus]:
    """Status of every replica, scraped concurrently (at most SCRAPE_CONCURRENCY at a time):
    `replica_status(urls)` or `replica_status(async_client, urls)` to reuse a client."""
    if isinstance(client_or_urls, httpx.AsyncClient):
        client, own = client_or_urls, False
        url_list = list(urls or [])
    else:
        client, own = _async_client(timeout, headers), True
        url_list = list(client_or_urls)
    gate = asyncio.Semaphore(SCRAPE_CONCURRENCY)

    async def one(u: str) -> ReplicaStatus:
        async with gate:
            return await scrape_async(client, u, timeout=timeout)

    try:
        return list(await asyncio.gather(*(one(u) for u in url_list)))
    finally:
        if own:
            await client.aclose()


def scrape(
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    transport: httpx.BaseTransport | None = None,
    headers: Mapping[str, str] | None = None,
) -> ReplicaStatus:
    """Sync status of one replica (for the web app: short timeout, never raises for a dead replica)."""
    base = _base(url)
    with httpx.Client(timeout=timeout, transport=transport, trust_env=False, headers=headers) as c:
        health = _get_sync(c, base + "/health", MAX_STATUS_BYTES, timeout)
        metrics = _get_sync(c, base + "/metrics", MAX_METRICS_BYTES, timeout)
        return _apply(ReplicaStatus(url=url), health, metrics)


def _run(coro_fn, fallback):
    """Run an async scrape from sync code; inside a running event loop, `fallback()` (sync) instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    return fallback()


def fleet_status(
    urls: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT, headers: Mapping[str, str] | None = None
) -> list[ReplicaStatus]:
    """Sync status of every replica, scraped concurrently (total time ~ one timeout per SCRAPE_CONCURRENCY);
    `headers` (the fleet key) go with every read."""
    url_list = list(urls)
    if not url_list:
        return []
    return _run(
        lambda: replica_status(url_list, timeout=timeout, headers=headers),
        lambda: [scrape(u, timeout=timeout, headers=headers) for u in url_list],
    )


def _workers_of(body: Any) -> tuple[list[str], list[dict], int | None]:
    """(worker URLs, the first MAX_LISTED_WORKERS entries with their scalar fields clipped, how many listed)
    from a router's /workers answer (vllm-router: {"workers": [{"url": ..., ...}, ...], ...})."""
    items: Any = None
    if isinstance(body, dict):
        for key in ("workers", "urls", "worker_urls"):
            if isinstance(body.get(key), list):
                items = body[key]
                break
        if items is None and isinstance(body.get("total"), int):
            return [], [], body["total"]
    elif isinstance(body, list):
        items = body
    if items is None:
        return [], [], None
    urls, entries = [], []
    for w in items:
        url = w.get("url") if isinstance(w, dict) else w
        if isinstance(url, str) and len(url) <= 2048:
            urls.append(url)
        if len(entries) < MAX_LISTED_WORKERS:
            if isinstance(w, dict):
                entry = {
                    limits.clip_text(str(k), 40): limits.clip_text(v) if isinstance(v, str) else v
                    for k, v in list(w.items())[:8]
                    if isinstance(v, (str, int, float, bool)) or v is None
                }
            else:
                entry = {"url": limits.clip_text(str(w))}
            entries.append(entry)
    return list(dict.fromkeys(urls)), entries, len(items)


async def router_status_async(
    client: httpx.AsyncClient, url: str, *, timeout: float = DEFAULT_TIMEOUT
) -> tuple[RouterStatus, list[str]]:
    """(the status of a vllm-router: liveness, readiness, its first workers; every worker URL it lists)."""
    base = url.rstrip("/")
    st = RouterStatus(url=url)
    live = await _get(client, base + "/liveness", MAX_STATUS_BYTES, timeout)
    if not isinstance(live, httpx.Response):
        st.error = f"/liveness: {_why(live)}"
        return st, []
    st.live = live.status_code == 200
    ready, workers = await asyncio.gather(
        _get(client, base + "/readiness", MAX_STATUS_BYTES, timeout),
        _get(client, base + "/workers", MAX_WORKERS_BYTES, timeout),
    )
    return _router_parts(st, ready, workers)


def _router_parts(
    st: RouterStatus, ready: httpx.Response | BaseException, workers: httpx.Response | BaseException
) -> tuple[RouterStatus, list[str]]:
    errors, urls = [], []
    if isinstance(ready, httpx.Response):
        st.ready = ready.status_code == 200
        with _suppress_json():
            body = ready.json()
            healthy, total = body.get("healthy_workers"), body.get("total_workers")
            st.healthy_workers = healthy if isinstance(healthy, int) else None
            st.total_workers = total if isinstance(total, int) else None
    else:
        errors.append(f"/readiness: {_why(ready)}")
    if isinstance(workers, httpx.Response):
        if workers.status_code == 200:
            with _suppress_json():
                urls, st.workers, listed = _workers_of(workers.json())
                if st.total_workers is None:
                    st.total_workers = listed
        else:
            errors.append(f"/workers answered {workers.status_code}")
    else:
        errors.append(f"/workers: {_why(workers)}")
    st.error = "; ".join(errors) or None
    return st, urls


def router_status(
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    transport: httpx.BaseTransport | None = None,
    headers: Mapping[str, str] | None = None,
) -> RouterStatus:
    """vllm-router liveness, readiness and worker list (each part best effort, each answer bounded)."""
    base = url.rstrip("/")
    st = RouterStatus(url=url)
    with httpx.Client(timeout=timeout, transport=transport, trust_env=False, headers=headers) as c:
        live = _get_sync(c, base + "/liveness", MAX_STATUS_BYTES, timeout)
        if not isinstance(live, httpx.Response):
            st.error = f"/liveness: {_why(live)}"
            return st
        st.live = live.status_code == 200
        ready = _get_sync(c, base + "/readiness", MAX_STATUS_BYTES, timeout)
        workers = _get_sync(c, base + "/workers", MAX_WORKERS_BYTES, timeout)
    return _router_parts(st, ready, workers)[0]


class _suppress_json:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, (ValueError, AttributeError, TypeError, RecursionError))


def rates(before: ReplicaStatus, after: ReplicaStatus) -> dict[str, float | None]:
    """Per-second rates between two scrapes of one replica: requests done, generation tokens.
    A healthy replica with waiting work and a rate of 0 is hung."""
    dt = after.scraped_at - before.scraped_at
    if dt <= 0:
        return {"requests_per_s": None, "tokens_per_s": None}
    return {
        "requests_per_s": max(0.0, after.success_total - before.success_total) / dt,
        "tokens_per_s": max(0.0, after.generation_tokens - before.generation_tokens) / dt,
    }


def router_workers(url: str, timeout: float = 3.0, headers: Mapping[str, str] | None = None) -> int | None:
    """How many workers a vllm-router at `url` has (GET /workers, bounded), or None if `url` is not a router."""
    with httpx.Client(timeout=timeout, trust_env=False, headers=headers) as c:
        r = _get_sync(c, url.rstrip("/") + "/workers", MAX_WORKERS_BYTES, timeout)
    if not isinstance(r, httpx.Response) or r.status_code != 200:
        return None
    try:
        n = _workers_of(r.json())[2]
    except (ValueError, RecursionError):
        return None
    return n if isinstance(n, int) and 0 < n <= MAX_ROUTER_WORKERS else None


async def _discover(
    client: httpx.AsyncClient, urls: list[str], timeout: float
) -> tuple[list[str], str | None, RouterStatus | None]:
    replicas: list[str] = []
    router: RouterStatus | None = None
    checked = await asyncio.gather(*(router_status_async(client, u, timeout=timeout) for u in urls))
    for url, (st, workers) in zip(urls, checked):
        if st.live and workers:
            router = router or st
            replicas += workers
        else:
            replicas.append(url)
    return list(dict.fromkeys(replicas)), (router.url if router else None), router


def discover(
    urls: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT, headers: Mapping[str, str] | None = None
) -> tuple[list[str], str | None]:
    """(replica URLs, router URL or None) behind what the operator configured: a vllm-router URL answers
    `/liveness` and lists its workers on `/workers`; anything else is taken as a replica. The configured URLs
    are checked concurrently; a router's list is returned whole (`snapshot` bounds what is scraped)."""
    url_list = list(dict.fromkeys(urls))[:MAX_SCRAPED]

    async def go():
        async with _async_client(timeout, headers) as c:
            return await _discover(c, url_list, timeout)

    replicas, router, _ = _run(go, lambda: _discover_sync(url_list, timeout, headers))
    return replicas, router


def _discover_sync(
    urls: list[str], timeout: float, headers: Mapping[str, str] | None = None
) -> tuple[list[str], str | None, None]:
    replicas: list[str] = []
    router = None
    for url in urls:
        st = router_status(url, timeout=timeout, headers=headers)
        if st.live and st.workers:
            router = router or url
            replicas += [w.get("url") for w in st.workers if isinstance(w.get("url"), str)]
        else:
            replicas.append(url)
    return list(dict.fromkeys(replicas)), router, None


def _summary(reps: list[ReplicaStatus], router: dict | None, listed: int) -> dict[str, Any]:
    return {
        "replicas": [r.to_dict() for r in reps],
        "router": router,
        "simulated": any(r.simulated for r in reps),
        "healthy": sum(r.healthy for r in reps),
        "total": len(reps),
        "listed": listed,  # replicas known; only the first MAX_SCRAPED are scraped
        "running": sum(r.running for r in reps),
        "waiting": sum(r.waiting for r in reps),
        "success_total": sum(r.success_total for r in reps),
    }


def snapshot(
    replica_urls: Iterable[str],
    router_url: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One dict for the UI: replicas (list of dicts, the first MAX_SCRAPED), router (dict or None), and fleet
    totals (`listed` says how many replicas there are in all)."""
    urls = list(dict.fromkeys(replica_urls))
    reps = fleet_status(urls[:MAX_SCRAPED], timeout=timeout, headers=headers)
    router = router_status(router_url, timeout=timeout, headers=headers).to_dict() if router_url else None
    return _summary(reps, router, len(urls))


def watch(
    urls: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT, headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What the Fleet tab shows for the configured fleet URLs, in one bounded refresh: routers found among
    them (their workers looked through), at most MAX_SCRAPED replicas scraped, every answer read under its
    size bound, and the whole refresh within REFRESH_ROUNDS x `timeout` (what has not answered by then is
    reported as such). Returns `snapshot`'s dict."""
    configured = list(dict.fromkeys(urls))[:MAX_SCRAPED]

    async def go() -> dict[str, Any]:
        async with _async_client(timeout, headers) as c:
            try:
                async with asyncio.timeout(REFRESH_ROUNDS * timeout):
                    replicas, _, router = await _discover(c, configured, timeout)
                    reps = await replica_status(c, replicas[:MAX_SCRAPED], timeout=timeout)
            except TimeoutError:
                late = f"no answer within the refresh's {REFRESH_ROUNDS * timeout:g} s"
                return _summary([ReplicaStatus(url=u, error=late) for u in configured], None, len(configured))
            return _summary(reps, router.to_dict() if router else None, len(replicas))

    return _run(
        go, lambda: snapshot(*_discover_sync(configured, timeout, headers)[:2], timeout=timeout, headers=headers)
    )


__all__ = [
    "discover",
    "fleet_status",
    "parse_metrics",
    "rates",
    "replica_status",
    "ReplicaStatus",
    "router_status",
    "router_workers",
    "RouterStatus",
    "scrape",
    "scrape_async",
    "snapshot",
    "watch",
]
