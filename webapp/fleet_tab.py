"""Fleet tab: replica health and load from their /metrics, router status, and the simulated-fleet banner.

Reads through serving.fleet (the one place that talks to the fleet's health and metrics endpoints), with a
short timeout so that a dead replica cannot stall the page.
"""

from __future__ import annotations

import threading
import time

import gradio as gr
import pandas as pd

from serving import fleet, fleet_key
from webapp import render
from webapp.context import AppContext, shows_errors

TIMEOUT_S = 1.5
CACHE_S = 5.0  # one scrape of the fleet serves every Fleet tab open within this many seconds
MAX_CELL = 4_000  # characters of one router field on the page (its worker list is already cut to 32 entries)
# what the table shows, from serving.fleet.ReplicaStatus (e2e_latency_mean and ttft_mean in seconds)
COLUMNS = [
    "replica",
    "state",
    "model",
    "running",
    "waiting",
    "KV cache",
    "requests done",
    "tokens generated",
    "mean latency",
    "mean TTFT",
    "error",
]


def _ms(seconds) -> str:
    return "" if seconds in (None, "") else f"{float(seconds) * 1000:,.0f} ms"


def _num(v) -> str:
    if v in (None, ""):
        return ""
    f = float(v)
    return f"{f:,.0f}" if f == int(f) else f"{f:,.1f}"


def row(r: dict) -> list:
    """One readable table row: rounded numbers with units, no raw structures."""
    kv = r.get("kv_cache_usage")
    model = str(r.get("model") or "")
    return [
        r.get("url") or "",
        r.get("state") or ("healthy" if r.get("healthy") else "down"),
        model + (" (simulated)" if r.get("simulated") and "simulated" not in model else ""),
        _num(r.get("running")),
        _num(r.get("waiting")),
        "" if kv in (None, "") else f"{float(kv):.0%}",
        _num(r.get("success_total")),
        _num(r.get("generation_tokens")),
        _ms(r.get("e2e_latency_mean")),
        _ms(r.get("ttft_mean")),
        str(r.get("error") or "")[:200],
    ]


def _plain(v) -> str:
    """A router status value as text: lists and dicts as short 'key: value' lines, numbers rounded."""
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_plain(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(_plain(x) for x in v) or "none"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return str(v)


def _cell(v) -> str:
    text = _plain(v)
    return render.esc(text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…")


def snapshot(
    urls: list[str], timeout: float = TIMEOUT_S, headers: dict[str, str] | None = None
) -> tuple[list[dict], dict | None]:
    """(one dict per replica, router status or None) for the configured fleet URLs, looking through a router
    to its workers, bounded in size, time and fan-out (serving.fleet.watch); `headers` (the fleet key) go with
    every read. Never raises: an unreachable replica is a row. The router dict carries `listed`: how many
    replicas there are in all."""
    snap = fleet.watch(urls, timeout=timeout, headers=headers)
    router = dict(snap["router"]) if snap["router"] else None
    if router is not None:
        router["listed"] = snap["listed"]
    return snap["replicas"], router


def any_simulated(rows: list[dict]) -> bool:
    return any(bool(r.get("simulated")) for r in rows)


class FleetTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._lock = threading.Lock()
        self._cache: tuple[float, list[dict], dict | None] = (float("-inf"), [], None)

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
                rows, router = snapshot(self.ctx.fleet_urls, headers=fleet_key.headers(self.ctx.settings))
                self._cache = (time.monotonic(), rows, router)
            return rows, router

    def refresh(self, request: gr.Request):
        self.ctx.user(request)
        rows, router = self.latest()
        df = pd.DataFrame([row(r) for r in rows], columns=COLUMNS)
        healthy = sum(1 for r in rows if r.get("healthy"))
        listed = (router or {}).get("listed", len(rows))
        summary = (
            f'<div class="cw-counts">{healthy} of {len(rows)} replicas healthy'
            + (
                f" ({len(rows)} of {listed} shown: at most {fleet.MAX_SCRAPED} are scraped per refresh)"
                if listed > len(rows)
                else ""
            )
            + (" · <b>simulated</b>" if any_simulated(rows) else "")
            + "</div>"
        )
        router_html = ""
        if router:
            router_html = (
                '<table class="cw-prov">'
                + "".join(
                    f"<tr><th>{render.esc(str(k).replace('_', ' '))}</th><td>{_cell(v)}</td></tr>"
                    for k, v in dict(router).items()
                )
                + "</table>"
            )
        return {
            self.table: df,
            self.summary: summary,
            self.router: router_html,
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
