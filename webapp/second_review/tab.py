"""Second review tab: a person answers the blind second reviews a lead sent them (data.quality.second_review).

Blind means the tab is given the clip's footage alone, as data.quality.second_review.task returns it: no caption, none
of the model's labels, nothing of the first review, never the clip row itself (its facet columns mirror the
current, reviewed caption). The form opens empty, so the answer is the person's own: shown the model's labels,
both reviewers would start from the same answer and their agreement would measure how often people keep it. The
person sets every label and approves (the labels describe the clip) or rejects (it cannot be labelled: broken or
wrong footage); the answer is stored as a second review and changes nothing of the clip (not its caption, not its
review status). The tab then opens their next one.

The form is Review's without the model (issue 45): the same keyboard pickers (webapp.picker: keys 1-7, option
numbers, the first letters, exact-match-first, "names no option / fits several"), `a` approves and `r` rejects (each
then opens the next), `n` opens the next one unanswered; at 1366x768 every label and Approve are on screen. Before,
its labels were mouse dropdowns that took the first option *containing* the typed text (`collision` and Enter stored
near_collision), so two reviewers who agreed read as disagreeing. With nothing waiting, nothing is actionable:
only the count shows.

The same person meets the clip elsewhere too: while their second review of it is pending, Review shows it
without its caption or review (`render.blind_header`, webapp.review.view) and Browse masks its tile (`masked`).
That keeps the first review out of sight, not out of reach: a person who filters Browse by a label value can
still infer it, so blindness protects the second opinion from being primed, not from being looked up on purpose.
"""

from __future__ import annotations

import gradio as gr

from data import taxonomy
from data.errors import DataError
from data.quality import second_review
from webapp import form_echo, render
from webapp.context import AppContext, shows_errors
from webapp.picker import label_picker
from webapp.quality import render as render_quality

LABELS = list(taxonomy.ENUMS)
BLIND_NOTE = "Caption and review hidden: you review this clip blind (Second review tab)."


def masked(row: dict) -> dict:
    """A Browse tile's row with what the current caption and its review say taken out (for its blind reviewer)."""
    hidden = dict.fromkeys(("scenario", "hazard_level", "weather", "lighting", "road_type", "assignee"))
    return {**row, **hidden, "review_status": "blind", "caption_preview": BLIND_NOTE}


HELP = (
    "You see the footage only: no caption and none of the model's or the first reviewer's labels, so that your "
    "answer is your own. Set every label as on Review (its key 1-7, the option's first letters or number, Enter; "
    "road users: shift+Enter adds one and stays), then **a** approves when they describe the clip, **r** rejects "
    "when it cannot be labelled (broken or wrong footage); **n** opens your next one without answering."
)


class SecondReviewTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        self.status = gr.HTML("", elem_id="second-status")
        self.header = gr.HTML("", elem_id="second-header")
        # shown only with a second review open: with none waiting nothing here can be acted on
        with gr.Row(equal_height=False, visible=False, elem_id="second-body", elem_classes="cw-review") as self.body:
            with gr.Column(scale=3, min_width=420):
                self.player = gr.HTML("", elem_id="second-player")
                self.filmstrip = gr.HTML("", elem_id="second-filmstrip")
            with gr.Column(scale=2, min_width=380):
                self.msg = gr.HTML("", elem_id="second-review-msg")
                with gr.Row(elem_classes="cw-actions"):
                    self.approve_btn = gr.Button(
                        "Approve + next (a)", elem_id="btn-second-approve", variant="primary", size="sm"
                    )
                    self.reject_btn = gr.Button(
                        "Reject + next (r)", elem_id="btn-second-reject", variant="stop", size="sm"
                    )
                    self.next_btn = gr.Button("Skip to my next (n)", elem_id="btn-second-next", size="sm")
                # Review's pickers, empty: keys 1-7 open them (webapp/picker.py says what Enter takes)
                with gr.Row(elem_classes="cw-labels"):
                    self.labels = {name: label_picker(name, i, scope="second") for i, name in enumerate(LABELS, 1)}
                gr.Markdown(HELP, elem_id="second-help")
        self.task = gr.State(None)  # the second review shown (its id)
        # the page's copy, sent last with an answer: its labels are for the task the page shows (webapp.form_echo)
        self.echo = {self.task: form_echo.copy_box("second-task")}

    @property
    def outputs(self) -> list:
        return [
            self.status,
            self.header,
            self.body,
            self.player,
            self.filmstrip,
            *self.labels.values(),
            self.msg,
            self.task,
            *self.echo.values(),
        ]

    def _status(self, name: str) -> str:
        n = second_review.pending_count(self.ctx.db(), name)
        words = (
            "No blind second review waits for you."
            if not n
            else f"{n:,} blind second review{' waits' if n == 1 else 's wait'} for you."
        )
        return render_quality.second_count(n, words)

    def view(self, task: dict | None, name: str, message: str = "", kind: str = "info") -> dict:
        """Every region for `task` (data.quality.second_review.task: the footage alone), or none for None (the count
        alone: nothing to act on); the labels always start empty."""
        out = {self.status: self._status(name), self.msg: render.message(message, kind)}
        out.update({comp: [] if n in taxonomy.MULTI else None for n, comp in self.labels.items()})
        if task is None:
            out.update(
                {
                    self.header: "",
                    self.player: "",
                    self.filmstrip: "",
                    self.task: None,
                    self.body: gr.update(visible=False),
                }
            )
            if message:  # what was done last stays readable above the count
                out[self.status] = render.message(message, kind) + out[self.status]
            return out
        out.update(
            {
                self.header: render_quality.second_header(task),
                self.player: render.player(task["clip"]),
                self.filmstrip: render.filmstrip(task["clip"]),
                self.task: task["id"],
                self.body: gr.update(visible=True),
            }
        )
        return out

    def show(self, task_id, request: gr.Request):
        """The tab shown: how many wait, and the one open (or the first, when none is)."""
        user = self.ctx.user(request)
        if task_id is not None:
            return {self.status: self._status(user.name)}
        return self.view(second_review.next_task(self.ctx.db(), user.name), user.name)

    def open_next(self, task_id, request: gr.Request):
        """The person's next pending second review after the one shown (wrapping around)."""
        user = self.ctx.user(request)
        after = int(task_id) if task_id not in (None, "") else None
        task = second_review.next_task(self.ctx.db(), user.name, after=after)
        return self.view(task, user.name)

    def answer(self, decision: str):
        def handler(request: gr.Request, task_id, *values):
            user = self.ctx.user(request)
            if task_id in (None, ""):
                return {self.msg: render.message("Open a second review first.", "error")}
            labels = {}
            for name, value in zip(LABELS, values):
                if name in taxonomy.MULTI:
                    labels[name] = list(value or [])
                elif not value:
                    key = LABELS.index(name) + 1
                    return {
                        self.msg: render.message(
                            f"Choose a value for {name.replace('_', ' ')} (key {key}), then answer again.", "error"
                        )
                    }
                else:
                    labels[name] = value
            db = self.ctx.db()
            try:
                done = second_review.answer(db, task_id, user.name, labels=labels, decision=decision)
            except DataError as e:
                return {self.msg: render.message(str(e), "error")}
            said = f"Your second review of clip {done['clip_id']} is saved ({decision})."
            task = second_review.next_task(db, user.name, after=done["id"])
            return self.view(task, user.name, said + ("" if task else " None is left."), "ok")

        handler.__name__ = f"second_review_{decision}"
        return handler

    def wire(self) -> None:
        outs = self.outputs
        self.next_btn.click(shows_errors(self.open_next), [self.task], outs, api_name="second_next")
        for decision, verb, btn in (("approved", "approve", self.approve_btn), ("rejected", "reject", self.reject_btn)):
            btn.click(
                shows_errors(self.answer(decision)),
                [self.task, *self.labels.values(), *self.echo.values()],
                outs,
                api_name=f"second_{verb}",
            )
