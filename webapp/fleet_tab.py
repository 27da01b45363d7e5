"""Fleet tab: replica health and load from their /metrics, router status, and the simulated-fleet banner.

Reads through serving.fleet (the one place that talks to the fleet's health and metrics endpoints), with a
short timeout so that a dead replica cannot stall the page.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from webapp import render
from webapp.context import AppContext

TIMEOUT_S = 1.5
COLUMNS = ["url", "healthy", "simulated", "running", "waiting", "kv_cache_usage", "success_total",
           "generation_tokens", "e2e_latency_mean_s", "decode_backend", "error"]


def snapshot(urls: list[str], timeout: float = TIMEOUT_S) -> tuple[list[dict], dict | None]:
    """(one dict per replica, router status or None). Never raises: an unreachable replica is a row."""
    try:
        from serving import fleet
    except ImportError:
        return [{"url": u, "healthy": None, "error": "serving.fleet is not available"} for u in urls], None
    rows: list[dict] = []
    router = None
    for url in urls:
        try:
            got = fleet.scrape(url, timeout=timeout) if _takes_timeout(fleet.scrape) else fleet.scrape(url)
        except Exception as e:  # noqa: BLE001 - any failure is shown as this replica's state
            rows.append({"url": url, "healthy": False, "error": f"{type(e).__name__}: {e}"})
            continue
        got = dict(got) if isinstance(got, dict) else dict(getattr(got, "__dict__", {}))
        if got.get("router") is not None:
            router = got["router"]
        if isinstance(got.get("replicas"), list):
            rows.extend(dict(r) for r in got["replicas"])
        else:
            got.setdefault("url", url)
            rows.append(got)
    return rows, router


def _takes_timeout(fn) -> bool:
    import inspect

    try:
        return "timeout" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def any_simulated(rows: list[dict]) -> bool:
    return any(bool(r.get("simulated")) for r in rows)


class FleetTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        s = self.ctx.settings
        gr.Markdown(f"Fleet setting: `{s.fleet}` · model `{s.model_name}` · "
                    f"replicas watched: {', '.join(self.ctx.fleet_urls) or 'none (pass --fleet URLs)'}")
        self.summary = gr.HTML("", elem_id="fleet-summary")
        self.table = gr.Dataframe(headers=COLUMNS, interactive=False, label="Replicas", elem_id="fleet-table")
        self.router = gr.HTML("", elem_id="fleet-router")
        self.refresh_btn = gr.Button("Refresh", elem_id="btn-fleet-refresh", size="sm")
        # live without a click; each scrape has a short timeout, so a dead replica costs one tick, not a hang
        self.timer = gr.Timer(10.0)

    def refresh(self, request: gr.Request):
        self.ctx.user(request)
        rows, router = snapshot(self.ctx.fleet_urls)
        df = pd.DataFrame([[r.get(c) for c in COLUMNS] for r in rows], columns=COLUMNS)
        healthy = sum(1 for r in rows if r.get("healthy"))
        summary = (f'<div class="cw-counts">{healthy} of {len(rows)} replicas healthy'
                   + (" · <b>simulated</b>" if any_simulated(rows) else "") + "</div>")
        router_html = ""
        if router:
            router_html = ('<table class="cw-prov">' + "".join(
                f"<tr><th>{render.esc(k)}</th><td>{render.esc(v)}</td></tr>" for k, v in dict(router).items())
                + "</table>")
        return {self.table: df, self.summary: summary, self.router: router_html,
                self.banner: render.banner(self.ctx.simulated_fleet or any_simulated(rows))}

    def wire(self, banner: gr.HTML) -> None:
        self.banner = banner
        gr.on([self.refresh_btn.click, self.timer.tick], self.refresh, None,
              [self.table, self.summary, self.router, banner], api_name="fleet_refresh", show_progress="hidden")
