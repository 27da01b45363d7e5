"""data.errors: the tree drawn in its docstring is the tree of classes (as httpx pins its exceptions), it is the
only tree of refusals in data/, and the old home (data.db) does not hand its names out any more."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from data import db, errors

DATA = Path(errors.__file__).parent


def drawn_tree() -> dict[str, str | None]:
    """class name -> parent name, read from the docstring's drawing (indentation = depth)."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^([│ ]*(?:[├└]── )?)([A-Z]\w+)\s{2,}", line)
        if not m:
            continue
        depth, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((depth, name))
    return parents


def test_the_docstring_draws_exactly_the_classes_and_their_parents():
    tree = drawn_tree()
    classes = {n: c for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, Exception)}
    assert set(tree) == set(classes) == set(errors.__all__)
    assert tree["DataError"] is None and classes["DataError"].__bases__ == (Exception,)
    for name, parent in tree.items():
        if parent is not None:
            # the drawn parent first; a builtin beside it (ValueError) only where the docstring says so
            bases = classes[name].__bases__
            assert bases[0] is classes[parent] and all(b.__module__ == "builtins" for b in bases[1:]), name
        assert classes[name].__doc__, f"{name} has no docstring"


def test_no_other_data_module_defines_a_refusal():
    """Every exception class of data/ that is a DataError lives in data/errors.py."""
    names = set(errors.__all__)
    for path in sorted(DATA.glob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                assert not bases & names, f"{path.name}: class {node.name}({', '.join(bases)}) belongs in errors.py"


def test_the_old_home_hands_out_no_error_names():
    for name in errors.__all__:
        assert not hasattr(db, name), f"data.db.{name}: import it from data.errors"
