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
`_leave` (save first) and the queue through `_take_next` (pick + lease). `ReviewTab` is built in layers, one concern
a module: webapp.review_view (the regions, `view`, the refusal and conflict views), webapp.review_actions (save,
decide, flag broken, adopt, re-caption, the walk and the queue), webapp.review_drafts and webapp.review_conflicts
(the draft offer's and a caption conflict's handlers); this module wires them.

Blind mode: a clip the person has a pending blind second review of (data.quality.second_review) is shown without its
caption, labels, review, provenance and history, and with no clip in the form's state, so nothing here can save or
decide on it (`_blind`); they answer on the Second review tab (webapp.second_review.tab).

Re-caption: any signed-in user may request a re-caption of the clip they are looking at (a 1-clip job with
the newest prompt). It never replaces a human or approved caption: the result arrives as a candidate
version they can adopt. Starting jobs over many clips stays a lead's action (Jobs tab).
"""

from __future__ import annotations

import gradio as gr

from webapp.context import shows_errors
from webapp.review_conflicts import ReviewConflicts
from webapp.review_drafts import ReviewDrafts


class ReviewTab(ReviewDrafts, ReviewConflicts):
    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        outs = self.view_outputs()
        form = self.form_inputs()
        walk = form + [filter_state, sort_state]  # the form, then where to go next
        copies = self.copies  # last, after each event's own inputs (webapp.form_echo checks and drops them)
        nav = dict(show_progress="hidden")
        # a second ctrl+s while the first is on its way is sent when the first is answered (with the version it
        # made as its base), not dropped ("once") nor sent at once on the old base ("multiple": a conflict with
        # oneself)
        self.save_btn.click(
            shows_errors(self.save), form + copies, outs, api_name="save_caption", trigger_mode="always_last"
        )
        self.approve_btn.click(shows_errors(self.decide("approved")), walk + copies, outs, api_name="approve", **nav)
        self.reject_btn.click(shows_errors(self.decide("rejected")), walk + copies, outs, api_name="reject", **nav)
        self.adopt_btn.click(
            shows_errors(self.adopt), [self.clip_id, self.base, self.adopt_choice], outs, api_name="adopt"
        )
        self.recaption_btn.click(shows_errors(self.recaption), [self.clip_id], [self.msg], api_name="recaption")
        self.reload_btn.click(shows_errors(self.reload), [self.clip_id], outs, api_name="reload_clip")
        self.next_btn.click(shows_errors(self.step(+1)), walk + copies, outs, api_name="next_clip", **nav)
        self.prev_btn.click(shows_errors(self.step(-1)), walk + copies, outs, api_name="previous_clip", **nav)
        self.queue_btn.click(shows_errors(self.queue_next), walk + copies, outs, api_name="next_unreviewed", **nav)
        self.nav_btn.click(
            shows_errors(self.goto), [self.nav_target] + form + copies, outs, api_name="goto_clip", **nav
        )
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
        self.keep_mine_btn.click(shows_errors(self.keep_mine), mine + copies, outs, api_name="conflict_keep_mine")
        self.take_theirs_btn.click(
            shows_errors(self.take_theirs), [self.clip_id], outs, api_name="conflict_take_theirs"
        )
        self.edit_merged_btn.click(shows_errors(self.edit_merged), mine + copies, outs, api_name="conflict_edit_merged")
        # broken clips: Enter in the reason box or the button; a lead clears a flag
        flag = walk + [self.broken_reason]
        gr.on(
            [self.broken_btn.click, self.broken_reason.submit],
            shows_errors(self.flag_broken),
            flag + copies,
            outs + [self.broken_reason],
            api_name="flag_broken",
            **nav,
        )
        self.unbreak_btn.click(shows_errors(self.clear_broken), [self.clip_id], outs, api_name="clear_broken")
        self.assign.wire(self.header, self.msg, self.clip_id, self.base, self.review_base)
