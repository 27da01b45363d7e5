#!/usr/bin/env python3
"""The operator's command for a GPU node: everything issue 14 asks of an 8-GPU node (start-up, the GPU test,
scaling, a replica killed), or its rehearsal on simulated replicas. `--help` says how; the code is the
benchmarks/node package (its docstring lists the modules)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere: the repo first

from benchmarks.node.cli import main

if __name__ == "__main__":
    sys.exit(main())
