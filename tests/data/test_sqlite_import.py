"""data/sqlite.py: every process of the workbench imports sqlite-utils without pandas and numpy, and a module
that wants them afterwards still gets them."""

import subprocess
import sys
from pathlib import Path

import data

ROOT = Path(data.__file__).resolve().parents[1]  # wherever this module sits under tests/

PROBE = """
import sys
import {module}
loaded = sorted(m for m in ("pandas", "numpy", "pyarrow") if m in sys.modules)
import sqlite_utils.db
print(loaded, sqlite_utils.db.pd is None, sqlite_utils.db.np is None)
import pandas, numpy  # what a release card's example or a benchmark may import later
print(pandas.DataFrame({{"a": [1]}}).shape, numpy.int64(3) + 1)
"""


def _probe(module: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_the_runner_supervisor_and_commands_load_no_pandas_and_pandas_still_imports_after():
    # all in one process: any one of them importing pandas would show it loaded
    assert _probe("serving.runner, serving.supervisor, serving.caption, data.release, data.db") == [
        "[] True True",
        "(1, 1) 4",
    ]


def test_a_process_that_had_pandas_first_keeps_it_for_sqlite_utils_too():
    # the app: Gradio imports pandas before the data floor; nothing is taken away from it
    first = _probe("pandas, data.db")[0]
    assert first.startswith("[") and "'pandas'" in first and first.endswith("False False"), first
