"""The page's copy of a form's server-side state, sent back with the form.

A form's state (the Review tab's clip and the versions it was loaded from; the Second review tab's task) is held
by the server as gr.State, so that a page cannot forge it (a blind second review stays blind); what is typed or
chosen is held by the page. An answer sets the state on the server before the page shows what goes with it: a key
pressed in between (n then a) sent the old clip's text with the new clip's state, and approve saved one clip's
caption onto the other as the person's edit. So the page keeps a hidden copy of each state, set by the same answers
(`echo_events`, from what the handler returns), and sends it with the form; a copy that differs from the state is
refused (`check`). A script calling the API sends no copy (None): there is nothing to compare.
"""

from __future__ import annotations

import functools
import inspect
from typing import Sequence

import gradio as gr

from data.errors import DataError
from webapp import failures

HALF_SENT = (
    "Not done: this was sent while the answer to your last action was still on its way to the page, so the form "
    "it sent was partly the one you were leaving. Nothing was saved or changed: press it again."
)


class HalfSent(DataError):
    """The page sent a form whose copy of the state is not the state (a key pressed before an answer showed)."""


def copy_of(value) -> str:
    """The page's copy of one value of a form's state (a hidden text box: None is empty)."""
    return "" if value is None else str(value)


def copy_box(elem_id: str) -> gr.Textbox:
    """The hidden text box that holds the page's copy of one state."""
    return gr.Textbox("", visible="hidden", elem_id=elem_id)


def check(states: Sequence, copies: Sequence) -> None:
    """Raise HalfSent unless the page's `copies` are those of `states` (no copy sent at all: nothing to check)."""
    if any(c is not None for c in copies) and [copy_of(s) for s in states] != [c or "" for c in copies]:
        raise HalfSent(HALF_SENT)


def _at(blocks: list, block) -> int | None:
    return next((i for i, b in enumerate(blocks) if b is block), None)


def echo_events(demo: gr.Blocks, pairs: dict) -> int:
    """For `pairs` ({state: copy box}): make every event of `demo` that sets a state set its copy too, from what
    its handler returns, and every event that is sent a copy (its last inputs; its handler takes gr.Request and
    gr.EventData before them) refuse the form when the copy is not the state, and call its handler without the
    copies. A wiring that
    breaks these rules fails here, when the app is built. Returns how many events."""
    n = 0
    for block_fn in demo.fns.values():
        ins, outs = list(block_fn.inputs), list(block_fn.outputs)
        sets = [(state, box) for state, box in pairs.items() if _at(outs, state) is not None]
        sent = [(state, box) for state, box in pairs.items() if _at(ins, box) is not None]
        if (not sets and not sent) or block_fn.fn is None:
            continue
        name = block_fn.name
        missing = [box.elem_id for _, box in sets if _at(outs, box) is None]
        if missing:
            raise RuntimeError(f"{name}: sets a form's state without its copy {', '.join(missing)}")
        if sent:
            if sorted(_at(ins, box) for _, box in sent) != list(range(len(ins) - len(sent), len(ins))):
                raise RuntimeError(f"{name}: a form's copies must be its last inputs")
            if any(_at(ins, state) is None for state, _ in sent):
                raise RuntimeError(f"{name}: is sent a copy without its state")
            if not _injected_first(block_fn.fn):
                raise RuntimeError(f"{name}: a handler sent a form's copy takes gr.Request and gr.EventData first")
        block_fn.fn = _echoing(block_fn.fn, sets, [(_at(ins, s), _at(ins, b)) for s, b in sent])
        n += 1
    return n


def _injected(fn) -> list[bool]:
    """For each parameter of `fn`: is it one Gradio passes besides the inputs (gr.Request, gr.EventData)?"""
    return [
        "Request" in str(p.annotation) or "EventData" in str(p.annotation)
        for p in inspect.signature(fn).parameters.values()
    ]


def _injected_first(fn) -> bool:
    """Does `fn` take what Gradio passes besides the inputs before any input?"""
    kinds = _injected(fn)
    return kinds == sorted(kinds, reverse=True)


def _echoing(fn, sets: list, sent: list):
    """`fn` that first checks each (state, copy) input position pair of `sent` and drops the copies (the last
    inputs), then sets each copy box of `sets` ((state, box)) to what its answer sets the state to (a skipped state
    leaves its copy as it is). The form's handlers answer with a dict keyed by component."""
    if inspect.iscoroutinefunction(fn):
        raise RuntimeError(f"{fn.__name__}: an async handler of a form is not echoed")
    lead = sum(_injected(fn))  # what Gradio passes first besides the inputs (_injected_first)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if sent:
            try:
                check([args[lead + i] for i, _ in sent], [args[lead + j] for _, j in sent])
            except HalfSent as e:
                raise failures.as_message(e) from None
            args = args[: len(args) - len(sent)]
        out = fn(*args, **kwargs)
        if isinstance(out, dict):  # gr.skip() too: it names no component
            for state, box in sets:
                if state in out:
                    value = out[state]
                    out[box] = value if isinstance(value, dict) else copy_of(value)  # a dict: gr.skip(), gr.update()
        return out

    return wrapper
