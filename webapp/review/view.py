"""The Review tab's regions and what fills them for a clip: `render`, the lists every handler shares, `show`
(with the version history a page at a time, blind mode, the draft offer), and the history's and reload's handlers.

The other parts of the tab fill these regions through what this part gives them (`show`, `fill`, `offer`,
`header_for`, its components); it knows none of them (webapp.review.tab says how the tab works)."""

from __future__ import annotations

import sqlite3

import gradio as gr

from data import caption_history, captions, clips, drafts, review_queue, review_states, taxonomy
from data.errors import NotFound
from data.quality import second_review
from webapp import failures, form_echo, render
from webapp.browse.assigning import ClipAssign
from webapp.context import AppContext
from webapp.picker import label_picker
from webapp.review.form import LABELS

# opening a clip takes its review lease, a write: it waits this long for another program's write lock, then
# opens the clip anyway (without the lease) rather than keep the person waiting (issue 21, class 7)
LEASE_WAIT_S = 2.0


class ReviewView:
    """The regions of the Review tab and `show`, which fills them for a clip. `assign` is the lead's one-clip
    assign row, laid out here between the broken-clip row and the provenance."""

    def __init__(self, ctx: AppContext, assign: ClipAssign):
        self.ctx = ctx
        self.assign = assign
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
        self.assign.render()  # leads only: shown on first paint (webapp/app.py)
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
        # the page's copy of those three, sent back with the form (webapp.form_echo)
        self.echo = {
            state: form_echo.copy_box(f"form-{name}")
            for name, state in (("clip", self.clip_id), ("base", self.base), ("review", self.review_base))
        }
        self.history_before = gr.State(None)  # the oldest version shown: "Older versions" starts below it
        self.theirs = gr.State(None)  # the caption version a conflict showed (what "keep mine" saves on top of)

    # -- what every action returns -------------------------------------------------------------------
    def outputs(self) -> list:
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
            *self.echo.values(),
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

    @property
    def copies(self) -> list:
        """The page's copies of the form's state: the last inputs of every event that sends the form
        (webapp.form_echo)."""
        return list(self.echo.values())

    def show(
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
            **self.offer(db, user, clip, show=not keep_form),
        }
        if not keep_media:
            out[self.player] = render.player(clip)
            out[self.filmstrip] = render.filmstrip(clip)
        if not keep_form:
            out.update(self.fill(cap))
        if second_review.is_blind(db, clip["id"], user.name):
            out.update(self._blind(clip))
        return out

    def _blind(self, clip: dict) -> dict:
        """Blind mode: the person has a pending blind second review of this clip (data.quality.second_review), so the
        view hides its caption, labels, review, assignee, provenance and history, and holds no clip in the form's
        state, so that no save or decision here can touch it (they answer on the Second review tab)."""
        return {
            self.header: render.blind_header(clip),
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

    def fill(self, source: dict | None) -> dict:
        """The form's text and labels from a caption version or a draft (None: empty)."""
        labels = (source or {}).get("labels") or {}
        out = {self.text: (source or {}).get("text", "")}
        for name, comp in self.labels.items():
            value = labels.get(name)
            out[comp] = (list(value) if value else []) if name in taxonomy.MULTI else (value or None)
        return out

    def offer(self, db, user, clip: dict, *, show: bool = True) -> dict:
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
                return self.show(int(raw), request)
            except gr.Error:
                pass
        return {self.header: render.no_clip(raw), self.msg: ""}

    def reload(self, clip_id, request: gr.Request):
        if clip_id is None:
            return gr.skip()
        return self.show(clip_id, request, message="Reloaded the current version.")

    def header_for(self, clip: dict, user, base: int | None, *, dirty: bool) -> str:
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
