"""The tests' own layout, read from their source (nothing is run): tests/ mirrors the product, each module sits in the
folder of its kind, and no test module imports another (docs/TESTING.md, "Where a test lives").

- tests/data/ (tests/data/release/), tests/serving/, tests/webapp/, tests/benchmarks/: tests of that part of the
  repository, run in tests/run.sh's first part;
- tests/browser/: every module with a test marked `browser`, and only those;
- tests/load/: every module with a test marked `load`, `serial` or `slow` (none of them browser), and only those;
- tests/ itself: the checks of the whole repository (CROSS_CUTTING), nothing else;
- tests/support/: the code tests share; tests/recordings/: what real vLLM answered, the simulated fleet's reference.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
MIRRORS = {"data", "data/release", "serving", "webapp", "benchmarks"}  # tests/<part>/ tests the repository's <part>/
KINDS = {"browser": {"browser"}, "load": {"load", "serial", "slow"}}  # tests/<kind>/ holds the modules so marked
CROSS_CUTTING = {  # tests/'s own modules: checks of the whole repository, launch.sh (at the repository's top) included
    "test_architecture_invariants.py",
    "test_docs_stand_alone.py",
    "test_launch_roles.py",
    "test_launch_shell.py",
    "test_layout.py",
    "test_structure.py",
}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.relative_to(TESTS).parts)


def _marks(source: str) -> set[str]:
    """The names of every `pytest.mark.<name>` the module's source uses (a decorator, a pytestmark, a param)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
            found.add(node.attr)
    return found


def _kind(source: str) -> str | None:
    marks = _marks(source)
    for kind, names in KINDS.items():
        if marks & names:
            return kind
    return None


def misplaced(folder: str, name: str, source: str) -> str | None:
    """Why a test module `name` with this source does not belong in tests/<folder> ("" for tests/ itself), or None."""
    kind = _kind(source)
    if kind is not None and folder != kind:
        return f"it has a test marked {sorted(_marks(source) & KINDS[kind])}: it belongs in tests/{kind}/"
    if folder in KINDS and kind != folder:
        return f"tests/{folder}/ holds only modules with a test marked {sorted(KINDS[folder])}; this has none"
    if folder == "" and name not in CROSS_CUTTING:
        return "tests/ itself holds only the checks of the whole repository: put it in the folder of what it tests"
    if folder not in KINDS and folder not in MIRRORS and folder != "":
        return f"tests/{folder}/ is no folder of the layout: {sorted(MIRRORS | set(KINDS))}"
    return None


def test_every_test_module_says_its_subject():
    """A module opens with a docstring that says what it tests: a newcomer reads that, not 500 lines, to find
    where a test goes (the catch-alls that had none became modules of one subject each)."""
    silent = [str(p.relative_to(ROOT)) for p in _test_modules() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not silent, f"no docstring saying what the module tests: {silent}"


def _folder(path: Path) -> str:
    return path.parent.relative_to(TESTS).as_posix().removeprefix(".")


def test_every_test_module_sits_in_the_folder_of_its_kind():
    modules = _test_modules()
    assert len(modules) > 100, modules  # the walk found the suite
    wrong = {str(p.relative_to(ROOT)): misplaced(_folder(p), p.name, p.read_text()) for p in modules}
    wrong = {k: v for k, v in wrong.items() if v}
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("folder", "source", "wrong"),
    [
        ("webapp", "import pytest\n\n@pytest.mark.browser\ndef test_a(page): ...\n", True),
        ("serving", "import pytest\n\n@pytest.mark.serial\ndef test_a(): ...\n", True),
        ("load", "import pytest\n\npytestmark = pytest.mark.browser\n", True),
        ("browser", "def test_a(): ...\n", True),
        ("load", "def test_a(): ...\n", True),
        ("data/quality", "def test_a(): ...\n", True),
        ("", "def test_a(): ...\n", True),
        ("browser", "import pytest\n\npytestmark = pytest.mark.browser\n", False),
        ("load", "import pytest\n\n@pytest.mark.slow\ndef test_a(): ...\n", False),
        ("data/release", "import pytest\n\n@pytest.mark.parametrize('x', [1])\ndef test_a(x): ...\n", False),
    ],
    ids=[
        "browser-test-in-webapp",
        "serial-test-in-serving",
        "browser-module-in-load",
        "unmarked-in-browser",
        "unmarked-in-load",
        "unknown-folder",
        "unmarked-at-top",
        "browser-in-browser",
        "slow-in-load",
        "parametrized-in-data-release",
    ],
)
def test_the_layout_check_refuses_a_misplaced_module(folder, source, wrong):
    assert (misplaced(folder, "test_new.py", source) is not None) is wrong


def _imported(source: str, package: tuple[str, ...]) -> list[str]:
    """Every module name a source imports, relative imports resolved against its package."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(x for x in (base, node.module or "") if x)
            names += [module] + [f"{module}.{a.name}" for a in node.names]
    return names


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def test_no_test_module_imports_another():
    """Shared code lives in tests/support/; a test module that imports another also runs the other's module-level
    code, and moving or splitting that module breaks the first (the reason reliability_runs.py exists)."""
    files = [*_test_modules(), *TESTS.glob("*.py"), *(TESTS / "support").glob("*.py")]
    found = {
        str(p.relative_to(ROOT)): [
            n for n in _imported(p.read_text(), p.parent.relative_to(ROOT).parts) if _is_test_module(n)
        ]
        for p in files
    }
    found = {k: v for k, v in found.items() if v}
    assert not found, f"import shared code from tests/support/ instead: {found}"


def test_the_import_check_sees_each_way_of_writing_it():
    for source in (
        "from tests.load.test_app_kill import run_r4",
        "import tests.data.test_export",
        "from . import test_x",
    ):
        assert any(_is_test_module(n) for n in _imported(source, ("tests", "data"))), source
    fine = "from tests.support.reliability_runs import run_r4\nfrom data import export\nfrom . import conftest\n"
    assert not any(_is_test_module(n) for n in _imported(fine, ("tests", "data")))
