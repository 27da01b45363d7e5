"""The blind second review's form in a real browser: it opens empty, so a test sets every label as a person would."""

from __future__ import annotations

from data import taxonomy
from tests.support.browser_fixtures import choose


def fill_labels(page, labels: dict) -> None:
    """Choose each label's value on the Second review tab (every item of a multi-choice label)."""
    for name in taxonomy.ENUMS:
        elem = f"second-{name.replace('_', '-')}"
        values = labels[name] if name in taxonomy.MULTI else [labels[name]]
        for value in values:
            choose(page, elem, value)


def form_is_empty(page) -> bool:
    """Whether every label field of the Second review tab is empty (no value typed or chosen, no chip)."""
    return page.evaluate(
        """(ids) => ids.every(id => {
            const box = document.querySelector('#' + id);
            return box && !box.querySelector('.token') && (box.querySelector('input')?.value ?? '') === '';
        })""",
        [f"second-{name.replace('_', '-')}" for name in taxonomy.ENUMS],
    )
