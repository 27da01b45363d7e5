"""The Jobs form's inputs for the job parameters: one per `JobParams` field, made from the field (its label, its
default, the values it offers), as data.job_param_args makes the terminal's flags. A field added to JobParams
appears on the form, goes with Start and is checked there by its own check, with no edit here or in the tab's
wiring (webapp.jobs.start, webapp.jobs.tab), unless NOT_ON_FORM says why it stays off the form.

Each input is named `job-<field-name-with-dashes>` (its elem_id). The inputs come in the fields' declaration
order, which is also the order of their values in the start event: Gradio's API takes them positionally, so a
caller sends the job's name, its clips, the prompt version, then the fields' values, then the Browse filter. The
fields that serving.cost prices a job by (`serving.cost.PRICED_BY`) go with the preview too, in the same order,
and a change to one of them prices the job again.

An input follows its field's type: a whole number (`int`, `int | None`) is a Number without decimals, a `float` a
Number, a `str` a Textbox, and a field that offers values (the knob's `choices`) a Dropdown of them that takes any
other value too. No Number has a minimum or a maximum: Gradio would refuse an out-of-range value with a terse
message of its own before the handler runs; the field's check says why and what to use instead. Each input
starts at the deployment's default (the setting of the same name, else the field's own); one left empty takes
the default at Start (`JobParams.resolve`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any, Callable, Sequence

import gradio as gr

from data.job_params import JobParams
from serving import cost

# The JobParams fields the form does not offer, each with why (every one is a flag of `python -m serving.caption`).
# tests/webapp/test_job_fields.py fails for a name here that is not a field.
NOT_ON_FORM: dict[str, str] = {
    "temperature": "sampling is the deployment's choice (CW_TEMPERATURE); a job needing another is started from the "
    "terminal (--temperature)",
    "seed": "a fixed seed reproduces a run, which a terminal job asks for (--seed); the form's jobs take the server's",
    "top_logprobs": "the labels' confidence is read from the default alternatives; a job without it is started from "
    "the terminal (--top-logprobs 0)",
}


def elem_id(name: str) -> str:
    """The elem_id of field `name`'s input: `job-max-tokens`."""
    return "job-" + name.replace("_", "-")


def label(f: dataclasses.Field) -> str:
    """What a person reads beside the input: the knob's label, else the field's name in words."""
    return f.metadata.get("label") or f.name.replace("_", " ").capitalize()


def _kind(hint: Any, name: str) -> type:
    """The one type a field holds (`int | None` holds an int)."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    if len(kinds) != 1 or not isinstance(kinds[0], type):
        raise TypeError(f"JobParams.{name}: the Jobs form has no input for a {hint}")
    return kinds[0]


def _choice(value: Any, what: str) -> str:
    return f"{value:,} ({what})" if isinstance(value, int) else f"{value} ({what})"


def _default(settings: Any, f: dataclasses.Field) -> Any:
    """The deployment's default: the setting of the same name, else the field's (none: empty)."""
    own = None if f.default is dataclasses.MISSING else f.default
    return getattr(settings, f.name, own)


def make_input(f: dataclasses.Field, kind: type, value: Any) -> gr.components.Component:
    """The form's input for field `f` of type `kind`, showing `value`."""
    name, eid = label(f), elem_id(f.name)
    choices = f.metadata.get("choices") or ()
    if choices:
        offered = [(_choice(v, what), v) for v, what in choices]
        return gr.Dropdown(offered, value=value, label=name, allow_custom_value=True, elem_id=eid)
    if kind is int:
        return gr.Number(value, label=name, precision=0, elem_id=eid)
    if kind is float:
        return gr.Number(value, label=name, elem_id=eid)
    if kind is str:
        return gr.Textbox(value, label=name, elem_id=eid)
    raise TypeError(
        f"JobParams.{f.name} holds a {kind.__name__}: the Jobs form has no input for one yet (webapp.jobs.fields); "
        "add one there, or list the field in NOT_ON_FORM with why"
    )


class JobFields:
    """The form's inputs for the fields of `spec` (JobParams, or a dataclass of knobs like it) but those of
    `not_on_form`; `priced` names the fields the preview prices a job by."""

    def __init__(
        self,
        spec: type[JobParams] = JobParams,
        *,
        priced: Sequence[str] = cost.PRICED_BY,
        not_on_form: dict[str, str] = NOT_ON_FORM,
    ):
        self.spec = spec
        self.fields = [f for f in dataclasses.fields(spec) if f.name not in not_on_form]
        self.names = [f.name for f in self.fields]
        self.priced_names = [n for n in self.names if n in priced]
        self.inputs: dict[str, gr.components.Component] = {}

    def render(self, settings: Any) -> None:
        """Make the inputs, in the fields' order, where the form is being laid out."""
        hints = typing.get_type_hints(self.spec)
        for f in self.fields:
            self.inputs[f.name] = make_input(f, _kind(hints[f.name], f.name), _default(settings, f))

    @property
    def components(self) -> list[gr.components.Component]:
        """Every input, in the order the start event sends their values."""
        return [self.inputs[n] for n in self.names]

    @property
    def priced(self) -> list[gr.components.Component]:
        """The inputs of the priced fields, in the order the preview events send their values."""
        return [self.inputs[n] for n in self.priced_names]

    def named(self, values: Sequence[Any], names: Sequence[str] | None = None) -> dict[str, Any]:
        """{field: value} of values sent in the order of `names` (default: every input's)."""
        names = self.names if names is None else names
        if len(values) != len(names):
            raise TypeError(f"{len(values)} job parameter value(s) for {len(names)} field(s): {', '.join(names)}")
        return dict(zip(names, values))

    def priced_of(self, chosen: dict[str, Any]) -> list[Any]:
        """The values of the priced fields in `chosen`, in the order the preview takes them."""
        return [chosen.get(n) for n in self.priced_names]

    def event(self, fn: Callable, before: Sequence[str], names: Sequence[str], after: Sequence[str]) -> Callable:
        """`fn(*before, *fields, *after, request)` as Gradio calls an event's handler: it names the event's API
        parameters after the handler's (a script may send `frames=16` to /start_job) and passes gr.Request only to
        a parameter it sees. `fn`'s own `*rest` would hide both, so the handler shows one parameter per name in
        `names` (the fields whose values the event sends), between `before` and `after`, then the request."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter(n, kind) for n in (*before, *names, *after)]
        shown = inspect.Signature([*params, inspect.Parameter("request", kind, annotation=gr.Request)])

        @functools.wraps(fn)
        def handler(*args: Any, **kwargs: Any) -> Any:
            return fn(*shown.bind(*args, **kwargs).args)

        handler.__signature__ = shown  # type: ignore[attr-defined]
        handler.__annotations__ = {"request": gr.Request}
        return handler

    def resolve(self, settings: Any, chosen: dict[str, Any]) -> JobParams:
        """The job's parameters: the deployment's defaults, then what the form chose; every field checked (a
        value that cannot work is an InvalidJobParams that says what to use)."""
        return self.spec.resolve(settings, chosen)
