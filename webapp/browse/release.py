"""The lead's "Release a training set" panel on Browse, beside the export links: the clips of the current filter
(approved unless the filter names another review state) released by data.release.make into the data folder's
releases/NAME-vVERSION, and its dataset card shown below. The release does the work, checks the role again and
records it; this module reads the form and shows what happened.

Shown to leads only (first paint); the handler checks the lead role itself (each event is an HTTP endpoint).
"""

from __future__ import annotations

import gradio as gr

from data import clips
from data.errors import DataError
from data.release import make as rel, stratify
from data.release.options import DEFAULT_GROUP_BY, DEFAULT_LICENSE, DEFAULT_NAME, MEDIA, Options
from webapp import render
from webapp.context import AppContext, shows_errors
from webapp.quality import render as render_quality

RELEASES = "releases"  # under the data folder


class ReleasePanel:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Accordion(
            "Release a training set", open=False, visible=False, elem_id="release-panel", elem_classes="cw-assign"
        ) as self.box:
            gr.Markdown(
                "Releases the clips of this filter (approved unless it names another review state; rejected and "
                "broken clips never) in train/val/test splits grouped by drive, with a dataset card. Written under "
                f"the data folder, `{RELEASES}/NAME-vVERSION`, read-only. A release of a name keeps each group in the "
                "split its last release put it in. `python -m data.release --help` says more."
            )
            with gr.Row():
                self.name = gr.Textbox(value=DEFAULT_NAME, label="Name", elem_id="release-name", min_width=140)
                self.shares = gr.Textbox(
                    value=stratify.DEFAULT, label="Splits", elem_id="release-splits", min_width=220
                )
                self.group_by = gr.Textbox(
                    value=DEFAULT_GROUP_BY, label="Group by (sidecar field)", elem_id="release-group-by"
                )
                self.seed = gr.Number(value=0, precision=0, label="Seed", elem_id="release-seed", min_width=100)
                self.simulated = gr.Checkbox(
                    value=False, label="Include simulated text (flagged)", elem_id="release-simulated"
                )
            with gr.Row():
                self.reshuffle = gr.Checkbox(
                    value=False,
                    label="Reshuffle: place every group anew (else each stays where the last release of this name "
                    "put it)",
                    elem_id="release-reshuffle",
                )
                self.license = gr.Textbox(
                    value="",
                    label=f"Licence (empty: {DEFAULT_LICENSE})",
                    placeholder=f"{DEFAULT_LICENSE}: the team's own terms; or e.g. cc-by-4.0",
                    max_lines=1,
                    elem_id="release-license",
                    min_width=140,
                )
                self.media = gr.Dropdown(
                    list(MEDIA),
                    value="none",
                    label="Clips: none (paths into the clip root), copy or link into the release",
                    elem_id="release-media",
                )
                self.button = gr.Button("Release", elem_id="btn-release", size="sm", variant="primary")
            self.msg = gr.HTML("", elem_id="release-msg")
            self.card = gr.Markdown("", elem_id="release-card")

    def for_user(self, user) -> dict:
        """First paint: the panel for a lead, nothing for anyone else."""
        return {self.box: gr.update(visible=user.can("lead"))}

    @property
    def first_paint_outputs(self) -> list:
        return [self.box]

    def make(self, fdict, name, shares, group_by, seed, simulated, reshuffle, license, media, request: gr.Request):
        """Release the filter's clips (data.release.make.release) and show what was written and its card."""
        lead = self.ctx.require(request, "lead")
        try:
            options = Options(
                clips.Filter.from_dict(fdict or {}),
                str(group_by or DEFAULT_GROUP_BY).strip(),
                tuple(stratify.parse(shares or stratify.DEFAULT).items()),
                0 if seed in (None, "") else seed,
                str(name or DEFAULT_NAME).strip(),
                bool(simulated),
                bool(reshuffle),
                str(license or "").strip() or None,
                str(media or "none"),
            )
            r = rel.release(
                self.ctx.db(),
                options,
                into=self.ctx.settings.data_dir / RELEASES,
                actor=lead.name,
                role=lead.role,
                clip_root=self.ctx.settings.clip_root,
            )
        except DataError as e:
            return {self.msg: render.message(str(e), "error"), self.card: ""}
        return {
            self.msg: render_quality.release_made(
                r.id, rel.summary(r), warn=bool(r.batches and any(b.verdict == "fix" for b in r.batches.batches))
            ),
            self.card: r.card,
        }

    def wire(self, filter_state: gr.State) -> None:
        self.button.click(
            shows_errors(self.make),
            [
                filter_state,
                self.name,
                self.shares,
                self.group_by,
                self.seed,
                self.simulated,
                self.reshuffle,
                self.license,
                self.media,
            ],
            [self.msg, self.card],
            api_name="release_set",
        )
