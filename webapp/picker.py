"""The label picker: one taxonomy label as a keyboard-first field (issue 18).

Why not gr.Dropdown: on Enter it takes the first option that *contains* the typed text (`t` on lighting is
night_lit, not tunnel), drops text that names nothing without a word, scrolls the page when a field low on it
opens, and draws its list in a layer of its own that can outlive the field. This field is a `gr.HTML` whose value
is what the Dropdown's was (an option, or a list of options for a multi-choice label), so handlers receive it the
same way (webapp.review.form.ReviewForm); the page script webapp/static/picker.js draws it and sets the value at once on
Enter, so a save or an approve sends what the field shows.

The rule Enter follows, for every label (the browser tests are generated from data.taxonomy.ENUMS):
- the option's number (shown beside it, as Label Studio and CVAT show their hotkeys), or its whole name, takes it;
- text that exactly one option's name starts with takes that option;
- text that no option's name starts with may match the start of a later word (`lit` -> night_lit); word starts
  are only consulted when no name starts with the text, so they never make a unique prefix ambiguous;
- text that fits several options shows them and says so; a second Enter takes the highlighted one (arrow keys
  move it); text that fits none says so, and the value stays as it was.
"""

from __future__ import annotations

import re

import gradio as gr

from data import taxonomy
from webapp import render

MOUNT = "window.cwPicker.mount(element, props, watch);"
# what an option may be spelt with: its name goes into the template, which Gradio evaluates as a JS template string
OPTION = re.compile(r"[a-z0-9_]+")


def label_picker(name: str, shortcut: int, scope: str = "review") -> gr.HTML:
    """The picker of taxonomy label `name`, opened by the key `shortcut` (1-7, shown in its label). Its value is
    what a Dropdown's was: an option or None, or a list of options for a multi-choice label; the data layer
    refuses anything else (data.taxonomy.validate_labels), as it does for any caller. `scope`: the form it belongs
    to ("review": Review's, elem_id label-NAME; "second": the blind second review's, elem_id second-label-NAME):
    each form's keys open its own fields, and the page script tells them apart.

    A plain gr.HTML rather than a subclass: Gradio writes a type stub next to the module of every component
    subclass when it is imported."""
    multi = name in taxonomy.MULTI
    return gr.HTML(
        value=[] if multi else None,
        html_template=template(name, shortcut, scope),
        js_on_load=MOUNT,
        apply_default_css=False,
        elem_id=f"label-{name}" if scope == "review" else f"{scope}-label-{name}",
    )


def template(name: str, shortcut: int, scope: str = "review") -> str:
    """The field's markup before picker.js builds it: what the script needs to know, as data attributes.

    Not gr.HTML's custom props: Gradio 6.31 replaces those with `{"__type__": "update"}` whenever a handler leaves
    the component out of its answer, and a field mounted after that (a tab first shown) would know no options. The
    template holds no value either, so a change of value never re-renders the markup the script owns."""
    options = taxonomy.ENUMS[name]
    bad = [o for o in options if not OPTION.fullmatch(o)]
    if bad:
        raise ValueError(f"{name}: option {bad[0]!r} is not a lowercase identifier")
    if not OPTION.fullmatch(scope):
        raise ValueError(f"a picker's scope is a lowercase identifier, not {scope!r}")
    data = {
        "scope": scope,
        "name": name,
        "title": name.replace("_", " "),
        "hotkey": str(shortcut),
        "multi": "1" if name in taxonomy.MULTI else "",
        "options": " ".join(options),
    }
    return render.label_field(data)
