"""Review tab: watch one clip, edit its caption and labels, approve or reject, walk the filter.

Nothing typed is ever dropped (issue 10). Every way of leaving a clip -- j/k, approve/reject (which move on to
the next unreviewed clip of the filter), "next unreviewed", a Browse tile, the browser's Back (the URL carries
the clip, webapp/static/shortcuts.js turns Back into a navigation here) -- goes through a handler that receives the
form and saves it first when it differs from the stored version (`_autosave`). A save that cannot happen (a
conflict, a label missing) stops the navigation with a message, and the edit stays in the form. Switching tabs
keeps the form as it is; leaving the page with an unsaved edit asks first (beforeunload, shortcuts.js).

Saves and review decisions are optimistic: the caption version the form was loaded from (`base`) and the
review state it showed (`review_base`, data.captions.review_token) stay in gr.State; data.captions refuses a
save or decision based on a stale one with `Conflict`. Nothing is overwritten silently, and the person's text
is never thrown away: a caption conflict shows their version beside yours with a word diff and offers "keep
mine" (yours saved as a new version on top of theirs, knowingly), "take theirs" and "edit merged" (your text
stays in the box, their version becomes the base); a review-state conflict offers a reload (there is no text
to lose: a decision with an edit saves the edit first).

The shared queue (data.review_queue): the clip a person is served by n (or approve/reject-and-next, or flag-
broken-and-next) or opens is leased to them; the others' n skips it, and those who open it anyway see who is on
it in the header. Every view of a clip renews the lease; the page script renews it on activity and the lease
runs out on its own after `review_lease_seconds` without any.

Drafts (data.drafts): the page script (webapp/static/drafts.js) writes the form to /drafts/{clip} as the person types,
and keeps it in the browser if the session has ended. When a person opens a clip they left an unsaved edit on,
the view offers it back ("restore / discard"); restoring an edit whose base someone replaced since is the
conflict view. Nothing becomes a caption version until the person saves (or leaves the clip, which saves).

Broken clips: a person flags a clip whose video cannot be reviewed (with a reason; it then counts apart from
rejections and leaves the queue); a lead can clear the flag. Approve and reject on such clips, and on clips that
failed at ingest, say what to do instead (data.captions).

Structure, for whoever adds a review mode: `render` builds the regions, `wire` connects them; `view` is the one
function that fills every region for a clip (handlers add to or override what it returns), and
`view_outputs`/`form_inputs` are the lists every handler shares. Handlers that may leave a clip go through
`_leave` (save first) and the queue through `_take_next` (pick + lease).

Blind mode: a clip the person has a pending blind second review of (data.quality.second_review) is shown without its
caption, labels, review, provenance and history, and with no clip in the form's state, so nothing here can save or
decide on it (`_blind`); they answer on the Second review tab (webapp.second_review_tab).

Re-caption: any signed-in user may request a re-caption of the clip they are looking at (a 1-clip job with
the newest prompt). It never replaces a human or approved caption: the result arrives as a candidate
version they can adopt. Starting jobs over many clips stays a lead's action (Jobs tab).
"""

from __future__ import annotations

import dataclasses
import sqlite3

import gradio as gr

from data import (
    assignments,
    caption_history,
    captions,
    clips,
    drafts,
    jobs,
    limits,
    order as orders,
    prompts,
    review_queue,
    review_states,
    taxonomy,
)
from data.errors import Conflict, DataError, NotFound
from data.job_params import JobParams
from data.quality import second_review
from webapp import failures, render, second_review_tab
from webapp.assigning import ClipAssign
from webapp.context import AppContext, shows_errors
from webapp.picker import label_picker
from webapp.review_form import LABELS, ReviewForm

# opening a clip takes its review lease, a write: it waits this long for another program's write lock, then
# opens the clip anyway (without the lease) rather than keep the person waiting (issue 21, class 7)
LEASE_WAIT_S = 2.0
# the queue is empty for this person: clips others are on are not theirs to take (data.review_queue), and clips
# without a caption have nothing to review yet (data.assignments.awaiting_caption says how many wait for one)
NONE_LEFT = "No unreviewed clips with a caption left in this filter that nobody else is on."
CONFLICT_NEXT = (
    " Your edit is kept: compare the two below, then keep yours, take theirs, or edit yours on top of theirs."
)


class ReviewTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.lease_ttl = ctx.settings.review_lease_seconds

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
                # an unsaved edit left on this clip (data.drafts), offered back when the person returns to it
                with gr.Row(visible=False, elem_id="draft-offer", elem_classes="cw-offer") as self.offer_row:
                    self.offer_note = gr.HTML("", elem_id="draft-offer-note", padding=False)
                    self.restore_btn = gr.Button(
                        "Restore", elem_id="btn-draft-restore", size="sm", variant="primary", scale=0, min_width=90
                    )
                    self.discard_btn = gr.Button(
                        "Discard", elem_id="btn-draft-discard", size="sm", scale=0, min_width=90
                    )
                # a caption conflict: theirs beside yours, and the three ways out
                with gr.Column(visible=False, elem_id="conflict", elem_classes="cw-conflict-box") as self.conflict_box:
                    self.conflict_view = gr.HTML("", elem_id="conflict-diff")
                    with gr.Row(elem_classes="cw-actions"):
                        self.keep_mine_btn = gr.Button(
                            "Keep mine", elem_id="btn-keep-mine", size="sm", variant="primary"
                        )
                        self.take_theirs_btn = gr.Button("Take theirs", elem_id="btn-take-theirs", size="sm")
                        self.edit_merged_btn = gr.Button("Edit merged", elem_id="btn-edit-merged", size="sm")
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
        # the video itself is bad although ingest passed: flag it (counted apart from rejections), then the next clip
        with gr.Row(elem_id="broken-row", elem_classes="cw-broken-row"):
            self.broken_reason = gr.Textbox(
                label="Video broken? Say why (b), then Enter",
                placeholder="e.g. black frames only, does not play, another clip's footage",
                elem_id="broken-reason",
                scale=4,
                max_lines=1,
            )
            self.broken_btn = gr.Button("Flag as broken + next", elem_id="btn-broken", size="sm", scale=1)
            self.unbreak_btn = gr.Button(
                "Clear the broken flag", elem_id="btn-clear-broken", size="sm", visible=False, scale=1
            )
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
        # the page script pushed drafts kept in the browser (after a login): offer the open clip's, if any
        self.draft_check_btn = gr.Button("drafts", visible="hidden", elem_id="btn-draft-check")
        self.clip_id = gr.State(None)
        self.base = gr.State(None)
        self.review_base = gr.State(None)
        self.history_before = gr.State(None)  # the oldest version shown: "Older versions" starts below it
        self.theirs = gr.State(None)  # the caption version a conflict showed (what "keep mine" saves on top of)

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
            self.offer_row,
            self.offer_note,
            self.conflict_box,
            self.conflict_view,
            self.unbreak_btn,
            self.clip_id,
            self.base,
            self.review_base,
            self.theirs,
            *self.history_outputs(),
        ]

    def history_outputs(self) -> list:
        return [self.history, self.adopt_choice, self.older_btn, self.newest_btn, self.history_before]

    def _history(self, db, clip_id: int, before: int | None = None) -> dict:
        """One page of the clip's history, the adopt choices from it, and the page buttons."""
        page = caption_history.history_page(db, clip_id, before=before)
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
        are left alone with keep_media, so that saving or approving does not reload the video being watched).

        keep_form is for every answer that stays on the clip with the form as the person sent it (a save, a
        decision with no next clip, a flag cleared): the answer then carries no text and no label, so what was
        typed after the request left is still there when it arrives (issue 26: a save's answer reset a fix typed
        within 0.3 s of ctrl+s), and the header says so (`kept`) for the page script."""
        user = self.ctx.user(request)
        db = self.ctx.db()
        try:
            clip = clips.get(db, int(clip_id))
        except (NotFound, ValueError, TypeError, OverflowError):
            raise gr.Error(f"There is no clip {clip_id!s:.40}.") from None
        cap = clip["caption"]
        try:  # opening a clip is a read: it does not wait long for a write lock another program holds
            holder = review_queue.visit(db, clip["id"], user.name, ttl=self.lease_ttl, wait=LEASE_WAIT_S)
        except sqlite3.OperationalError as e:
            # the lease is a write, the view a read: a database that takes no writes still shows the clip
            known = failures.describe(e)
            if known not in (failures.BUSY, failures.FULL):
                raise
            holder = review_queue.holder(db, clip["id"])
            holder = None if holder == user.name else holder  # their own lease from before: nobody else's
            why, until = (
                ("The database is busy", "the database is free")
                if known is failures.BUSY
                else ("The server's disk is full", "space is freed (tell whoever runs the workbench)")
            )
            note = (
                f"{why}: this clip is not marked as yours yet, so a colleague's n may serve it too. "
                f"Saving works once {until}."
            )
            message = " ".join(filter(None, [message, note]))
            kind = "conflict"
        out = {
            self.header: render.header(clip, user.name, user.role, holder=holder, kept=keep_form),
            self.provenance: render.provenance(cap, caption_history.lineage(db, cap)),
            **self._history(db, clip["id"]),
            self.msg: render.message(message, kind),
            self.reload_btn: gr.update(visible=False),
            self.conflict_box: gr.update(visible=False),
            self.unbreak_btn: gr.update(visible=clip["review_status"] == "broken" and user.can("lead")),
            self.clip_id: clip["id"],
            self.base: clip["current_caption_id"],
            self.review_base: review_states.review_token(clip),
            self.theirs: None,
            **self._offer(db, user, clip, show=not keep_form),
        }
        if not keep_media:
            out[self.player] = render.player(clip)
            out[self.filmstrip] = render.filmstrip(clip)
        if not keep_form:
            out.update(self._fill(cap))
        if second_review.is_blind(db, clip["id"], user.name):
            out.update(self._blind(clip))
        return out

    def _blind(self, clip: dict) -> dict:
        """Blind mode: the person has a pending blind second review of this clip (data.quality.second_review), so the
        view hides its caption, labels, review, assignee, provenance and history, and holds no clip in the form's
        state, so that no save or decision here can touch it (they answer on the Second review tab)."""
        return {
            self.header: second_review_tab.blind_header(clip),
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
            self.theirs: None,
            self.offer_row: gr.update(visible=False),
            self.offer_note: "",
            self.conflict_box: gr.update(visible=False),
            self.unbreak_btn: gr.update(visible=False),
        }

    def _fill(self, source: dict | None) -> dict:
        """The form's text and labels from a caption version or a draft (None: empty)."""
        labels = (source or {}).get("labels") or {}
        out = {self.text: (source or {}).get("text", "")}
        for name, comp in self.labels.items():
            value = labels.get(name)
            out[comp] = (list(value) if value else []) if name in taxonomy.MULTI else (value or None)
        return out

    def _offer(self, db, user, clip: dict, *, show: bool = True) -> dict:
        """The draft offer for `clip`: shown when `user` left an unsaved edit on it that differs from the current
        caption (and the form is being filled from the stored version: `show`)."""
        draft = drafts.get(db, user.name, clip["id"]) if show else None
        cap = clip.get("caption") if "caption" in clip else captions.get(db, clip["current_caption_id"])
        if draft is None or drafts.same_as(draft, cap):
            return {self.offer_row: gr.update(visible=False), self.offer_note: ""}
        stale = draft["base_caption_id"] != clip["current_caption_id"]
        return {self.offer_row: gr.update(visible=True), self.offer_note: render.draft_offer(draft, cap, stale=stale)}

    def open_link(self, raw: str, request: gr.Request) -> dict:
        """The Review view for a link's `?clip=RAW`: that clip, or a header saying there is no such clip (an id
        not in the library, or text that is not an id) with an empty form."""
        if raw.isascii() and raw.isdigit():
            try:
                return self.view(int(raw), request)
            except gr.Error:
                pass
        return {self.header: render.no_clip(raw), self.msg: ""}

    def _refused(self, clip_id, e: DataError, request: gr.Request, *, stay: str = "", form=None) -> dict:
        """What the view shows when data/ refuses an action: a conflict shows who changed what (with `form`, the
        person's edit beside their version); any other refusal (a label missing or out of the taxonomy, a limit,
        a clip nobody can review) its message, after `stay` (why we are still on this clip)."""
        if isinstance(e, Conflict):
            return self._conflict(clip_id, e, request, form)
        return {self.msg: render.message(stay + str(e), "error")}

    def _conflict(self, clip_id: int, e: Conflict, request: gr.Request, form=None) -> dict:
        """The conflict view; the form keeps the person's edit and its stale bases (a plain save would conflict
        again). A caption conflict with the form at hand shows theirs beside yours and the three ways out; a
        review-state conflict (or one without the form) offers a reload."""
        out = self.view(clip_id, request, keep_form=True, keep_media=True)
        out[self.base] = gr.skip()
        out[self.review_base] = gr.skip()
        out[self.header] = gr.skip()  # the page script reads "unsaved" from the header: it still is
        theirs = e.current if e.current.get("text") is not None else None
        if theirs is None or form is None:
            reload = " Reload to see their version." if theirs else ""
            out[self.msg] = render.message(str(e) + reload, "conflict")
            out[self.reload_btn] = gr.update(visible=True)
            return out
        mine = form.draft_labels()
        base = captions.get(self.ctx.db(), int(form.base)) if form.base is not None else None
        out[self.msg] = render.message(str(e) + CONFLICT_NEXT, "conflict")
        out[self.conflict_view] = render.conflict(theirs, form.text or "", mine, base=base)
        out[self.conflict_box] = gr.update(visible=True)
        out[self.theirs] = theirs["id"]
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
                form.clip_id, e, request, stay="Your edit is not saved yet, so you stay on this clip: ", form=form
            )
        note = f"Your edit was saved as version {saved['version']} of clip {int(form.clip_id)}. " if saved else ""
        return go(note)

    def _take_next(self, fdict: dict, sort: str, after: int | None, user) -> int | None:
        """The review queue: the next unreviewed clip of the filter after `after` in the grid's order (`sort`,
        an order name), the clips assigned to `user` first, then unassigned ones, that nobody else is on; leased
        to `user` in the same transaction (data.review_queue)."""
        f = clips.Filter.from_dict(fdict or {})
        return review_queue.take_next(self.ctx.db(), f, user.name, ttl=self.lease_ttl, after=after, order=sort)

    def _none_left(self, fdict: dict, user) -> str:
        """What an empty queue says: none left, and how many clips of the filter wait for a caption."""
        n, exact = assignments.awaiting_caption(self.ctx.db(), clips.Filter.from_dict(fdict or {}), user.name)
        if not n:
            return NONE_LEFT
        count = f"{n:,}{'' if exact else '+'}"
        who = "start one on the Jobs tab" if user.can("lead") else "a lead starts one on the Jobs tab"
        return (
            f"{NONE_LEFT} {count} clip{'s' if n != 1 else ''} of it await captioning: they join the queue once a "
            f"captioning job has written their captions ({who})."
        )

    def _then_next(self, clip_id: int, done: str, fdict: dict, sort: str, user, request: gr.Request) -> dict:
        """After a decision on `clip_id`: the next clip of the queue with `done` said, or this clip if none is left."""
        target = self._take_next(fdict, sort, clip_id, user)
        if target is None:
            none = self._none_left(fdict, user)
            return self.view(clip_id, request, message=f"{done} {none}", kind="ok", keep_form=True, keep_media=True)
        return self.view(target, request, message=done, kind="ok")

    # -- handlers: those that receive the form take (request, *values), see webapp.review_form ----------------
    def save(self, request: gr.Request, *values):
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None:
            raise gr.Error("Open a clip first.")
        unchanged = self._nothing_to_save(form)
        if unchanged is not None:
            return unchanged
        try:
            cap = self._save_form(form, user)
        except DataError as e:
            return self._refused(form.clip_id, e, request, form=form)
        return self.view(
            form.clip_id,
            request,
            message=f"Saved as version {cap['version']}.",
            kind="ok",
            keep_form=True,
            keep_media=True,
        )

    def _nothing_to_save(self, form: ReviewForm) -> dict | None:
        """The answer to a save of a form that is the version it was loaded from (None: there is something to
        save): no version is written (a version identical to the one before says nothing, and 22 of one clip's
        48 were), and the message says so, and whether someone saved another version since."""
        db = self.ctx.db()
        base = captions.get(db, int(form.base)) if form.base is not None else None
        if form.differs_from(base):
            return None
        if base is None:
            return {self.msg: render.message("Nothing to save: write a caption first.", "info")}
        note = f"Nothing to save: the caption and labels are those of version {base['version']}."
        cur = clips.get(db, int(form.clip_id))["caption"]
        if cur is not None and cur["id"] != base["id"]:
            note += f" {cur['author']} saved version {cur['version']} since: reload to see it."
            return {self.msg: render.message(note, "info"), self.reload_btn: gr.update(visible=True)}
        return {self.msg: render.message(note, "info")}

    def _decide_and_next(self, request: gr.Request, form: ReviewForm, fdict: dict, sort: str, act) -> dict:
        """A decision on the clip the form shows: save an edit first, then `act(clip_id, user, base, review_base)`
        (data/ raises DataError to refuse it; it returns what was done, as "marked clip 3 approved"), then the next
        clip of the queue. A refusal, or a conflict, keeps the person on the clip with their edit."""
        user = self.ctx.user(request)
        if form.clip_id is None:
            raise gr.Error("Open a clip first.")
        clip_id = int(form.clip_id)
        try:
            new_base, saved = self._autosave(form, user)
            did = act(clip_id, user, new_base, None if saved else form.review_base)
        except DataError as e:
            return self._refused(clip_id, e, request, form=form)
        done = (f"Saved your edit as version {saved['version']} and " if saved else "") + did + "."
        return self._then_next(clip_id, done[0].upper() + done[1:], fdict, sort, user, request)

    def decide(self, status: str):
        """Approve / reject what the form shows (saving an edit first), then move to the next unreviewed
        clip of the filter (approve-and-next: one key per clip)."""

        def act(clip_id, user, base, review_base) -> str:
            review_states.set_review(
                self.ctx.db(), clip_id, status=status, user=user.name, base_caption_id=base, base_review=review_base
            )
            return f"marked clip {clip_id} {status}"

        def handler(request: gr.Request, *values):
            form, (fdict, sort) = ReviewForm.split(values)
            return self._decide_and_next(request, form, fdict, sort, act)

        handler.__name__ = f"review_{status}"
        return handler

    def adopt(self, clip_id, base, caption_id, request: gr.Request):
        user = self.ctx.user(request)
        if clip_id is None or caption_id in (None, ""):
            return {self.msg: render.message("Choose a version to adopt.", "error")}
        db = self.ctx.db()
        chosen, current = captions.get(db, int(caption_id)), clips.get(db, int(clip_id))["caption"]
        if chosen and current and chosen["clip_id"] == int(clip_id) and base == current["id"]:
            if not ReviewForm.of(chosen).differs_from(current):
                note = (
                    f"Nothing to adopt: version {chosen['version']} has the caption and labels of the current "
                    f"version {current['version']}."
                )
                return {self.msg: render.message(note, "info")}
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
                fleet=self.ctx.job_fleet,
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
                        **(self.view(clip_id, request, keep_form=True, keep_media=True) if note else {}),
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
            target = self._take_next(fdict, sort, after, user)
            if target is None:
                return {self.msg: render.message(note + self._none_left(fdict, user), "info")}
            return self.view(target, request, message=note, kind="ok" if note else "info")

        return self._leave(form, request, go)

    def goto(self, request: gr.Request, target, *values) -> dict:
        """Open clip `target` (browser Back/Forward, a Browse tile), saving the form first. Always a dict keyed by
        components, whatever the path (the Browse tile adds the tab to it): the clip already open changes
        nothing."""
        form, _ = ReviewForm.split(values)
        self.ctx.user(request)
        target = str(target or "").strip()
        if not target.isdigit() or (form.clip_id is not None and int(target) == int(form.clip_id)):
            return {self.msg: gr.skip()}
        return self._leave(
            form, request, lambda note: self.view(int(target), request, message=note, kind="ok" if note else "info")
        )

    # -- drafts: an unsaved edit left on a clip, offered back (data.drafts) -------------------------------------
    def restore_draft(self, clip_id, request: gr.Request):
        """Put the person's unsaved edit of this clip back in the form. If someone saved another version since
        the edit was started, the form gets the edit and the conflict view shows theirs beside it."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        db = self.ctx.db()
        draft = drafts.get(db, user.name, int(clip_id))
        if draft is None:
            out = self.view(
                clip_id, request, message="There is no unsaved edit of this clip any more.", keep_media=True
            )
            return out
        clip = clips.get(db, int(clip_id))
        form = ReviewForm.from_draft(draft)
        if draft["base_caption_id"] != clip["current_caption_id"]:
            cur = clip["caption"] or {}
            e = Conflict(
                f"Your edit was based on an earlier version; {cur.get('author', 'someone')} saved version "
                f"{cur.get('version', '?')} since.",
                current=cur,
            )
            out = self._conflict(clip_id, e, request, form)
            out.update(self._fill(draft))
            out[self.base] = draft["base_caption_id"]
            out[self.review_base] = review_states.review_token(clip)
            out[self.header] = self._header(clip, user, draft["base_caption_id"], dirty=True)
            return out
        out = self.view(
            clip_id,
            request,
            message="Restored your unsaved edit: it is not saved yet (ctrl+s saves it; moving on saves it too).",
            kind="ok",
            keep_form=True,
            keep_media=True,
        )
        out.update(self._fill(draft))
        out[self.header] = self._header(clip, user, clip["current_caption_id"], dirty=True)
        return out

    def discard_draft(self, clip_id, request: gr.Request):
        """Drop the person's unsaved edit of this clip (they chose to)."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        had = drafts.discard(self.ctx.db(), user.name, int(clip_id))
        note = "Discarded your unsaved edit." if had else "There was no unsaved edit of this clip any more."
        return {self.offer_row: gr.update(visible=False), self.offer_note: "", self.msg: render.message(note, "ok")}

    def check_draft(self, clip_id, request: gr.Request):
        """The draft offer of the open clip, again (the page script pushed drafts kept in the browser)."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        db = self.ctx.db()
        return self._offer(db, user, clips.get(db, int(clip_id)))

    def _header(self, clip: dict, user, base: int | None, *, dirty: bool) -> str:
        """The header for a form filled with an edit (`dirty`) based on version `base`."""
        holder = review_queue.holder(self.ctx.db(), clip["id"])
        return render.header(
            clip,
            user.name,
            user.role,
            loaded=render.loaded_key(clip["id"], base, clip.get("review_status")),
            holder=holder if holder != user.name else None,
            dirty=dirty,
        )

    # -- a caption conflict's three ways out ---------------------------------------------------------------
    def keep_mine(self, request: gr.Request, theirs, *values):
        """Save the person's edit as a new version on top of the version the conflict showed them (knowingly);
        if that changed again meanwhile, the conflict view shows the newer one."""
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None or theirs is None:
            return gr.skip()
        mine = dataclasses.replace(form, base=int(theirs))
        if not mine.differs_from(captions.get(self.ctx.db(), int(theirs))):
            out = self.view(
                form.clip_id,
                request,
                message="Nothing to save: yours and theirs are the same caption and labels.",
                keep_form=True,
                keep_media=True,
            )
            return out
        try:
            cap = self._save_form(mine, user)
        except DataError as e:
            return self._refused(form.clip_id, e, request, form=form)
        return self.view(
            form.clip_id,
            request,
            message=f"Kept yours: saved as version {cap['version']}, on top of theirs (still in the history).",
            kind="ok",
            keep_form=True,
            keep_media=True,
        )

    def take_theirs(self, clip_id, request: gr.Request):
        """Show their version in the form; the person's edit (and its draft) is dropped, as they chose."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        drafts.discard(self.ctx.db(), user.name, int(clip_id))
        return self.view(clip_id, request, message="Took their version; your edit was dropped.", keep_media=True)

    def edit_merged(self, request: gr.Request, theirs, *values):
        """Keep the person's text in the box with their version as the new base: a save is then an ordinary
        save on top of theirs, after the person merged by hand what they want of it."""
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None or theirs is None:
            return gr.skip()
        clip = clips.get(self.ctx.db(), int(form.clip_id))
        version = captions.get(self.ctx.db(), int(theirs))
        out = self.view(
            form.clip_id,
            request,
            message=f"Your text stays in the box, now based on version {version['version']} by "
            f"{version['author']} (shown in the history below): merge what you want of theirs, then save.",
            kind="info",
            keep_form=True,
            keep_media=True,
        )
        out[self.base] = int(theirs)
        out[self.header] = self._header(clip, user, int(theirs), dirty=True)
        return out

    # -- broken clips --------------------------------------------------------------------------------------
    def flag_broken(self, request: gr.Request, *values):
        """Flag the clip as broken (the video, not the caption: counted apart from rejections), saving an edit
        first, then move to the next clip of the queue."""
        form, (fdict, sort, reason) = ReviewForm.split(values)
        flagged = []

        def act(clip_id, user, base, review_base) -> str:
            review_states.flag_broken(
                self.ctx.db(), clip_id, user=user.name, reason=reason or "", base_review=review_base
            )
            flagged.append(clip_id)
            return f"flagged clip {clip_id} as broken (counted apart from rejections)"

        out = self._decide_and_next(request, form, fdict, sort, act)
        return {**out, self.broken_reason: ""} if flagged else out  # a refused flag keeps the reason typed

    def clear_broken(self, clip_id, request: gr.Request):
        """A lead clears the broken flag: the clip is unreviewed and back in the queue."""
        user = self.ctx.require(request, "lead")  # data.captions checks it too: a refusal here is the API's
        if clip_id is None:
            return gr.skip()
        try:
            review_states.clear_broken(self.ctx.db(), int(clip_id), user=user.name, role=user.role)
        except DataError as e:
            return {self.msg: render.message(str(e), "error")}
        note = f"Cleared the broken flag: clip {int(clip_id)} is unreviewed and back in the queue."
        return self.view(clip_id, request, message=note, kind="ok", keep_form=True, keep_media=True)

    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        outs = self.view_outputs()
        form = self.form_inputs()
        walk = form + [filter_state, sort_state]  # the form, then where to go next
        nav = dict(show_progress="hidden")
        # a second ctrl+s while the first is on its way is sent when the first is answered (with the version it
        # made as its base), not dropped ("once") nor sent at once on the old base ("multiple": a conflict with
        # oneself)
        self.save_btn.click(shows_errors(self.save), form, outs, api_name="save_caption", trigger_mode="always_last")
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
        # drafts
        self.restore_btn.click(shows_errors(self.restore_draft), [self.clip_id], outs, api_name="draft_restore")
        self.discard_btn.click(shows_errors(self.discard_draft), [self.clip_id], outs, api_name="draft_discard", **nav)
        self.draft_check_btn.click(
            shows_errors(self.check_draft),
            [self.clip_id],
            [self.offer_row, self.offer_note],
            api_name="draft_check",
            **nav,
        )
        # a caption conflict's three ways out
        mine = [self.theirs] + form
        self.keep_mine_btn.click(shows_errors(self.keep_mine), mine, outs, api_name="conflict_keep_mine")
        self.take_theirs_btn.click(
            shows_errors(self.take_theirs), [self.clip_id], outs, api_name="conflict_take_theirs"
        )
        self.edit_merged_btn.click(shows_errors(self.edit_merged), mine, outs, api_name="conflict_edit_merged")
        # broken clips: Enter in the reason box or the button; a lead clears a flag
        flag = walk + [self.broken_reason]
        gr.on(
            [self.broken_btn.click, self.broken_reason.submit],
            shows_errors(self.flag_broken),
            flag,
            outs + [self.broken_reason],
            api_name="flag_broken",
            **nav,
        )
        self.unbreak_btn.click(shows_errors(self.clear_broken), [self.clip_id], outs, api_name="clear_broken")
        self.assign.wire(self.header, self.msg, self.clip_id, self.base, self.review_base)
