"""Shared fixtures: real SQLite files in a temporary folder, settings pointing there."""

from __future__ import annotations

import functools
import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_PROXY", "localhost,127.0.0.1")
os.environ.setdefault("no_proxy", "localhost,127.0.0.1")

from data import db as dbmod
from data.settings import Settings


# Each httpx client builds its own SSL context and loads certifi's CA bundle into it (~18 ms of CPU), even for the
# http:// loopback URLs every test uses; the tests make thousands (a Gradio tab, a login, a /config read each:
# test_roles (then test_roles_at_the_api) alone made 730, 12 CPU-s). One context with httpx's default verification,
# built on first use, serves every client of a test process that asks for that default (httpx's advice: share one
# SSLContext; serving.client does the same). Clients that pass their own `verify` or `cert` still get their own.
@functools.lru_cache(maxsize=None)
def _default_ssl_context(trust_env: bool, cert_file: str | None, cert_dir: str | None):
    return _make_ssl_context(verify=True, cert=None, trust_env=trust_env)


def _shared_ssl_context(verify=True, cert=None, trust_env=True):
    if verify is True and cert is None:
        return _default_ssl_context(trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    return _make_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


# httpx's private module: where a later httpx moves it, the tests go on with a context per client (slower, same proofs)
try:
    import httpx._transports.default as httpx_transports

    _make_ssl_context = httpx_transports.create_ssl_context
except (ImportError, AttributeError):
    pass
else:
    httpx_transports.create_ssl_context = _shared_ssl_context

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


def pytest_collection_modifyitems(config, items):
    """Modules marked `waits` first, the rest in their order (a stable sort). pytest-xdist hands out modules in this
    order (`--dist loadfile`): a module that waits minutes at little CPU, handed out last, ended the run alone on one
    worker while the others were idle (test_login_delays: ~3 minutes of the product's login delays)."""
    items.sort(key=lambda item: item.get_closest_marker("waits") is None)


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
