"""The Jobs tab's job shown and its controls (leads): its id, Pause, Resume, Cancel, Retry failed, and the message.

The job shown and its buttons sit above the list (webapp.jobs.progress), so that the list growing or being redrawn
never moves them. Every handler checks the lead role itself: each Gradio event is an HTTP endpoint anyone can call.
Messages say what is true now: one about a job's state goes when that state does (`msg_for`, which the start form
and the refresh write too); a resume or a retry that would restart a cancelled job asks first, saying what it will
send.
"""

from __future__ import annotations

import time

import gradio as gr

from data import jobs
from data.errors import DataError, NotFound
from data.jobs import queries as job_queries
from webapp import render
from webapp.context import AppContext
from webapp.number_box import number_box, whole

CONFIRM_S = 60.0  # a second press of Resume / Retry failed within this long goes ahead
# why retry_failed left a failed clip failed (data.jobs.FINAL_KINDS), as a lead reads it
WHY_LEFT = {
    "ingest": "failed ingest (the model cannot read them either: fix or replace the files and ingest again)",
    "missing": "have no file in the clip root",
    "clip": "were refused by the fleet as sent (HTTP 400/422, undecodable video: the same request fails again)",
    "answer": (
        "got an unusable answer (the same prompt and limits give the same answer: start a job with more max "
        "tokens or another prompt version)"
    ),
}


class JobControl:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def render(self) -> None:
        with gr.Row():
            self.job_id = number_box("Job shown", empty="the newest", elem_id="job-id")
            self.pause_btn = gr.Button("Pause", elem_id="btn-pause", size="sm")
            self.resume_btn = gr.Button("Resume", elem_id="btn-resume", size="sm")
            self.cancel_btn = gr.Button("Cancel", elem_id="btn-cancel", size="sm", variant="stop")
            self.retry_btn = gr.Button("Retry failed", elem_id="btn-retry", size="sm")
        self.msg = gr.HTML("", elem_id="jobs-msg")  # below the buttons: a message appearing does not move them
        self.msg_for = gr.State(None)  # {"job", "states"}: the message goes when that job leaves those states
        self.confirm = gr.State(None)  # {"job", "verb", "at"}: the press a second one confirms

    @property
    def buttons(self) -> list[tuple[str, gr.Button]]:
        """Each verb with its button, in the order they are wired."""
        return [
            ("pause", self.pause_btn),
            ("resume", self.resume_btn),
            ("cancel", self.cancel_btn),
            ("retry", self.retry_btn),
        ]

    def action(self, verb: str):
        def handler(job_id, confirm, request: gr.Request):
            user = self.ctx.require(request, "lead")
            job_id = whole(job_id, "The job shown")
            if not job_id:
                return {self.msg: render.message("Enter a job id first.", "error"), self.msg_for: None}
            db = self.ctx.db()
            try:
                job = job_queries.get(db, job_id)
                ask = self._ask_first(db, job, verb, confirm)
                if ask:
                    bound = {"job": job_id, "states": [job["state"]]}
                    pending = {"job": job_id, "verb": verb, "at": time.time()}
                    return {self.msg: render.message(ask, "warn"), self.msg_for: bound, self.confirm: pending}
                if verb == "retry":
                    text, kind = self._retry(db, job, user.name)
                elif verb == "resume" and job["state"] in job_queries.FINISHED:
                    text, kind = self._nothing_to_resume(db, job), "info"
                elif verb == "resume":
                    was = job["state"]
                    jobs.change_state(db, job_id, verb, user.name)
                    text, kind = f"Job {job_id} resumed: {self._unsent(db, job_id)} are sent.", "ok"
                    if was == "cancelled":
                        text = f"Job {job_id} was cancelled and runs again: {self._unsent(db, job_id)} are sent."
                else:
                    job = jobs.change_state(db, job_id, verb, user.name)
                    text, kind = f"Job {job_id} is now {job['state']}.", "ok"
            except (DataError, NotFound) as e:
                state = job_queries.states(db, [job_id]).get(job_id)
                bound = {"job": job_id, "states": [state]} if state else None
                return {self.msg: render.message(str(e), "error"), self.msg_for: bound, self.confirm: None}
            state = job_queries.get(db, job_id)["state"]
            # the message is true while the job stays in this state (paused, cancelled), or, when it was set
            # going, while it runs: it goes with it
            bound = {"job": job_id, "states": list(job_queries.ACTIVE) if state in job_queries.ACTIVE else [state]}
            return {self.msg: render.message(text, kind), self.msg_for: bound, self.confirm: None}

        handler.__name__ = f"job_{verb}"
        return handler

    def _unsent(self, db, job_id: int) -> str:
        c = job_queries.counts(db, job_id)
        return f"its {c['pending'] + c['leased']:,} clip(s) not captioned yet"

    def _ask_first(self, db, job: dict, verb: str, confirm) -> str:
        """The question to ask before a resume or a retry restarts a cancelled job, or "" to go ahead (not
        cancelled, nothing else would run, or this press confirms the one before)."""
        if job["state"] != "cancelled" or verb not in ("resume", "retry"):
            return ""
        if (
            isinstance(confirm, dict)
            and confirm.get("job") == job["id"]
            and confirm.get("verb") == verb
            and time.time() - float(confirm.get("at") or 0) < CONFIRM_S
        ):
            return ""
        c = job_queries.counts(db, job["id"])
        unsent = c["pending"] + c["leased"]
        if verb == "retry" and not unsent:
            return ""  # only its failed clips would run: nothing else to warn about
        button = "Resume" if verb == "resume" else "Retry failed"
        what = (
            f"Resume queues it again: {unsent:,} clip(s) not captioned yet are sent; the {c['done']:,} captioned "
            f"stay as they are and the {c['failed']:,} failed stay failed (Retry failed sends those a retry can "
            "help)."
            if verb == "resume"
            else f"Retry failed queues it again, so its {unsent:,} clip(s) not captioned yet are sent too, with the "
            "failed ones a retry can help."
        )
        return f"Job {job['id']} was cancelled. {what} Press {button} again to go ahead."

    def _nothing_to_resume(self, db, job: dict) -> str:
        failed = job_queries.counts(db, job["id"])["failed"]
        return f"Job {job['id']} is {job['state']}: nothing is left to resume" + (
            f" ({failed:,} failed: Retry failed sends those a retry can help)." if failed else "."
        )

    def _retry(self, db, job: dict, user: str) -> tuple[str, str]:
        r = jobs.retry_failed(db, job["id"], user)
        left = "; ".join(f"{n:,} {WHY_LEFT.get(why, why)}" for why, n in sorted(r.left.items()))
        if not r.requeued:
            text = f"Job {job['id']}: no failed clip a retry can help" + (f". Left failed: {left}." if left else ".")
            return text, "info"
        text = f"Job {job['id']}: {r.requeued:,} failed clip(s) queued again." + (
            f" Not retried, a retry cannot help: {left}." if left else ""
        )
        return text, "ok"
