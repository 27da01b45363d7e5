"""What an event costs the app beyond its handler (issue 27, a team's load through the page's path).

Profiling 50 annotators (benchmarks/bench_team.py) put most of the app's CPU per review event in Gradio's own
work on the event loop: rebuilding every output a handler left unchanged, and recomputing the monitoring summary
with pandas after every event. webapp.blocks and Workbench.build stop both; these tests hold them, by counting
the work (the figures are the benchmark's)."""

from __future__ import annotations

import asyncio

import gradio as gr
import pytest

from tests.support.reliability_fixtures import GradioSession, dependencies
from webapp.blocks import SKIP, Blocks


@pytest.fixture
def built(monkeypatch):
    """A small Blocks of ours: one event with five outputs, and a count of components Gradio builds."""
    with Blocks() as demo:
        shown = gr.HTML("a", elem_id="shown")
        other = gr.HTML("b", elem_id="other")
        hidden = gr.Button("x", visible=False)
        listed = gr.Dropdown(choices=["p", "q"], value=None)
        kept = gr.State(None)
        btn = gr.Button("go")
        btn.click(lambda: None, None, [shown, other, hidden, listed, kept])
    fn = next(f for f in demo.fns.values() if len(f.outputs) == 5)
    built = []
    for cls in (gr.HTML, gr.Button, gr.Dropdown):
        original = cls.__init__

        def counting(self, *a, _original=original, **k):
            built.append(type(self).__name__)
            _original(self, *a, **k)

        monkeypatch.setattr(cls, "__init__", counting)
    from gradio.state_holder import SessionState

    return demo, fn, (shown, other, hidden, listed, kept), SessionState(demo), built


def test_outputs_a_handler_leaves_out_are_not_rebuilt(built):
    demo, fn, (shown, other, hidden, listed, kept), state, made = built
    out = asyncio.run(demo.postprocess_data(fn, {shown: "new text", kept: 7}, state))
    assert out[0] == "new text" and out[1:4] == [SKIP, SKIP, SKIP] and out[4] is None
    assert state[kept._id] == 7
    assert made == []  # before: the HTML, the Button and the Dropdown left out were each built anew
    stock = asyncio.run(gr.Blocks.postprocess_data(demo, fn, {shown: "new text", kept: 7}, state))
    assert stock[0] == out[0] and len(made) == 3  # Gradio's own path, for comparison


def test_an_update_to_what_the_component_already_is_is_no_work_and_a_change_still_applies(built):
    demo, fn, (shown, other, hidden, listed, kept), state, made = built
    out = asyncio.run(demo.postprocess_data(fn, {hidden: gr.update(visible=False), shown: "t"}, state))
    assert out[2] == SKIP and made == []  # hidden already
    out = asyncio.run(demo.postprocess_data(fn, {hidden: gr.update(visible=True), shown: "t"}, state))
    assert out[2]["visible"] is True and made == ["Button"]
    assert state[hidden._id].visible is True  # the session's copy follows, so the next comparison is right
    out = asyncio.run(demo.postprocess_data(fn, {hidden: gr.update(visible=True), shown: "t"}, state))
    assert out[2] == SKIP and made == ["Button"]
    out = asyncio.run(demo.postprocess_data(fn, {listed: gr.update(choices=["p", "q"], value="p"), shown: "t"}, state))
    assert out[3]["value"] == "p"  # an update with a value is always applied


def test_other_return_shapes_go_to_gradio_as_they_were(built):
    demo, fn, (shown, other, hidden, listed, kept), state, made = built
    out = asyncio.run(demo.postprocess_data(fn, ["a2", "b2", gr.skip(), gr.skip(), 3], state))
    assert out[:2] == ["a2", "b2"] and state[kept._id] == 3
    assert asyncio.run(demo.postprocess_data(fn, gr.skip(), state))[0]["__type__"] == "update"


def test_gradios_monitoring_summary_is_not_recomputed_after_every_event(server, monkeypatch):
    """Before: a pandas summary over up to 10,000 past events after each event, on every event."""
    queue = server.app.state.demo._queue
    summaries = []
    original = type(queue)._get_df
    monkeypatch.setattr(type(queue), "_get_df", staticmethod(lambda records: summaries.append(1) or original(records)))
    cookie = server.client("ann").cookies["cw_session"]
    tab = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    try:
        for _ in range(20):
            tab.call("history_newest", [1])
    finally:
        tab.close()
    assert len(summaries) <= 1, len(summaries)  # before: 20
