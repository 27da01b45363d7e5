"""A lead's answer schema, keyword by keyword, in every JSON Schema draft it may declare (4, 6, 7, 2019-09,
2020-12): which keywords hold schemas, and `pattern` matched in linear time.

Every answer of a job is checked against its prompt version's schema (data.taxonomy.split_answer, in the runner's
checker processes: serving.answer_check), so a check that costs more than linear time in the answer stalls the
checkers every job shares. Two things make that impossible:

- **`pattern` is matched by RE2** (`google-re2`), whose matching is linear in the text whatever the expression:
  Python's `re` backtracks (`(\\w+\\s?)*$` on a 300-character caption runs for hours). Every validator class
  jsonschema has (one per draft) is extended so that `pattern`, `patternProperties` and `additionalProperties`
  (which matches the `patternProperties` names) use RE2 (`validator_for`). A pattern RE2 cannot express
  (backreferences, lookahead and lookbehind: they are what makes matching costly) is refused when a version is
  saved and by the runner (`pattern_problems`), with what to write instead. ECMA 262's `\\uXXXX` and `\\cX`
  escapes are turned into RE2's before compiling; the rest of JSON Schema's regular expressions is RE2's syntax.
- **The walker knows every keyword that holds a schema in any of those drafts** (`walk`), whatever `$schema` a
  schema declares: a draft-07 `dependencies`, a draft-04 `items` list, `contains`, `propertyNames`, the 2019-09
  `unevaluated*` keywords and draft-03's `extends` are all opened, so nothing the validator will follow is hidden
  from the checks (data.taxonomy's COSTLY_CHECKS and GRAMMAR_UNSUPPORTED). A `$schema` that names another draft
  (or none of jsonschema's) is refused at save (`declared_draft_problem`).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import jsonschema
import re2
from jsonschema.exceptions import ValidationError

from data.errors import DataError

# what `$schema` may name (with or without its trailing "#"), and the draft it is
DRAFTS = {
    "http://json-schema.org/draft-04/schema": "4",
    "http://json-schema.org/draft-06/schema": "6",
    "http://json-schema.org/draft-07/schema": "7",
    "https://json-schema.org/draft/2019-09/schema": "2019-09",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}
# the keywords whose value holds schemas, in any draft from 3 to 2020-12
SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items", "extends", "disallow", "type")
SCHEMA_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "extends",
)
MAX_CACHED = 64  # compiled patterns kept per process (a prompt has a few)
PATTERN_MEMORY = 4 << 20  # RE2's memory for one pattern (program and DFA cache): 64 of them in 256 MiB at most


def walk(schema: Any, visit: Callable[[dict], dict]) -> Any:
    """Rebuild a JSON schema, calling `visit(subschema) -> subschema` on each (sub)schema, children first. Only
    keywords that hold schemas are descended into (a property *named* "contains" is data, not a keyword), every
    such keyword of every draft, whatever the schema declares."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: walk(v, visit) for k, v in out[key].items()}
    for key in SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [walk(v, visit) for v in out[key]]
    for key in SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = walk(out[key], visit)
    return visit(out)


def keywords_in(schema: Any, wanted: frozenset[str] | set[str]) -> set[str]:
    """Which of `wanted` appear as keywords of `schema` or of any schema inside it."""
    found: set[str] = set()

    def visit(s: dict) -> dict:
        found.update(wanted.intersection(s))
        return s

    walk(schema, visit)
    return found


def declared_draft_problem(schema: Any) -> str | None:
    """Why the `$schema` that `schema` (or a schema inside it) declares cannot be saved, or None."""
    declared: list[Any] = []

    def visit(s: dict) -> dict:
        if "$schema" in s:
            declared.append(s["$schema"])
        return s

    walk(schema, visit)
    for value in declared:
        if not isinstance(value, str) or value.rstrip("#") not in DRAFTS:
            return (
                f'"$schema" names {str(value)[:80]!r}, which is not a JSON Schema draft the workbench checks: '
                f"declare one of {', '.join(sorted(set(DRAFTS.values())))} (e.g. "
                '"https://json-schema.org/draft/2020-12/schema"), or none.'
            )
    return None


# ---- `pattern` in linear time ----------------------------------------------------------------------------------
_ECMA_ESCAPE = re.compile(r"\\(?:u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})|c([A-Za-z])|(.))", re.S)


def _to_re2(pattern: str) -> str:
    """ECMA 262 escapes RE2 spells otherwise: `\\uXXXX` and `\\u{X}` -> `\\x{X}`, `\\cX` -> the control character's
    `\\x{..}`. Every other escape pair is kept as it is (so `\\\\u0041` stays a backslash and a `u`)."""

    def one(m: re.Match) -> str:
        if m.group(1) or m.group(2):
            return "\\x{" + (m.group(1) or m.group(2)) + "}"
        if m.group(3):
            return "\\x{%02x}" % (ord(m.group(3).upper()) % 32)
        return m.group(0)

    return _ECMA_ESCAPE.sub(one, pattern)


class PatternRefused(DataError, ValueError):
    """A `pattern` RE2 cannot express; its message says why and what to write instead."""


@functools.lru_cache(maxsize=MAX_CACHED)
def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2 (cached), or PatternRefused saying why it cannot be."""
    options = re2.Options()
    options.log_errors = False  # the refusal says it; RE2 would also write it to stderr
    options.max_mem = PATTERN_MEMORY  # past it a pattern is refused; a match past its DFA cache runs RE2's NFA, linear
    try:
        return re2.compile(_to_re2(pattern), options)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise PatternRefused(
            f"the pattern {pattern[:80]!r} cannot be matched in linear time (RE2 says: {why[:120]}). Patterns are "
            "matched by RE2, which has no backreferences (\\1) and no lookarounds ((?=, (?!, (?<=, (?<!): they are "
            "what makes a pattern cost hours on one caption. Write it without them, with repetitions up to {1000}."
        ) from None


def pattern_problems(schema: Any) -> list[str]:
    """Each `pattern` (and `patternProperties` name) of `schema`, at any depth, that RE2 cannot compile, with why."""
    problems: list[str] = []

    def check(p: Any) -> None:
        if not isinstance(p, str):
            return
        try:
            compile_pattern(p)
        except PatternRefused as e:
            problems.append(str(e)[0].upper() + str(e)[1:])

    def visit(s: dict) -> dict:
        check(s.get("pattern"))
        if isinstance(s.get("patternProperties"), dict):
            for name in s["patternProperties"]:
                check(name)
        return s

    walk(schema, visit)
    return problems


def _search(pattern: str, text: str) -> bool:
    try:
        return compile_pattern(pattern).search(text) is not None
    except PatternRefused as e:
        raise ValidationError(str(e)) from None  # the answer is not read as fitting, and says why


def _pattern(validator, patrn, instance, schema):
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance[:80]!r} does not match {patrn[:80]!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator, ap, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [p for p in instance if p not in properties and not any(_search(x, p) for x in patterns)]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        names = ", ".join(repr(e)[:40] for e in sorted(extras, key=str)[:5])
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


_LINEAR = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


@functools.lru_cache(maxsize=None)
def _linear(cls: type) -> type:
    return jsonschema.validators.extend(cls, {k: v for k, v in _LINEAR.items() if k in cls.VALIDATORS})


def validator_for(schema: Any) -> type:
    """The jsonschema validator class of the draft `schema` declares (the newest when it declares none), with
    `pattern` and the keywords that match `patternProperties` names in RE2 (the module docstring)."""
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        return _linear(jsonschema.Draft202012Validator)  # refused at save; jsonschema's look-up would raise
    return _linear(jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator))


__all__ = [
    "compile_pattern",
    "declared_draft_problem",
    "DRAFTS",
    "keywords_in",
    "pattern_problems",
    "PatternRefused",
    "validator_for",
    "walk",
]
