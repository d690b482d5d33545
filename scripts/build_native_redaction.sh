#!/usr/bin/env bash
# (Re)build the compiled redaction modules (mypyc) into src/evolvable/governance/redaction/_native; setup.sh does
# this too. The package loads them only while they match its sources (see evolvable/governance/redaction/native.py).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m evolvable.governance.redaction.compiled build "$@"
