"""The Review tab's refusals and a caption conflict: what the view shows when data/ refuses an action (a conflict
shows their version beside the person's edit, any other refusal its message), and the conflict's three ways out:
keep mine (saved on top of theirs, knowingly), take theirs, or edit merged (the person's text on their version as
the new base)."""

from __future__ import annotations

import dataclasses

import gradio as gr

from data import captions, clips, drafts
from data.errors import Conflict, DataError
from webapp import render
from webapp.context import AppContext
from webapp.review.form import ReviewForm
from webapp.review.saves import ReviewSaves
from webapp.review.view import ReviewView

CONFLICT_NEXT = (
    " Your edit is kept: compare the two below, then keep yours, take theirs, or edit yours on top of theirs."
)


class ReviewConflicts:
    """Fills `view`'s conflict box and message; "keep mine" saves through `saves`."""

    def __init__(self, ctx: AppContext, view: ReviewView, saves: ReviewSaves):
        self.ctx = ctx
        self.view = view
        self.saves = saves

    def refused(self, clip_id, e: DataError, request: gr.Request, *, stay: str = "", form=None) -> dict:
        """What the view shows when data/ refuses an action: a conflict shows who changed what (with `form`, the
        person's edit beside their version); any other refusal (a label missing or out of the taxonomy, a limit,
        a clip nobody can review) its message, after `stay` (why we are still on this clip)."""
        if isinstance(e, Conflict):
            return self.conflict(clip_id, e, request, form)
        return {self.view.msg: render.message(stay + str(e), "error")}

    def conflict(self, clip_id: int, e: Conflict, request: gr.Request, form=None) -> dict:
        """The conflict view; the form keeps the person's edit and its stale bases (a plain save would conflict
        again). A caption conflict with the form at hand shows theirs beside yours and the three ways out; a
        review-state conflict (or one without the form) offers a reload."""
        v = self.view
        out = v.show(clip_id, request, keep_form=True, keep_media=True)
        out[v.base] = gr.skip()
        out[v.review_base] = gr.skip()
        out[v.header] = gr.skip()  # the page script reads "unsaved" from the header: it still is
        theirs = e.current if e.current.get("text") is not None else None
        if theirs is None or form is None:
            reload = " Reload to see their version." if theirs else ""
            out[v.msg] = render.message(str(e) + reload, "conflict")
            out[v.reload_btn] = gr.update(visible=True)
            return out
        mine = form.draft_labels()
        base = captions.get(self.ctx.db(), int(form.base)) if form.base is not None else None
        out[v.msg] = render.message(str(e) + CONFLICT_NEXT, "conflict")
        out[v.conflict_view] = render.conflict(theirs, form.text or "", mine, base=base)
        out[v.conflict_box] = gr.update(visible=True)
        out[v.theirs] = theirs["id"]
        return out

    # -- the three ways out ----------------------------------------------------------------------------------
    def keep_mine(self, request: gr.Request, theirs, *values):
        """Save the person's edit as a new version on top of the version the conflict showed them (knowingly);
        if that changed again meanwhile, the conflict view shows the newer one."""
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None or theirs is None:
            return gr.skip()
        mine = dataclasses.replace(form, base=int(theirs))
        if not mine.differs_from(captions.get(self.ctx.db(), int(theirs))):
            out = self.view.show(
                form.clip_id,
                request,
                message="Nothing to save: yours and theirs are the same caption and labels.",
                keep_form=True,
                keep_media=True,
            )
            return out
        try:
            cap = self.saves.save(mine, user)
        except DataError as e:
            return self.refused(form.clip_id, e, request, form=form)
        return self.view.show(
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
        return self.view.show(clip_id, request, message="Took their version; your edit was dropped.", keep_media=True)

    def edit_merged(self, request: gr.Request, theirs, *values):
        """Keep the person's text in the box with their version as the new base: a save is then an ordinary
        save on top of theirs, after the person merged by hand what they want of it."""
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None or theirs is None:
            return gr.skip()
        clip = clips.get(self.ctx.db(), int(form.clip_id))
        version = captions.get(self.ctx.db(), int(theirs))
        out = self.view.show(
            form.clip_id,
            request,
            message=f"Your text stays in the box, now based on version {version['version']} by "
            f"{version['author']} (shown in the history below): merge what you want of theirs, then save.",
            kind="info",
            keep_form=True,
            keep_media=True,
        )
        out[self.view.base] = int(theirs)
        out[self.view.header] = self.view.header_for(clip, user, int(theirs), dirty=True)
        return out
