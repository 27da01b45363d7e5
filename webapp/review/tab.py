"""Review tab: watch one clip, edit its caption and labels, approve or reject, walk the filter.

Nothing typed is ever dropped (issue 10). Every way of leaving a clip -- j/k, approve/reject (which move on to
the next unreviewed clip of the filter), "next unreviewed", a Browse tile, the browser's Back (the URL carries
the clip, webapp/static/shortcuts.js turns Back into a navigation here) -- goes through a handler that receives the
form and saves it first when it differs from the stored version (`ReviewSaves.autosave`). A save that cannot happen (a
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

Structure, for whoever adds a review mode: the tab is built like the others, from parts that are given what they
use when they are made, and this module makes them and wires their events:
- `ReviewView` (webapp.review.view): the regions (`render`), the lists every handler shares (`outputs`,
  `form_inputs`, `copies`), and `show`, the one function that fills every region for a clip (handlers add to or
  override what it returns), with the history's pages, blind mode and the draft offer; the lead's one-clip assign
  row (webapp.browse.assigning.ClipAssign) is laid out inside it;
- `ReviewSaves` (webapp.review.saves): how the form becomes a caption version (the save, the save before leaving);
- `ReviewConflicts(view, saves)` (webapp.review.conflicts): what a refusal shows (a caption conflict: theirs beside
  yours) and a conflict's three ways out;
- `ReviewActions(view, saves, conflicts)` (webapp.review.actions): save, decide, flag broken, adopt, re-caption,
  the walk and the queue; those that may leave a clip go through `_leave` (save first), the queue through
  `_take_next` (pick + lease);
- `ReviewDrafts(view, conflicts)` (webapp.review.drafts): the draft offer's handlers.
A part reads another only through what it was given (tests/test_structure.py checks that no class of the product
has two project bases); the event API's names and parameters are the tab's contract with the page script and with
docs/roles.csv.

Blind mode: a clip the person has a pending blind second review of (data.quality.second_review) is shown without its
caption, labels, review, provenance and history, and with no clip in the form's state, so nothing here can save or
decide on it (`_blind`); they answer on the Second review tab (webapp.second_review.tab).

Re-caption: any signed-in user may request a re-caption of the clip they are looking at (a 1-clip job with
the newest prompt). It never replaces a human or approved caption: the result arrives as a candidate
version they can adopt. Starting jobs over many clips stays a lead's action (Jobs tab).
"""

from __future__ import annotations

import gradio as gr

from webapp.browse.assigning import ClipAssign
from webapp.context import AppContext, shows_errors
from webapp.review.actions import ReviewActions
from webapp.review.conflicts import ReviewConflicts
from webapp.review.drafts import ReviewDrafts
from webapp.review.saves import ReviewSaves
from webapp.review.view import ReviewView


class ReviewTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.assign = ClipAssign(ctx)  # leads only: shown on first paint (webapp/app.py)
        self.view = ReviewView(ctx, self.assign)
        self.saves = ReviewSaves(ctx)
        self.conflicts = ReviewConflicts(ctx, self.view, self.saves)
        self.actions = ReviewActions(ctx, self.view, self.saves, self.conflicts)
        self.drafts = ReviewDrafts(ctx, self.view, self.conflicts)

    def render(self) -> None:
        self.view.render()

    def wire(self, filter_state: gr.State, sort_state: gr.State) -> None:
        v, act, drafts, conflicts = self.view, self.actions, self.drafts, self.conflicts
        outs = v.outputs()
        form = v.form_inputs()
        walk = form + [filter_state, sort_state]  # the form, then where to go next
        copies = v.copies  # last, after each event's own inputs (webapp.form_echo checks and drops them)
        nav = dict(show_progress="hidden")
        # a second ctrl+s while the first is on its way is sent when the first is answered (with the version it
        # made as its base), not dropped ("once") nor sent at once on the old base ("multiple": a conflict with
        # oneself)
        v.save_btn.click(
            shows_errors(act.save), form + copies, outs, api_name="save_caption", trigger_mode="always_last"
        )
        v.approve_btn.click(shows_errors(act.decide("approved")), walk + copies, outs, api_name="approve", **nav)
        v.reject_btn.click(shows_errors(act.decide("rejected")), walk + copies, outs, api_name="reject", **nav)
        v.adopt_btn.click(shows_errors(act.adopt), [v.clip_id, v.base, v.adopt_choice], outs, api_name="adopt")
        v.recaption_btn.click(shows_errors(act.recaption), [v.clip_id], [v.msg], api_name="recaption")
        v.reload_btn.click(shows_errors(v.reload), [v.clip_id], outs, api_name="reload_clip")
        v.next_btn.click(shows_errors(act.step(+1)), walk + copies, outs, api_name="next_clip", **nav)
        v.prev_btn.click(shows_errors(act.step(-1)), walk + copies, outs, api_name="previous_clip", **nav)
        v.queue_btn.click(shows_errors(act.queue_next), walk + copies, outs, api_name="next_unreviewed", **nav)
        v.nav_btn.click(shows_errors(act.goto), [v.nav_target] + form + copies, outs, api_name="goto_clip", **nav)
        v.older_btn.click(
            shows_errors(v.older), [v.clip_id, v.history_before], v.history_outputs(), api_name="history_older"
        )
        v.newest_btn.click(shows_errors(v.newest), [v.clip_id], v.history_outputs(), api_name="history_newest")
        # drafts
        v.restore_btn.click(shows_errors(drafts.restore_draft), [v.clip_id], outs, api_name="draft_restore")
        v.discard_btn.click(shows_errors(drafts.discard_draft), [v.clip_id], outs, api_name="draft_discard", **nav)
        v.draft_check_btn.click(
            shows_errors(drafts.check_draft),
            [v.clip_id],
            [v.offer_row, v.offer_note],
            api_name="draft_check",
            **nav,
        )
        # a caption conflict's three ways out
        mine = [v.theirs] + form
        v.keep_mine_btn.click(shows_errors(conflicts.keep_mine), mine + copies, outs, api_name="conflict_keep_mine")
        v.take_theirs_btn.click(shows_errors(conflicts.take_theirs), [v.clip_id], outs, api_name="conflict_take_theirs")
        v.edit_merged_btn.click(
            shows_errors(conflicts.edit_merged), mine + copies, outs, api_name="conflict_edit_merged"
        )
        # broken clips: Enter in the reason box or the button; a lead clears a flag
        flag = walk + [v.broken_reason]
        gr.on(
            [v.broken_btn.click, v.broken_reason.submit],
            shows_errors(act.flag_broken),
            flag + copies,
            outs + [v.broken_reason],
            api_name="flag_broken",
            **nav,
        )
        v.unbreak_btn.click(shows_errors(act.clear_broken), [v.clip_id], outs, api_name="clear_broken")
        self.assign.wire(v.header, v.msg, v.clip_id, v.base, v.review_base)
