"""The Review tab's handlers of the draft offer: an unsaved edit a person left on a clip (data.drafts), restored
into the form (or into the conflict view when its base was replaced since), discarded, or offered again."""

from __future__ import annotations

import gradio as gr

from data import clips, drafts, review_states
from data.errors import Conflict
from webapp import render
from webapp.context import AppContext
from webapp.review.conflicts import ReviewConflicts
from webapp.review.form import ReviewForm
from webapp.review.view import ReviewView


class ReviewDrafts:
    """Fills `view`'s form and offer from a draft; a draft on a replaced version goes to `conflicts`' view."""

    def __init__(self, ctx: AppContext, view: ReviewView, conflicts: ReviewConflicts):
        self.ctx = ctx
        self.view = view
        self.conflicts = conflicts

    def restore_draft(self, clip_id, request: gr.Request):
        """Put the person's unsaved edit of this clip back in the form. If someone saved another version since
        the edit was started, the form gets the edit and the conflict view shows theirs beside it."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        v = self.view
        db = self.ctx.db()
        draft = drafts.get(db, user.name, int(clip_id))
        if draft is None:
            out = v.show(clip_id, request, message="There is no unsaved edit of this clip any more.", keep_media=True)
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
            out = self.conflicts.conflict(clip_id, e, request, form)
            out.update(v.fill(draft))
            out[v.base] = draft["base_caption_id"]
            out[v.review_base] = review_states.review_token(clip)
            out[v.header] = v.header_for(clip, user, draft["base_caption_id"], dirty=True)
            return out
        out = v.show(
            clip_id,
            request,
            message="Restored your unsaved edit: it is not saved yet (ctrl+s saves it; moving on saves it too).",
            kind="ok",
            keep_form=True,
            keep_media=True,
        )
        out.update(v.fill(draft))
        out[v.header] = v.header_for(clip, user, clip["current_caption_id"], dirty=True)
        return out

    def discard_draft(self, clip_id, request: gr.Request):
        """Drop the person's unsaved edit of this clip (they chose to)."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        had = drafts.discard(self.ctx.db(), user.name, int(clip_id))
        note = "Discarded your unsaved edit." if had else "There was no unsaved edit of this clip any more."
        v = self.view
        return {v.offer_row: gr.update(visible=False), v.offer_note: "", v.msg: render.message(note, "ok")}

    def check_draft(self, clip_id, request: gr.Request):
        """The draft offer of the open clip, again (the page script pushed drafts kept in the browser)."""
        user = self.ctx.user(request)
        if clip_id is None:
            return gr.skip()
        db = self.ctx.db()
        return self.view.offer(db, user, clips.get(db, int(clip_id)))
