"""Fields whose label says what empty means do what it says (issue 26: "Seed (empty: a new one)" showed 0 and
drew with seed 0; "How many (empty: the whole filter)" showed 0).

Gradio's Number cannot be empty (with no value it shows and sends 0), so the app has no Number without a value:
checked over every component of the built app, with every field that promises an empty meaning a text box that
starts empty and says the meaning in its placeholder. `webapp.number_box.whole` reads those boxes. The browser
side (each field empty on the page, two draws with an empty seed two different samples) is
tests/browser/test_browser_samples.py."""

from __future__ import annotations

import gradio as gr
import pytest

from data.errors import DataError
from data.quality import samples
from webapp.number_box import whole


@pytest.fixture
def demo(settings):
    from webapp.app import build_app

    app = build_app(settings.replace(auth="off"))
    yield app.state.demo
    app.state.ctx.close()


def test_no_number_field_shows_a_zero_it_was_not_given_and_every_empty_meaning_is_an_empty_box(demo):
    blocks = list(demo.blocks.values())
    numbers = [b for b in blocks if isinstance(b, gr.Number)]
    assert numbers and all(b.value is not None for b in numbers), [b.elem_id for b in numbers if b.value is None]
    promised = [b for b in blocks if "empty" in str(getattr(b, "label", "") or "").lower()]
    by_id = {b.elem_id: b for b in blocks}
    for elem in ("sample-seed", "sample-size", "second-sample", "assign-count", "f-job", "job-id"):
        assert isinstance(by_id[elem], gr.Textbox) and not by_id[elem].value and by_id[elem].placeholder, elem
    assert {b.elem_id for b in promised} == {
        "sample-seed",
        "assign-count",
        "quality-target-confidence",
        "release-license",
    }
    for b in promised:
        assert isinstance(b, gr.Textbox) and not b.value and b.max_lines == 1
        meaning = b.label.lower().split("empty:")[1].strip(" )")
        assert meaning in b.placeholder, (b.label, b.placeholder)


def test_a_number_box_reads_empty_as_none_and_refuses_what_is_no_whole_number():
    for empty in (None, "", "   "):
        assert whole(empty, "The seed") is None
    assert [whole(v, "The seed") for v in ("42", " 7 ", 12, "12.0", "1,000", 0)] == [42, 7, 12, 12, 1000, 0]
    for bad in ("abc", "1.5", "nan", "inf", "4e"):
        with pytest.raises(DataError, match="The seed must be a whole number, not"):
            whole(bad, "The seed")
    with pytest.raises(DataError, match="of 0 or more"):
        whole("-3", "The seed")


def test_an_empty_seed_is_a_new_one_each_time_and_a_given_one_is_kept():
    seeds = {samples.checked_seed(v) for v in (None, "", " ") for _ in range(5)}
    assert len(seeds) > 10 and all(0 <= s < 2**31 for s in seeds)
    assert samples.checked_seed("42") == samples.checked_seed(42) == 42
    with pytest.raises(DataError, match="0 or more"):
        samples.checked_seed(-1)
