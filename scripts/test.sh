#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite, the slow model tests included.
# PostgreSQL must be reachable (EVOLVABLE_TEST_POSTGRES, default postgres@127.0.0.1:5432/test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Static checks first: lint, the layer contract (docs/ARCHITECTURE.md) that a wrong import breaks,
# and the type checker ([tool.mypy] in pyproject.toml: strict, over src/).
.venv/bin/ruff check src tests benchmarks
.venv/bin/lint-imports
.venv/bin/mypy
set +e
.venv/bin/python -m pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "error: no tests were collected" >&2
  exit 1
fi
exit "$code"
