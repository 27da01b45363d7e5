"""Browse tab: filters, full-text search, sort, keyset pages of thumbnails, live counts.

Session state holds ids only: the filter (its dict form, `Filter.to_dict`), the sort order's name, the stack
of page anchors (the cursor each page starts after, data.order: opaque strings passed back untouched) and the
cursor of the next page. The filter inputs reach the handlers as one dict keyed by Filter field (`read_form`),
not by position. Thumbnails are <img src="/thumb/ID"> served by webapp.routes.media, never copied into
Gradio's cache.
"""

from __future__ import annotations

import threading
import time

import gradio as gr

from data import clips, limits, order as orders, search
from data.errors import DataError, SearchSyntaxError
from data.quality import second_review
from webapp import render
from webapp.browse import assigning, release as release_panel, sampling
from webapp.context import AppContext
from webapp.number_box import number_box, whole
from webapp.second_review import tab as second_review_tab

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


# The filter form: each input's Filter field (in the order Gradio passes their values), then the sort order.
# A field in CHOICES is a dropdown of ANY and those values; the other fields take their form from the Filter
# field's type (bool: any/yes/no, int: a number, str: typed text), except the assignee (webapp.browse.assigning).
FORM_FIELDS = (
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
SORT = "sort"
CHOICES = {name: clips.CHOICES[name] for name in FORM_FIELDS if name in clips.CHOICES}  # the Filter's own
_TRI = {"yes": True, "no": False}


def read_form(values) -> dict:
    """The filter form's values (in FORM_FIELDS order, then the sort) as one dict; values a script left out
    are "not sent" (None), as in webapp.review.form."""
    values = list(values) + [None] * (len(FORM_FIELDS) + 1 - len(values))
    return dict(zip((*FORM_FIELDS, SORT), values))


def form_values(form: dict) -> list:
    """The input values of a form dict, in the order Gradio passes them (the inverse of `read_form`)."""
    return [form.get(name) for name in (*FORM_FIELDS, SORT)]


def filter_from_form(form: dict, *, me: str = "") -> clips.Filter:
    """The Filter the form describes (`me`: who "assigned to me" is); a DataError (shown to the user) for an
    id out of range or a NUL."""
    fields: dict = {}
    for name in FORM_FIELDS:
        value = form.get(name)
        if name == "assignee":
            fields.update(assigning.assignee_filter(value, me))
        elif name in CHOICES:
            fields[name] = None if value in (None, "", ANY) else value
        elif clips.FIELD_TYPES[name] is bool:
            fields[name] = _TRI.get(value or ANY)
        elif clips.FIELD_TYPES[name] is int:
            fields[name] = _whole(value, name)
        else:
            fields[name] = str(value or "").strip() or None
    return clips.Filter(**fields)


def _whole(value, name: str) -> int | None:
    """A number box: empty or 0 is "any"; anything else a whole number."""
    return whole(value, f"The {name.replace('_', ' ')}") or None


def form_from_filter(fdict: dict) -> dict:
    """The form values that show `fdict` (the inverse of `filter_from_form`; a value the inputs cannot show
    becomes "any")."""
    form = {}
    for name in FORM_FIELDS:
        v = fdict.get(name)
        if name == "assignee":
            form[name] = assigning.assignee_choice(fdict)
        elif name in CHOICES:
            form[name] = v if v in CHOICES[name] else ANY
        elif clips.FIELD_TYPES[name] is bool:
            form[name] = {True: "yes", False: "no"}.get(v, ANY)
        elif clips.FIELD_TYPES[name] is int:
            form[name] = v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
        else:
            form[name] = str(v or "")
    return form


class BrowseTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._lock = threading.Lock()
        self._summary: tuple[float, dict | None] = (0.0, None)
        self.assign = assigning.AssignPanel(ctx)
        self.sample = sampling.SamplePanel(ctx)
        self.release = release_panel.ReleasePanel(ctx)

    def render(self) -> None:
        with gr.Row(elem_classes="cw-filters"):
            self.text = gr.Textbox(
                label="Search (caption, labels, path)",
                elem_id="search",
                scale=3,
                placeholder="e.g. pedestrian night   (press / to focus)",
            )
            self.status = gr.Dropdown(
                [ANY, *CHOICES["review_status"]], value=ANY, label="Review", elem_id="f-status", min_width=120
            )
            self.scenario = gr.Dropdown(
                [ANY, *CHOICES["scenario"]], value=ANY, label="Scenario", elem_id="f-scenario", min_width=160
            )
            self.hazard = gr.Dropdown(
                [ANY, *CHOICES["hazard_level"]], value=ANY, label="Hazard", elem_id="f-hazard", min_width=110
            )
            self.weather = gr.Dropdown([ANY, *CHOICES["weather"]], value=ANY, label="Weather", min_width=110)
            self.lighting = gr.Dropdown([ANY, *CHOICES["lighting"]], value=ANY, label="Lighting", min_width=120)
        with gr.Row(elem_classes="cw-filters"):
            self.has_caption = gr.Radio(TRISTATE, value=ANY, label="Has caption", elem_id="f-has-caption")
            self.failed = gr.Radio(TRISTATE, value=ANY, label="Ingest failed", elem_id="f-failed")
            self.job = number_box("Job id", empty="any", elem_id="f-job")
            self.assignee = gr.Dropdown(
                [assigning.ANY, assigning.ME, assigning.UNASSIGNED],
                value=assigning.ANY,
                label="Assigned to",
                elem_id="f-assignee",
                allow_custom_value=True,  # a person's name (a lead's list comes with the first paint)
                min_width=140,
            )
            self.sort = gr.Radio(orders.choices(), value=orders.DEFAULT, label="Sort", elem_id="f-sort")
        self.assign.render()
        self.sample.render()
        # Filter field -> its input, in FORM_FIELDS order (the order Gradio passes the values in; read_form)
        self.form = dict(
            zip(
                FORM_FIELDS,
                [self.status, self.scenario, self.hazard, self.weather, self.lighting]
                + [self.has_caption, self.failed, self.job, self.text, self.assignee],
            )
        )
        self.counts = gr.HTML(elem_id="browse-counts")
        self.export = gr.HTML(elem_id="browse-export")
        self.release.render()  # beside the export links: both write what the filter shows
        self.grid = gr.HTML("", elem_id="gallery", js_on_load=TILE_JS)
        with gr.Row():
            self.prev_btn = gr.Button("◀ Previous page", elem_id="page-prev", size="sm")
            self.page_label = gr.Markdown("", elem_id="page-label")
            self.next_btn = gr.Button("Next page ▶", elem_id="page-next", size="sm")
        self.anchors = gr.State([None])  # the cursor each page shown so far starts after (None: the start)
        self.next_cursor = gr.State(None)  # where the next page starts (None: this is the last page)

    def filter_from_url(self, raw: str | None) -> dict:
        """The filter a URL carries (?f=<json>); anything unreadable is no filter (a link must never fail)."""
        if not raw:
            return {}
        try:
            return clips.Filter.from_dict(limits.outside_json(raw, "The link's filter")).to_dict()
        except (ValueError, TypeError, DataError):
            return {}

    def set_inputs(self, form: dict, user) -> dict:
        """First paint: the inputs showing `form` (a `read_form` dict); for a lead, the assign panel and the
        people to filter by."""
        out = {comp: form.get(name) for name, comp in self.form.items()}
        out.update({self.sort: orders.name_or_default(form.get(SORT)), **self.assign.for_user(user)})
        out.update(self.sample.for_user(user))
        out.update(self.release.for_user(user))
        if user.can("lead"):
            choices = [assigning.ANY, assigning.ME, assigning.UNASSIGNED, *self.assign.people()]
            out[self.assignee] = gr.update(choices=choices, value=form.get("assignee"))
        return out

    @property
    def first_paint_outputs(self) -> list:
        return (
            list(self.form.values())
            + [self.sort, self.assign.row, self.assign.person]
            + self.sample.first_paint_outputs
            + self.release.first_paint_outputs
        )

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
        """The page that starts after the last of `anchors` (cursors), in the order named `sort`."""
        user = self.ctx.user(request)
        db = self.ctx.db()
        anchors = list(anchors or [None])
        try:
            f = clips.Filter.from_dict(fdict if isinstance(fdict, dict) else {})
            order = orders.get(sort)
            shown = clips.page(db, f, order=order, after=anchors[-1])
        except DataError as e:  # a tampered cursor or filter from a script: a message, not a 500
            raise gr.Error(str(e), title="Cannot show that page") from None
        rows = shown.rows
        blind = second_review.blind_clip_ids(db, user.name, [r["id"] for r in rows])  # their pending second reviews
        rows = [second_review_tab.masked(r) if r["id"] in blind else r for r in rows]
        n, exact = clips.count_capped(db, f)
        hint = search.no_match_hint(f.text) if f.text and not n else ""
        # the page script writes the filter and order into the URL (render.browse_state); the default order is
        # left out of it
        url_sort = "" if order.name == orders.DEFAULT else order.name
        return {
            self.grid: render.tiles(rows, hint),
            self.counts: render.browse_state(f.to_dict(), url_sort, self.summary(db), n, exact),
            self.export: render.export_links(f.to_dict()) if user.can("lead") else "",
            self.page_label: f"Page {len(anchors)}" + (f" · clips #{rows[0]['id']}–#{rows[-1]['id']}" if rows else ""),
            self.prev_btn: gr.update(interactive=len(anchors) > 1),
            self.next_btn: gr.update(interactive=shown.next is not None),
            self.anchors: anchors,
            self.next_cursor: shown.next,
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
            self.next_cursor,
            filter_state,
        ]

    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        outs = self.outputs(filter_state) + [sort_state]

        def apply(request: gr.Request, *values):
            """The form's filter and order, from the first page."""
            form = read_form(values)
            try:
                fdict = filter_from_form(form, me=self.ctx.user(request).name).to_dict()
                sort = orders.get(form[SORT]).name
            except SearchSyntaxError as e:  # shown where the results would be: nothing ran, and why
                return {
                    self.grid: render.search_refused(str(e)),
                    self.counts: "",
                    self.export: "",
                    self.page_label: "",
                    self.prev_btn: gr.update(interactive=False),
                    self.next_btn: gr.update(interactive=False),
                    self.next_cursor: None,
                }
            except DataError as e:  # a NUL or an over-long search, a huge job id: say so, no 500
                raise gr.Error(str(e), title="Cannot search for that") from None
            return {**self.page(fdict, [None], sort, request), filter_state: fdict, sort_state: sort}

        def next_page(fdict, anchors, cursor, sort, request: gr.Request):
            if not cursor:
                return gr.skip()
            return self.page(fdict, [*(anchors or [None]), cursor], sort, request)

        def prev_page(fdict, anchors, sort, request: gr.Request):
            if len(anchors or []) <= 1:
                return gr.skip()
            return self.page(fdict, anchors[:-1], sort, request)

        inputs = list(self.form.values()) + [self.sort]
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
            return self.page(fdict or {}, anchors or [None], sort or orders.DEFAULT, request)

        self.refresh = refresh
        self.apply = apply
        self.apply_inputs = inputs
        self.apply_outputs = outs
        self.next_btn.click(
            next_page, [filter_state, self.anchors, self.next_cursor, sort_state], outs[:-2], api_name="browse_next"
        )
        self.prev_btn.click(prev_page, [filter_state, self.anchors, sort_state], outs[:-2], api_name="browse_prev")
        self.assign.wire(self, filter_state, sort_state)
        self.sample.wire(self, filter_state, sort_state)
        self.release.wire(filter_state)
