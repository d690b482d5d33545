#!/usr/bin/env bash
# Compile the redaction engine's hot modules to C with mypyc, into build/native (a copy of src/ with the compiled
# modules beside their sources). Same code, so the same findings; 1.26-1.50x the throughput of the pure-Python
# modules (docs/PERFORMANCE.md). Use it by putting build/native first: PYTHONPATH=build/native evolvable ...
# Needs mypy (the dev or `native` extra; mypyc ships with it) and a C compiler with the Python headers.
# Takes a few CPU-minutes (mypy checks what the modules import). Re-run after changing any redaction module:
# build/native is a snapshot, and a stale one would run old code.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
OUT=build/native
MODULES=(findings validators recognizers phones addresses names)

rm -rf "$OUT"
mkdir -p "$OUT"
cp -r src/evolvable "$OUT/"
find "$OUT" -name "__pycache__" -prune -exec rm -rf {} +
paths=()
for module in "${MODULES[@]}"; do
  paths+=("evolvable/governance/redaction/$module.py")
done
# mypy reads the project's strict configuration from pyproject.toml (found by walking up from build/native)
(cd "$OUT" && PYTHONPATH=. "$PYTHON" -m mypyc "${paths[@]}" >build.log 2>&1) || {
  tail -n 30 "$OUT/build.log" >&2
  exit 1
}
rm -rf "$OUT/build"
PYTHONPATH="$OUT" "$PYTHON" - "${MODULES[@]}" <<'PY'
import importlib
import sys

for name in sys.argv[1:]:
    module = importlib.import_module(f"evolvable.governance.redaction.{name}")
    assert module.__file__ is not None and module.__file__.endswith(".so"), f"{name} is not compiled: {module.__file__}"
print("native redaction build ready: run with PYTHONPATH=build/native")
PY
