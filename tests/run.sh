#!/usr/bin/env bash
# Run the test suite on a fresh machine: installs what is missing (Debian chromium for the browser tests,
# the project with its test extra), then the lint and format checks (ruff, configured in pyproject.toml), then
# pytest. Extra arguments go to pytest, e.g. tests/run.sh -k media.
# GPU tests are marked `gpu` and skip here with a reason; run them on a GPU node (README, "GPU node").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x /usr/bin/chromium ]; then
  echo "[tests] installing Debian chromium for the browser tests"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium
fi
if ! "$PY" -c "import gradio, sqlite_utils, av, httpx, matplotlib, hypothesis, playwright, pytest_timeout, sklearn, scipy, data.settings" 2>/dev/null \
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
exec "$PY" -m pytest -m "not slow" -q "$@"
