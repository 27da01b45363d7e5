"""The lead's assign panel on Browse: give the clips of the current filter (or its next N open ones) to a person,
take them back. And its one-clip form on Review (`ClipAssign`): give the clip being looked at to a person.
data.assignments does the work (and audits it); the person's "next unreviewed" then serves those clips first.

The panel is shown to leads only (on first paint), and every handler checks the lead role itself: an annotator
calling the endpoint through Gradio's API gets a refusal, not an assignment.
"""

from __future__ import annotations

import gradio as gr

from data import assignments, clips, review_states, users
from data.errors import DataError
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.number_box import number_box, whole

ANY, ME, UNASSIGNED = "any", "me", "unassigned"


def assignee_filter(value: str | None, me: str) -> dict:
    """The Filter fields of the Browse "Assigned to" choice: any, me, unassigned or a person's name."""
    value = (value or "").strip()
    if value in ("", ANY):
        return {}
    if value == UNASSIGNED:
        return {"unassigned": True}
    return {"assignee": me if value == ME else value}


def assignee_choice(fdict: dict) -> str:
    """The "Assigned to" choice that shows `fdict` (the inverse of `assignee_filter`, names stay names)."""
    if fdict.get("unassigned"):
        return UNASSIGNED
    return str(fdict.get("assignee") or ANY)


def people(db) -> list[str]:
    """Who can be given clips: every enabled user."""
    return [u["name"] for u in users.list_users(db) if not u["disabled"]]


def clips_n(n: int) -> str:
    return f"{n:,} clip" + ("" if n == 1 else "s")


def _limit(count) -> int | None:
    """The "how many" box: empty or 0 = the whole filter; anything else a whole number (checked in data/)."""
    return whole(count, "How many clips (empty: the whole filter)") or None


class AssignPanel:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Row(visible=False, elem_id="assign-panel", elem_classes="cw-assign") as self.row:
            self.person = gr.Dropdown(
                [], label="Assign to", elem_id="assign-to", allow_custom_value=True, min_width=160, scale=2
            )
            self.count = number_box(
                "How many (empty: the whole filter)", empty="the whole filter", elem_id="assign-count"
            )
            self.assign_btn = gr.Button("Assign this filter's clips", elem_id="btn-assign", size="sm")
            self.unassign_btn = gr.Button("Unassign them", elem_id="btn-unassign", size="sm", variant="secondary")
        self.msg = gr.HTML("", elem_id="assign-msg")

    def people(self) -> list[str]:
        return people(self.ctx.db())

    def for_user(self, user) -> dict:
        """First paint: the panel and its list of people for a lead; nothing for anyone else."""
        if not user.can("lead"):
            return {self.row: gr.update(visible=False)}
        return {self.row: gr.update(visible=True), self.person: gr.update(choices=self.people())}

    def wire(self, browse, filter_state: gr.State, sort_state: gr.State) -> None:
        page_outs = browse.outputs(filter_state)[:-1] + [self.msg]

        def assign(fdict, sort, person, count, anchors, request: gr.Request):
            """Assign the filter's clips (or its next `count` unreviewed clips nobody has) to `person`."""
            lead = self.ctx.require(request, "lead")
            f = clips.Filter.from_dict(fdict or {})
            try:
                out = assignments.assign(
                    self.ctx.db(),
                    f,
                    person,
                    actor=lead.name,
                    role=lead.role,
                    limit=_limit(count),
                    order=sort,
                )
            except DataError as e:
                return {self.msg: render.message(str(e), "error")}
            note = f"Assigned {clips_n(out['assigned'])} to {out['assignee']}"
            extra = [f"{out['reassigned']:,} taken from someone else"] if out["reassigned"] else []
            extra += [f"{out['unchanged']:,} already theirs"] if out["unchanged"] else []
            note += (f" ({'; '.join(extra)})" if extra else "") + "."
            if not out["assigned"] and not out["unchanged"]:
                note = "No clips to assign: nothing unreviewed and unassigned in this filter."
            return {**browse.page(fdict or {}, anchors, sort, request), self.msg: render.message(note, "ok")}

        def unassign(fdict, sort, anchors, request: gr.Request):
            """Give the filter's clips back to nobody."""
            lead = self.ctx.require(request, "lead")
            f = clips.Filter.from_dict(fdict or {})
            try:
                n = assignments.unassign(self.ctx.db(), f, actor=lead.name, role=lead.role)
            except DataError as e:
                return {self.msg: render.message(str(e), "error")}
            note = f"Unassigned {clips_n(n)} of this filter." if n else "No clip of this filter was assigned."
            return {**browse.page(fdict or {}, anchors, sort, request), self.msg: render.message(note, "ok")}

        self.assign_btn.click(
            shows_errors(assign),
            [filter_state, sort_state, self.person, self.count, browse.anchors],
            page_outs,
            api_name="assign_clips",
        )
        self.unassign_btn.click(
            shows_errors(unassign), [filter_state, sort_state, browse.anchors], page_outs, api_name="unassign_clips"
        )


class ClipAssign:
    """Review's lead-only row: "Assign this clip to [person] / Unassign". The header (which names the assignee)
    is redrawn with the form's own `data-loaded`, so that assigning never makes an unsaved edit look saved."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Row(visible=False, elem_id="review-assign", elem_classes="cw-assign") as self.row:
            # custom values reach the handler, which checks the role and data.assignments the name (as on Browse)
            self.person = gr.Dropdown(
                [], label="Assign this clip to", elem_id="review-assign-to", allow_custom_value=True, min_width=160
            )
            self.assign_btn = gr.Button("Assign", elem_id="btn-assign-clip", size="sm")
            self.unassign_btn = gr.Button("Unassign", elem_id="btn-unassign-clip", size="sm", variant="secondary")

    def for_user(self, user) -> dict:
        if not user.can("lead"):
            return {self.row: gr.update(visible=False)}
        return {self.row: gr.update(visible=True), self.person: gr.update(choices=people(self.ctx.db()))}

    def wire(self, header, msg, clip_id, base, review_base) -> None:
        outs = [header, msg]

        def redraw(cid, base_id, token, note: str, request: gr.Request) -> dict:
            user = self.ctx.user(request)
            clip = clips.get(self.ctx.db(), cid)
            status = review_states.review_token_status(token) if token else clip.get("review_status")
            loaded = render.loaded_key(clip["id"], base_id, status)
            return {header: render.header(clip, user.name, user.role, loaded=loaded), msg: render.message(note, "ok")}

        def assign(cid, base_id, token, person, request: gr.Request):
            lead = self.ctx.require(request, "lead")
            if cid is None:
                return {msg: render.message("Open a clip first.", "error")}
            try:
                out = assignments.assign_clip(self.ctx.db(), cid, person, actor=lead.name, role=lead.role)
            except DataError as e:  # NotFound included
                return {msg: render.message(str(e), "error")}
            note = (
                f"Clip {int(cid)} is already {out['assignee']}'s."
                if out["unchanged"]
                else f"Clip {int(cid)} assigned to {out['assignee']}."
            )
            return redraw(cid, base_id, token, note, request)

        def unassign(cid, base_id, token, request: gr.Request):
            lead = self.ctx.require(request, "lead")
            if cid is None:
                return {msg: render.message("Open a clip first.", "error")}
            try:
                had = assignments.unassign_clip(self.ctx.db(), cid, actor=lead.name, role=lead.role)
            except DataError as e:  # NotFound included
                return {msg: render.message(str(e), "error")}
            note = f"Clip {int(cid)} taken back from {had}." if had else f"Clip {int(cid)} was not assigned."
            return redraw(cid, base_id, token, note, request)

        state = [clip_id, base, review_base]
        self.assign_btn.click(shows_errors(assign), [*state, self.person], outs, api_name="assign_clip")
        self.unassign_btn.click(shows_errors(unassign), state, outs, api_name="unassign_clip")
