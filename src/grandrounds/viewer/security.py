"""The viewer's request checks: Host, access token, session and CSRF token, Origin.

- **Host.** A page on another site can make its own name resolve to 127.0.0.1 (DNS
  rebinding) and then read the viewer as if it were that site; its requests still carry
  that site's name in ``Host``. Every request whose Host is not an address the viewer was
  started on is refused. Loopback binds accept ``127.0.0.1``, ``localhost`` and ``[::1]``
  with the port; a specific address accepts itself; a wildcard bind (``0.0.0.0``, ``::``)
  accepts IP literals and this machine's names (a rebinding page cannot use an IP literal:
  its origin is its name), always with the port, plus any ``--allow-host`` name.
- **Access token.** Beyond loopback the viewer requires a random token (printed in its
  URL). The first request carries it as ``?token=``; the answer sets it as an HttpOnly,
  SameSite=Strict cookie so links keep working.
- **CSRF.** The page gets a session cookie and, in a ``<meta>`` tag, a token derived from it
  with a key made at start (HMAC-SHA256). A POST must carry that token in its body and an
  Origin (or, without one, a Referer) equal to the viewer's own.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Protocol
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def host_literal(host: str) -> str:
    """How ``host`` appears in a Host header: IPv6 addresses in brackets, names lower-case."""
    ip = _ip(host)
    if ip is not None and ip.version == 6:
        return f"[{ip.compressed}]"
    return host.lower()


def split_host(value: str) -> tuple[str, int | None] | None:
    """(host, port or None) of a Host header value; None when malformed."""
    value = value.strip().lower()
    if not value or any(c in value for c in " /\\@?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[: end + 1], value[end + 1 :]
        if _ip(host) is None:
            return None
    else:
        host, sep, port_text = value.partition(":")
        rest = sep + port_text
        if not host:
            return None
    if not rest:
        return host, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return host, int(rest[1:])


@dataclass(frozen=True)
class HostPolicy:
    """Which Host header values the viewer answers."""

    port: int
    names: frozenset[str]
    any_ip: bool = False

    @classmethod
    def for_bind(cls, bind_host: str, port: int, extra: Iterable[str] = ()) -> HostPolicy:
        """The policy of a server bound to ``bind_host``:``port`` (``extra``: more accepted names)."""
        names = {host_literal(h) for h in extra if h}
        any_ip = bind_host in WILDCARDS
        if is_loopback(bind_host):
            names |= set(LOOPBACK_NAMES)
        if any_ip:
            names |= set(LOOPBACK_NAMES) | {
                n.lower() for n in (socket.gethostname(), socket.getfqdn()) if n
            }
        else:
            names.add(host_literal(bind_host))
        return cls(port, frozenset(names), any_ip)

    def example(self) -> str:
        """One address this policy accepts, for messages."""
        name = (
            "127.0.0.1"
            if "127.0.0.1" in self.names
            else sorted(self.names)[0]
            if self.names
            else "<this machine's address>"
        )
        return f"http://{name}:{self.port}/"

    def allows(self, header: str | None) -> bool:
        """True when ``header`` (the request's Host) names this server."""
        parsed = split_host(header or "")
        if parsed is None:
            return False
        host, port = parsed
        if (port if port is not None else 80) != self.port:
            return False
        return host in self.names or (self.any_ip and _ip(host) is not None)


def cookie(header: str | None, name: str) -> str | None:
    """The value of cookie ``name`` in a Cookie header (None when absent or unreadable)."""
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def same(a: str | None, b: str | None) -> bool:
    """Constant-time equality of two secrets (False when either is missing)."""
    return (
        a is not None
        and b is not None
        and hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))
    )


@dataclass
class Guard:
    """The secrets of one viewer process: the access token (None on loopback) and the CSRF key."""

    port: int
    token: str | None = None
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def token_cookie(self) -> str:
        return f"grandrounds_token_{self.port}"  # cookies ignore ports: one name per viewer

    @property
    def session_cookie(self) -> str:
        return f"grandrounds_session_{self.port}"

    def new_session(self) -> str:
        return secrets.token_urlsafe(24)

    def csrf(self, session: str) -> str:
        """The CSRF token of a session: HMAC-SHA256 of its id under this process's key."""
        return hmac.new(self.key, session.encode("utf-8"), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: str | None, token: object) -> bool:
        return session is not None and isinstance(token, str) and same(self.csrf(session), token)

    def token_ok(self, given: str | None) -> bool:
        return self.token is None or same(self.token, given)


class Headers(Protocol):
    """A request's headers as read here: a mapping, or the server's ``email.message.Message``."""

    def get(self, name: str, /) -> str | None: ...


def same_origin(headers: Headers, host: str) -> bool:
    """True when the request's Origin (or, lacking one, its Referer) is ``http://host``."""
    origin = headers.get("Origin")
    if origin is not None:
        return origin == f"http://{host}"
    referer = headers.get("Referer")
    if referer is None:
        return False
    parts = urlsplit(referer)
    return parts.scheme == "http" and parts.netloc == host
