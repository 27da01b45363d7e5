"""Review tab: watch one clip, edit its caption and labels, approve or reject, walk the filter.

Nothing typed is ever dropped (issue 10). Every way of leaving a clip -- j/k, approve/reject (which move on to
the next unreviewed clip of the filter), "next unreviewed", a Browse tile, the browser's Back (the URL carries
the clip, webapp/shortcuts.js turns Back into a navigation here) -- goes through a handler that receives the
form and saves it first when it differs from the stored version (`_autosave`). A save that cannot happen (a
conflict, a label missing) stops the navigation with a message, and the edit stays in the form. Switching tabs
keeps the form as it is; leaving the page with an unsaved edit asks first (beforeunload, shortcuts.js).

Saves and review decisions are optimistic: the caption version the form was loaded from (`base`) and the
review state it showed (`review_base`, data.captions.review_token) stay in gr.State; data.captions refuses a
save or decision based on a stale one with `Conflict`, which we show with who and when plus a Reload button.
Nothing is overwritten silently.

Blind mode: a clip the person has a pending blind second review of (data.samples) is shown without its caption,
labels, review, provenance and history, and with no clip in the form's state, so nothing here can save or decide
on it (`_blind`); they answer on the Second review tab (webapp.second_review).

Re-caption: any signed-in user may request a re-caption of the clip they are looking at (a 1-clip job with
the newest prompt). It never replaces a human or approved caption: the result arrives as a candidate
version they can adopt. Starting jobs over many clips stays a lead's action (Jobs tab).
"""

from __future__ import annotations

import gradio as gr

from data import assignments, captions, clips, jobs, limits, order as orders, prompts, samples, taxonomy
from data.errors import Conflict, DataError, NotFound
from data.job_params import JobParams
from webapp import render, second_review
from webapp.assigning import ClipAssign
from webapp.context import AppContext, shows_errors
from webapp.picker import label_picker
from webapp.review_form import LABELS, ReviewForm


class ReviewTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        self.header = gr.HTML(render.no_clip(), elem_id="review-header")
        # at 1366x768 the header, the player, the caption, the decision buttons and every label fit on one screen
        # (webapp/static/app.css): nothing in this block changes height from clip to clip
        with gr.Row(equal_height=False, elem_classes="cw-review"):
            with gr.Column(scale=3, min_width=420):
                self.player = gr.HTML("", elem_id="player")
                self.filmstrip = gr.HTML("", elem_id="filmstrip")
                with gr.Row(elem_classes="cw-navrow"):
                    self.prev_btn = gr.Button("◀ Previous (k)", elem_id="btn-prev", size="sm")
                    self.next_btn = gr.Button("Next (j) ▶", elem_id="btn-next", size="sm")
                    self.queue_btn = gr.Button("Next unreviewed (n)", elem_id="btn-next-unreviewed", size="sm")
            with gr.Column(scale=2, min_width=380):
                self.msg = gr.HTML("", elem_id="review-msg")
                self.reload_btn = gr.Button(
                    "Reload the current version", elem_id="btn-reload", visible=False, variant="secondary", size="sm"
                )
                # a fixed height: a long caption scrolls inside the box instead of pushing the buttons and labels down
                self.text = gr.Textbox(
                    label="Caption (c to edit, Esc to leave)", lines=7, max_lines=7, elem_id="caption-text"
                )
                with gr.Row(elem_classes="cw-actions"):
                    self.save_btn = gr.Button("Save (ctrl+s)", elem_id="btn-save", variant="primary", size="sm")
                    self.approve_btn = gr.Button("Approve + next (a)", elem_id="btn-approve", size="sm")
                    self.reject_btn = gr.Button("Reject + next (r)", elem_id="btn-reject", variant="stop", size="sm")
                # the labels: keys 1-7 open them (webapp/picker.py says what Enter takes)
                with gr.Row(elem_classes="cw-labels"):
                    self.labels = {name: label_picker(name, i) for i, name in enumerate(LABELS, 1)}
        with gr.Row():
            self.recaption_btn = gr.Button("Re-caption this clip", elem_id="btn-recaption", size="sm")
            self.adopt_choice = gr.Dropdown([], label="Version to adopt", elem_id="adopt-choice", min_width=160)
            self.adopt_btn = gr.Button("Adopt version", elem_id="btn-adopt", size="sm")
        self.assign = ClipAssign(self.ctx)  # leads only: shown on first paint (webapp/app.py)
        self.assign.render()
        with gr.Accordion("Provenance", open=True):
            self.provenance = gr.HTML("", elem_id="provenance")
        with gr.Accordion("Version history", open=True):
            self.history = gr.HTML("", elem_id="history")
            with gr.Row():  # the history comes a page at a time (limits.HISTORY_PAGE): older ones on demand
                self.newest_btn = gr.Button("Newest versions", visible=False, elem_id="btn-history-newest", size="sm")
                self.older_btn = gr.Button("Older versions", visible=False, elem_id="btn-history-older", size="sm")
        # navigation asked for by the page script (browser Back/Forward): a clip id, then a click
        self.nav_target = gr.Textbox("", visible="hidden", elem_id="nav-target")
        self.nav_btn = gr.Button("go", visible="hidden", elem_id="btn-nav")
        self.clip_id = gr.State(None)
        self.base = gr.State(None)
        self.review_base = gr.State(None)
        self.history_before = gr.State(None)  # the oldest version shown: "Older versions" starts below it

    # -- what every action returns -------------------------------------------------------------------
    def view_outputs(self) -> list:
        return [
            self.header,
            self.player,
            self.filmstrip,
            self.text,
            *self.labels.values(),
            self.provenance,
            self.history,
            self.adopt_choice,
            self.msg,
            self.reload_btn,
            self.clip_id,
            self.base,
            self.review_base,
            *self.history_outputs(),
        ]

    def history_outputs(self) -> list:
        return [self.history, self.adopt_choice, self.older_btn, self.newest_btn, self.history_before]

    def _history(self, db, clip_id: int, before: int | None = None) -> dict:
        """One page of the clip's history, the adopt choices from it, and the page buttons."""
        page = captions.history_page(db, clip_id, before=before)
        html, shown = render.history_page(page)
        older = page["older"] + len(page["versions"]) - len(shown)
        return {
            self.history: html,
            self.adopt_choice: gr.update(
                choices=[
                    (f"v{v['version']} ({v['source']}, {v['author']})", v["id"]) for v in shown if not v["current"]
                ],
                value=None,
            ),
            self.older_btn: gr.update(visible=bool(older)),
            self.newest_btn: gr.update(visible=bool(page["newer"])),
            self.history_before: shown[-1]["version"] if shown else None,
        }

    def _rate(self):
        """The save rate limit: per person, so none with login off (one person, on this machine)."""
        return limits.SAVE_RATE if self.ctx.settings.auth_required else None

    def older(self, clip_id, before, request: gr.Request):
        """The next page of older versions."""
        self.ctx.user(request)
        if clip_id is None or before is None:
            return gr.skip()
        return self._history(self.ctx.db(), int(clip_id), before=int(before))

    def newest(self, clip_id, request: gr.Request):
        """Back to the newest versions."""
        self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        return self._history(self.ctx.db(), int(clip_id))

    def form_inputs(self) -> list:
        """What every handler that may leave the clip receives: enough to save the form first."""
        return [self.clip_id, self.base, self.review_base, self.text, *self.labels.values()]

    def view(
        self,
        clip_id: int,
        request: gr.Request,
        *,
        message: str = "",
        kind: str = "info",
        keep_form: bool = False,
        keep_media: bool = False,
    ) -> dict:
        """All review components for `clip_id` (the form is refilled unless keep_form; the player and filmstrip
        are left alone with keep_media, so that saving or approving does not reload the video being watched)."""
        user = self.ctx.user(request)
        db = self.ctx.db()
        try:
            clip = clips.get(db, int(clip_id))
        except (NotFound, ValueError, TypeError, OverflowError):
            raise gr.Error(f"There is no clip {clip_id!s:.40}.") from None
        cap = clip["caption"]
        out = {
            self.header: render.header(clip, user.name, user.role),
            self.provenance: render.provenance(cap, captions.lineage(db, cap)),
            **self._history(db, clip["id"]),
            self.msg: render.message(message, kind),
            self.reload_btn: gr.update(visible=False),
            self.clip_id: clip["id"],
            self.base: clip["current_caption_id"],
            self.review_base: captions.review_token(clip),
        }
        if not keep_media:
            out[self.player] = render.player(clip)
            out[self.filmstrip] = render.filmstrip(clip)
        if not keep_form:
            labels = (cap or {}).get("labels") or {}
            out[self.text] = (cap or {}).get("text", "")
            for name, comp in self.labels.items():
                out[comp] = labels.get(name, [] if name in taxonomy.MULTI else None)
        if samples.is_blind(db, clip["id"], user.name):
            out.update(self._blind(clip))
        return out

    def _blind(self, clip: dict) -> dict:
        """Blind mode: the person has a pending blind second review of this clip (data.samples), so the view hides
        its caption, labels, review, assignee, provenance and history, and holds no clip in the form's state, so
        that no save or decision here can touch it (they answer on the Second review tab)."""
        return {
            self.header: second_review.blind_header(clip),
            self.provenance: "",
            self.history: "",
            self.adopt_choice: gr.update(choices=[], value=None),
            self.older_btn: gr.update(visible=False),
            self.newest_btn: gr.update(visible=False),
            self.history_before: None,
            self.text: "",
            **{comp: [] if name in taxonomy.MULTI else None for name, comp in self.labels.items()},
            self.clip_id: None,
            self.base: None,
            self.review_base: None,
        }

    def open_link(self, raw: str, request: gr.Request) -> dict:
        """The Review view for a link's `?clip=RAW`: that clip, or a header saying there is no such clip (an id
        not in the library, or text that is not an id) with an empty form."""
        if raw.isascii() and raw.isdigit():
            try:
                return self.view(int(raw), request)
            except gr.Error:
                pass
        return {self.header: render.no_clip(raw), self.msg: ""}

    def _refused(self, clip_id, e: DataError, request: gr.Request, *, stay: str = "") -> dict:
        """What the view shows when data/ refuses an action: a conflict shows who changed what and offers a
        reload (the form keeps the edit); any other refusal (a label missing or out of the taxonomy, a limit)
        its message, after `stay` (why we are still on this clip)."""
        if isinstance(e, Conflict):
            return self._conflict(clip_id, e, request)
        return {self.msg: render.message(stay + str(e), "error")}

    def _conflict(self, clip_id: int, e: Conflict, request: gr.Request) -> dict:
        out = self.view(clip_id, request, keep_form=True, keep_media=True)
        out[self.base] = gr.skip()  # keep the stale bases: the user must reload to adopt the new version
        out[self.review_base] = gr.skip()
        out[self.header] = gr.skip()  # the page script reads "unsaved" from the header: it still is
        out[self.msg] = render.message(str(e), "conflict")
        out[self.reload_btn] = gr.update(visible=True)
        return out

    def _autosave(self, form: ReviewForm, user) -> tuple[int | None, dict | None]:
        """Save the form if it differs from the version it was loaded from; returns (the new base, the saved
        version or None). Raises DataError (a Conflict, labels that do not fit): the caller stays on the clip and
        shows why (`_refused`)."""
        if form.clip_id is None:
            return form.base, None
        db = self.ctx.db()
        if not form.differs_from(captions.get(db, form.base) if form.base is not None else None):
            return form.base, None
        cap = self._save_form(form, user)
        return cap["id"], cap

    def _save_form(self, form: ReviewForm, user) -> dict:
        """The form as a new human version (data.captions.save_human: Conflict, TooFast, DataError)."""
        return captions.save_human(
            self.ctx.db(),
            int(form.clip_id),
            text=form.text,
            labels=form.labels(),
            author=user.name,
            base_caption_id=form.base,
            rate=self._rate(),
        )

    def _leave(self, form: ReviewForm, request: gr.Request, go) -> dict:
        """Save the form if needed, then `go(saved_message)` -> the view to show; on a failed save stay here."""
        user = self.ctx.user(request)
        try:
            _, saved = self._autosave(form, user)
        except DataError as e:
            return self._refused(
                form.clip_id, e, request, stay="Your edit is not saved yet, so you stay on this clip: "
            )
        note = f"Your edit was saved as version {saved['version']} of clip {int(form.clip_id)}. " if saved else ""
        return go(note)

    def next_unreviewed_id(self, fdict: dict, sort: str, after: int | None, user) -> int | None:
        """The review queue: the next unreviewed clip of the filter after `after` in the grid's order (`sort`,
        an order name), the clips assigned to `user` first, then unassigned ones (data.assignments), wrapping
        around."""
        f = clips.Filter.from_dict(fdict or {})
        return assignments.next_in_queue(self.ctx.db(), f, user.name, after=after, order=sort)

    # -- handlers: those that receive the form take (request, *values), see webapp.review_form ----------------
    def save(self, request: gr.Request, *values):
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None:
            raise gr.Error("Open a clip first.")
        try:
            cap = self._save_form(form, user)
        except DataError as e:
            return self._refused(form.clip_id, e, request)
        return self.view(
            form.clip_id, request, message=f"Saved as version {cap['version']}.", kind="ok", keep_media=True
        )

    def decide(self, status: str):
        """Approve / reject what the form shows (saving an edit first), then move to the next unreviewed
        clip of the filter (approve-and-next: one key per clip)."""

        def handler(request: gr.Request, *values):
            form, (fdict, sort) = ReviewForm.split(values)
            user = self.ctx.user(request)
            if form.clip_id is None:
                raise gr.Error("Open a clip first.")
            clip_id = int(form.clip_id)
            try:
                new_base, saved = self._autosave(form, user)
                captions.set_review(
                    self.ctx.db(),
                    clip_id,
                    status=status,
                    user=user.name,
                    base_caption_id=new_base,
                    base_review=None if saved else form.review_base,
                )
            except DataError as e:
                return self._refused(clip_id, e, request)
            done = (
                f"Saved your edit as version {saved['version']} and marked" if saved else "Marked"
            ) + f" clip {clip_id} {status}."
            target = self.next_unreviewed_id(fdict, sort, clip_id, user)
            if target is None:
                return self.view(
                    clip_id,
                    request,
                    message=done + " No unreviewed clips left in this filter.",
                    kind="ok",
                    keep_media=True,
                )
            return self.view(target, request, message=done, kind="ok")

        handler.__name__ = f"review_{status}"
        return handler

    def adopt(self, clip_id, base, caption_id, request: gr.Request):
        user = self.ctx.user(request)
        if clip_id is None or caption_id in (None, ""):
            return {self.msg: render.message("Choose a version to adopt.", "error")}
        try:
            cap = captions.adopt(
                self.ctx.db(),
                int(clip_id),
                caption_id=int(caption_id),
                author=user.name,
                base_caption_id=base,
                rate=self._rate(),
            )
        except DataError as e:
            return self._refused(clip_id, e, request)
        return self.view(
            clip_id, request, message=f"Adopted: now version {cap['version']}.", kind="ok", keep_media=True
        )

    def recaption(self, clip_id, request: gr.Request):
        user = self.ctx.user(request)
        if clip_id is None:
            raise gr.Error("Open a clip first.")
        db = self.ctx.db()
        try:
            prompt = prompts.latest(db)
            job_id = jobs.create_recaption(
                db,
                clip_id,
                user=user.name,
                role=user.role,
                quota=self.ctx.settings.job_quota,
                prompt_id=prompt["id"],
                params=JobParams.resolve(self.ctx.settings),
            )
        except DataError as e:
            return render.message(str(e), "error")
        return render.message(
            f"Re-caption requested: job {job_id}. The result arrives as a new version "
            "(a candidate if a human caption is current).",
            "ok",
        )

    def reload(self, clip_id, request: gr.Request):
        if clip_id is None:
            return gr.skip()
        return self.view(clip_id, request, message="Reloaded the current version.")

    def step(self, direction: int):
        def handler(request: gr.Request, *values):
            form, (fdict, sort) = ReviewForm.split(values)
            self.ctx.user(request)
            if form.clip_id is None:
                return gr.skip()
            clip_id = int(form.clip_id)

            def go(note):
                prev_id, next_id = clips.neighbours(
                    self.ctx.db(), clips.Filter.from_dict(fdict), clip_id, order=sort or orders.DEFAULT
                )
                target = next_id if direction > 0 else prev_id
                if target is None:
                    return {
                        **(self.view(clip_id, request, keep_media=True) if note else {}),
                        self.msg: render.message(note + "No more clips in this filter in that direction.", "info"),
                    }
                return self.view(target, request, message=note, kind="ok" if note else "info")

            return self._leave(form, request, go)

        handler.__name__ = "next_clip" if direction > 0 else "previous_clip"
        return handler

    def queue_next(self, request: gr.Request, *values):
        """The review queue: the next unreviewed clip of the Browse filter, yours first (saving the form first)."""
        form, (fdict, sort) = ReviewForm.split(values)
        user = self.ctx.user(request)

        def go(note):
            after = int(form.clip_id) if form.clip_id is not None else None
            target = self.next_unreviewed_id(fdict, sort, after, user)
            if target is None:
                return {self.msg: render.message(note + "No unreviewed clips in this filter.", "info")}
            return self.view(target, request, message=note, kind="ok" if note else "info")

        return self._leave(form, request, go)

    def goto(self, request: gr.Request, target, *values):
        """Open clip `target` (browser Back/Forward, a Browse tile), saving the form first."""
        form, _ = ReviewForm.split(values)
        self.ctx.user(request)
        target = str(target or "").strip()
        if not target.isdigit() or (form.clip_id is not None and int(target) == int(form.clip_id)):
            return gr.skip()
        return self._leave(
            form, request, lambda note: self.view(int(target), request, message=note, kind="ok" if note else "info")
        )

    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        outs = self.view_outputs()
        form = self.form_inputs()
        walk = form + [filter_state, sort_state]  # the form, then where to go next
        nav = dict(show_progress="hidden")
        self.save_btn.click(shows_errors(self.save), form, outs, api_name="save_caption")
        self.approve_btn.click(shows_errors(self.decide("approved")), walk, outs, api_name="approve", **nav)
        self.reject_btn.click(shows_errors(self.decide("rejected")), walk, outs, api_name="reject", **nav)
        self.adopt_btn.click(
            shows_errors(self.adopt), [self.clip_id, self.base, self.adopt_choice], outs, api_name="adopt"
        )
        self.recaption_btn.click(shows_errors(self.recaption), [self.clip_id], [self.msg], api_name="recaption")
        self.reload_btn.click(shows_errors(self.reload), [self.clip_id], outs, api_name="reload_clip")
        self.next_btn.click(shows_errors(self.step(+1)), walk, outs, api_name="next_clip", **nav)
        self.prev_btn.click(shows_errors(self.step(-1)), walk, outs, api_name="previous_clip", **nav)
        self.queue_btn.click(shows_errors(self.queue_next), walk, outs, api_name="next_unreviewed", **nav)
        self.nav_btn.click(shows_errors(self.goto), [self.nav_target] + form, outs, api_name="goto_clip", **nav)
        self.older_btn.click(
            shows_errors(self.older),
            [self.clip_id, self.history_before],
            self.history_outputs(),
            api_name="history_older",
        )
        self.newest_btn.click(
            shows_errors(self.newest), [self.clip_id], self.history_outputs(), api_name="history_newest"
        )
        self.assign.wire(self.header, self.msg, self.clip_id, self.base, self.review_base)
