"""The code's structure, read from its source (nothing is run): no import cycle, the layers point one way, every
name is imported from the module that defines it, and each package's public surface is pinned by its `__all__`
(as httpx's tests/test_exported_members.py pins httpx's)."""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import io
import re
import tokenize
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("data", "serving", "webapp")  # the product; tests and benchmarks import from it
READERS = (*PACKAGES, "tests", "benchmarks")
LAYERS = {"data": set(), "serving": {"data"}, "webapp": {"data", "serving"}}  # what each may import


def _path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files(tops: tuple[str, ...]) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def _defined(module: str) -> frozenset[str]:
    """Names a module binds itself at top level (functions, classes, assignments), not those it imports."""
    names: set[str] = set()
    for node in _tree(_path(module)).body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(names)


@functools.cache
def _exported(module: str) -> tuple[str, ...] | None:
    """A module's `__all__`, read from its source (None without one)."""
    for node in _tree(_path(module)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return None


def _project(module: str | None, tops: tuple[str, ...]) -> bool:
    return bool(module) and module.split(".")[0] in tops and _path(module) is not None


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) for every import of a project module in `path`, at any depth (function-level
    imports are imports too); name is None for `import a.b`."""
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _project(node.module, READERS):
            out += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if _project(a.name, READERS)]
    return out


def _edges(path: Path) -> set[str]:
    """The project modules `path` imports (a submodule named in `from pkg import sub` counts as itself)."""
    out = set()
    for _, module, name in _imports(path):
        sub = f"{module}.{name}" if name else None
        out.add(sub if sub and _path(sub) else module)
    return out


def test_no_module_imports_itself_back_through_others():
    graph = {_module_of(p): _edges(p) for p in _files(PACKAGES)}
    cycles, done, stack = [], set(), []

    def visit(m: str) -> None:
        if m in stack:
            cycles.append(stack[stack.index(m) :] + [m])
            return
        if m in done:
            return
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            visit(n)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_layers_point_one_way_data_below_serving_below_webapp():
    wrong = []
    for path in _files(PACKAGES):
        top = _module_of(path).split(".")[0]
        for line, module, _ in _imports(path):
            if module.split(".")[0] not in LAYERS[top] | {top}:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, wrong


CORE = {"data.db", "data.errors", "data.events", "data.limits", "data.settings"}  # what the library wing may import
# the launchers of commands users type, beside the wings: a `__main__` guard that imports the wing's `main`, nothing
# any module could import
COMMANDS = {"data.ingest", "data.demo", "data.deployment"}
DATA_WINGS = ("library", "jobs", "quality", "release")


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "data" and len(parts) > 1 and parts[1] in DATA_WINGS else None


def test_the_wings_of_data_point_one_way():
    """data/library imports only the core; jobs is imported only by quality (and within itself); quality only by
    the release wing; the release wing by nothing else in data/ (its command is its own `__main__`); the launchers
    beside the wings (COMMANDS) import the wing whose command they start. The rest of data/ stays flat
    (ARCHITECTURE.md, "The floors")."""
    wrong = []
    for path in _files(("data",)):
        me = _module_of(path)
        mine = _wing(me)
        for line, module, name in _imports(path):
            target = f"{module}.{name}" if name and _path(f"{module}.{name}") else module
            theirs = _wing(target)
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if mine == "library" and theirs != "library" and target not in CORE:
                wrong.append(where + " (the library wing imports only the core)")
            if theirs == "release" and mine != "release":
                wrong.append(where + " (nothing in data/ imports the release wing)")
            if theirs == "quality" and mine not in ("quality", "release"):
                wrong.append(where + " (only the release wing imports the quality wing)")
            if theirs == "jobs" and mine not in ("jobs", "quality"):
                wrong.append(where + " (only the quality wing imports the jobs wing)")
            if theirs == "library" and mine != "library" and me not in COMMANDS:
                wrong.append(where + " (nothing in data/ imports the library wing)")
    assert not wrong, wrong


def _serving_wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "serving" and len(parts) > 1 and parts[1] in ("launch", "fleet") else None


LAUNCH_READ_OUTSIDE = {"serving.launch.record"}  # what `up` started: the fleet's URL, for the runner, cost and tabs
COMMAND_OF = {"serving.launcher": "serving.launch.cli"}  # the launcher of the command users type, and its code


def test_the_wings_of_serving_point_one_way():
    """Only serving/launch/ starts or stops a fleet: outside it, serving/ and webapp/ read only its record, and only
    the command's launcher (serving/launcher.py) imports its command line. serving/fleet/ (the readers) imports
    neither the launch wing nor the runner (ARCHITECTURE.md, "The floors")."""
    wrong = []
    for path in _files(("serving", "webapp")):
        me = _module_of(path)
        for line, module, name in _imports(path):
            target = f"{module}.{name}" if name and _path(f"{module}.{name}") else module
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            theirs, mine = _serving_wing(target), _serving_wing(me)
            if theirs == "launch" and mine != "launch":
                if target not in LAUNCH_READ_OUTSIDE and COMMAND_OF.get(me) != target:
                    wrong.append(where + " (outside the launch wing only its record is read)")
            if mine == "fleet" and (theirs == "launch" or target.split(".")[:2] == ["serving", "runner"]):
                wrong.append(where + " (the fleet readers import neither the launch wing nor the runner)")
    assert not wrong, wrong


TABS = ("browse", "review", "second_review", "jobs", "quality", "fleet")  # webapp/: a package per tab
# what one tab shows of another's, each with why (any other import between two tabs is a part in the wrong room)
TAB_READS = {
    ("browse", "webapp.second_review.tab"): "Browse masks the clips sent to a blind second review (`masked`)",
    ("browse", "webapp.quality.render"): "Browse's sample and release panels say their figures in the Quality markup",
    ("second_review", "webapp.quality.render"): "the second review's header and count are Quality markup",
    ("fleet", "webapp.jobs.fleet_notice"): "the Fleet tab says what the runners' heartbeats say, as Jobs does",
    ("review", "webapp.browse.assigning"): "Review's one-clip assign form is the assign panel's (`ClipAssign`)",
}
MAX_TOP = 15  # webapp/'s own modules (what every tab shares), __init__ aside


def _tab(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "webapp" and len(parts) > 1 and parts[1] in TABS else None


def test_each_tab_is_a_room_of_its_own():
    """A tab's package holds its tab, its panels and its markup, and imports webapp's shared pieces, never another
    tab's module unless TAB_READS says why; of webapp's shared modules only webapp.app (which lays the tabs out)
    imports a tab (ARCHITECTURE.md, "The floors")."""
    wrong = []
    for path in _files(("webapp",)):
        me = _module_of(path)
        for line, module, name in _imports(path):
            target = f"{module}.{name}" if name and _path(f"{module}.{name}") else module
            mine, theirs = _tab(me), _tab(target)
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if theirs and mine is None and me != "webapp.app":
                wrong.append(where + " (a shared module imports a tab)")
            if theirs and mine and theirs != mine and (mine, target) not in TAB_READS:
                wrong.append(where + " (one tab's part imports another's: move it, or say why in TAB_READS)")
    assert not wrong, wrong
    used = {
        (_tab(_module_of(p)), m if not n or not _path(f"{m}.{n}") else f"{m}.{n}")
        for p in _files(("webapp",))
        for _, m, n in _imports(p)
    }
    assert set(TAB_READS) <= used, f"take off TAB_READS: {sorted(set(TAB_READS) - used)}"


def test_webapp_s_top_holds_only_what_every_tab_shares():
    """At most MAX_TOP modules at webapp/'s top (the app, the context, the guard, the page and its shared markup,
    the shared fields, the users' command); the rest live in a tab's package or a group of shared pieces (login/,
    routes/), and every package of webapp/ is a tab or one of those groups."""
    top = sorted(_module_of(p) for p in (ROOT / "webapp").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP, top
    packages = sorted(p.parent.name for p in (ROOT / "webapp").glob("*/__init__.py"))
    assert packages == sorted({*TABS, "login", "routes"}), packages


def test_the_rule_of_the_data_wings_reads_each_module_right():
    """`_wing` on the shapes the rule above meets: a wing's package and its modules, a launcher beside a wing, the
    flat core."""
    assert [_wing(m) for m in ("data.release", "data.release.make", "data.quality.stats", "data.jobs")] == [
        "release",
        "release",
        "quality",
        "jobs",
    ]
    assert [_wing(m) for m in ("data.ingest", "data.clips", "data")] == [None, None, None]


def _home_ok(module: str, name: str) -> bool:
    """`name` may be taken from `module`: the module defines it, it is a submodule, or `module` is a package
    that exports it (its pinned `__all__`)."""
    if name in _defined(module) or _path(f"{module}.{name}"):
        return True
    return _path(module).name == "__init__.py" and name in (_exported(module) or ())


def test_every_name_is_imported_from_the_module_that_defines_it():
    """No compatibility re-exports: `from a import n` and `a.n` (a an imported project module) name n's home."""
    wrong = []
    for path in _files(READERS):
        where = path.relative_to(ROOT)
        aliases: dict[str, str] = {}
        for line, module, name in _imports(path):
            if name is not None and not _path(f"{module}.{name}") and not _home_ok(module, name):
                wrong.append(f"{where}:{line}: from {module} import {name}")
        for node in ast.walk(_tree(path)):
            # the name each import binds: `from webapp.quality import render as render_quality` binds
            # render_quality, and leaves `render` to `from webapp import render`
            if isinstance(node, ast.ImportFrom) and node.level == 0 and _project(node.module, READERS):
                aliases.update(
                    {
                        a.asname or a.name: f"{node.module}.{a.name}"
                        for a in node.names
                        if a.asname or _path(f"{node.module}.{a.name}")
                    }
                )
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and _project(a.name, READERS)})
        # a name the file also binds otherwise (a parameter `db`, a variable `fleet`) is not read as the module
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.arg) or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
                aliases.pop(getattr(node, "arg", None) or getattr(node, "id", None), None)
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                module = aliases[node.value.id]
                if _path(module) and not node.attr.startswith("__") and not _home_ok(module, node.attr):
                    wrong.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr} (not defined in {module})")
    assert not wrong, "\n".join(sorted(set(wrong)))


MODULES_WITH_ALL = sorted(_module_of(p) for p in _files(PACKAGES) if _exported(_module_of(p)) is not None)


@pytest.mark.parametrize("module", MODULES_WITH_ALL)
def test_a_declared_surface_is_sorted_and_exactly_what_the_module_offers(module):
    """A package's `__all__` is every public name of its namespace (its face); a module's names only what it
    defines itself."""
    exported = _exported(module)
    assert list(exported) == sorted(exported, key=str.casefold), f"{module}.__all__ is not sorted"
    if _path(module).name == "__init__.py":
        mod = importlib.import_module(module)
        public = {k for k, v in vars(mod).items() if not k.startswith("_") and not isinstance(v, types.ModuleType)} - {
            "annotations"
        }
        assert set(exported) == public, f"{module}: exported {sorted(set(exported) - public)}, "
        f"not exported {sorted(public - set(exported))}"
    else:
        assert set(exported) <= _defined(module), f"{module} exports names it does not define: " + ", ".join(
            sorted(set(exported) - _defined(module))
        )


def test_the_packages_with_a_face_are_jobs_quality_the_runner_and_the_simulated_fleet():
    faces = [m for m in MODULES_WITH_ALL if _path(m).name == "__init__.py"]
    assert faces == ["data.jobs", "data.quality", "serving.runner", "serving.simfleet"]
    assert set(_exported("serving.runner")) == {"Runner", "fleet_targets", "run_job", "serve"}


def _package_inits() -> list[Path]:
    return [p for p in _files(PACKAGES) if p.name == "__init__.py"]


def test_every_package_s_init_is_its_docstring_and_at_most_a_face():
    """One convention for a package's `__init__.py` (ARCHITECTURE.md, "The floors"): it opens with a docstring that
    says what the package holds; a wing's names each of its modules (`tab.py`, ...). After it comes nothing, or a
    face: `from` imports of the package's own modules and the `__all__` that names them. Never a definition, so
    the code a caller runs is always in a module named for what it holds. One more thing may stand there: a plain
    `import` of one of its own modules for that module's effect, which the docstring names (data/sqlite.py)."""
    wrong = []
    for init in _package_inits():
        package = _module_of(init)
        tree = _tree(init)
        doc = ast.get_docstring(tree) or ""
        if not doc.strip():
            wrong.append(f"{package}: no docstring saying what it holds")
        if "." in package:  # a wing: its docstring names every module it holds
            modules = sorted(p.name for p in init.parent.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
            wrong += [f"{package}: its docstring does not name {m}" for m in modules if m not in doc]
        for node in tree.body[1:] if doc else tree.body:
            own = isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + ".")
            future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
            face = isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
            effect = isinstance(node, ast.Import) and all(
                a.name.startswith(package + ".") and f"{a.name.removeprefix(package + '.')}.py" in doc
                for a in node.names
            )
            if not (own or future or face or effect):
                wrong.append(f"{init.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node).splitlines()[0][:60]}")
        imports = any(isinstance(n, ast.ImportFrom) and n.module != "__future__" for n in tree.body)
        if imports and _exported(package) is None:
            wrong.append(f"{package}: imports its modules' names without an `__all__` (a face names what it offers)")
    assert not wrong, "\n".join(wrong)


def test_every_package_is_shipped():
    """pyproject lists the packages a wheel carries: a package missing there imports from a checkout only."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_module_of(p) for p in _files(PACKAGES) if p.name == "__init__.py"}
    assert found == listed


ROOTS = {"data.errors.DataError", "serving.errors.FleetError"}  # the two trees
# exceptions outside the two trees, each with the reason it stays outside
OUTSIDE_THE_TREES = {
    "serving.procs.StartupError": "a child process of the launcher died or never became healthy: a launch failure",
    "serving.simfleet.errors.SimError": "the simulated vLLM's own error answer (the server's side, not ours)",
}


def test_every_error_joins_the_data_tree_or_the_fleet_tree():
    """An exception class the product defines derives from `data.errors.DataError` or `serving.errors.FleetError`
    (each with its message fit for a user), unless it is private to its module or listed with its reason above:
    one `except` at an edge then catches every refusal of its floor (issue 28)."""
    exceptions = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    stray = []
    for path in _files(PACKAGES):
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            if bases & exceptions:
                name = f"{_module_of(path)}.{node.name}"
                if name not in ROOTS | set(OUTSIDE_THE_TREES) and not {"DataError", "FleetError"} & bases:
                    stray.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({', '.join(sorted(bases))})")
    assert not stray, stray


# The size rules count code, not lines: a module's or a class's size is its lines of code, those that hold a token
# of code outside a docstring (`_code_lines`). Docstrings, comments and blank lines are free, so nothing is ever
# gained by trimming an explanation, joining a docstring's closing quotes onto its last line (serving/runner/loop.py
# was brought back to 500 lines so) or a comment onto a statement; and the code's own layout is the formatter's
# (`ruff format --check` in tests/run.sh), so lines of code cannot be squeezed either, only a concern taken out.
MAX_CODE_LINES = 400  # a module (about the 500 lines of before: a fifth of a product module is prose)
MAX_CLASS_LINES = 300  # a class
WHOLE_MARK = "Whole on purpose:"  # a line of the opening docstring that starts so says why a longer module stays one
LONG_MARK = "Long on purpose:"  # a line of a class's docstring that starts so says why a longer class stays one
MIN_REASON = 60  # characters of reason after a mark, to the end of its paragraph: a why, not a bare mark
# Longer modules still to be split, each with what it holds: the list only shrinks; a module leaves it when it is
# split or when its docstring gives a real reason to stay whole.
NOT_YET_SPLIT: dict[str, str] = {}
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The lines of every docstring (module, class, function) in `tree`."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    out.update(range(first.lineno, first.end_lineno + 1))
    return out


def _code_lines(source: str) -> set[int]:
    """The lines of `source` that hold a token of code outside a docstring: comments, blank lines and docstrings
    are not counted, whatever their layout (a multi-line string that is a value is code)."""
    docs = _docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _NOT_CODE:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return lines


@functools.cache
def _code(path: Path) -> frozenset[int]:
    return frozenset(_code_lines(path.read_text()))


def _opening_docstring(path: Path) -> str:
    return ast.get_docstring(_tree(path)) or ""


def _reason(docstring: str, mark: str) -> str | None:
    """The reason a docstring gives after `mark` (which starts one of its lines), to the end of its paragraph;
    None without the mark."""
    lines = docstring.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(mark):
            paragraph = [line.strip()[len(mark) :]]
            for more in lines[i + 1 :]:
                if not more.strip():
                    break
                paragraph.append(more.strip())
            return " ".join(paragraph).strip()
    return None


ROOMY = '''"""What the module holds.

Why it is so.
"""

# a comment on its own line


def f(a, b):
    """What f does.
    """
    x = compute(a, b)
    return [
        x,
        """a value, not a docstring""",
    ]
'''
TIGHT = '''"""What the module holds.

Why it is so."""
def f(a, b):  # a comment after code
    """What f does."""
    x = compute(a, b)
    return [
        x,
        """a value, not a docstring""",
    ]
'''


def test_the_size_rules_count_code_not_prose():
    """The same code measures the same however its prose is laid out (a docstring's closing quotes on a line of
    their own or joined to its text, a comment on its own line or after a statement, blank lines), and one more
    statement measures one more: the count cannot be brought down by trimming, only by taking code out."""
    assert len(ROOMY.splitlines()) - len(TIGHT.splitlines()) == 6  # what trimming won under a count of lines
    assert len(_code_lines(ROOMY)) == len(_code_lines(TIGHT)) == 6  # def, x =, and the four lines of the list
    assert len(_code_lines(TIGHT + "y = 1\n")) == 7


def test_a_module_over_the_limit_says_why_it_stays_whole():
    """A product module over MAX_CODE_LINES lines of code is split by concern, or its opening docstring has a line
    starting with WHOLE_MARK that says why it must stay whole (ARCHITECTURE.md, "The floors"). The rule is
    checked, not a hand-kept list of offenders (which went stale within one commit)."""
    long, bare = {}, []
    for path in _files(PACKAGES):
        rel = str(path.relative_to(ROOT))
        size = len(_code(path))
        if size <= MAX_CODE_LINES or rel in NOT_YET_SPLIT:
            continue
        reason = _reason(_opening_docstring(path), WHOLE_MARK)
        if reason is None:
            long[rel] = size
        elif len(reason) < MIN_REASON:
            bare.append(rel)
    assert not long, f"over {MAX_CODE_LINES} lines of code without a '{WHOLE_MARK}' reason in the docstring: {long}"
    assert not bare, f"'{WHOLE_MARK}' with no reason after it (at least {MIN_REASON} characters): {bare}"
    stale = [m for m in NOT_YET_SPLIT if not (ROOT / m).exists() or len(_code(ROOT / m)) <= MAX_CODE_LINES]
    assert not stale, f"split already, take off NOT_YET_SPLIT: {stale}"


def test_a_class_over_the_limit_says_why_it_is_long():
    """A class of the product over MAX_CLASS_LINES lines of code has a line in its docstring starting with
    LONG_MARK that says why it is not made of parts (as the Review tab is: webapp.review.tab)."""
    long, bare = {}, []
    for path in _files(PACKAGES):
        code = _code(path)
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ClassDef):
                continue
            size = sum(1 for n in code if node.lineno <= n <= node.end_lineno)
            if size <= MAX_CLASS_LINES:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
            reason = _reason(ast.get_docstring(node) or "", LONG_MARK)
            if reason is None:
                long[where] = size
            elif len(reason) < MIN_REASON:
                bare.append(where)
    assert not long, f"classes over {MAX_CLASS_LINES} lines of code without a '{LONG_MARK}' reason: {long}"
    assert not bare, f"'{LONG_MARK}' with no reason after it (at least {MIN_REASON} characters): {bare}"


@functools.cache
def _project_classes() -> frozenset[str]:
    """The names of every class the product defines (at any depth)."""
    return frozenset(n.name for p in _files(PACKAGES) for n in ast.walk(_tree(p)) if isinstance(n, ast.ClassDef))


def _project_bases(tree: ast.Module, module: str, node: ast.ClassDef) -> list[str]:
    """The bases of class `node` of `module` (parsed as `tree`) that are classes of this repository: one defined
    in the module, or imported from a project module, by name or as an attribute of an imported project module."""
    local = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    imported: dict[str, str] = {}  # a name an import binds -> the project module it comes from
    for imp in ast.walk(tree):
        if isinstance(imp, ast.ImportFrom) and imp.level == 0 and _project(imp.module, READERS):
            imported.update({a.asname or a.name: imp.module for a in imp.names})
        elif isinstance(imp, ast.Import):
            bound = {a.asname or a.name.split(".")[0]: a.name for a in imp.names if _project(a.name, READERS)}
            imported.update(bound)
    out = []
    for base in node.bases:
        dotted = ast.unparse(base)
        if dotted.rpartition(".")[2] not in _project_classes():
            continue
        if dotted in local:
            out.append(f"{module}.{dotted}")
        elif dotted.partition(".")[0] in imported:
            out.append(f"{imported[dotted.partition('.')[0]]}: {dotted}")
    return out


def test_no_class_has_two_project_bases():
    """A class of the product has at most one base defined in this repository (a builtin or library base beside it
    is fine: `class Unstorable(DataError, ValueError)`): a tab, a panel or a service is made of parts given to it,
    not of layers mixed into one `self` (issue 47: the Review tab was ReviewTab(ReviewDrafts, ReviewConflicts))."""
    mixed = []
    for path in _files(PACKAGES):
        tree = _tree(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and len(bases := _project_bases(tree, _module_of(path), node)) > 1:
                mixed.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({', '.join(bases)})")
    assert not mixed, mixed


def test_project_bases_are_found_by_name_and_through_a_module():
    """The finder of the rule above on the shapes it must see: a base of the same module, one imported by name,
    one reached through an imported module; a library's base is none of them."""
    tree = ast.parse(
        "import gradio as gr\n"
        "from webapp import review_view\n"
        "from webapp.review.drafts import ReviewDrafts\n"
        "class ReviewSaves: pass\n"
        "class Tab(ReviewDrafts, review_view.ReviewView, ReviewSaves, gr.Blocks, ValueError): pass\n"
    )
    assert _project_bases(tree, "webapp.example", tree.body[-1]) == [
        "webapp.review.drafts: ReviewDrafts",
        "webapp: review_view.ReviewView",
        "webapp.example.ReviewSaves",
    ]


SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|PRAGMA|WITH) ")


def test_all_sql_is_in_data():
    """SQLite is data/'s alone: no string in serving/ or webapp/ is an SQL statement (the simulated fleet has no
    database; a statement found elsewhere moves to the data module that owns its tables)."""
    found = []
    for folder in ("serving", "webapp"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.strip()[:60]}")
    assert not found, found
