"""The Review tab's handlers that act on the clip the form shows and move on: save (first, whenever a clip is
left), approve, reject, flag broken or clear the flag, adopt a version, request a re-caption, and the walk through
the filter and the shared queue."""

from __future__ import annotations

import gradio as gr

from data import assignments, captions, clips, jobs, order as orders, prompts, review_queue, review_states
from data.errors import DataError
from data.job_params import JobParams
from webapp import render
from webapp.context import AppContext
from webapp.review.conflicts import ReviewConflicts
from webapp.review.form import ReviewForm
from webapp.review.saves import ReviewSaves, undone
from webapp.review.view import ReviewView

# the queue is empty for this person: clips others are on are not theirs to take (data.review_queue), and clips
# without a caption have nothing to review yet (data.assignments.awaiting_caption says how many wait for one)
NONE_LEFT = "No unreviewed clips with a caption left in this filter that nobody else is on."


class ReviewActions:
    """The handlers that act on `view`'s clip: a form is written through `saves`, a refusal shown by `conflicts`."""

    def __init__(self, ctx: AppContext, view: ReviewView, saves: ReviewSaves, conflicts: ReviewConflicts):
        self.ctx = ctx
        self.view = view
        self.saves = saves
        self.conflicts = conflicts
        self.lease_ttl = ctx.settings.review_lease_seconds

    def _leave(self, form: ReviewForm, request: gr.Request, go) -> dict:
        """Save the form if needed, then `go(saved_message)` -> the view to show; on a failed save stay here."""
        user = self.ctx.user(request)
        try:
            _, saved = self.saves.autosave(form, user)
        except DataError as e:
            return self.conflicts.refused(
                form.clip_id, e, request, stay="Your edit is not saved yet, so you stay on this clip: ", form=form
            )
        note = f"Your edit was saved as version {saved['version']} of clip {int(form.clip_id)}. " if saved else ""
        return go(note + undone(saved, form.clip_id))

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
            return self.view.show(
                clip_id, request, message=f"{done} {none}", kind="ok", keep_form=True, keep_media=True
            )
        return self.view.show(target, request, message=done, kind="ok")

    # -- handlers: those that receive the form take (request, *values), see webapp.review.form ----------------
    def save(self, request: gr.Request, *values):
        form, _ = ReviewForm.split(values)
        user = self.ctx.user(request)
        if form.clip_id is None:
            raise gr.Error("Open a clip first.")
        unchanged = self._nothing_to_save(form)
        if unchanged is not None:
            return unchanged
        try:
            cap = self.saves.save(form, user)
        except DataError as e:
            return self.conflicts.refused(form.clip_id, e, request, form=form)
        return self.view.show(
            form.clip_id,
            request,
            message=f"Saved as version {cap['version']}. {undone(cap, form.clip_id)}".strip(),
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
            return {self.view.msg: render.message("Nothing to save: write a caption first.", "info")}
        note = f"Nothing to save: the caption and labels are those of version {base['version']}."
        cur = clips.get(db, int(form.clip_id))["caption"]
        if cur is not None and cur["id"] != base["id"]:
            note += f" {cur['author']} saved version {cur['version']} since: reload to see it."
            return {self.view.msg: render.message(note, "info"), self.view.reload_btn: gr.update(visible=True)}
        return {self.view.msg: render.message(note, "info")}

    def _decide_and_next(self, request: gr.Request, form: ReviewForm, fdict: dict, sort: str, act) -> dict:
        """A decision on the clip the form shows: save an edit first, then `act(clip_id, user, base, review_base)`
        (data/ raises DataError to refuse it; it returns what was done, as "marked clip 3 approved"), then the next
        clip of the queue. A refusal, or a conflict, keeps the person on the clip with their edit."""
        user = self.ctx.user(request)
        if form.clip_id is None:
            raise gr.Error("Open a clip first.")
        clip_id = int(form.clip_id)
        try:
            new_base, saved = self.saves.autosave(form, user)
            did = act(clip_id, user, new_base, None if saved else form.review_base)
        except DataError as e:
            return self.conflicts.refused(clip_id, e, request, form=form)
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
            return {self.view.msg: render.message("Choose a version to adopt.", "error")}
        db = self.ctx.db()
        chosen, current = captions.get(db, int(caption_id)), clips.get(db, int(clip_id))["caption"]
        if chosen and current and chosen["clip_id"] == int(clip_id) and base == current["id"]:
            if not ReviewForm.of(chosen).differs_from(current):
                note = (
                    f"Nothing to adopt: version {chosen['version']} has the caption and labels of the current "
                    f"version {current['version']}."
                )
                return {self.view.msg: render.message(note, "info")}
        try:
            cap = captions.adopt(
                self.ctx.db(),
                int(clip_id),
                caption_id=int(caption_id),
                author=user.name,
                base_caption_id=base,
                rate=self.saves.rate(),
            )
        except DataError as e:
            return self.conflicts.refused(clip_id, e, request)
        return self.view.show(
            clip_id,
            request,
            message=f"Adopted: now version {cap['version']}. {undone(cap, clip_id)}".strip(),
            kind="ok",
            keep_media=True,
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
                        **(self.view.show(clip_id, request, keep_form=True, keep_media=True) if note else {}),
                        self.view.msg: render.message(note + "No more clips in this filter in that direction.", "info"),
                    }
                return self.view.show(target, request, message=note, kind="ok" if note else "info")

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
                return {self.view.msg: render.message(note + self._none_left(fdict, user), "info")}
            return self.view.show(target, request, message=note, kind="ok" if note else "info")

        return self._leave(form, request, go)

    def goto(self, request: gr.Request, target, *values) -> dict:
        """Open clip `target` (browser Back/Forward, a Browse tile), saving the form first. Always a dict keyed by
        components, whatever the path (the Browse tile adds the tab to it): the clip already open changes
        nothing."""
        form, _ = ReviewForm.split(values)
        self.ctx.user(request)
        target = str(target or "").strip()
        if not target.isdigit() or (form.clip_id is not None and int(target) == int(form.clip_id)):
            return {self.view.msg: gr.skip()}
        return self._leave(
            form,
            request,
            lambda note: self.view.show(int(target), request, message=note, kind="ok" if note else "info"),
        )

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
        return {**out, self.view.broken_reason: ""} if flagged else out  # a refused flag keeps the reason typed

    def clear_broken(self, clip_id, request: gr.Request):
        """A lead clears the broken flag: the clip is unreviewed and back in the queue."""
        user = self.ctx.require(request, "lead")  # data.captions checks it too: a refusal here is the API's
        if clip_id is None:
            return gr.skip()
        try:
            review_states.clear_broken(self.ctx.db(), int(clip_id), user=user.name, role=user.role)
        except DataError as e:
            return {self.view.msg: render.message(str(e), "error")}
        note = f"Cleared the broken flag: clip {int(clip_id)} is unreviewed and back in the queue."
        return self.view.show(clip_id, request, message=note, kind="ok", keep_form=True, keep_media=True)
