"""Shared fixtures: real SQLite files in a temporary folder, settings pointing there."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_PROXY", "localhost,127.0.0.1")
os.environ.setdefault("no_proxy", "localhost,127.0.0.1")

from data import db as dbmod
from data.settings import Settings

# the helpers' own asserts (assert_audit_complete, check_oracle, ...) report their operands too
pytest.register_assert_rewrite("tests.support")
# the fixtures of tests/support, for every test module (a test names them as parameters, no import);
# webapp_fixtures before browser_fixtures, which imports it
pytest_plugins = [
    "tests.support.webapp_fixtures",
    "tests.support.browser_fixtures",
    "tests.support.clip_fixtures",
    "tests.support.fleet_fixtures",
    "tests.support.leak_guard",
    "tests.support.small_filesystem",
]


@pytest.fixture
def settings(tmp_path):
    """Settings for one test: everything under tmp_path, environment ignored."""
    return Settings.load({"data_dir": str(tmp_path / "var")}, environ={})


@pytest.fixture
def db(settings):
    """A fresh, migrated database file for one test."""
    d = dbmod.connect(settings.db)
    yield d
    d.close()


@pytest.fixture
def db_path(settings):
    dbmod.connect(settings.db).close()
    return settings.db
