"""Gradio's Blocks, with the outputs a handler leaves unchanged costing nothing (issue 27, a team's load).

Our handlers return dicts keyed by component: the review view names the 20-odd outputs it changes out of the
35 its events declare. Gradio (6.x, `Blocks.postprocess_data`) fills every output left out with `gr.skip()` and
then treats each skip as a property update: it builds a new instance of the component from its constructor
arguments, recomputes the component's config (an `inspect.signature` per call) and stores both in the session
state, on the event loop that serves every request. A skip changes nothing, so this was pure cost: measured
with benchmarks/bench_team.py, most of the app's CPU per review event, and on a shared 2-core machine the event
loop was the first thing to saturate.

`Blocks.postprocess_data` here hands Gradio only the outputs the handler named with something to change, and
answers `gr.skip()` (the bytes Gradio itself sends for one) for the others: left out, named with gr.skip(), or
an update that sets properties to what the session's copy of the component already holds (the view hides the
reload button on every open; it is hidden already).
Every other return shape (a list, a single value, a lone skip, a key that is not an output) goes to Gradio
unchanged.
"""

from __future__ import annotations

import copy

from gradio.blocks import Block

from webapp import failures

SKIP = {"__type__": "update"}  # what Gradio answers for an output it skips (gr.skip() after postprocessing)
# properties only the server changes: the browser's copy is the session's (a tab's `selected` or an accordion's
# `open` change in the browser, and a value is always sent)
SERVER_PROPS = {"visible", "interactive", "choices"}


def _unchanged(block, value, state) -> bool:
    """Is `value` (what a handler returned for `block`) a skip, or an update that sets properties to what the
    session's copy of the component already has (`gr.update(visible=False)` on a hidden button)?"""
    if not isinstance(value, dict) or value.get("__type__") != "update":
        return False
    props = {k: v for k, v in value.items() if k != "__type__"}
    if not props:
        return True
    if state is None or not set(props) <= SERVER_PROPS:
        return False
    current = getattr(state.get(block._id, block), "constructor_args", None) or {}
    return all(k in current and _same(current[k], v) for k, v in props.items())


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a value that cannot say whether it is equal is not
        return False


class Blocks(failures.Blocks):
    """failures.Blocks (every failure of an event is a sentence for a person), whose skipped outputs cost nothing."""

    async def postprocess_data(self, block_fn, predictions, state):
        outputs = list(block_fn.outputs)
        if (
            len(outputs) > 1
            and isinstance(predictions, dict)
            and predictions
            and all(isinstance(k, Block) for k in predictions)
        ):
            if any(k not in outputs for k in predictions):  # a key that is no output: Gradio says so
                return await super().postprocess_data(block_fn, predictions, state)
            named = [
                i
                for i, block in enumerate(outputs)
                if block in predictions and not _unchanged(block, predictions[block], state)
            ]
            if len(named) < len(outputs):
                out = [dict(SKIP) for _ in outputs]
                if not named:
                    return out
                fn = copy.copy(block_fn)
                fn.outputs = [outputs[i] for i in named]
                if len(named) == 1:  # Gradio reads a single output's value bare, not as a dict
                    data = await super().postprocess_data(fn, predictions[outputs[named[0]]], state)
                else:
                    data = await super().postprocess_data(
                        fn, {outputs[i]: predictions[outputs[i]] for i in named}, state
                    )
                for j, i in enumerate(named):
                    out[i] = data[j]
                return out
        return await super().postprocess_data(block_fn, predictions, state)
