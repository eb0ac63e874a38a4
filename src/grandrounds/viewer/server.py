"""Starting the viewer: a server bound to its address with its context, its URL, and ``serve``.

Binds 127.0.0.1 by default; beyond loopback every request needs the access token the URL
carries. The checks each request passes are in :mod:`grandrounds.viewer.routes`; at most
``max_threads`` connections are handled at once and a connection that finds no free slot within
``slot_wait`` seconds gets 503 (:mod:`grandrounds.viewer.httpd`).
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path

from grandrounds.viewer.httpd import ViewerServer, ViewerServer6
from grandrounds.viewer.routes import ViewerHandler
from grandrounds.viewer.security import Guard, HostPolicy, host_literal, is_loopback
from grandrounds.viewer.state import ViewerContext, ViewerState


def make_server(
    store_path: Path | str,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    token: str | None = None,
    require_token: bool | None = None,
    allow_hosts: tuple[str, ...] = (),
    max_threads: int = 16,
    idle_timeout: float = 10.0,
    slot_wait: float = 2.0,
) -> ViewerServer:
    """A ready server (port 0 picks a free one); call ``serve_forever`` on it.

    Beyond loopback an access token is required (``require_token`` forces it either way); one
    is generated unless ``token`` is given. ``allow_hosts`` adds names the Host header may use.
    ``idle_timeout`` bounds each wait for the client; a request not received within three times
    that in all is cut off.
    """
    state = ViewerState(store_path)
    cls = ViewerServer6 if ":" in host else ViewerServer
    srv = cls((host, port), ViewerHandler, max_threads, slot_wait)
    bound_port = srv.server_address[1]
    need = (not is_loopback(host)) if require_token is None else require_token
    policy = HostPolicy.for_bind(host, bound_port, allow_hosts)
    guard = Guard(bound_port, (token or secrets.token_urlsafe(24)) if need else None)
    srv.context = ViewerContext(state, policy, guard, idle_timeout)
    return srv


def viewer_url(srv: ViewerServer, host: str) -> str:
    """The address to open: the bound host (loopback for wildcard binds) and, when one is needed, the token."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host_literal(host)
    token = srv.context.guard.token if srv.context else None
    return f"http://{shown}:{srv.server_address[1]}/" + (f"?token={token}" if token else "")


def serve(
    store_path: Path | str,
    host: str = "127.0.0.1",
    port: int = 8765,
    log: Callable[[str], None] = print,
    allow_hosts: tuple[str, ...] = (),
) -> None:
    """Build the index, then serve the viewer until Ctrl-C."""
    t = time.perf_counter()
    srv = make_server(store_path, host, port, allow_hosts=allow_hosts)
    if not is_loopback(host):
        log(
            f"warning: the viewer listens on {host}, beyond this machine, over plain HTTP; anyone with the token in the address "
            "below can read every run and add reviews. Use the default --host 127.0.0.1 unless you need this."
        )
    log(
        f"index ready in {time.perf_counter() - t:.1f} s; viewer on {viewer_url(srv, host)} (Ctrl-C to stop)"
    )
    if host in ("0.0.0.0", "::", ""):
        log(f"from other machines: {viewer_url(srv, socket.gethostname())}")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
