"""The review form as a handler receives it: which clip, the versions it was loaded from, what is typed.

Every handler that may leave a clip (save, approve/reject, j/k, the queue, Back, a Browse tile) gets the whole
form, so that it can save an edit first. Gradio passes inputs positionally and gives gr.Request only to a
named positional parameter, so those handlers take `(request, *values)` and read the form with
`ReviewForm.split(values)`: one place that knows the form's shape instead of an 11-parameter signature per
handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from data import taxonomy
from data.errors import DataError

LABELS = list(taxonomy.ENUMS)


@dataclass(frozen=True)
class ReviewForm:
    clip_id: int | None = None
    base: int | None = None  # the caption version the form was loaded from (optimistic saves)
    review_base: str | None = None  # the review state it showed (data.captions.review_token)
    text: str | None = None
    label_values: tuple = ()  # one value per label, in taxonomy.ENUMS order

    SIZE: ClassVar[int] = 4 + len(LABELS)

    @classmethod
    def split(cls, values: Sequence) -> tuple[ReviewForm, list]:
        """The form from the first SIZE input values (in ReviewView.form_inputs order), and the values after it
        (a handler's own inputs: the filter, the sort)."""
        values = list(values)
        if len(values) < cls.SIZE:  # a script calling the API with a short list: missing values are "not sent"
            values += [None] * (cls.SIZE - len(values))
        clip_id, base, review_base, text, *labels = values[: cls.SIZE]
        return cls(clip_id, base, review_base, text, tuple(labels)), values[cls.SIZE :]

    def values(self) -> list:
        """The input values this form stands for (the inverse of `split`): for scripts and benchmarks."""
        labels = list(self.label_values) or [None] * len(LABELS)
        return [self.clip_id, self.base, self.review_base, self.text, *labels]

    @classmethod
    def from_draft(cls, draft: dict) -> ReviewForm:
        """The form a draft (data.drafts.get) fills in: for showing it beside a conflicting version."""
        return cls(
            draft["clip_id"],
            draft["base_caption_id"],
            None,
            draft["text"],
            tuple(draft["labels"].get(name) for name in LABELS),
        )

    @classmethod
    def of(cls, cap: dict) -> ReviewForm:
        """The form a stored caption version fills in (to compare two versions as a form would)."""
        labels = cap.get("labels") or {}
        return cls(cap["clip_id"], cap["id"], None, cap.get("text") or "", tuple(labels.get(n) for n in LABELS))

    def draft_labels(self) -> dict:
        """The labels as typed, none refused (an empty one stays empty): what a conflict view or a draft shows."""
        return {
            name: list(value or []) if name in taxonomy.MULTI else (value or None)
            for name, value in zip(LABELS, self.label_values)
        }

    def labels(self) -> dict:
        """The labels as data.captions stores them; a DataError names the first single-choice label left empty."""
        labels = {}
        for name, value in zip(LABELS, self.label_values):
            if name in taxonomy.MULTI:
                labels[name] = list(value or [])
            elif not value:
                raise DataError(f"Choose a value for {name.replace('_', ' ')}.")
            else:
                labels[name] = value
        return labels

    def differs_from(self, cap: dict | None) -> bool:
        """Does the form differ from the stored caption `cap` (the version it was loaded from)? A form sent
        without any values (a script driving the queue; a browser always sends the textbox's string) carries
        no edit."""
        if self.text is None and all(v is None for v in self.label_values):
            return False
        if cap is None:
            return bool((self.text or "").strip()) or any(v for v in self.label_values)
        if (self.text or "").strip() != (cap["text"] or "").strip():
            return True
        stored = cap.get("labels") or {}
        for name, value in zip(LABELS, self.label_values):
            if name in taxonomy.MULTI:
                if sorted(value or []) != sorted(stored.get(name) or []):
                    return True
            elif (value or None) != (stored.get(name) or None):
                return True
        return False
