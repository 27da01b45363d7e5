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

DEFAULT_TIMEOUT = 2.0


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
        errors.append(f"/health: {type(health).__name__}: {health}")
    if isinstance(metrics, httpx.Response):
        status.reachable = True
        status.simulated = status.simulated or metrics.headers.get("x-simulated") == "1"
        if metrics.status_code == 200:
            try:
                m = parse_metrics(metrics.text)
            except ValueError as e:
                errors.append(f"/metrics unparseable: {e}")
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
        else:
            errors.append(f"/metrics answered {metrics.status_code}")
    else:
        errors.append(f"/metrics: {type(metrics).__name__}: {metrics}")
    if status.model and "simulated" in status.model.lower():
        status.simulated = True
    status.error = "; ".join(errors) or None
    status.scraped_at = time.time()
    return status


async def scrape_async(client: httpx.AsyncClient, url: str, *, timeout: float = DEFAULT_TIMEOUT) -> ReplicaStatus:
    """Health and metrics of one replica; never raises for a replica that is down (healthy=False)."""
    base = _base(url)

    async def get(path: str) -> httpx.Response | BaseException:
        try:
            return await client.get(base + path, timeout=timeout)
        except httpx.HTTPError as e:
            return e

    health, metrics = await asyncio.gather(get("/health"), get("/metrics"))
    return _apply(ReplicaStatus(url=url), health, metrics)


async def replica_status(
    client_or_urls: httpx.AsyncClient | Iterable[str],
    urls: Iterable[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> list[ReplicaStatus]:
    """Status of every replica, scraped concurrently: `replica_status(urls)` or
    `replica_status(async_client, urls)` to reuse a client."""
    if isinstance(client_or_urls, httpx.AsyncClient):
        client, own = client_or_urls, False
        url_list = list(urls or [])
    else:
        client, own = httpx.AsyncClient(timeout=timeout, trust_env=False, headers=headers), True
        url_list = list(client_or_urls)
    try:
        return list(await asyncio.gather(*(scrape_async(client, u, timeout=timeout) for u in url_list)))
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

        def get(path: str) -> httpx.Response | BaseException:
            try:
                return c.get(base + path)
            except httpx.HTTPError as e:
                return e

        return _apply(ReplicaStatus(url=url), get("/health"), get("/metrics"))


def fleet_status(
    urls: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT, headers: Mapping[str, str] | None = None
) -> list[ReplicaStatus]:
    """Sync status of every replica, scraped concurrently (total time ~ one timeout, not N)."""
    url_list = list(urls)
    if not url_list:
        return []
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(replica_status(url_list, timeout=timeout, headers=headers))
    # called from inside an event loop (e.g. an async handler): scrape one by one, synchronously
    return [scrape(u, timeout=timeout, headers=headers) for u in url_list]


def router_status(
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    transport: httpx.BaseTransport | None = None,
    headers: Mapping[str, str] | None = None,
) -> RouterStatus:
    """vllm-router liveness, readiness and worker list (each part best effort)."""
    base = url.rstrip("/")
    st = RouterStatus(url=url)
    errors = []
    with httpx.Client(timeout=timeout, transport=transport, trust_env=False, headers=headers) as c:
        try:
            st.live = c.get(base + "/liveness").status_code == 200
        except httpx.HTTPError as e:
            st.error = f"/liveness: {type(e).__name__}: {e}"
            return st
        try:
            r = c.get(base + "/readiness")
            st.ready = r.status_code == 200
            with _suppress_json():
                body = r.json()
                st.healthy_workers = body.get("healthy_workers")
                st.total_workers = body.get("total_workers")
        except httpx.HTTPError as e:
            errors.append(f"/readiness: {e}")
        try:
            r = c.get(base + "/workers")
            if r.status_code == 200:
                with _suppress_json():
                    st.workers = list(r.json().get("workers") or [])
            else:
                errors.append(f"/workers answered {r.status_code}")
        except httpx.HTTPError as e:
            errors.append(f"/workers: {e}")
    st.error = "; ".join(errors) or None
    return st


class _suppress_json:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, (ValueError, AttributeError, TypeError))


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
    """How many workers a vllm-router at `url` has (GET /workers), or None if `url` is not a router."""
    try:
        r = httpx.get(url.rstrip("/") + "/workers", timeout=timeout, headers=headers)
        if r.status_code != 200:
            return None
        data = r.json()
    except (httpx.HTTPError, ValueError):
        return None
    if isinstance(data, dict):
        for key in ("workers", "urls", "worker_urls"):
            if isinstance(data.get(key), list):
                return len(data[key])
        if isinstance(data.get("total"), int):
            return data["total"]
    if isinstance(data, list):
        return len(data)
    return None


def discover(
    urls: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT, headers: Mapping[str, str] | None = None
) -> tuple[list[str], str | None]:
    """(replica URLs, router URL or None) behind what the operator configured: a vllm-router URL answers
    `/liveness` and lists its workers on `/workers`; anything else is taken as a replica."""
    replicas: list[str] = []
    router = None
    for url in urls:
        st = router_status(url, timeout=timeout, headers=headers)
        if st.live and st.workers:
            router = router or url
            replicas += [w["url"] if isinstance(w, dict) else str(w) for w in st.workers]
        else:
            replicas.append(url)
    return list(dict.fromkeys(replicas)), router


def snapshot(
    replica_urls: Iterable[str],
    router_url: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One dict for the UI: replicas (list of dicts), router (dict or None), and fleet totals."""
    reps = fleet_status(replica_urls, timeout=timeout, headers=headers)
    router = router_status(router_url, timeout=timeout, headers=headers).to_dict() if router_url else None
    return {
        "replicas": [r.to_dict() for r in reps],
        "router": router,
        "simulated": any(r.simulated for r in reps),
        "healthy": sum(r.healthy for r in reps),
        "total": len(reps),
        "running": sum(r.running for r in reps),
        "waiting": sum(r.waiting for r in reps),
        "success_total": sum(r.success_total for r in reps),
    }


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
]
