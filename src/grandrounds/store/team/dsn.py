"""Where the team store is: a ``postgresql://`` (or ``postgres://``) DSN, completed by libpq from the
standard ``PG*`` variables (``PGHOST``, ``PGUSER``, ``PGPASSWORD``, ``PGPASSFILE``, ...), and how it
is named on screen: never with its password."""

from __future__ import annotations

import re

from grandrounds.core.errors import StoreError

SCHEMES = ("postgresql://", "postgres://")


def is_team_dsn(text: object) -> bool:
    """True when ``text`` names a PostgreSQL team store rather than an SQLite file."""
    return isinstance(text, str) and text.startswith(SCHEMES)


def shown(dsn: str) -> str:
    """The DSN as it may be printed, logged or stored: its password (in the userinfo or as a
    ``password=`` parameter) replaced by ``***``; host, port, user and database kept."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # a malformed DSN: show only the scheme and what follows the last @
        return dsn.split("://", 1)[0] + "://***@" + dsn.rsplit("@", 1)[-1] if "@" in dsn else dsn
    user = parts.get("user")
    host = parts.get("host") or ""
    port = parts.get("port")
    db = parts.get("dbname") or ""
    where = (f"[{host}]" if ":" in str(host) else str(host)) + (f":{port}" if port else "")
    if "/" in str(host):  # a socket folder
        where = ""
    out = "postgresql://" + (f"{user}@" if user else "") + where + (f"/{db}" if db else "")
    if "/" in str(host):
        out += f"?host={host}"
    return out


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver's message) with the DSN's password removed wherever it appears."""
    secret = password_of(dsn)
    out = text.replace(dsn, shown(dsn))
    if secret:
        out = out.replace(secret, "***")
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", out)


def password_of(dsn: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    try:
        value = conninfo_to_dict(dsn).get("password")
        return str(value) if value else None
    except Exception:
        m = re.match(r"^[a-z]+://[^:/@]*:([^@]*)@", dsn)
        return m.group(1) if m else None


def team_error(dsn: str, problem: str) -> StoreError:
    """A one-line error naming the team store (without its password)."""
    return StoreError(shown(dsn), scrub(problem, dsn))
