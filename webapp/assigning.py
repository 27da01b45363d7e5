"""The lead's assign panel on Browse: give the clips of the current filter (or its next N open ones) to a person,
take them back. data.assignments does the work (and audits it); the person's "next unreviewed" then serves
those clips first.

The panel is shown to leads only (on first paint), and every handler checks the lead role itself: an annotator
calling the endpoint through Gradio's API gets a refusal, not an assignment.
"""

from __future__ import annotations

import gradio as gr

from data import assignments, clips, users
from data.db import DataError
from webapp import render
from webapp.context import AppContext, shows_errors

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


def clips_n(n: int) -> str:
    return f"{n:,} clip" + ("" if n == 1 else "s")


def _limit(count) -> int | None:
    """The "how many" box: empty or 0 = the whole filter; anything else a whole number (checked in data/)."""
    if count in (None, ""):
        return None
    try:
        n = float(count)
    except (TypeError, ValueError):
        raise DataError("How many clips: a whole number (empty: the whole filter).") from None
    if n != int(n):
        raise DataError("How many clips: a whole number (empty: the whole filter).")
    return int(n) or None


class AssignPanel:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Row(visible=False, elem_id="assign-panel", elem_classes="cw-assign") as self.row:
            self.person = gr.Dropdown(
                [], label="Assign to", elem_id="assign-to", allow_custom_value=True, min_width=160, scale=2
            )
            self.count = gr.Number(
                label="How many (empty: the whole filter)", value=None, precision=0, minimum=0, elem_id="assign-count"
            )
            self.assign_btn = gr.Button("Assign this filter's clips", elem_id="btn-assign", size="sm")
            self.unassign_btn = gr.Button("Unassign them", elem_id="btn-unassign", size="sm", variant="secondary")
        self.msg = gr.HTML("", elem_id="assign-msg")

    def people(self) -> list[str]:
        return [u["name"] for u in users.list_users(self.ctx.db()) if not u["disabled"]]

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
                    descending=sort == "newest",
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
