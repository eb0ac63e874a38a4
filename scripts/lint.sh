#!/usr/bin/env bash
# The mechanical gates: the formatter leaves every file as it is, the linter finds nothing, the
# type checker finds nothing (their settings are in pyproject.toml, their versions pinned in the
# dev extra). Runs the tools of the project's .venv, else those on PATH. Exits non-zero when any
# gate fails, after running them all and naming each that failed.
set -uo pipefail
cd "$(dirname "$0")/.."

tool() {
    if [ -x ".venv/bin/$1" ]; then
        echo ".venv/bin/$1"
    elif command -v "$1" >/dev/null 2>&1; then
        command -v "$1"
    else
        echo "lint: $1 is not installed (bash scripts/setup.sh dev installs it into .venv)" >&2
        return 1
    fi
}

PATHS=(src tests bench scripts)
failed=()

run() {
    local name=$1
    shift
    echo "lint: $name" >&2
    if ! "$@"; then
        failed+=("$name")
    fi
}

if ruff=$(tool ruff); then
    run "ruff format --check" "$ruff" format --check "${PATHS[@]}"
    run "ruff check" "$ruff" check "${PATHS[@]}"
else
    failed+=("ruff (not installed)")
fi
if mypy=$(tool mypy); then
    run "mypy" "$mypy"  # files, strictness: [tool.mypy] in pyproject.toml
else
    failed+=("mypy (not installed)")
fi

if [ ${#failed[@]} -gt 0 ]; then
    printf 'lint: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "lint: ruff format, ruff check and mypy clean" >&2
