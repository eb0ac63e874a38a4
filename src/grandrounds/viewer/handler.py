"""The viewer's request handler below its routes: every request answered, in time, with the
viewer's security headers.

Every request gets an HTTP answer: malformed ones 400 (414, 431 for oversized lines and
headers), a request not completed within the idle timeout 408, an unexpected failure 500. Each
wait for the client is bounded by the context's ``idle_timeout``; a request (line, headers and
body) not received within three times that in all is cut off, so a client trickling bytes
cannot hold a handler thread either. Subclasses answer in :meth:`RequestHandler.route`.
"""

from __future__ import annotations

import json
import socket
from http.server import BaseHTTPRequestHandler
from typing import Any

from grandrounds.viewer.api import finite
from grandrounds.viewer.httpd import ViewerServer
from grandrounds.viewer.state import ViewerContext

CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


class RequestHandler(BaseHTTPRequestHandler):
    """One connection of a :class:`ViewerServer`: reads each request, calls :meth:`route`, and
    makes sure the client gets an answer."""

    server_version = "grandrounds-viewer"
    sys_version = ""
    default_request_version = "HTTP/1.0"  # so even a garbled request line gets a status line back
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s\n"
    server: ViewerServer

    @property
    def ctx(self) -> ViewerContext:
        """What this viewer checks requests against and answers from."""
        ctx = self.server.context
        assert ctx is not None
        return ctx

    def setup(self) -> None:
        # socket timeout: an idle or half-sent request is dropped (408 when begun); per connection,
        # as the viewer's context says, where socketserver declares a class attribute
        self.timeout = self.ctx.idle_timeout  # type: ignore[misc]
        super().setup()

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
        pass

    def route(self) -> None:
        """Answer the parsed request (``self.command``, ``self.path``, ``self.headers``)."""
        raise NotImplementedError

    # ---- one request, always answered -------------------------------------------------
    def handle_one_request(self) -> None:
        self.answered = False
        self.server.watch(self, 3 * self.ctx.idle_timeout)
        try:
            self._handle_one()
        finally:
            self.server.unwatch(self)

    def cut_off(self) -> None:
        """The whole request took too long to arrive: close the connection under the reader."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def received(self) -> None:
        """The request is in: stop the clock (the answer may take its time)."""
        self.server.unwatch(self)

    def _handle_one(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True  # an idle connection: nothing was asked
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        try:
            if len(self.raw_requestline) > 65536:
                self.requestline, self.request_version, self.command = "", "", ""
                self.send_error(414)
                return
            if not self.parse_request():  # answers malformed lines and headers itself
                return
            self.route()
            self.wfile.flush()
        except TimeoutError:
            self._fail(408, "request not completed in time")
        except (ConnectionError, OSError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - whatever went wrong, the client gets an answer
            self._fail(500, "internal error")

    def _fail(self, code: int, message: str) -> None:
        self.close_connection = True
        if not self.answered:
            try:
                self._text(code, message)
            except OSError:
                pass

    def send_response(self, code: int, message: str | None = None) -> None:
        self.answered = True
        super().send_response(code, message)

    # ---- responses --------------------------------------------------------------------
    def _send(
        self, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Referrer-Policy", "same-origin")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("X-Frame-Options", "DENY")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for c in getattr(self, "cookies", ()):
            self.send_header("Set-Cookie", c)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any, code: int = 200) -> None:
        self._send(
            code,
            json.dumps(finite(obj), ensure_ascii=False).encode("utf-8"),
            "application/json; charset=utf-8",
        )

    def _text(self, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._send(code, (message + "\n").encode("utf-8"), "text/plain; charset=utf-8", headers)

    def _set_cookie(self, name: str, value: str) -> None:
        self.cookies = [
            *getattr(self, "cookies", []),
            f"{name}={value}; Path=/; HttpOnly; SameSite=Strict",
        ]
