"""The Jobs form's job parameters are made from `JobParams` (webapp.jobs.fields), as the terminal's flags are
(data.job_param_args): a field added to a JobParams-like spec appears on the form with its label and default, goes
with Start under its own name and is checked there, and the events keep the API Gradio shows (one parameter per
field, positionally before the Browse filter). The tab is built in-process over a real SQLite file; Start runs
through Gradio's own event processing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from data.errors import InvalidJobParams
from data.job_params import JobParams, knob
from serving import cost
from tests.support.runner_fixtures import add_clips
from webapp.context import AppContext
from webapp.jobs import fields as job_fields
from webapp.jobs.tab import JobsTab


def _language(value) -> str:
    code = str(value).strip().lower()
    if not re.fullmatch(r"[a-z]{2}", code):
        raise InvalidJobParams(f"Caption language must be a two-letter code such as en, not {str(value)[:20]!r}.")
    return code


@dataclasses.dataclass(frozen=True)
class WithLanguage(JobParams):
    """JobParams and one field more, as a change to JobParams would add it: nothing else is edited."""

    language: str = knob(_language, str, "the language captions are written in", "en", label="Caption language")


def test_every_job_parameter_is_on_the_form_or_says_why_not():
    names = [f.name for f in dataclasses.fields(JobParams)]
    on_form = job_fields.JobFields().names
    assert on_form == [n for n in names if n not in job_fields.NOT_ON_FORM]  # declaration order
    assert set(job_fields.NOT_ON_FORM) <= set(names), set(job_fields.NOT_ON_FORM) - set(names)
    assert all(len(why) > 20 for why in job_fields.NOT_ON_FORM.values())
    assert set(cost.PRICED_BY) <= set(on_form)  # the preview prices by what the form offers


@pytest.fixture
def tab(settings):
    """The Jobs tab for the WithLanguage spec, rendered and wired in a Blocks of its own (login off)."""
    ctx = AppContext(settings.replace(auth="off"))
    with gr.Blocks() as demo:
        filter_state = gr.State({})
        jobs_tab = JobsTab(ctx, WithLanguage)
        jobs_tab.render()
        jobs_tab.wire(filter_state)
    jobs_tab.demo = demo
    yield jobs_tab
    ctx.close()


def _event(demo: gr.Blocks, api_name: str):
    return next(f for f in demo.fns.values() if f.api_name == api_name)


def _start(demo: gr.Blocks, values: list) -> list:
    """Start as the page sends it: Gradio preprocesses each input, passes the request, runs the handler."""
    out = asyncio.run(demo.process_api(_event(demo, "start_job"), values, state=SessionState(demo)))
    return out["data"]


def test_a_field_added_to_the_spec_appears_on_the_form_and_goes_with_start(tab, db):
    demo = tab.demo
    language = next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == "job-language")
    assert isinstance(language, gr.Textbox) and language.label == "Caption language" and language.value == "en"
    start = _event(demo, "start_job")
    assert [getattr(c, "elem_id", None) for c in start.inputs] == [
        "job-name",
        "job-source",
        "job-prompt",
        "job-frames",
        "job-max-tokens",
        "job-max-pixels",
        "job-language",
        None,  # the Browse filter (a State)
        None,  # the preview shown
    ]
    # the API names it too, and it does not price a job: the preview does not send it
    params = demo.get_api_info()["named_endpoints"]["/start_job"]["parameters"]
    assert [p["parameter_name"] for p in params][3:7] == ["frames", "max_tokens", "max_pixels", "language"]
    assert language not in _event(demo, "job_preview").inputs
    add_clips(db, 3)
    msg, _, job_id, *_ = _start(demo, ["in French", "everything uncaptioned", None, 16, 640, None, "FR", {}, None])
    assert "Started job" in msg, msg
    stored = json.loads(db.execute("SELECT params FROM jobs WHERE id = ?", [job_id]).fetchone()[0])
    assert stored["language"] == "fr" and stored["frames"] == 16 and stored["max_tokens"] == 640
    # its own check refuses what cannot work, with its words, and starts nothing
    msg, *_ = _start(demo, ["in Klingon", "everything uncaptioned", None, 16, 640, None, "Klingon", {}, None])
    assert "Caption language must be a two-letter code" in msg, msg
    assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 1


def test_a_field_of_a_type_the_form_has_no_input_for_is_refused_when_the_form_is_built(settings):
    @dataclasses.dataclass(frozen=True)
    class WithFlags(JobParams):
        flags: tuple = knob(tuple, tuple, "labels to skip", ())

    ctx = AppContext(settings.replace(auth="off"))
    try:
        with pytest.raises(TypeError, match="flags .*NOT_ON_FORM"), gr.Blocks():
            JobsTab(ctx, WithFlags).render()
    finally:
        ctx.close()
