"""Fleet tab: replica health and load from their /metrics, router status, and the simulated-fleet banner.

Reads through the app's serving.fleet.reader.FleetReader (the one way to read a fleet, with the data dir's fleet
key: without it the router gate answers 401), with a short timeout, so that a dead replica cannot stall the page.

A fleet can answer `/health` and fail every request. So the tab also says what the caption requests did between
its last two refreshes, from the fleet's own counters: answered and failed on each replica (its `/metrics`), and
refused by the router (its Prometheus metrics, where the launcher of this data dir started it: "no available
workers" while its circuit breaker is open, and the breaker of each worker). Under it, the runner's word on the
fleet, from its heartbeat, in the words of the Jobs tab's runner line (webapp.jobs.fleet_notice), so that both tabs
say the same.
"""

from __future__ import annotations

import threading
import time

import gradio as gr
import pandas as pd

from data import heartbeats
from serving.fleet import health
from serving.fleet.reader import FleetReader
from serving.launch import record as fleet_record
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.fleet import render as render_fleet
from webapp.jobs import fleet_notice

TIMEOUT_S = 1.5
CACHE_S = 5.0  # one scrape of the fleet serves every Fleet tab open within this many seconds
# what the table shows, from serving.fleet.health.ReplicaStatus (e2e_latency_mean and ttft_mean in seconds)
COLUMNS = [
    "replica",
    "state",
    "model",
    "running",
    "waiting",
    "KV cache",
    "requests done",
    "requests failed",
    "tokens generated",
    "mean latency",
    "mean TTFT",
    "error",
]


NONE = "—"  # what a person reads for a value that is not there (never "None")
CELL_CHARS = 200  # characters of one router value on the page
WORKERS_SHOWN = 32  # rows of the router's worker table
# the router's fields (serving.fleet.health.RouterStatus) in the order and the words a person reads them
ROUTER_FIELDS = {"url": "router", "live": "live", "ready": "ready", "error": "error"}
# a worker's fields as vllm-router lists them (GET /workers), first those a person looks for
WORKER_FIELDS = {
    "url": "worker",
    "is_healthy": "healthy",
    "load": "load",
    "worker_type": "type",
    "model_id": "model",
    "connection_mode": "connection",
    "priority": "priority",
    "cost": "cost",
    "breaker": "circuit breaker",
}


def _ms(seconds) -> str:
    return "" if seconds in (None, "") else f"{float(seconds) * 1000:,.0f} ms"


def _num(v) -> str:
    if v in (None, ""):
        return ""
    f = float(v)
    return f"{f:,.0f}" if f == int(f) else f"{f:,.1f}"


def value(v) -> str:
    """One value as a person reads it: yes/no, "—" for nothing, rounded numbers, short text."""
    if v is None or v == "":
        return NONE
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return _num(v)
    if isinstance(v, dict):
        return "; ".join(f"{str(k).replace('_', ' ')}: {value(x)}" for k, x in v.items()) or NONE
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v) or NONE
    text = str(v)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def workers_table(workers: list) -> str:
    """The router's workers as a table, one row each with its health (yes/no), load, type and model."""
    rows = [w if isinstance(w, dict) else {"url": w} for w in workers[:WORKERS_SHOWN]]
    keys = [k for k in WORKER_FIELDS if any(k in w for w in rows)]
    keys += [k for k in dict.fromkeys(k for w in rows for k in w) if k not in WORKER_FIELDS]
    head = [WORKER_FIELDS.get(k, str(k).replace("_", " ")) for k in keys]
    cells = [(w.get("is_healthy") is False, [value(w.get(k)) for k in keys]) for w in rows]
    return render_fleet.workers_table(head, cells, len(workers) - WORKERS_SHOWN, NONE)


def router_html(router: dict | None) -> str:
    """The router's status for a person: yes/no, "—", "healthy workers: 3 of 4", its workers as a table."""
    if not router:
        return ""
    r = dict(router)
    metrics = r.get("metrics") if isinstance(r.get("metrics"), dict) else {}
    breakers = metrics.get("workers") if isinstance(metrics.get("workers"), dict) else {}
    # each worker's circuit breaker, from the router's metrics, beside what /workers says of it
    workers = [
        {**w, "breaker": (breakers.get(str(w.get("url"))) or {}).get("breaker")} if breakers else w
        for w in r.get("workers") or []
        if isinstance(w, dict)
    ]
    healthy = r.get("healthy_workers")
    if healthy is None and any("is_healthy" in w for w in workers):  # a router that is not ready omits the count
        healthy = sum(1 for w in workers if w.get("is_healthy") is True)
    rows = []
    for key, label in ROUTER_FIELDS.items():
        if key in r:
            rows.append((label, value(r[key])))
        if key == "ready" and (healthy is not None or r.get("total_workers") is not None):
            rows.append(("healthy workers", f"{value(healthy)} of {value(r.get('total_workers'))}"))
    if metrics.get("error"):
        rows.append(("its metrics", value(metrics["error"])))
    elif metrics:
        rows.append(("requests refused: no available workers", value(metrics.get("no_available_workers"))))
        rows.append(("requests whose retries ran out", value(metrics.get("retries_exhausted"))))
    # `listed` (replicas known, snapshot) is said by the summary above the table
    known = {*ROUTER_FIELDS, "healthy_workers", "total_workers", "workers", "listed", "metrics"}
    rows += [(str(k).replace("_", " "), value(v)) for k, v in r.items() if k not in known]
    return render_fleet.router_table(rows, workers_table(workers))


def row(r: dict) -> list:
    """One readable table row: rounded numbers with units, "—" where there is nothing, no raw structures."""
    kv = r.get("kv_cache_usage")
    model = str(r.get("model") or "")
    cells = [
        r.get("url") or "",
        r.get("state") or ("healthy" if r.get("healthy") else "down"),
        model + (" (simulated)" if r.get("simulated") and "simulated" not in model else ""),
        _num(r.get("running")),
        _num(r.get("waiting")),
        "" if kv in (None, "") else f"{float(kv):.0%}",
        _num(r.get("success_total")),
        _num(r.get("failed_total")),
        _num(r.get("generation_tokens")),
        _ms(r.get("e2e_latency_mean")),
        _ms(r.get("ttft_mean")),
        str(r.get("error") or "")[:200],
    ]
    return [c or NONE for c in cells]


def snapshot(
    reader: FleetReader, urls: list[str], timeout: float = TIMEOUT_S, router_metrics: str | None = None
) -> tuple[list[dict], dict | None]:
    """(one dict per replica, router status or None) for the configured fleet URLs, read by `reader` (with its
    fleet key), looking through a router to its workers, bounded in size, time and fan-out (`FleetReader.watch`).
    Never raises: an unreachable replica is a row. The router dict carries `listed`: how many replicas there are
    in all, and `metrics`: its Prometheus metrics read at `router_metrics` (serving.fleet.health.parse_router_metrics;
    none without that URL)."""
    snap = reader.watch(urls, timeout=timeout, router_metrics=router_metrics)
    router = dict(snap["router"]) if snap["router"] else None
    if router is not None:
        router["listed"] = snap["listed"]
        if snap.get("router_metrics") is not None:
            router["metrics"] = snap["router_metrics"]
    return snap["replicas"], router


def requests_seen(before: tuple | None, now: tuple) -> dict:
    """What the caption requests did between two snapshots (`before` None: since the fleet started), each
    (monotonic time, rows, router): answered and failed on the replicas, refused by the router as "no available
    workers", over `seconds` (None: since the start); a counter that went down (a replica restarted) counts
    from 0. `breakers_open`: workers whose circuit breaker is open, of `workers`."""

    def totals(rows: list[dict], router: dict | None) -> tuple[dict, float]:
        reps = {str(r.get("url")): r for r in rows}
        refused = ((router or {}).get("metrics") or {}).get("no_available_workers") or 0.0
        return reps, float(refused)

    t, rows, router = now
    reps, refused = totals(rows, router)
    old_reps, old_refused = totals(before[1], before[2]) if before else ({}, 0.0)

    def grew(new: float, old: float) -> float:
        return new - old if new >= old else new

    answered = failed = 0.0
    for url, r in reps.items():
        o = old_reps.get(url, {})
        answered += grew(float(r.get("success_total") or 0), float(o.get("success_total") or 0))
        failed += grew(float(r.get("failed_total") or 0), float(o.get("failed_total") or 0))
    breakers = [w.get("breaker") for w in (((router or {}).get("metrics") or {}).get("workers") or {}).values()]
    return {
        "seconds": round(t - before[0], 1) if before else None,
        "answered": answered,
        "failed": failed,
        "refused": grew(refused, old_refused),
        "breakers_open": sum(1 for b in breakers if b == "open"),
        "workers": len(breakers),
        "router_metrics": bool(((router or {}).get("metrics") or {}).get("workers") is not None),
    }


def any_simulated(rows: list[dict]) -> bool:
    return any(bool(r.get("simulated")) for r in rows)


class FleetTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._lock = threading.Lock()
        self._cache: tuple[float, list[dict], dict | None] = (float("-inf"), [], None)
        self._seen: dict = requests_seen(None, self._cache)  # what the requests did between the last two scrapes

    def render(self) -> None:
        s = self.ctx.settings
        # vLLM does not report its decoder; what the launcher started is known from the settings
        backend = (
            "simulated (PyAV probe, no decode)"
            if self.ctx.simulated_fleet
            else "pynvvideocodec (NVDEC), as the launcher starts replicas"
            if s.fleet_mode == "gpu"
            else "set by whoever started the fleet (the launcher uses pynvvideocodec)"
        )
        gr.Markdown(
            f"Fleet mode: `{s.fleet_mode}` · model `{s.model_name}` · decode backend: {backend} · "
            f"watching: {', '.join(self.ctx.fleet_urls) or 'none (pass --fleet-urls)'} "
            "(a router's workers are found through its `/workers`)"
        )
        self.summary = gr.HTML("", elem_id="fleet-summary")
        self.table = gr.Dataframe(headers=COLUMNS, interactive=False, label="Replicas", elem_id="fleet-table")
        self.router = gr.HTML("", elem_id="fleet-router")
        self.refresh_btn = gr.Button("Refresh", elem_id="btn-fleet-refresh", size="sm")
        # live without a click; each scrape has a short timeout, so a dead replica costs one tick, not a hang
        self.timer = gr.Timer(10.0, active=False)  # on only while this tab is shown (app.py)

    def latest(self) -> tuple[list[dict], dict | None]:
        """The fleet as of at most CACHE_S ago, scraped once for every user who looks (one refresh at a time):
        many open Fleet tabs cost the fleet one scrape per CACHE_S, not one per tab and tick."""
        with self._lock:
            t, rows, router = self._cache
            if time.monotonic() - t > CACHE_S:
                metrics = fleet_record.router_metrics_url(self.ctx.settings, self.ctx.fleet_urls)
                rows, router = snapshot(self.ctx.fleet_reader, self.ctx.fleet_urls, router_metrics=metrics)
                previous = self._cache if t > float("-inf") else None
                self._cache = (time.monotonic(), rows, router)
                self._seen = requests_seen(previous, self._cache)
            return rows, router

    def runner_view(self) -> str:
        """The runner's word on the fleet, as the Jobs tab's runner line says it ("" without a running runner)."""
        beats = heartbeats.heartbeats(self.ctx.db(), "runner")
        report = fleet_notice.report_for(beats)
        words = fleet_notice.summary(report)
        if not words:
            return ""
        cause = fleet_notice.failing_cause(report)
        return words + (f" ({cause})" if cause else "")

    def refresh(self, request: gr.Request):
        self.ctx.user(request)
        rows, router = self.latest()
        df = pd.DataFrame([row(r) for r in rows], columns=COLUMNS)
        healthy = sum(1 for r in rows if r.get("healthy"))
        listed = (router or {}).get("listed", len(rows))
        return {
            self.table: df,
            self.summary: render_fleet.fleet_summary(
                healthy, len(rows), listed, health.MAX_SCRAPED, any_simulated(rows)
            )
            + render_fleet.requests_seen(self._seen)
            + render_fleet.runner_view(self.runner_view()),
            self.router: router_html(router),
            self.banner: render.banner(self.ctx.simulated_fleet or any_simulated(rows)),
        }

    @property
    def outputs(self) -> list:
        return [self.table, self.summary, self.router, self.banner]

    def wire(self, banner: gr.HTML) -> None:
        self.banner = banner
        gr.on(
            [self.refresh_btn.click, self.timer.tick],
            shows_errors(self.refresh),
            None,
            self.outputs,
            api_name="fleet_refresh",
            show_progress="hidden",
        )
