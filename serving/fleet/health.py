"""What a fleet's health and load answers mean: each replica's `/health` and Prometheus `/metrics`, and a
router's status. The reads themselves are serving.fleet.reader's (the one way to read a fleet, with its key).

Per replica (what the web app and the runner show): healthy (`GET /health` is 200), running / waiting requests,
KV-cache usage, successful requests by finish reason, caption requests that failed (5xx) or were refused (4xx)
(`http_requests_total` of `/v1/chat/completions`, which vLLM's HTTP instrumentation counts, failures included),
prompt and generation tokens, mean end-to-end latency and time to first token, and whether the replica is
simulated (a served model id containing "simulated" or an `x-simulated: 1` header), so the UI can show a banner.
`/health` passes while an engine hangs: compare `success_total` between two scrapes (`rates`) to see progress.

Metrics are parsed with `prometheus_client.parser.text_string_to_metric_families`; series with several
label sets (engines, API servers) are summed. A router (vllm-router) is read through `/liveness`,
`/readiness` and `/workers` (its `/health` is 503 as soon as any one worker is down).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from data import limits

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
CAPTION_HANDLER = "/v1/chat/completions"  # the route whose answers count as caption requests


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
    failed_total: float = 0.0  # caption requests answered 5xx (http_requests_total)
    refused_total: float = 0.0  # caption requests answered 4xx
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

    Returns running, waiting, kv_cache_usage, success (by finished_reason), success_total, failed_total and
    refused_total (caption requests answered 5xx and 4xx: `http_requests_total` of /v1/chat/completions),
    prompt_tokens, generation_tokens, e2e_sum/e2e_count/e2e_latency_mean, ttft_mean, model (the model_name
    label)."""
    out: dict[str, Any] = {
        "running": 0.0,
        "waiting": 0.0,
        "kv_cache_usage": 0.0,
        "success": {},
        "success_total": 0.0,
        "failed_total": 0.0,
        "refused_total": 0.0,
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
            elif name == "http_requests_total" and labels.get("handler") == CAPTION_HANDLER:
                status = str(labels.get("status", ""))
                if status.startswith("5"):
                    out["failed_total"] += value
                elif status.startswith("4"):
                    out["refused_total"] += value
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


# vllm-router 0.1.17's circuit-breaker state per worker (`vllm_router_cb_state`), as its transitions name them
# (`vllm_router_cb_state_transitions_total{from, to}`): read from the installed router
# (tests/browser/test_browser_fleet_failing.py)
BREAKER_STATES = {0: "closed", 1: "open", 2: "half-open"}


def parse_router_metrics(text: str) -> dict[str, Any]:
    """What vllm-router's own Prometheus metrics (its `--prometheus-port`) say about failing requests: requests it
    answered with an error, by type (`errors`; `no_available_workers`: refused because every worker's circuit
    breaker was open or its health check failed), requests whose retries ran out (`retries_exhausted`), and per
    worker (at most MAX_LISTED_WORKERS, names clipped): the breaker's state, and the requests the breaker counted
    as failures and successes. Series are summed over label sets."""
    out: dict[str, Any] = {"errors": {}, "no_available_workers": 0.0, "retries_exhausted": 0.0, "workers": {}}

    def worker(labels: dict) -> dict | None:
        name = limits.clip_text(str(labels.get("worker", "")), 200)
        if name not in out["workers"] and len(out["workers"]) >= MAX_LISTED_WORKERS:
            return None
        return out["workers"].setdefault(name, {"breaker": None, "failures": 0.0, "successes": 0.0})

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if name == "vllm_router_request_errors_total":
                kind = limits.clip_text(str(labels.get("error_type", "unknown")), 60)
                if kind in out["errors"] or len(out["errors"]) < 16:
                    out["errors"][kind] = out["errors"].get(kind, 0.0) + value
            elif name == "vllm_router_retries_exhausted_total":
                out["retries_exhausted"] += value
            elif name == "vllm_router_cb_state" and (w := worker(labels)) is not None:
                w["breaker"] = BREAKER_STATES.get(int(value), f"state {value:g}") if value == int(value) else None
            elif name == "vllm_router_cb_outcomes_total" and (w := worker(labels)) is not None:
                key = {"failure": "failures", "success": "successes"}.get(labels.get("outcome", ""))
                if key:
                    w[key] += value
    out["no_available_workers"] = out["errors"].get("no_available_workers", 0.0)
    return out


Answer = httpx.Response | BaseException  # a read's answer, or why there is none


def why(e: BaseException) -> str:
    """A read that got no answer, in a few words."""
    return limits.clip_text(f"{type(e).__name__}: {e}")


def replica_from(url: str, health: Answer, metrics: Answer | None = None) -> ReplicaStatus:
    """The status of the replica at `url` from its `/health` and `/metrics` answers (`metrics` None: not read,
    as in the runner's look, which asks only whether it is healthy)."""
    status = ReplicaStatus(url=url)
    errors = []
    if isinstance(health, httpx.Response):
        status.reachable = True
        status.healthy = health.status_code == 200
        if not status.healthy:
            errors.append(f"/health answered {health.status_code}")
        status.simulated = status.simulated or health.headers.get("x-simulated") == "1"
    else:
        errors.append(f"/health: {why(health)}")
    if metrics is None:
        pass
    elif isinstance(metrics, httpx.Response):
        status.reachable = True
        status.simulated = status.simulated or metrics.headers.get("x-simulated") == "1"
        if metrics.status_code == 200:
            try:
                m = parse_metrics(metrics.text)
            except (ValueError, TypeError, RecursionError) as e:
                errors.append(f"/metrics unparseable: {why(e)}")
            else:
                for key in (
                    "running",
                    "waiting",
                    "kv_cache_usage",
                    "success",
                    "success_total",
                    "failed_total",
                    "refused_total",
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
        errors.append(f"/metrics: {why(metrics)}")
    if status.model and "simulated" in status.model.lower():
        status.simulated = True
    status.error = limits.clip_text("; ".join(errors), 400) if errors else None
    status.scraped_at = time.time()
    return status


def workers_of(body: Any) -> tuple[list[str], list[dict], int | None]:
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


def router_from(
    url: str, live: Answer, ready: Answer | None = None, workers: Answer | None = None
) -> tuple[RouterStatus, list[str]]:
    """(the status of a vllm-router at `url`, every worker URL it lists) from its `/liveness`, `/readiness` and
    `/workers` answers (None: not read, as after a liveness read that got no answer)."""
    st = RouterStatus(url=url)
    if not isinstance(live, httpx.Response):
        st.error = f"/liveness: {why(live)}"
        return st, []
    st.live = live.status_code == 200
    errors, urls = [], []
    if isinstance(ready, httpx.Response):
        st.ready = ready.status_code == 200
        with _suppress_json():
            body = ready.json()
            healthy, total = body.get("healthy_workers"), body.get("total_workers")
            st.healthy_workers = healthy if isinstance(healthy, int) else None
            st.total_workers = total if isinstance(total, int) else None
        if ready.status_code == 503 and st.healthy_workers is None:
            # a router that says it is not ready serves no request (a 404 or 401 says nothing of the kind: a proxy
            # without /readiness, a missing key): vllm-router 0.1.17 answers 503 with
            # {"status": "not_ready", "reason": "no healthy workers available", "total_workers": N} and no count,
            # also for the seconds after its workers' /health is back and before its own check re-admits them
            # (tests/recordings/vllm-router-0.1.17-readiness.json)
            st.healthy_workers = 0
    elif ready is not None:
        errors.append(f"/readiness: {why(ready)}")
    if isinstance(workers, httpx.Response):
        if workers.status_code == 200:
            with _suppress_json():
                urls, st.workers, listed = workers_of(workers.json())
                if st.total_workers is None:
                    st.total_workers = listed
        else:
            errors.append(f"/workers answered {workers.status_code}")
    elif workers is not None:
        errors.append(f"/workers: {why(workers)}")
    st.error = "; ".join(errors) or None
    return st, urls


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


def summary(reps: list[ReplicaStatus], router: dict | None, listed: int) -> dict[str, Any]:
    """What the Fleet tab shows: each replica's status, the router's, and the fleet's totals (`listed`: how many
    replicas are known; only the first MAX_SCRAPED are scraped)."""
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
        "failed_total": sum(r.failed_total for r in reps),
    }


__all__ = [
    "Answer",
    "MAX_SCRAPED",
    "parse_metrics",
    "parse_router_metrics",
    "rates",
    "replica_from",
    "ReplicaStatus",
    "router_from",
    "RouterStatus",
    "summary",
    "why",
    "workers_of",
]
