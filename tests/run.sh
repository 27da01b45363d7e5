#!/usr/bin/env bash
# Run the test suite on a fresh machine: installs what is missing (Debian chromium for the browser tests, openssl
# for the self-signed certificate of test_fleet_reads (TLS),
# the project with its test extra), then the lint and format checks (ruff, configured in pyproject.toml), then
# pytest. Extra arguments go to pytest, e.g. tests/run.sh -k media.
# GPU tests are marked `gpu` and skip here with a reason; run them on a GPU node (README, "GPU node").
#
# Two parts. Every unit and integration test (no browser, no load) runs on CW_TEST_WORKERS pytest-xdist workers
# (default 2 per core, 4 to 8: most of these tests wait on servers and processes they start, each on its own free
# port and temporary data dir, so they overlap well; a test module stays on one worker). Then the real-browser
# tests, the fault-injection runs under load and the tests that watch the whole machine or wait by the clock
# (marked `browser`, `load`, `serial`) run one at a time: they must not share the machine with other tests.
#   tests/run.sh --quick   the first part only, each property test drawing a quarter of its examples and each
#                          table of cases a share of its rows (every subject still met)
#                          (tests/support/examples.py; docs/TESTING.md: its time on a 2-core machine)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
export CW_TEST_QUICK=$QUICK  # tests/support/examples.py: the property tests' full numbers in the full run only
if [ ! -x /usr/bin/chromium ] || ! command -v openssl >/dev/null; then
  echo "[tests] installing Debian chromium (the browser tests) and openssl (a test's self-signed certificate)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium openssl
fi
if ! "$PY" -c "import gradio, sqlite_utils, av, httpx, matplotlib, re2, hypothesis, playwright, pytest_timeout, xdist, sklearn, scipy, tokenizers, data.settings" 2>/dev/null \
   || ! "$PY" -m ruff --version >/dev/null 2>&1; then
  echo "[tests] installing the project and its test extra"
  "$PY" -m pip install -q -e ".[test]"
fi
# ruff through $PY (python -m ruff): the one installed with the test extra in that environment, venv or not
echo "[tests] ruff check, ruff format --check"
"$PY" -m ruff check .
"$PY" -m ruff format --check .
# console scripts of that environment (vllm-router, ...) first on PATH: a venv's python run by path does not
# put its bin/ there, and the end-to-end tests start the real router as a process
PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 NO_PROXY=localhost,127.0.0.1 no_proxy=localhost,127.0.0.1
# compiled bytecode kept (in the __pycache__ folders .gitignore names): with PYTHONDONTWRITEBYTECODE set, as some
# shells and containers do, every worker rewrote and compiled all ~110 test modules again (~4 of its ~10 s of
# collection) and every app, runner and CLI process the tests start compiled the project again
unset PYTHONDONTWRITEBYTECODE
cores=$(nproc 2>/dev/null || echo 2)
w=$(( cores * 2 > 4 ? cores * 2 : 4 ))
WORKERS=${CW_TEST_WORKERS:-$(( w > 8 ? 8 : w ))}  # each worker holds an app's imports (~0.5 GB): at most 8
echo "[tests] unit and integration tests on $WORKERS workers"
rc=0
"$PY" -m pytest -m "not slow and not browser and not load and not serial" -q -n "$WORKERS" --dist loadfile "$@" || rc=$?
# 5: nothing selected (a -k that names only browser tests, say), not a failure
[ $rc = 5 ] && rc=0
if [ $QUICK = 0 ]; then
  echo "[tests] real-browser tests, runs under load and tests that watch the machine, one at a time"
  rc2=0
  "$PY" -m pytest -m "(browser or load or serial) and not slow" -q "$@" || rc2=$?
  [ $rc2 = 5 ] && rc2=0
  [ $rc = 0 ] && rc=$rc2
fi
exit $rc
