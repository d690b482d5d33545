#!/usr/bin/env bash
# Installs the LiteLLM proxy (the peer in benchmarks/proxy_overhead.py) into its own venv, so the main
# environment stays clean. Pinned to the version measured in docs/PERFORMANCE.md; 1.107.0 was a
# compromised release and must never be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-bench-litellm
PYTHON=${PYTHON:-python3.11}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "litellm[proxy]==1.106.2"
LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/python" -c "import litellm; print('litellm ok', litellm.__version__ if hasattr(litellm, '__version__') else '')"
