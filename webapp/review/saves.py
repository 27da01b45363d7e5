"""How the Review form becomes a caption version: the one place both the tab's actions (a save, the save before a
clip is left) and a conflict's "keep mine" write the person's edit (data.captions.save_human, rate-limited)."""

from __future__ import annotations

from data import captions, limits
from webapp.context import AppContext
from webapp.review.form import ReviewForm


def undone(saved: dict | None, clip_id) -> str:
    """What a saved version undid: the approval or rejection of the version before (data.captions)."""
    if not saved or not saved.get("review_was"):
        return ""
    who = f" by {saved['reviewed_by_was']}" if saved.get("reviewed_by_was") else ""
    what = {"approved": "approval", "rejected": "rejection"}.get(saved["review_was"], saved["review_was"])
    return (
        f"The {what} of clip {int(clip_id)}{who} was of the version before, so the clip is unreviewed again: "
        "approve (a) or reject (r) this version. "
    )


class ReviewSaves:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def rate(self):
        """The save rate limit: per person, so none with login off (one person, on this machine)."""
        return limits.SAVE_RATE if self.ctx.settings.auth_required else None

    def save(self, form: ReviewForm, user) -> dict:
        """The form as a new human version (data.captions.save_human: Conflict, TooFast, DataError)."""
        return captions.save_human(
            self.ctx.db(),
            int(form.clip_id),
            text=form.text,
            labels=form.labels(),
            author=user.name,
            base_caption_id=form.base,
            rate=self.rate(),
        )

    def autosave(self, form: ReviewForm, user) -> tuple[int | None, dict | None]:
        """Save the form if it differs from the version it was loaded from; returns (the new base, the saved
        version or None). Raises DataError (a Conflict, labels that do not fit): the caller stays on the clip and
        shows why (webapp.review.conflicts.ReviewConflicts.refused)."""
        if form.clip_id is None:
            return form.base, None
        db = self.ctx.db()
        if not form.differs_from(captions.get(db, form.base) if form.base is not None else None):
            return form.base, None
        cap = self.save(form, user)
        return cap["id"], cap
