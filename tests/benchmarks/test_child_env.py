"""benchmarks/child_env.py: a benchmark's child process imports the code under test first and still finds what
this process's PYTHONPATH holds (the GPU machine keeps its packages in /tmp/site, on PYTHONPATH); and no
benchmark sets a child's PYTHONPATH in place of the inherited one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from benchmarks.child_env import child_env

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import fake_site_pkg, fake_shared; print(fake_site_pkg.WHERE, fake_shared.WHERE)"


def test_a_child_imports_the_code_first_and_still_finds_the_inherited_packages(tmp_path, monkeypatch):
    site, code = tmp_path / "site", tmp_path / "code"
    site.mkdir()
    code.mkdir()
    (site / "fake_site_pkg.py").write_text("WHERE = 'site'\n")
    (site / "fake_shared.py").write_text("WHERE = 'site'\n")
    (code / "fake_shared.py").write_text("WHERE = 'code'\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.chdir(tmp_path)
    env = child_env("code", GRADIO_ANALYTICS_ENABLED="False")  # relative, as --code may be; the child runs in it
    assert env["GRADIO_ANALYTICS_ENABLED"] == "False"
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=code, capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["site", "code"]


def _pythonpath_values(tree: ast.AST):
    """Each expression assigned to PYTHONPATH: a dict's key, a keyword (env.update(PYTHONPATH=...)), env[...] =."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            yield from (
                v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "PYTHONPATH"
            )
        elif isinstance(node, ast.keyword) and node.arg == "PYTHONPATH":
            yield node.value
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "PYTHONPATH":
                    yield node.value


def test_no_benchmark_replaces_the_inherited_pythonpath():
    replaced = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for value in _pythonpath_values(ast.parse(path.read_text(), filename=str(path))):
            source = ast.unparse(value)
            if "pythonpath(" not in source and "PYTHONPATH" not in source:  # child_env's, or its own join
                replaced.append(f"{path.relative_to(ROOT)}:{value.lineno}: {source}")
    assert not replaced, "use benchmarks.child_env:\n" + "\n".join(replaced)
