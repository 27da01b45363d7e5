"""sqlite-utils, imported without pandas and numpy.

sqlite-utils imports pandas and numpy when they are installed (they are: Gradio needs them) for one use: telling the
SQL type of a pandas or numpy value when a table is made from rows. The workbench makes every table from its schema
(data/schema.py) and writes plain Python values, so it never needs that. Imported as sqlite-utils does it, every
process that opens the database paid for pandas, numpy and pyarrow: the runner started with 1.0 CPU-s and 127 MB
resident instead of 0.56 CPU-s and 45 MB, and so did the supervisor, the launcher, the caption and release commands,
and each process the tests start (docs/TESTING.md). A numpy or pandas value written by mistake is refused by sqlite3
("type not supported") in every process alike, never stored as something else.

data/__init__.py imports this module first, so every import of `sqlite_utils` in a process of the workbench gets
this one. A process that has imported pandas before (the app: Gradio) keeps its copy: nothing is taken away from a
module that has it; only the import sqlite-utils tries for itself is answered "not installed".
"""

from __future__ import annotations

import sys

OPTIONAL = ("pandas", "numpy")  # what sqlite_utils.db tries to import, and uses only for column types


def _lean_import():
    if "sqlite_utils" in sys.modules:
        return sys.modules["sqlite_utils"]
    blocked = [name for name in OPTIONAL if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # `import name` raises ImportError: sqlite_utils goes on without it
    try:
        import sqlite_utils
    except ImportError:  # an interpreter without the workbench's packages (launch.sh's checks run one): the module
        return None  # that needs sqlite-utils says so when it imports it, as it did before this module
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]  # a later `import pandas` (a release's card, a benchmark) works as ever
    return sqlite_utils


sqlite_utils = _lean_import()
