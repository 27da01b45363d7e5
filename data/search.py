"""The search language of the Browse box and `--text`, translated to a safe FTS5 query.

What a person writes (README, "Search"):
- `pedestrian night`: every word must match (side by side, or with AND between them);
- `pedestrian OR cyclist`: either (OR binds the words next to it first, as in web search engines:
  `pedestrian OR cyclist night` is night clips with either);
- `"turns left"`: a phrase; `pedestr*` (or `"turns le"*`): a prefix;
- `( ... )`: a group; `NOT cyclist`: leave out clips that match (after something to find).
Operators are words in capitals; in lower case they are words to look for, as in FTS5 itself.

Every word reaches FTS5 inside double quotes, so punctuation is literal (`car.` is the word car, never FTS
syntax), and every operator is written explicitly (FTS5 has no implicit AND next to a bracket). A query that
cannot be read raises `SearchSyntaxError` with what to write instead; nothing reaches SQLite that could be an
FTS5 syntax error. Parsing is one pass over at most `limits.MAX_SEARCH_CHARS` characters with a bounded depth
and at most MAX_PREFIXES prefixes (R10, R11).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from data.errors import SearchSyntaxError

MAX_DEPTH = 8  # brackets inside brackets
# Words with *: FTS5 merges the index entries of every word a prefix starts, for each one (a one-letter prefix on
# a million captions: ~0.1 s a page with its count). Plain words are streamed and cost little (bench_browse).
MAX_PREFIXES = 4
OPERATORS = ("OR", "AND", "NOT")


@dataclass(frozen=True)
class Term:
    """A word or a phrase (its words as typed), maybe a prefix."""

    text: str
    prefix: bool = False
    phrase: bool = False

    def fts(self) -> str:
        return '"' + self.text + '"' + (" *" if self.prefix else "")

    def shown(self) -> str:
        return ('"' + self.text + '"' if self.phrase else self.text) + ("*" if self.prefix else "")


def _has_token(text: str) -> bool:
    """Whether FTS5's unicode61 tokenizer finds a token in `text` (letters, digits, private-use characters):
    a word of punctuation only would be an empty phrase, which matches nothing."""
    return any(unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Co" for ch in text)


# ---- reading: characters -> tokens ------------------------------------------------------------------------------
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"'})


def _lex(text: str) -> list[tuple[str, object]]:
    """Tokens: ("term", Term), ("op", "OR"|"AND"|"NOT"), ("(", None), (")", None). Typographic double quotes
    (pasted from a document) count as quotes."""
    text = text.translate(_QUOTES)
    out: list[tuple[str, object]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            out.append((ch, None))
            i += 1
        elif ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise SearchSyntaxError(
                    'A quote is not closed. Put a quote at each end of a phrase ("turns left"), or leave quotes out.'
                )
            words = " ".join(text[i + 1 : end].split())
            prefix = end + 1 < n and text[end + 1] == "*"
            if not _has_token(words):
                raise SearchSyntaxError(
                    'The quotes hold no word to find. Put words between them ("turns left"), or leave them out.'
                )
            out.append(("term", Term(words, prefix=prefix, phrase=True)))
            i = end + 2 if prefix else end + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()"':
                j += 1
            word = text[i:j]
            i = j
            if word in OPERATORS:
                out.append(("op", word))
                continue
            prefix = word.endswith("*")
            stem = word[:-1] if prefix else word
            if "*" in stem or (prefix and not _has_token(stem)):
                raise SearchSyntaxError(
                    f"{word!r}: * marks a prefix and goes at the end, after at least one letter or digit "
                    "(pedestr* finds pedestrian and pedestrians)."
                )
            if word.startswith("-") and _has_token(word):
                raise SearchSyntaxError(
                    f"{word!r}: to leave clips with a word out, write NOT before it, after what you look for "
                    f"(pedestrian NOT {word[1:]})."
                )
            if _has_token(stem):
                out.append(("term", Term(stem, prefix=prefix)))
            # a word of punctuation only (`-`, `...`) is no word: skipped like a space
    return out


# ---- parsing: tokens -> FTS5 query ------------------------------------------------------------------------------
# query := items;  items := item ((AND)? item)*;  item := [NOT] group;  group := primary (OR primary)*
# primary := term | "(" items ")"
class _Parser:
    def __init__(self, tokens: list[tuple[str, object]]):
        self.tokens = tokens
        self.i = 0

    def peek(self) -> tuple[str, object] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, object]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def items(self, depth: int) -> str:
        positives: list[str] = []
        negatives: list[str] = []
        while True:
            tok = self.peek()
            if tok is None or tok[0] == ")":
                break
            if tok == ("op", "AND"):
                if not (positives or negatives):
                    raise SearchSyntaxError(_operand_hint("AND"))
                self.take()
                nxt = self.peek()
                if nxt is None or nxt[0] == ")" or nxt in (("op", "AND"), ("op", "OR")):
                    raise SearchSyntaxError(_operand_hint("AND"))
                continue
            if tok == ("op", "NOT"):
                self.take()
                nxt = self.peek()
                if nxt is None or nxt[0] in ("op", ")"):
                    raise SearchSyntaxError(
                        "NOT needs a word after it: write pedestrian NOT cyclist to leave cyclists out."
                    )
                negatives.append(self.group(depth))
                continue
            positives.append(self.group(depth))
        if not positives:
            if negatives:
                raise SearchSyntaxError(
                    "NOT only leaves clips out of what the rest of the search finds: write what to find first "
                    "(pedestrian NOT cyclist)."
                )
            return ""
        out = positives[0] if len(positives) == 1 else "(" + " AND ".join(positives) + ")"
        for neg in negatives:
            out = f"({out} NOT {neg})"
        return out

    def group(self, depth: int) -> str:
        parts = [self.primary(depth)]
        while self.peek() == ("op", "OR"):
            self.take()
            nxt = self.peek()
            if nxt is None or nxt[0] in ("op", ")"):
                raise SearchSyntaxError(_operand_hint("OR"))
            parts.append(self.primary(depth))
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def primary(self, depth: int) -> str:
        kind, value = self.take()
        if kind == "term":
            assert isinstance(value, Term)
            return value.fts()
        if kind == "(":
            if depth >= MAX_DEPTH:
                raise SearchSyntaxError(f"Too many brackets inside each other ({MAX_DEPTH} at most).")
            inner = self.items(depth + 1)
            if self.peek() is None:
                raise SearchSyntaxError(
                    "A bracket is not closed: close each ( with a ), as in (pedestrian OR cyclist) night."
                )
            self.take()
            if not inner:
                raise SearchSyntaxError("The brackets hold no word to find: put words between them, or leave them out.")
            return inner
        assert kind == "op" and value == "OR"
        raise SearchSyntaxError(_operand_hint("OR"))


def _operand_hint(op: str) -> str:
    example = "pedestrian OR cyclist" if op == "OR" else "pedestrian AND night (or just pedestrian night)"
    return f"{op} needs a word on each side: write {example}."


def fts_query(text: str | None) -> str:
    """User text -> an FTS5 MATCH expression ("" for no search). Raises SearchSyntaxError with a hint."""
    tokens = _lex(text or "")
    if not tokens and (text or "").strip():
        raise SearchSyntaxError(f"{text.strip()[:40]!r} holds no word or number to search for.")
    if sum(1 for kind, t in tokens if kind == "term" and isinstance(t, Term) and t.prefix) > MAX_PREFIXES:
        raise SearchSyntaxError(
            f"At most {MAX_PREFIXES} words with * in one search: write the others out (pedestrian, not pedestr*)."
        )
    parser = _Parser(tokens)
    out = parser.items(0)
    if parser.peek() is not None:  # items() stops only at the end or at a ")" it did not open
        raise SearchSyntaxError("A ) has no ( before it: remove it, or open the group, as in (pedestrian OR cyclist).")
    return out


def no_match_hint(text: str | None) -> str:
    """Why a readable search may have found nothing, and what to try ("" when there is nothing to suggest)."""
    try:
        tokens = _lex(text or "")
    except SearchSyntaxError as e:
        return str(e)
    words = [t[1] for t in tokens if t[0] == "term"]
    lower_ops = [w for w in words if isinstance(w, Term) and not w.phrase and w.text in ("or", "and", "not")]
    if lower_ops:
        op = lower_ops[0].text
        return f"'{op}' was searched as a word. Operators are written in capitals: {op.upper()}."
    has_ops = any(t[0] in ("op", "(") for t in tokens)
    if len(words) >= 2 and not has_ops:
        shown = [w.shown() for w in words if isinstance(w, Term)]
        return (
            f"No clip in this filter has all of {', '.join(shown)} (every word must match). For clips with any of "
            f"them, write {' OR '.join(shown)}."
        )
    return ""
