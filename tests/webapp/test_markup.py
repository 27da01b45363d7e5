"""Markup is built in one place (issue 28): the render modules (webapp/render*.py, and each tab's
webapp/TAB/render.py), where every value is escaped as the fragment is made. No other product module holds an HTML
tag in a string, read from the source (nothing is run): a string constant or the literal pieces of an f-string,
docstrings left out. A tag found elsewhere moves to a render helper; the few strings below are not page markup and
say why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from webapp import render

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("data", "serving", "webapp")
RENDER = ("webapp/render*.py", "webapp/*/render.py")  # the one place markup is made: the shared pieces and each tab's
# a browser starts a tag only where a letter follows "<" or "</": "a < b" is text
TAG = re.compile(
    r"</?(a|abbr|b|body|br|button|code|del|details|div|em|form|h[1-6]|head|hr|html|i|iframe|img|input|ins|"
    r"kbd|label|li|link|main|mark|meta|ol|option|p|pre|script|section|select|small|span|strong|style|sub|summary|"
    r"sup|svg|table|tbody|td|textarea|th|thead|time|title|tr|ul|video)\b",
    re.IGNORECASE,
)
# path: (the tags it may hold, why they are not page markup)
NOT_MARKUP = {
    "data/library/demo.py": ({"html", "head", "title", "body"}, "a demo clip that is an HTML error page, for ingest"),
    "data/release/files.py": ({"video"}, "the <video> token of Qwen's fine-tuning format, in training data"),
    "data/release/card.py": ({"video"}, "the release card (Markdown) quotes that token"),
    "data/release/card_method.py": ({"video"}, "the release card's loading notes (Markdown) quote that token"),
}


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }


def _strings(tree: ast.Module):
    """(line, text) of every string a module writes: each constant, and each f-string with its values as {}."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip |= {id(v) for v in node.values}
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def _tags() -> dict[str, list[tuple[int, set[str], str]]]:
    """path: [(line, the tags, the string's start)] for each string with a tag, in each product module outside
    the render modules."""
    found: dict[str, list[tuple[int, set[str], str]]] = {}
    render = {p for pattern in RENDER for p in ROOT.glob(pattern)}
    for path in sorted(p for top in PACKAGES for p in (ROOT / top).rglob("*.py")):
        if path in render:
            continue
        rel = str(path.relative_to(ROOT))
        for line, text in sorted(_strings(ast.parse(path.read_text(), filename=rel))):
            tags = {m.group(1).lower() for m in TAG.finditer(text)}
            if tags:
                found.setdefault(rel, []).append((line, tags, text.strip()[:60]))
    return found


def test_markup_is_made_only_in_the_render_modules():
    """Escaping by construction holds only if no fragment is put together anywhere else (ARCHITECTURE.md,
    invariant 6): a tag in a string outside the render modules is markup built elsewhere."""
    stray = [
        f"{rel}:{line} {' '.join(sorted(tags))}: {text!r}"
        for rel, hits in _tags().items()
        for line, tags, text in hits
        if not tags <= NOT_MARKUP.get(rel, (set(), ""))[0]
    ]
    assert not stray, f"{len(stray)} strings build HTML outside {RENDER} (use or add a render helper):\n" + "\n".join(
        stray
    )


def test_the_strings_let_through_are_still_there():
    """NOT_MARKUP only shrinks: an entry whose tags are gone is taken off."""
    found = _tags()
    stale = [
        rel for rel, (tags, _) in NOT_MARKUP.items() if not tags <= set().union(*(t for _, t, _ in found.get(rel, [])))
    ]
    assert not stale, f"take off NOT_MARKUP: {stale}"


def test_the_check_finds_markup_in_each_kind_of_string():
    """The reader sees a tag in a constant and in an f-string's pieces, and not in a docstring or in a comparison
    written in words."""
    tree = ast.parse(
        '"""<div>docs</div>"""\n'
        "A = '<span class=\"x\">'\n"
        "def f(v):\n"
        '    """<b>docs</b>"""\n'
        "    return f'<td>{v}</td>' + 'a < b, 2 <3'\n"
    )
    texts = [text for _, text in _strings(tree) if TAG.search(text)]
    assert texts == ["<td>{}</td>", '<span class="x">']


def test_render_escapes_everything():
    evil = "<script>alert(1)</script>\"'"
    row = {"id": 1, "path": evil, "review_status": "unreviewed", "caption_preview": evil, "hazard_level": None}
    for html_out in (
        render.tiles([row]),
        render.word_diff(evil, evil + " x"),
        render.message(evil),
        render.header(
            {
                "id": 1,
                "path": evil,
                "codec": evil,
                "reviewed_by": evil,
                "review_status": "approved",
                "reviewed_at": 1.0,
            },
            "u",
            "annotator",
        ),
        render.player({"id": 1, "path": evil, "codec": "h264"}),
        render.no_clip(evil),
    ):
        assert "<script>" not in html_out and "&lt;script&gt;" in html_out


def test_conflict_and_draft_views_escape_every_piece_of_text():
    """S3 for the views added with the shared queue: their text, a name and labels are never markup."""
    evil = '<img src=x onerror="alert(1)">'
    theirs = {"id": 1, "version": 2, "author": evil, "created_at": 0, "text": f"a {evil} b", "labels": {}}
    out = render.conflict(theirs, f"a b {evil}", {"weather": evil})
    assert "<img" not in out and "&lt;img" in out
    draft = {"clip_id": 1, "saved_at": 1.0, "text": evil, "labels": {"weather": "fog"}}
    out = render.draft_offer(draft, {**theirs, "labels": {"weather": "rain"}}, stale=True)
    assert "<img" not in out and "(caption, weather)" in out and "saved version 2 since" in out
    header = render.header(
        {"id": 1, "path": evil, "review_status": "broken", "review_note": evil}, "u", "lead", holder=evil
    )
    assert "<img" not in header and header.count("&lt;img") == 3
