"""The Review tab's handlers of a caption conflict's three ways out: keep mine (saved on top of theirs, knowingly),
take theirs, or edit merged (the person's text on their version as the new base)."""

from __future__ import annotations

import dataclasses

import gradio as gr

from data import captions, clips, drafts
from data.errors import DataError
from webapp.review_actions import ReviewActions
from webapp.review_form import ReviewForm


class ReviewConflicts(ReviewActions):
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
