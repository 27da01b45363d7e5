"""The Markdown pieces of a release's dataset card (data.release.card, data.release.card_method): user and fleet
text made inert, shares as percentages, tables."""

from __future__ import annotations

from typing import Any


def md(text: Any, limit: int = 200) -> str:
    """User or fleet text made inert in Markdown (and in the HTML Markdown may hold): escaped, one line, bounded."""
    s = " ".join(str(text).split())[:limit]
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_{}[]()#+!|~":
        s = s.replace(ch, "\\" + ch)
    return s


def pct(part: int | float, whole: int | float) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return out
