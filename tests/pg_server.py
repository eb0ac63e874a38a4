"""A private PostgreSQL server for tests: ``initdb`` in a temporary folder, ``pg_ctl`` on a free
loopback port with its socket in that folder, stopped at the end of the session.

PostgreSQL refuses to run as root; under root the server runs as ``$GRANDROUNDS_PG_USER`` (the
user ``scripts/ci/postgres-user.sh`` creates) or, failing that, ``nobody``, its folder handed to
that user. Skips with the reason where the server binaries are absent (fails under CI=true, where
CI installs them).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN_DIRS = [
    os.environ.get("GRANDROUNDS_PG_BIN", ""),
    *sorted((str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")), reverse=True),
]


def _bin_dir() -> Path | None:
    for d in BIN_DIRS:
        if d and (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


def _missing(msg: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running server: ``dsn(db)`` names a database on it (a superuser's, no password)."""

    port: int
    socket_dir: Path
    user: str
    bin_dir: Path
    run_as: list[str]

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def createdb(self, name: str) -> str:
        """A new empty database; its DSN."""
        subprocess.run(
            [*self.run_as, str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", self.user, name],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        return self.dsn(name)

    def psql(self, db: str, sql: str) -> str:
        r = subprocess.run(
            [*self.run_as, str(self.bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", self.user, "-d", db, "-XAtc", sql],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        return r.stdout


def start_server() -> Iterator[PgServer]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        _missing(
            "PostgreSQL server binaries (initdb, pg_ctl) not found "
            "(apt-get install -y postgresql, or set GRANDROUNDS_PG_BIN)"
        )
        return
    run_as: list[str] = []
    owner = None
    if os.geteuid() == 0:  # initdb and postgres refuse root
        name = os.environ.get("GRANDROUNDS_PG_USER", "")
        for candidate in (name, "grandrounds-pg", "nobody"):
            if not candidate:
                continue
            try:
                owner = pwd.getpwnam(candidate)
                break
            except KeyError:
                continue
        if owner is None:
            _missing("running as root and no unprivileged user to run PostgreSQL as")
            return
        run_as = ["runuser", "-u", owner.pw_name, "--"]
    root = Path(tempfile.mkdtemp(prefix="grandrounds-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if owner is not None:
        os.chmod(root, 0o755)
        for p in (root, sock):
            os.chown(p, owner.pw_uid, owner.pw_gid)
    user = "grandrounds_test"
    r = subprocess.run(
        [*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", user, "-A", "trust",
         "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        _missing(f"initdb failed: {r.stderr.strip()[-500:]}")
        return
    # trust on loopback, except the role "publisher", which must give its password (the tests of
    # passwords log in as it)
    hba = data / "pg_hba.conf"
    hba.write_text(
        "local all all trust\n"
        "host all publisher 127.0.0.1/32 scram-sha-256\n"
        "host all all 127.0.0.1/32 trust\n",
        encoding="utf-8",
    )
    if owner is not None:
        os.chown(hba, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    opts = f"-k {sock} -c listen_addresses=127.0.0.1 -p {port} -c fsync=off -c max_connections=60"
    r = subprocess.run(
        [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l",
         str(root / "server.log"), "-w", "-t", "60", "start"],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        log = (
            (root / "server.log").read_text(errors="replace")[-800:]
            if (root / "server.log").exists()
            else ""
        )
        shutil.rmtree(root, ignore_errors=True)
        _missing(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {log}")
        return
    try:
        yield PgServer(port, sock, user, bin_dir, run_as)
    finally:
        subprocess.run(
            [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    yield from start_server()


_counter = iter(range(10**6))


@pytest.fixture
def pg_db(pg_server: PgServer) -> str:
    """The DSN of a new, empty database on the session's server."""
    return pg_server.createdb(f"t{os.getpid()}_{next(_counter)}")
