"""The web app: Gradio Blocks mounted in FastAPI, next to the login, media and export routes.

`build_app(settings)` returns a FastAPI app and starts nothing. Layout: a banner (simulated
fleet), a user line, six tabs (Browse, Review, Second review, Jobs, Quality, Fleet) and a keyboard-shortcut help panel.
Each tab module has a render step and a wiring step; handlers are thin adapters over data/ (and serving.fleet.health).
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import matplotlib
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from data import limits, order
from data.library import clip_root
from serving.fleet.reader import FleetReader
from webapp import budget, failures, form_echo, idle, render, render_page
from webapp.blocks import Blocks
from webapp.browse import tab as browse_tab
from webapp.browse.tab import BrowseTab
from webapp.budget import Budget, WriteBudget
from webapp.context import AppContext, shows_errors
from webapp.fleet.tab import FleetTab, any_simulated, snapshot
from webapp.guard import Guard
from webapp.jobs.tab import JobsTab
from webapp.login.auth import Auth
from webapp.quality.tab import QualityTab
from webapp.review.tab import ReviewTab
from webapp.routes import activity, exports, media as media_routes
from webapp.second_review.tab import SecondReviewTab

STATIC = Path(__file__).parent / "static"  # the page's styles and scripts
CONCURRENCY = 16  # handlers are short SQLite calls: let saves run side by side instead of queueing
ANALYTICS_EVERY = 200  # Gradio's monitoring summary is recomputed once per this many events (see Workbench.build)
ANALYTICS_EVENTS = 2_000  # over at most this many recent events


def tab_heading(text: str) -> None:
    """A tab's h2, for the page's heading structure: read by screen readers, not drawn (the tab button is)."""
    gr.HTML(render_page.tab_heading(text), elem_classes="cw-sr-only", padding=False)


def head_html() -> str:
    """The page scripts: the label picker first (the Review tab's fields mount through it), then the keys, then
    drafts and the session (it wraps fetch before Gradio's client starts)."""
    names = ("picker.js", "shortcuts.js", "drafts.js")
    return render_page.scripts([(STATIC / name).read_text() for name in names])


class Workbench:
    """The Blocks of one app instance."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.browse = BrowseTab(ctx)
        self.review = ReviewTab(ctx)
        self.second = SecondReviewTab(ctx)
        self.jobs = JobsTab(ctx)
        self.quality = QualityTab(ctx)
        self.fleet = FleetTab(ctx)

    def build(self) -> gr.Blocks:
        # webapp.blocks.Blocks: outputs left unchanged cost nothing; and (failures.Blocks) every failure of an
        # event reaches the person as a sentence, never a repr or a traceback
        with Blocks(title="Clip captioning workbench") as demo:
            self.banner = gr.HTML(render.banner(self.ctx.simulated_fleet), elem_id="banner")
            self.userline = gr.HTML("", elem_id="userline")
            self.filter_state = gr.State({})
            self.sort_state = gr.State(order.DEFAULT)
            with gr.Tabs(selected="browse", elem_id="tabs") as self.tabs:
                # each tab opens with its h2 (the tab's button shows the name; the heading is for screen readers'
                # heading list), except Review, whose clip header is its h2
                with gr.Tab("Browse", id="browse", elem_id="tab-browse") as self.tab_browse:
                    tab_heading("Browse clips")
                    self.browse.render()
                with gr.Tab("Review", id="review", elem_id="tab-review") as self.tab_review:
                    self.review.render()
                with gr.Tab("Second review", id="second", elem_id="tab-second") as self.tab_second:
                    tab_heading("Blind second review")
                    self.second.render()
                with gr.Tab("Jobs", id="jobs", elem_id="tab-jobs") as self.tab_jobs:
                    tab_heading("Jobs")
                    self.jobs.render()
                with gr.Tab("Quality", id="quality", elem_id="tab-quality") as self.tab_quality:
                    tab_heading("Quality: the model measured against its reviewers")
                    self.quality.render()
                with gr.Tab("Fleet", id="fleet", elem_id="tab-fleet") as self.tab_fleet:
                    tab_heading("Fleet")
                    self.fleet.render()
            gr.HTML(render_page.SHORTCUT_HELP, elem_id="help-panel")
            self.browse.wire(self.filter_state, self.sort_state)
            self.review.wire(self.filter_state, self.sort_state)
            self.jobs.wire(self.filter_state)
            self.second.wire()
            self.quality.wire(self.filter_state)
            self.fleet.wire(self.banner)
            self._wire()
            demo.load(shows_errors(self.on_load), None, self._load_outputs, api_name="on_load")
        # the page's copy of each form's state, set by the answers that set the state (webapp.form_echo)
        form_echo.echo_events(demo, {**self.review.view.echo, **self.second.echo})
        failures.guard_events(demo)  # every handler, also those wired without shows_errors (timers, tab selects)
        demo.queue(default_concurrency_limit=CONCURRENCY)
        direct = sorted(str(f.api_name) for f in demo.fns.values() if not f.queue)
        if direct:  # the page would call Gradio's /run route for them, which webapp.guard keeps closed
            raise RuntimeError(f"events must go through the queue (queue=False on {', '.join(direct)})")
        # Gradio's queue polls itself every 1 ms (and its progress loop every 10 ms) while nothing is queued:
        # 7.7 % of a core for an app nobody has open; it now sleeps until an event comes (webapp.idle)
        idle.quiet_queue(demo)
        # After every event Gradio recomputed its monitoring summary (/monitoring/summary, for leads) with pandas
        # over the last 10,000 events: a cost per event that grew with the events served, and the largest part
        # of the app's CPU per event once a team had worked a while (issue 27, benchmarks/bench_team.py). Every
        # ANALYTICS_EVERY events over the last ANALYTICS_EVENTS is plenty for a summary of timings. Private
        # attributes of gradio.queueing.Queue (6.x): if they go away this is a no-op, not an error.
        q = getattr(demo, "_queue", None)
        if q is not None and hasattr(q, "ANAYLTICS_CACHE_FREQUENCY"):
            q.ANAYLTICS_CACHE_FREQUENCY = ANALYTICS_EVERY
            q.ANALYTICS_MAX_EVENTS = ANALYTICS_EVENTS
        return demo

    def userline_html(self, request: gr.Request) -> str:
        user = self.ctx.user(request)
        return render_page.topbar(user.name, user.role, self.ctx.settings.auth_required)

    def on_load(self, request: gr.Request):
        """First paint: who is here, the filter and clip the URL carries (/?f={...}&clip=123, so deep links
        and the browser's Back work), the first page and prompt choices."""
        out = {self.userline: self.userline_html(request)}
        params = (request.query_params or {}) if request is not None else {}
        b = self.browse
        form = browse_tab.form_from_filter(b.filter_from_url(params.get("f")))
        form[browse_tab.SORT] = order.name_or_default(params.get("sort"))
        out.update(b.apply(request, *browse_tab.form_values(form)))
        out.update(b.set_inputs(form, self.ctx.user(request)))
        out.update(self.review.assign.for_user(self.ctx.user(request)))
        out[self.jobs.form.prompt] = self.jobs.form.prompt_choices(request)
        out.update(self.jobs.prompts.for_user(self.ctx.user(request)))
        clip = str(params.get("clip") or "").strip()
        if clip:  # the clip, or Review saying why there is none (never a silent Browse)
            out.update(self.review.view.open_link(clip, request))
            out[self.tabs] = gr.Tabs(selected="review")
        return out

    def open_tile(self, evt: gr.EventData, request: gr.Request, *values) -> dict:
        """A Browse tile: open it in Review, saving an edit left in the Review form (`values`) first. Review is
        shown whatever happened: the clip opened, Review says why the edit was not saved, or the clip was
        already open there."""
        clip = (evt._data or {}).get("clip") if isinstance(evt._data, dict) else None
        if clip is None:
            return {self.tabs: gr.skip()}
        out = self.review.actions.goto(request, str(limits.sql_int(clip, "clip id")), *values)
        return {**out, self.tabs: gr.Tabs(selected="review")}

    def _wire(self) -> None:
        review_outs = self.review.view.outputs()
        load_outs = (
            [self.userline, self.jobs.form.prompt, self.tabs]
            + self.browse.apply_outputs
            + self.browse.first_paint_outputs
            + [self.review.assign.row, self.review.assign.person]
            + self.jobs.prompts.first_paint_outputs
            + review_outs
        )
        self.browse.grid.click(
            shows_errors(self.open_tile),
            self.review.view.form_inputs() + self.review.view.copies,
            review_outs + [self.tabs],
            api_name="open_clip",
            show_progress="hidden",
        )
        # timers run only while their tab is shown (an idle browser on Browse polls nothing); each tab
        # paints at once when selected instead of waiting for its first tick
        timers = [*self.jobs.timers, self.fleet.timer]
        for tab, active in (
            (self.tab_browse, ()),
            (self.tab_review, ()),
            (self.tab_second, ()),
            (self.tab_jobs, tuple(self.jobs.timers)),
            (self.tab_quality, ()),
            (self.tab_fleet, (self.fleet.timer,)),
        ):

            def timers_for(active=active):
                return [gr.Timer(active=any(t is a for a in active)) for t in timers]

            tab.select(timers_for, None, timers, show_progress="hidden", api_name=f"timers_{tab.id}")
        self.tab_browse.select(
            shows_errors(self.browse.refresh),
            [self.filter_state, self.browse.anchors, self.sort_state],
            self.browse.outputs(self.filter_state)[:-1],
            show_progress="hidden",
            api_name="browse_refresh",
        )
        self.tab_jobs.select(
            shows_errors(self.jobs.on_show_event),
            self.jobs.show_inputs + [self.filter_state],
            self.jobs.show_outputs,
            show_progress="hidden",
            api_name="jobs_show",
        )
        self.tab_quality.select(
            shows_errors(self.quality.show),
            self.quality.show_inputs(self.filter_state),
            self.quality.show_outputs,
            show_progress="minimal",
            api_name="quality_show",
        )
        self.tab_second.select(
            shows_errors(self.second.show),
            [self.second.task],
            self.second.outputs,
            show_progress="hidden",
            api_name="second_show",
        )
        self.tab_fleet.select(
            shows_errors(self.fleet.refresh), None, self.fleet.outputs, show_progress="hidden", api_name="fleet_show"
        )
        self._load_outputs = load_outs


def build_app(settings) -> FastAPI:
    """The whole web app for `settings` (the Fleet tab watches `settings.fleet_urls`). Refuses a non-loopback
    bind without login."""
    if settings.auth.lower() == "off" and not settings.loopback:
        raise ValueError(f"auth=off is only allowed on a loopback host, not {settings.host!r}")
    settings = clip_root.settings_for_path(settings)  # the media route serves from the recorded clip root
    urls = list(settings.fleet_urls)
    # simulated or not is decided once, here, so the banner is part of the first paint (the Fleet tab's first
    # scrape comes ~10 s later): launched as `--fleet-mode sim`, or a fleet that says so in its /metrics
    simulated = settings.fleet_mode == "sim" or (
        bool(urls) and any_simulated(snapshot(FleetReader(settings), urls, timeout=1.0)[0])
    )
    ctx = AppContext(settings, fleet_urls=urls, simulated=simulated)
    # Gradio asks matplotlib for its backend around every handler call; left to choose one itself, matplotlib
    # imports pyplot then (3 s of CPU on the event loop, at the first event after a start). The Quality tab
    # draws with the Figure API, which needs no more than Agg.
    matplotlib.use("agg")
    auth = Auth(ctx)
    app = FastAPI(title="clip workbench", docs_url=None, redoc_url=None, openapi_url=None)
    failures.install(app)  # a message and a status for every failure of our own routes, never a traceback
    app.state.ctx = ctx
    app.state.auth = auth
    auth.install(app)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        """Liveness for launch.sh and load balancers: answers before login, reveals nothing."""
        return {"ok": True}

    media_routes.install(app, ctx, auth.user_name)
    media_routes.install_signed(app, ctx)  # clips for replicas on other nodes (signed URLs, no login)
    exports.install(app, ctx, auth.user_name)
    activity.install(app, ctx, auth.user_name)  # drafts and review-lease activity from the page script
    app.mount("/cw-static", StaticFiles(directory=STATIC), name="cw-static")
    own_routes = list(app.routes)  # what webapp.guard lets through besides the Gradio routes the page uses
    bench = Workbench(ctx)
    demo = bench.build()
    app.state.workbench = bench
    app.state.demo = demo
    app = gr.mount_gradio_app(
        app,
        demo,
        path="/",
        auth_dependency=auth.user_name,
        ssr_mode=False,
        footer_links=[],  # no "Use via API": the page's queue is the only way in (webapp.guard)
        run_history=False,
        head=head_html(),
        css_paths=[STATIC / "app.css"],
        show_error=True,
    )

    def is_lead(name: str | None) -> bool:
        user = ctx.user_by_name(name) if name else None
        return user is not None and user.can("lead")

    # outermost: Host allow-list, Origin checks, no CORS, security headers, only the routes the page uses, queue
    # sessions bound to users (S8), one write budget per person (issue 27)
    app.add_middleware(
        Guard,
        settings=settings,
        user_name=auth.user_name,
        is_lead=is_lead,
        auth_required=auth.required,
        own_routes=own_routes,
        budget=WriteBudget(Budget(settings.write_budget, settings.write_burst)),
        reads=frozenset(i for i, fn in demo.fns.items() if not budget.writes(fn.api_name)),
        event_ids=frozenset(demo.fns),
    )
    return app
