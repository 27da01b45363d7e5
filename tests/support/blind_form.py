"""The blind second review's form in a real browser: Review's keyboard pickers (webapp.picker, scope "second"), empty
when a second review opens, so a test sets every label as a person would: the label's key, the text, Enter."""

from __future__ import annotations

from data import taxonomy

LABELS = list(taxonomy.ENUMS)
KEY = {name: str(i) for i, name in enumerate(LABELS, 1)}


def to_page(page) -> None:
    """Focus on the page itself (out of any field): the next key is a shortcut."""
    page.evaluate("document.activeElement?.blur(); document.body.focus()")


def typed_for(name: str, value: str, how: str = "name") -> str:
    """What a person types for `value` of label `name`: its whole name ("name"), its number ("number"), its
    shortest prefix ("prefix": the start of its name no other option shares; the whole name when there is none),
    or the fewer characters of those two ("fewest", the prefix on a tie: docs/keys-per-clip.txt's rule)."""
    options = list(taxonomy.ENUMS[name])
    number = str(options.index(value) + 1)
    prefix = next(
        (value[:k] for k in range(1, len(value)) if [o for o in options if o.startswith(value[:k])] == [value]), value
    )
    return {"name": value, "number": number, "prefix": prefix}.get(how) or (
        prefix if len(prefix) <= len(number) else number
    )


def fill_labels(page, labels: dict, how: str = "name") -> int:
    """Set each label of the Second review tab with the keyboard (every item of a multi-choice label); returns the
    keys pressed."""
    to_page(page)
    pressed = 0
    for name in LABELS:
        values = labels[name] if name in taxonomy.MULTI else [labels[name]]
        for value in values:
            text = typed_for(name, value, how)
            page.keyboard.press(KEY[name])
            page.keyboard.type(text)
            page.keyboard.press("Enter")
            pressed += 2 + len(text)
    return pressed


def values(page) -> dict:
    """What each field of the Second review tab holds (what an answer sends)."""
    return page.evaluate("window.cwPicker.values('second')")


def form_is_empty(page) -> bool:
    """Whether every label field of the Second review tab is empty (no value typed or chosen, no chip)."""
    return page.evaluate(
        """(ids) => ids.every(id => {
            const box = document.querySelector('#' + id);
            return box && !box.querySelector('.cw-chip') && (box.querySelector('input')?.value ?? '') === '';
        })""",
        [f"second-label-{name}" for name in LABELS],
    ) and all(v in (None, []) for v in values(page).values())
