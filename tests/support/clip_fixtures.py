"""Fixtures of the clip-library tests: a tiny generated demo library and the hostile corpus.

The fixtures are registered for every test module (tests/conftest.py, pytest_plugins). The
files are generated once per session (cached by path), ~1 s on 2 cores.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from data.library import demo, hostile

TINY = dict(height=90, min_seconds=1.5, max_seconds=2.0, fps=15)
TINY_COUNT = 4
_CACHE: dict[str, Path] = {}


def _source(tmp_path_factory, kind: str) -> Path:
    if kind not in _CACHE:
        d = tmp_path_factory.mktemp(f"{kind}_source")
        if kind == "library":
            demo.make_library(d, TINY_COUNT, seed=3, workers=2, **TINY)
        else:
            hostile.write_hostile_corpus(d)
        _CACHE[kind] = d
    return _CACHE[kind]


@pytest.fixture
def tiny_library(tmp_path_factory, settings) -> Path:
    """A fresh copy of a 4-clip demo library (160x90, 1.5-2 s, 15 fps, + 3 broken files) as the clip root."""
    root = settings.clip_root
    shutil.copytree(_source(tmp_path_factory, "library"), root, symlinks=True)
    return root


@pytest.fixture
def hostile_root(tmp_path_factory, settings) -> tuple[Path, dict[str, str]]:
    """The hostile corpus as the clip root, with {name: expected reason keyword}."""
    root = settings.clip_root
    expected = hostile.write_hostile_corpus(root)
    return root, expected
