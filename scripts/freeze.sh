#!/usr/bin/env bash
# Write requirements/constraints.txt from .venv after the tests pass on an upgrade: every package
# at the version that was tested (the package itself left out).
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# Every package at the version the tests ran with, on Python 3.11 (Linux x86-64 and aarch64)."
  echo "# scripts/setup.sh installs with -c this file; regenerate with scripts/freeze.sh after a tested upgrade."
  .venv/bin/python -m pip freeze --exclude-editable | grep -v -e '^-e ' -e '^grandrounds=='
} > requirements/constraints.txt.part
mv requirements/constraints.txt.part requirements/constraints.txt
