#!/usr/bin/env bash
# Set up (first time only, with test tools), check formatting, lint and types, then run the whole
# test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
bash scripts/lint.sh
export GRANDROUNDS_THREADS=${GRANDROUNDS_THREADS:-1}
exec .venv/bin/python -m pytest -q "$@"
