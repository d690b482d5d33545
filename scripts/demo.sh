#!/usr/bin/env bash
# Set up (if needed) and run the main job: `evolvable demo` on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/evolvable demo "$@"
