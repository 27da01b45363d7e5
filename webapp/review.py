"""Review tab: watch one clip, edit its caption and labels, approve or reject, walk the filter.

Saves are optimistic: the caption version the form was loaded from stays in gr.State (`base`), and
data.captions refuses a save based on a stale version with `Conflict`, which we show with who and when plus
a Reload button. Nothing is overwritten silently.

Re-caption: any signed-in user may request a re-caption of the clip they are looking at (a 1-clip job with
the newest prompt). It never replaces a human or approved caption: the result arrives as a candidate
version they can adopt. Starting jobs over many clips stays a lead's action (Jobs tab).
"""

from __future__ import annotations

import gradio as gr

from data import captions, clips, jobs, prompts, taxonomy
from data.db import Conflict, DataError, NotFound
from webapp import render
from webapp.context import AppContext

LABELS = list(taxonomy.ENUMS)


class ReviewTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        self.header = gr.HTML('<p class="cw-muted">Open a clip from Browse (or /?clip=ID).</p>',
                              elem_id="review-header")
        with gr.Row():
            with gr.Column(scale=3):
                self.player = gr.HTML("", elem_id="player")
                self.filmstrip = gr.HTML("", elem_id="filmstrip")
                with gr.Row():
                    self.prev_btn = gr.Button("◀ Previous (k)", elem_id="btn-prev", size="sm")
                    self.next_btn = gr.Button("Next (j) ▶", elem_id="btn-next", size="sm")
            with gr.Column(scale=2):
                self.msg = gr.HTML("", elem_id="review-msg")
                self.reload_btn = gr.Button("Reload the current version", elem_id="btn-reload", visible=False,
                                            variant="secondary")
                self.text = gr.Textbox(label="Caption", lines=7, max_lines=20, elem_id="caption-text")
                self.labels = {}
                with gr.Row():
                    for name in LABELS:
                        multi = name in taxonomy.MULTI
                        self.labels[name] = gr.Dropdown(list(taxonomy.ENUMS[name]), value=[] if multi else None,
                                                        multiselect=multi, label=name.replace("_", " "),
                                                        elem_id=f"label-{name}", min_width=150)
                with gr.Row():
                    self.save_btn = gr.Button("Save (ctrl+s)", elem_id="btn-save", variant="primary")
                    self.approve_btn = gr.Button("Approve (a)", elem_id="btn-approve")
                    self.reject_btn = gr.Button("Reject (r)", elem_id="btn-reject", variant="stop")
                with gr.Row():
                    self.recaption_btn = gr.Button("Re-caption this clip", elem_id="btn-recaption", size="sm")
                    self.adopt_choice = gr.Dropdown([], label="Version to adopt", elem_id="adopt-choice",
                                                    min_width=160)
                    self.adopt_btn = gr.Button("Adopt version", elem_id="btn-adopt", size="sm")
        with gr.Accordion("Provenance", open=True):
            self.provenance = gr.HTML("", elem_id="provenance")
        with gr.Accordion("Version history", open=True):
            self.history = gr.HTML("", elem_id="history")
        self.clip_id = gr.State(None)
        self.base = gr.State(None)

    # -- what every action returns -------------------------------------------------------------------
    def view_outputs(self) -> list:
        return [self.header, self.player, self.filmstrip, self.text, *self.labels.values(), self.provenance,
                self.history, self.adopt_choice, self.msg, self.reload_btn, self.clip_id, self.base]

    def view(self, clip_id: int, request: gr.Request, *, message: str = "", kind: str = "info",
             keep_form: bool = False, keep_media: bool = False) -> dict:
        """All review components for `clip_id` (the form is refilled unless keep_form; the player and filmstrip
        are left alone with keep_media, so that saving or approving does not reload the video being watched)."""
        user = self.ctx.user(request)
        db = self.ctx.db()
        try:
            clip = clips.get(db, int(clip_id))
        except (NotFound, ValueError, TypeError, OverflowError):
            raise gr.Error(f"There is no clip {clip_id!s:.40}.") from None
        cap = clip["caption"]
        versions = captions.history(db, clip["id"])
        out = {
            self.header: render.header(clip, user.name, user.role),
            self.provenance: render.provenance(cap),
            self.history: render.history(versions),
            self.adopt_choice: gr.update(choices=[(f"v{v['version']} ({v['source']}, {v['author']})", v["id"])
                                                  for v in versions if not v["current"]], value=None),
            self.msg: render.message(message, kind),
            self.reload_btn: gr.update(visible=False),
            self.clip_id: clip["id"],
            self.base: clip["current_caption_id"],
        }
        if not keep_media:
            out[self.player] = render.player(clip)
            out[self.filmstrip] = render.filmstrip(clip)
        if not keep_form:
            labels = (cap or {}).get("labels") or {}
            out[self.text] = (cap or {}).get("text", "")
            for name, comp in self.labels.items():
                out[comp] = labels.get(name, [] if name in taxonomy.MULTI else None)
        return out

    def _labels(self, values: list) -> dict:
        labels = {}
        for name, value in zip(LABELS, values):
            if name in taxonomy.MULTI:
                labels[name] = list(value or [])
            elif not value:
                raise DataError(f"Choose a value for {name.replace('_', ' ')}.")
            else:
                labels[name] = value
        return labels

    def _conflict(self, clip_id: int, e: Conflict, request: gr.Request) -> dict:
        out = self.view(clip_id, request, keep_form=True)
        out[self.base] = gr.skip()  # keep the stale base: the user must reload to adopt the new version
        out[self.msg] = render.message(str(e), "conflict")
        out[self.reload_btn] = gr.update(visible=True)
        return out

    # -- handlers -------------------------------------------------------------------------------------
    def save(self, clip_id, base, text, scenario_category, hazard_level, road_users, ego_maneuver, weather,
             lighting, road_type, request: gr.Request):
        # one parameter per label (in taxonomy.ENUMS order): Gradio passes gr.Request only to a named parameter
        label_values = [scenario_category, hazard_level, road_users, ego_maneuver, weather, lighting, road_type]
        user = self.ctx.user(request)
        if clip_id is None:
            raise gr.Error("Open a clip first.")
        try:
            labels = self._labels(list(label_values))
            cap = captions.save_human(self.ctx.db(), int(clip_id), text=text, labels=labels, author=user.name,
                                      base_caption_id=base)
        except Conflict as e:
            return self._conflict(clip_id, e, request)
        except (DataError, taxonomy.InvalidLabels) as e:
            return {self.msg: render.message(str(e), "error")}
        return self.view(clip_id, request, message=f"Saved as version {cap['version']}.", kind="ok",
                         keep_media=True)

    def review(self, status: str):
        def handler(clip_id, base, request: gr.Request):
            user = self.ctx.user(request)
            if clip_id is None:
                raise gr.Error("Open a clip first.")
            try:
                captions.set_review(self.ctx.db(), int(clip_id), status=status, user=user.name,
                                    base_caption_id=base)
            except Conflict as e:
                return self._conflict(clip_id, e, request)
            except DataError as e:
                return {self.msg: render.message(str(e), "error")}
            return self.view(clip_id, request, message=f"Marked {status}.", kind="ok", keep_form=True,
                             keep_media=True)
        handler.__name__ = f"review_{status}"
        return handler

    def adopt(self, clip_id, base, caption_id, request: gr.Request):
        user = self.ctx.user(request)
        if clip_id is None or caption_id in (None, ""):
            return {self.msg: render.message("Choose a version to adopt.", "error")}
        try:
            cap = captions.adopt(self.ctx.db(), int(clip_id), caption_id=int(caption_id), author=user.name,
                                 base_caption_id=base)
        except Conflict as e:
            return self._conflict(clip_id, e, request)
        except DataError as e:
            return {self.msg: render.message(str(e), "error")}
        return self.view(clip_id, request, message=f"Adopted: now version {cap['version']}.", kind="ok",
                         keep_media=True)

    def recaption(self, clip_id, request: gr.Request):
        user = self.ctx.user(request)
        if clip_id is None:
            raise gr.Error("Open a clip first.")
        db = self.ctx.db()
        try:
            prompt = prompts.latest(db)
            job_id = jobs.create_recaption(db, clip_id, user=user.name, role=user.role,
                                           quota=self.ctx.settings.job_quota, prompt_id=prompt["id"],
                                           params={"frames": self.ctx.settings.frames,
                                                   "max_tokens": self.ctx.settings.max_tokens})
        except DataError as e:
            return render.message(str(e), "error")
        return render.message(f"Re-caption requested: job {job_id}. The result arrives as a new version "
                              "(a candidate if a human caption is current).", "ok")

    def reload(self, clip_id, request: gr.Request):
        if clip_id is None:
            return gr.skip()
        return self.view(clip_id, request, message="Reloaded the current version.")

    def step(self, direction: int):
        def handler(clip_id, fdict, sort, request: gr.Request):
            self.ctx.user(request)
            if clip_id is None:
                return gr.skip()
            prev_id, next_id = clips.neighbours(self.ctx.db(), clips.Filter.from_dict(fdict), int(clip_id))
            if sort == "newest":  # the grid runs newest first: "next" is the lower id
                prev_id, next_id = next_id, prev_id
            target = next_id if direction > 0 else prev_id
            if target is None:
                return {self.msg: render.message("No more clips in this filter in that direction.", "info")}
            return self.view(target, request)
        handler.__name__ = "next_clip" if direction > 0 else "previous_clip"
        return handler

    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        outs = self.view_outputs()
        label_inputs = list(self.labels.values())
        self.save_btn.click(self.save, [self.clip_id, self.base, self.text, *label_inputs], outs,
                            api_name="save_caption")
        self.approve_btn.click(self.review("approved"), [self.clip_id, self.base], outs, api_name="approve")
        self.reject_btn.click(self.review("rejected"), [self.clip_id, self.base], outs, api_name="reject")
        self.adopt_btn.click(self.adopt, [self.clip_id, self.base, self.adopt_choice], outs, api_name="adopt")
        self.recaption_btn.click(self.recaption, [self.clip_id], [self.msg], api_name="recaption")
        self.reload_btn.click(self.reload, [self.clip_id], outs, api_name="reload_clip")
        self.next_btn.click(self.step(+1), [self.clip_id, filter_state, sort_state], outs, api_name="next_clip")
        self.prev_btn.click(self.step(-1), [self.clip_id, filter_state, sort_state], outs,
                            api_name="previous_clip")
