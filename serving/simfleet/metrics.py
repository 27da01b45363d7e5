"""A replica's Prometheus series: vLLM's names and labels (`model_name`, `engine`), plus exact busy integrals.

`vllm:*` series are those real vLLM exports and the fleet view reads (tests/serving/test_vllm_recordings.py checks the
names against the recording). `sim:*` series are the simulator's own: time integrals of running requests, so
that a benchmark can say how busy a replica was between two scrapes without sampling.

`http_requests_total{handler, method, status}` counts every answer of the OpenAI API, failures included (vLLM's
own series count only what succeeded): vLLM 0.25 mounts prometheus-fastapi-instrumentator on its app
(`vllm/entrypoints/serve/instrumentator/metrics.py`: `Instrumentator(excluded_handlers=["/metrics", "/health",
"/load", "/ping", "/version", "/server_info"]).add()`), whose default metrics include this counter with the
status grouped as "2xx", "4xx", "5xx" (`should_group_status_codes=True`). Read from the 0.25.0 wheel's source and
prometheus-fastapi-instrumentator 8.0.0's, not from the GPU recording (which kept the `vllm:` names only).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
# vLLM 0.25's buckets for these two histograms
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0]
E2E_BUCKETS += [480.0, 960.0, 1920.0, 7680.0]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0]
TTFT_BUCKETS += [40.0, 80.0, 160.0, 640.0, 2560.0]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# the instrumentator's exclusions in vLLM 0.25 (the module docstring): no http_requests_total for these
NOT_INSTRUMENTED = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


class ReplicaMetrics:
    """The series of one replica, in its own registry (replicas share a process but not their metrics)."""

    def __init__(self, served: str):
        self.registry = CollectorRegistry()
        self._labels = (served, "0")  # model_name, engine
        self.running = self._series(
            Gauge, "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = self._series(Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv = self._series(Gauge, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prompt = self._series(Counter, "vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation = self._series(Counter, "vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "engine", "finished_reason"],
            registry=self.registry,
        )
        self.success = {r: success.labels(*self._labels, r) for r in FINISH_REASONS}
        self.e2e = self._series(
            Histogram, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS
        )
        self.ttft = self._series(
            Histogram, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        # Not vLLM series: exact time integrals (busy = at least one request running).
        self.busy = self._series(
            Counter, "sim:busy_seconds", "Seconds with at least one request running (simulated fleet)."
        )
        self.slot = self._series(
            Counter,
            "sim:running_request_seconds",
            "Integral of running requests over time, in request-seconds (simulated fleet).",
        )
        self.capacity = self._series(Gauge, "sim:capacity", "Requests a replica runs at once (simulated fleet).")
        self.http = Counter(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            ["method", "status", "handler"],
            registry=self.registry,
        )
        self._running = 0
        self._acc_t = time.monotonic()

    def _series(self, kind: type, name: str, doc: str, buckets: list[float] | None = None):
        extra = {"buckets": buckets} if buckets else {}
        return kind(name, doc, ["model_name", "engine"], registry=self.registry, **extra).labels(*self._labels)

    def set_running(self, running: int) -> None:
        """Account the time at the old count, then take the new one."""
        self.account()
        self._running = running

    def account(self) -> None:
        """Add the time since the last change to the busy integrals (called on every change and scrape)."""
        now = time.monotonic()
        dt, self._acc_t = now - self._acc_t, now
        if self._running > 0 and dt > 0:
            self.busy.inc(dt)
            self.slot.inc(dt * self._running)

    def answered(self, method: str, handler: str, status: int) -> None:
        """One HTTP answer of `handler` (the route's path), counted as vLLM's instrumentator counts it."""
        if handler not in NOT_INSTRUMENTED:
            self.http.labels(method, f"{str(status)[0]}xx", handler).inc()

    def observe(self, prompt_tokens: int, tokens: int, finish: str, ttft: float, e2e: float) -> None:
        """One request answered."""
        self.prompt.inc(prompt_tokens)
        self.generation.inc(tokens)
        self.success[finish].inc()
        self.ttft.observe(ttft)
        self.e2e.observe(e2e)

    def scrape(self, capacity: int) -> bytes:
        """The Prometheus text of `GET /metrics`, with the busy integrals brought up to now."""
        self.account()
        self.capacity.set(capacity)
        return generate_latest(self.registry)
