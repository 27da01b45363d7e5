"""The Jobs tab's start form (leads): the clips, the prompt version, the work per clip, the preview, Start.

The job's parameters are the inputs webapp.jobs.fields makes from `data.job_params.JobParams`, one per field: the
handlers here take their values as they come (`*rest`, in the inputs' order, then what follows them and the
request last), name them by field and resolve them, so no field is named by hand. Gradio calls them through
`on_preview`, `on_tick` and `on_start`, which show it one parameter per field (the API's names) and the request.

The app never captions anything itself: starting a job writes rows (data.jobs.create_once) and the runner process
(serving.runner) does the work. Start checks the lead role itself: each Gradio event is an HTTP endpoint anyone can
call, so parameters are checked here too (data.job_params), not only by the form. The preview says how many clips a
start would caption and what that costs on this fleet (serving.cost), counted again on a timer of its own while
the tab is shown; a start says the job's true clip count, and warns when no runner or no healthy replica can run
it yet (webapp.jobs.fleet_notice).
"""

from __future__ import annotations

import functools
import time

import gradio as gr

from data import clips, heartbeats, jobs, prompts
from data.errors import DataError
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from serving import cost, cost_records, gpu_models
from serving.launch import record as fleet_record
from webapp import render
from webapp.context import AppContext
from webapp.jobs import fleet_notice, render as render_jobs
from webapp.jobs.control import JobControl
from webapp.jobs.fields import JobFields

PREVIEW_EVERY_S = 10.0  # the start preview is counted again at least this often while the tab is shown


class StartForm:
    def __init__(self, ctx: AppContext, shown: JobControl, spec: type[JobParams] = JobParams):
        self.ctx = ctx
        self.shown = shown  # a start shows its job, with the message about it
        self.params = p = JobFields(spec)  # the job's parameters, one input per field of `spec`
        # the handlers as Gradio calls them: a parameter per field, named after it, then the request
        self.on_preview = p.event(self.count_preview, ["source"], p.priced_names, ["fdict"])
        self.on_tick = p.event(self.preview_tick, ["source"], p.priced_names, ["fdict", "seen"])
        self.on_start = p.event(self.start, ["name", "source", "prompt_id"], p.names, ["fdict", "seen"])

    def render(self) -> None:
        with gr.Accordion("Start a job", open=True):
            with gr.Row():
                self.name = gr.Textbox(label="Job name", placeholder="e.g. night clips, prompt v2", elem_id="job-name")
                self.source = gr.Radio(
                    ["current filter", "everything uncaptioned"],
                    value="everything uncaptioned",
                    label="Clips",
                    elem_id="job-source",
                )
                self.prompt = gr.Dropdown([], label="Prompt version", elem_id="job-prompt")
                # frames, max tokens, pixels per clip (all frames share it: more frames are smaller frames) and any
                # field JobParams gains
                self.params.render(self.ctx.settings)
            self.preview = gr.HTML("", elem_id="job-preview")
            self.preview_seen = gr.State(None)  # {"n": clips the preview showed, "at": when it counted them}
            self.start_btn = gr.Button("Start job", variant="primary", elem_id="btn-start-job")

    def _selection(self, source, fdict) -> tuple[clips.Filter, str]:
        if source == "current filter":
            f = clips.Filter.from_dict(fdict)
            shown = f.to_dict()
            desc = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in shown.items()) or "no filter: every clip"
            ok = "" if f.failed is not None else "; ingest ok"
            return f, f"the Browse filter ({desc}{ok})"
        return clips.Filter(has_caption=False, failed=False), "every clip without a caption (ingest ok)"

    def count_preview(self, source, *rest) -> dict:
        """How many clips a start would caption, and what that costs at the frames and pixels chosen, before any
        GPU is committed, counted now (and when)."""
        *priced, fdict, request = rest  # the priced fields' values (self.params.priced), the Browse filter
        chosen = self.params.named(priced, self.params.priced_names)
        self.ctx.user(request)
        f, desc = self._selection(source, fdict)
        n = Selection(filter=f).count(self.ctx.db())  # what a start would send (ingest failures left out)
        t = time.time()
        html = render_jobs.job_preview(n, desc, t, self._cost_html(n, chosen))
        return {self.preview: html, self.preview_seen: {"n": n, "at": t}}

    def preview_tick(self, source, *rest):
        """Count the preview again on its timer (every PREVIEW_EVERY_S): clips are captioned, ingested and
        changed while the tab is open, and a count the lead reads must be a recent one."""
        *priced, fdict, seen, request = rest  # the priced fields' values, the Browse filter, the preview shown
        # half the period: a count made by a filter change since the last tick is fresh enough to keep
        if isinstance(seen, dict) and time.time() - float(seen.get("at") or 0) < PREVIEW_EVERY_S / 2:
            return gr.skip()
        return self.count_preview(source, *priced, fdict, request)

    def _fleet(self) -> tuple[int, str | None, list[str] | None]:
        """Replicas behind the configured fleet (a router is asked for its workers), what they compute in and
        the GPU model of each as the launcher of this data dir recorded them (None: no record describes them),
        cached for a minute."""
        hit = getattr(self, "_fleet_cache", None)
        if hit and time.monotonic() - hit[1] < 60:
            return hit[0]
        urls = self.ctx.fleet_urls
        reader = self.ctx.fleet_reader
        n = (reader.router_workers(urls[0], timeout=1.0) or 1) if len(urls) == 1 else max(1, len(urls))
        rec = fleet_record.load_record(self.ctx.settings)
        fleet = (
            n,
            fleet_record.fleet_precision(self.ctx.settings, urls, rec),
            fleet_record.fleet_gpus(self.ctx.settings, urls, rec),
        )
        self._fleet_cache = (fleet, time.monotonic())
        return fleet

    def _cost_html(self, n: int, chosen: dict | None = None) -> str:
        """What the job will cost on this fleet at the frames and pixels chosen (`chosen`, the form's values by
        field; empty: the defaults), from the work-per-clip table and the recorded GPU runs (serving.cost). A point
        nobody measured says so; values the job would refuse say that; simulated fleets get nothing (their speed
        says nothing about GPUs)."""
        if not n or self.ctx.simulated_fleet:
            return ""
        try:
            p = self.params.resolve(self.ctx.settings, chosen or {})
        except DataError as e:
            return render_jobs.job_cost(str(e), estimate=False)
        replicas, precision, models = self._fleet()
        st = self.ctx.settings
        # said before the note, which is cut short: the lead must read what the figure assumed
        assumed, priced = ("", precision) if precision else (ASSUMED_PRECISION, "bf16")
        if models is None or len(models) != replicas:
            assumed = "; ".join(a for a in (assumed, ASSUMED_GPU) if a)
        said = f"{assumed}; " if assumed else ""
        kw = dict(max_pixels=p.max_pixels, in_flight=st.per_replica_inflight, window_fill_s=st.window_fill_seconds)
        if models and len(models) == replicas:  # each replica priced on its own GPU model's measurements
            e = cost.estimate_fleet(models, p.frames, priced, _measurements(), **kw)
        else:
            e = cost.estimate(replicas, p.frames, priced, _measurements(), **kw)
        on = gpu_models.describe(models) if models and len(models) == replicas else f"{replicas} GPU(s)"
        if not e.clips_per_s:
            return render_jobs.job_cost(
                f"No cost estimate for {p.frames} frames at {p.max_pixels:,} pixels in {priced}: {e.note[:300]}."
                + (f" ({assumed}.)" if assumed else ""),
                estimate=False,
            )
        return render_jobs.job_cost(
            f"About {_duration(e.seconds_for(n))} on {on} at {p.frames} frames, {p.max_pixels:,} pixels, "
            f"{priced} "
            f"({e.clips_per_s:.1f} clips/s, {e.gpu_hours(n):.1f} GPU-hours; {said}{e.basis}: {e.note[:400]})."
        )

    def start(self, name, source, prompt_id, *rest):
        """Start a job over the selection as it is now. The message gives the job's true clip count (and says
        so when the preview showed another), and warns when no runner or no healthy replica can run it yet:
        the job is started all the same and waits."""
        *values, fdict, seen, request = rest  # each job parameter's (self.params.components), the filter, the preview
        chosen = self.params.named(values)
        user = self.ctx.require(request, "lead")
        db = self.ctx.db()
        f, _ = self._selection(source, fdict)
        msg, msg_for = self.shown.msg, self.shown.msg_for
        try:
            params = self.params.resolve(self.ctx.settings, chosen)
            pid = int(prompt_id) if prompt_id not in (None, "") else prompts.latest(db)["id"]
            prompts.get(db, pid)
            job_id, created = jobs.create_once(
                db,
                name=name or f"{source} by {user.name}",
                created_by=user.name,
                selection=Selection(filter=f, origin=source),
                prompt_id=pid,
                params=params,
                fleet=self.ctx.job_fleet,
            )
        except (DataError, ValueError) as e:
            return {msg: render.message(str(e), "error"), msg_for: None}
        total = job_queries.get(db, job_id)["total"]
        out = {self.shown.job_id: job_id, **self.count_preview(source, *self.params.priced_of(chosen), fdict, request)}
        if not created:
            text = f"Job {job_id} over {total:,} clips was just started with the same settings: not started twice."
            return {**out, msg: render.message(text, "info"), msg_for: None}
        text = f"Started job {job_id} over {total:,} clips."
        shown = seen.get("n") if isinstance(seen, dict) else None
        if shown is not None and shown != total:
            text += (
                f" The preview showed {shown:,} (counted at {render.when_s(seen.get('at'))} UTC): the clips of the "
                "selection changed since, and the job has those of the moment it started."
            )
        warning = fleet_notice.start_warning(heartbeats.heartbeats(db, "runner"), fleet=self.ctx.job_fleet)
        if warning:  # true while the job waits: it goes when the job is no longer queued or running
            bound = {"job": job_id, "states": list(job_queries.ACTIVE)}
            return {**out, msg: render.message(f"{text} {warning}", "warn"), msg_for: bound}
        return {**out, msg: render.message(text, "ok"), msg_for: None}

    def prompt_choices(self, request: gr.Request):
        self.ctx.user(request)
        db = self.ctx.db()
        prompts.latest(db)  # installs the presets on a fresh database
        rows = prompts.list_prompts(db)
        return gr.update(
            choices=[(f"{p['name']} v{p['version']}", p["id"]) for p in rows], value=rows[0]["id"] if rows else None
        )


ASSUMED_PRECISION = (
    "bf16 assumed, as in the recipe: no fleet launched from this data dir records what these replicas compute in "
    "(the replicas of a head are launched on the GPU nodes)"
)


ASSUMED_GPU = (
    "GPU model not known here (no fleet launched from this data dir records it): priced from the GPU the "
    "measurement names"
)


@functools.lru_cache(maxsize=1)
def _measurements() -> tuple:
    """The work-per-clip table and the GPU runs recorded in the repository, read once per process."""
    return tuple(cost_records.default_measurements())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
