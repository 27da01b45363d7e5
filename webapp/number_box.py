"""Whole-number fields that may be left empty, and say what empty means ("Seed (empty: a new one)").

Gradio's `gr.Number` cannot be empty: with `value=None` (with or without a placeholder) it shows 0 and an untouched
field sends 0 (Gradio 6.31, seen in Chromium). So "Seed (empty: a new one)" drew with seed 0 every time, and "How
many (empty: the whole filter)" showed 0. Such fields are one-line text boxes here, empty until someone types, with
the meaning of empty as their placeholder; `whole` reads them.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from data.errors import DataError


def number_box(label: str, *, empty: str, elem_id: str, **kwargs: Any) -> gr.Textbox:
    """A one-line field for a whole number: empty at first, `empty` (what empty means) shown inside it."""
    return gr.Textbox(label=label, value=None, placeholder=empty, lines=1, max_lines=1, elem_id=elem_id, **kwargs)


def whole(value: Any, what: str, *, minimum: int = 0) -> int | None:
    """The whole number in a number box: None when it is empty (or blanks), else an int of at least `minimum`;
    DataError naming `what` for anything else (a number sent by the API as a number is read as well)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip().replace(",", "")
    try:
        n = int(text)
    except ValueError:
        try:  # 12.0, as a browser's number field or the API may send it
            x = float(text)
            if not x.is_integer():
                raise ValueError
            n = int(x)
        except (ValueError, OverflowError):
            raise DataError(f"{what} must be a whole number, not {str(value)[:20]!r}.") from None
    if n < minimum:
        raise DataError(f"{what} must be a whole number of {minimum} or more, not {n:,}.")
    return n
