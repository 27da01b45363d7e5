"""Helpers of the test suite: fixtures (registered for every test module by `pytest_plugins` in
tests/conftest.py, so a test names a fixture as a parameter without importing it) and the helper functions
and classes that tests import (`from tests.support.runner_fixtures import add_clips`).

What benchmarks share with tests lives in the packages (data.library.clipgen, data.examples), not here: benchmarks
never import tests."""
