"""data.textdiff: the word diff's opcodes turn one text into the other exactly, and the edit ratio says how much a
reviewer changed a caption (0 unchanged, 1 nothing kept). Its bound at the caption limit is R11's
(tests/webapp/test_input_bounds.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from data import textdiff
from tests.support.examples import examples

words = st.lists(st.sampled_from(["a", "car", "bus", "turns", "left", "the", "pedestrian", "x"]), max_size=40)


def lcs(a: list[str], b: list[str]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev_diag, row[0] = 0, 0
        for j, y in enumerate(b, 1):
            prev_diag, row[j] = row[j], prev_diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def apply(d: textdiff.WordDiff) -> list[str]:
    """Rebuild the new text's words from the old one's and the opcodes."""
    out: list[str] = []
    pos_a = pos_b = 0
    for tag, i1, i2, j1, j2 in d.ops:
        assert (i1, j1) == (pos_a, pos_b), d.ops  # contiguous, in order, nothing skipped
        if tag == "equal":
            assert d.a[i1:i2] == d.b[j1:j2]
            out += d.a[i1:i2]
        else:
            assert tag in ("replace", "delete", "insert") and (i2 > i1 or j2 > j1)
            out += d.b[j1:j2]
        pos_a, pos_b = i2, j2
    assert (pos_a, pos_b) == (len(d.a), len(d.b))
    return out


@hsettings(max_examples=examples(300), deadline=None)
@given(a=words, b=words)
def test_opcodes_turn_the_old_words_into_the_new(a, b):
    d = textdiff.word_diff(" ".join(a), " ".join(b))
    assert (d.a, d.b, d.cut) == (a, b, False)
    assert apply(d) == b
    kept = sum(i2 - i1 for tag, i1, i2, _, _ in d.ops if tag == "equal")
    assert kept <= lcs(a, b)  # no alignment keeps more than the longest common subsequence
    ratio = textdiff.edit_ratio(" ".join(a), " ".join(b))
    assert 0.0 <= ratio <= 1.0
    assert (ratio == 0.0) == (a == b)
    assert ratio == pytest.approx(1 - kept / max(len(a), len(b)) if a or b else 0.0)


@pytest.mark.parametrize(
    "old, new, ratio",
    [
        ("", "", 0.0),
        (None, "", 0.0),
        ("a car turns left", "a car  turns\nleft", 0.0),  # whitespace is not a word
        ("one two three four five six seven eight nine ten", "one two three four five six seven eight nine 10", 0.1),
        ("one two three four five six seven eight nine", "one two three four five six seven eight nine ten", 0.1),
        ("a car turns left", "", 1.0),
        ("", "a new caption", 1.0),
        ("a car turns left", "the bus goes right", 1.0),
        ("a car turns left", "a car turns right", 0.25),
    ],
)
def test_edit_ratio_hand_worked(old, new, ratio):
    assert textdiff.edit_ratio(old, new) == pytest.approx(ratio)


def test_the_bound_cuts_a_huge_diff_short_and_says_so():
    a = " ".join(f"a{i}" if i % 3 else "x" for i in range(3000))
    b = " ".join(f"b{i}" if i % 3 else "x" for i in range(3000))
    d = textdiff.word_diff(a, b)
    assert d.cut and apply(d) == d.b  # coarse, still exact
    assert textdiff.edit_ratio(a, b) >= 1 - 1000 / 3000  # an upper bound: at most the 1,000 x's could be kept
