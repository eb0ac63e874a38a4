#!/bin/sh
# An unprivileged user for the tests' private PostgreSQL server: initdb and postgres refuse to run
# as root, so under root the tests run them as this user (tests/pg_server.py). Idempotent.
# Usage (as root, once per machine): scripts/ci/postgres-user.sh
set -eu
NAME=${GRANDROUNDS_PG_USER:-grandrounds-pg}
if ! id "$NAME" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$NAME"
fi
echo "$NAME"
