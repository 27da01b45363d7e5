"""Browse tab: filters, full-text search, sort, keyset pages of thumbnails, live counts.

Session state holds ids only: the filter (as a dict), the stack of page anchors (the id each page starts
after) and the ids shown. Thumbnails are <img src="/thumb/ID"> served by webapp.media_routes, never copied into
Gradio's cache.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from urllib.parse import quote

import gradio as gr

from data import clips, limits, taxonomy
from data.db import DataError
from webapp import assigning, render
from webapp.context import AppContext

ANY = "any"
SUMMARY_TTL = 10.0
TRISTATE = [ANY, "yes", "no"]
TILE_JS = """
element.addEventListener('click', (ev) => {
  const a = ev.target.closest('a.cw-tile');
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  trigger('click', {clip: parseInt(a.dataset.clip, 10)});
});
"""


def _tri(v: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(v or ANY)


def filter_dict(f: clips.Filter) -> dict:
    """The filter as a JSON-able dict that keeps False (`Filter.to_dict` drops it, which would turn
    "has caption: no" into "any")."""
    return {
        k: v
        for k, v in dataclasses.asdict(f).items()
        if v is not None and v != "" and not (k == "include_missing" and v is False)
    }


def filter_from_inputs(
    status, scenario, hazard, weather, lighting, has_caption, failed, job, text, assignee=ANY, *, me: str = ""
) -> dict:
    """The filter the inputs describe (`me`: who "assigned to me" is); a DataError (shown to the user) for an
    id out of range or a NUL."""
    try:
        job_id = int(job) if job not in (None, "") and float(job) > 0 else None
    except (TypeError, ValueError, OverflowError):
        raise DataError("The job id must be a whole number.") from None
    f = clips.Filter(
        review_status=status if status != ANY else None,
        scenario=scenario if scenario != ANY else None,
        hazard_level=hazard if hazard != ANY else None,
        weather=weather if weather != ANY else None,
        lighting=lighting if lighting != ANY else None,
        has_caption=_tri(has_caption),
        failed=_tri(failed),
        job_id=job_id,
        text=(text or "").strip() or None,
        **assigning.assignee_filter(assignee, me),
    )
    return filter_dict(f)


FILTER_INPUT_KEYS = (
    "review_status",
    "scenario",
    "hazard_level",
    "weather",
    "lighting",
    "has_caption",
    "failed",
    "job_id",
    "text",
    "assignee",
)


def _tri_value(v) -> str:
    return {True: "yes", False: "no"}.get(v, ANY)


def export_links(fdict: dict, can_export: bool) -> str:
    if not can_export:
        return ""
    q = quote(json.dumps(fdict, sort_keys=True), safe="")
    return (
        f'<div class="cw-export">Export this filter: <a id="export-jsonl" href="/export?fmt=jsonl&filter={q}">'
        f'JSONL</a> · <a id="export-csv" href="/export?fmt=csv&filter={q}">CSV</a></div>'
    )


class BrowseTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._lock = threading.Lock()
        self._summary: tuple[float, dict | None] = (0.0, None)
        self.assign = assigning.AssignPanel(ctx)

    def render(self) -> None:
        with gr.Row(elem_classes="cw-filters"):
            self.text = gr.Textbox(
                label="Search (caption, labels, path)",
                elem_id="search",
                scale=3,
                placeholder="e.g. pedestrian night   (press / to focus)",
            )
            self.status = gr.Dropdown(
                [ANY, "unreviewed", "approved", "rejected"],
                value=ANY,
                label="Review",
                elem_id="f-status",
                min_width=120,
            )
            self.scenario = gr.Dropdown(
                [ANY, *taxonomy.SCENARIO_CATEGORIES], value=ANY, label="Scenario", elem_id="f-scenario", min_width=160
            )
            self.hazard = gr.Dropdown(
                [ANY, *taxonomy.HAZARD_LEVELS], value=ANY, label="Hazard", elem_id="f-hazard", min_width=110
            )
            self.weather = gr.Dropdown([ANY, *taxonomy.WEATHER], value=ANY, label="Weather", min_width=110)
            self.lighting = gr.Dropdown([ANY, *taxonomy.LIGHTING], value=ANY, label="Lighting", min_width=120)
        with gr.Row(elem_classes="cw-filters"):
            self.has_caption = gr.Radio(TRISTATE, value=ANY, label="Has caption", elem_id="f-has-caption")
            self.failed = gr.Radio(TRISTATE, value=ANY, label="Ingest failed", elem_id="f-failed")
            self.job = gr.Number(label="Job id", value=None, precision=0, minimum=0, elem_id="f-job")
            self.assignee = gr.Dropdown(
                [assigning.ANY, assigning.ME, assigning.UNASSIGNED],
                value=assigning.ANY,
                label="Assigned to",
                elem_id="f-assignee",
                allow_custom_value=True,  # a person's name (a lead's list comes with the first paint)
                min_width=140,
            )
            self.sort = gr.Radio(["newest", "oldest"], value="newest", label="Sort", elem_id="f-sort")
        self.assign.render()
        # in FILTER_INPUT_KEYS order: the handlers read them positionally
        self.filter_inputs = [self.status, self.scenario, self.hazard, self.weather, self.lighting]
        self.filter_inputs += [self.has_caption, self.failed, self.job, self.text, self.assignee]
        self.counts = gr.HTML(elem_id="browse-counts")
        self.export = gr.HTML(elem_id="browse-export")
        self.grid = gr.HTML("", elem_id="gallery", js_on_load=TILE_JS)
        with gr.Row():
            self.prev_btn = gr.Button("◀ Previous page", elem_id="page-prev", size="sm")
            self.page_label = gr.Markdown("", elem_id="page-label")
            self.next_btn = gr.Button("Next page ▶", elem_id="page-next", size="sm")
        self.anchors = gr.State([None])
        self.page_ids = gr.State([])

    def filter_from_url(self, raw: str | None) -> dict:
        """The filter a URL carries (?f=<json>); anything unreadable is no filter (a link must never fail)."""
        if not raw:
            return {}
        try:
            d = json.loads(raw)
            return filter_dict(clips.Filter.from_dict(d)) if isinstance(d, dict) else {}
        except (ValueError, TypeError):
            return {}

    def inputs_from_filter(self, fdict: dict) -> list:
        """Form values (in `filter_inputs` order) showing `fdict`."""
        choices = {
            "review_status": [ANY, "unreviewed", "approved", "rejected"],
            "scenario": [ANY, *taxonomy.SCENARIO_CATEGORIES],
            "hazard_level": [ANY, *taxonomy.HAZARD_LEVELS],
            "weather": [ANY, *taxonomy.WEATHER],
            "lighting": [ANY, *taxonomy.LIGHTING],
        }
        out = []
        for key in FILTER_INPUT_KEYS:
            v = fdict.get(key)
            if key in choices:
                out.append(v if v in choices[key] else ANY)
            elif key in ("has_caption", "failed"):
                out.append(_tri_value(v))
            elif key == "job_id":
                out.append(int(v) if str(v or "").isdigit() else None)
            elif key == "assignee":
                out.append(assigning.assignee_choice(fdict))
            else:
                out.append(str(v or ""))
        return out

    def set_inputs(self, values: list, sort: str, user) -> dict:
        """First paint: the filter's inputs showing `values`; for a lead, the assign panel and the people to
        filter by."""
        out = {**dict(zip(self.filter_inputs, values)), self.sort: sort, **self.assign.for_user(user)}
        if user.can("lead"):
            choices = [assigning.ANY, assigning.ME, assigning.UNASSIGNED, *self.assign.people()]
            out[self.assignee] = gr.update(choices=choices, value=values[-1])
        return out

    @property
    def first_paint_outputs(self) -> list:
        return self.filter_inputs + [self.sort, self.assign.row, self.assign.person]

    def summary(self, db) -> dict:
        """Headline counts, recomputed at most every SUMMARY_TTL seconds (a full scan at a million clips);
        the total comes from the trigger-kept row count, so it is always current."""
        with self._lock:
            t, value = self._summary
            if value is None or time.monotonic() - t > SUMMARY_TTL:
                value = clips.summary(db)
                self._summary = (time.monotonic(), value)
        return {**value, "clips": clips.total(db)}

    def page(self, fdict: dict, anchors: list, sort: str, request: gr.Request) -> dict:
        user = self.ctx.user(request)
        db = self.ctx.db()
        try:
            f = clips.Filter.from_dict(fdict if isinstance(fdict, dict) else {})
            anchors = [None if a is None else limits.sql_int(a, "page anchor") for a in anchors or [None]]
        except DataError as e:
            raise gr.Error(str(e), title="Cannot show that page") from None
        rows = clips.page(db, f, after_id=anchors[-1], descending=(sort == "newest"))
        more = len(rows) == clips.PAGE_SIZE and bool(
            clips.page(db, f, after_id=rows[-1]["id"], limit=1, descending=(sort == "newest"))
        )
        n, exact = clips.count_capped(db, f)
        # data-filter / data-sort: the page script writes them into the URL (?f=...), so Back and links work
        counts = (
            f'<div id="browse-state" data-filter="{render.esc(json.dumps(fdict, sort_keys=True))}" '
            f'data-sort="{render.esc(sort)}">' + render.counts(self.summary(db), n, exact) + "</div>"
        )
        return {
            self.grid: render.tiles(rows),
            self.counts: counts,
            self.export: export_links(fdict, user.can("lead")),
            self.page_label: f"Page {len(anchors)}" + (f" · clips #{rows[0]['id']}–#{rows[-1]['id']}" if rows else ""),
            self.prev_btn: gr.update(interactive=len(anchors) > 1),
            self.next_btn: gr.update(interactive=more),
            self.anchors: anchors,
            self.page_ids: [r["id"] for r in rows],
        }

    def outputs(self, filter_state: gr.State) -> list:
        return [
            self.grid,
            self.counts,
            self.export,
            self.page_label,
            self.prev_btn,
            self.next_btn,
            self.anchors,
            self.page_ids,
            filter_state,
        ]

    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        outs = self.outputs(filter_state) + [sort_state]

        def apply(
            status,
            scenario,
            hazard,
            weather,
            lighting,
            has_caption,
            failed,
            job,
            text,
            assignee,
            sort,
            request: gr.Request,
        ):
            me = self.ctx.user(request).name
            try:
                fdict = filter_from_inputs(
                    status, scenario, hazard, weather, lighting, has_caption, failed, job, text, assignee, me=me
                )
            except DataError as e:  # a NUL or an over-long search, a huge job id: say so, no 500
                raise gr.Error(str(e), title="Cannot search for that") from None
            return {**self.page(fdict, [None], sort, request), filter_state: fdict, sort_state: sort}

        def next_page(fdict, anchors, ids, sort, request: gr.Request):
            if not ids:
                return gr.skip()
            return self.page(fdict, [*anchors, ids[-1]], sort, request)

        def prev_page(fdict, anchors, sort, request: gr.Request):
            if len(anchors) <= 1:
                return gr.skip()
            return self.page(fdict, anchors[:-1], sort, request)

        inputs = self.filter_inputs + [self.sort]
        for comp in inputs:  # a choice applies at once; typed fields (search, job id) on Enter
            if comp is self.text or comp is self.job or comp is self.assignee:
                continue
            comp.change(apply, inputs, outs, show_progress="hidden")
        self.text.submit(apply, inputs, outs, api_name="browse_search")
        self.job.submit(apply, inputs, outs)
        self.assignee.change(apply, inputs, outs, show_progress="hidden", api_name="browse_assignee")

        def refresh(fdict, anchors, sort, request: gr.Request):
            """Re-read the page shown (when the tab is shown again: reviews change tiles and counts)."""
            with self._lock:
                self._summary = (0.0, None)
            return self.page(fdict or {}, anchors or [None], sort or "newest", request)

        self.refresh = refresh
        self.apply = apply
        self.apply_inputs = inputs
        self.apply_outputs = outs
        self.next_btn.click(
            next_page, [filter_state, self.anchors, self.page_ids, sort_state], outs[:-2], api_name="browse_next"
        )
        self.prev_btn.click(prev_page, [filter_state, self.anchors, sort_state], outs[:-2], api_name="browse_prev")
        self.assign.wire(self, filter_state, sort_state)
