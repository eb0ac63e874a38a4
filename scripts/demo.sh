#!/usr/bin/env bash
# Set up (first time only) and run the bundled example exam on the default local model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/grandrounds demo "$@"
