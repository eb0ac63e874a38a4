"""The viewer's HTTP server: stdlib ``http.server``, a JSON API and one static page.

Binds 127.0.0.1 by default. Every request passes, in order:

1. **Host**: a request naming any other host is refused with 421 (DNS rebinding), see
   :mod:`grandrounds.viewer.security`;
2. **access token** (binds beyond loopback only): ``?token=`` once, then a cookie; else 403;
3. the route. A review POST also needs a same-origin Origin (or Referer), a JSON body, the
   page's CSRF token and a score on the benchmark's scale (:mod:`grandrounds.viewer.scales`).

Every request gets an HTTP answer: malformed ones 400 (414, 431 for oversized lines and
headers), a request not completed within the idle timeout 408, an unexpected failure 500. At
most ``max_threads`` connections are handled at once; a connection that finds no free slot
within ``slot_wait`` seconds gets 503. The page is served with a Content-Security-Policy that
allows no inline script, and its JS inserts untrusted text with ``textContent`` only.
"""

from __future__ import annotations

import json
import math
import socket
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from grandrounds.store import ReviewInput, Store
from grandrounds.viewer import index, queries
from grandrounds.viewer.page import APP_JS, page_html
from grandrounds.viewer.security import Guard, HostPolicy, cookie, host_literal, is_loopback, same_origin

CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
MAX_BODY = 100_000
MAX_QUERY_FIELDS = 30
#: Longest text field of a review (characters): names and ids are short, reasons a paragraph.
MAX_FIELD = {"reason": 10_000}
MAX_FIELD_DEFAULT = 500


class ViewerState:
    """The store path, the sidecar index and per-thread connections to both."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = Path(store_path)
        with Store(self.store_path):  # create / migrate before anything reads it
            pass
        self.index_path = index.index_path(self.store_path)
        self.lock = threading.Lock()
        self.generation = 0
        self.checked = 0.0
        self.local = threading.local()
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Rebuild the index if the store changed (checked at most every 2 s)."""
        if not force and time.monotonic() - self.checked < 2.0:
            return
        with self.lock, Store(self.store_path) as st:
            if not index.is_current(self.index_path, st):
                index.build(self.index_path, st)
                self.generation += 1
            self.checked = time.monotonic()

    def con(self) -> sqlite3.Connection:
        """This thread's read-only connection to the index (reopened after each rebuild)."""
        c = getattr(self.local, "con", None)
        if c is None or getattr(self.local, "gen", -1) != self.generation:
            if c is not None:
                c.close()
            c = index.connect_readonly(self.index_path, like_bytes=8 * queries.MAX_TERM_CHARS)  # 4 bytes a character, escapes
            self.local.con, self.local.gen = c, self.generation
        return c

    def store(self) -> Store:
        """This thread's handle on the store (a connection cannot be shared across threads)."""
        s = getattr(self.local, "store", None)
        if s is None:
            s = self.local.store = Store(self.store_path)
        return s


def _flag(qs: dict[str, list[str]], name: str) -> bool:
    return qs.get(name, [""])[0] in ("1", "true", "on")


def _arg(qs: dict[str, list[str]], name: str, default: str = "") -> str:
    return qs.get(name, [default])[0] or default


def _int(qs: dict[str, list[str]], name: str, default: int, lo: int, hi: int) -> int:
    """An integer parameter within [lo, hi] (ValueError naming it otherwise)."""
    text = _arg(qs, name, str(default))
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}")
    return int(text)


def api_get(state: ViewerState, path: str, qs: dict[str, list[str]]) -> tuple[int, Any]:
    """(HTTP status, JSON body) of one GET under ``/api/``; ValueError on a malformed parameter,
    :class:`queries.QueryTooSlow` past the time budget."""
    state.refresh()
    con = state.con()
    with queries.time_bounded(con):
        if path == "/api/facets":
            return 200, queries.facets(con)
        if path == "/api/runs":
            return 200, queries.runs(state.store())
        if path == "/api/items":
            f = queries.Filters(
                benchmark=_arg(qs, "benchmark"), model=_arg(qs, "model"), run=_arg(qs, "run"), col=_arg(qs, "col"),
                dimension=_arg(qs, "dimension"), verdict=_arg(qs, "verdict"),
                disagree=_flag(qs, "disagree"), unknown=_flag(qs, "unknown"), queued=_flag(qs, "queued"), q=_arg(qs, "q"),
            )
            return 200, queries.list_items(con, f, _int(qs, "page", 1, 1, 10**6), _int(qs, "per_page", 50, 1, queries.PAGE_MAX))
        if path.startswith("/api/item/"):
            tail = path.rsplit("/", 1)[1]
            if not tail.isdigit() or len(tail) > 12:
                raise ValueError("an item id is a whole number")
            got = queries.item(con, state.store(), int(tail))
            return (200, got) if got else (404, {"error": "no such item"})
    return 404, {"error": "not found"}


def _text_field(d: dict[str, Any], name: str) -> str:
    value = d.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text")
    limit = MAX_FIELD.get(name, MAX_FIELD_DEFAULT)
    if len(value) > limit:
        raise ValueError(f"{name} is limited to {limit} characters")
    return value


def _score(value: Any) -> float | None:
    """A posted score: a JSON number or numeric text, finite (None when absent)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("a score must be a number")
    try:
        score = float(value)
    except (ValueError, OverflowError):
        raise ValueError("a score must be a number") from None
    if not math.isfinite(score):
        raise ValueError("a score must be a finite number")
    return score


def review_from_json(body: bytes) -> tuple[ReviewInput, Any]:
    """(the review a posted JSON object describes, its ``csrf`` field); ValueError when malformed."""
    d = json.loads(body or b"{}")
    if not isinstance(d, dict):
        raise ValueError("send a JSON object")
    verdict = d.get("verdict")
    if verdict is not None and not isinstance(verdict, str):
        raise ValueError("verdict must be text")
    review = ReviewInput(
        run_id=_text_field(d, "run_id"), grader_fp=_text_field(d, "grader_fp"), sample_id=_text_field(d, "sample_id"),
        reviewer=_text_field(d, "reviewer"), reason=_text_field(d, "reason"), criterion_id=_text_field(d, "criterion_id"),
        verdict=verdict or None, score=_score(d.get("score")),
    )
    return review, d.get("csrf")


def _finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities as null (JSON has no form for them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


class ViewerServer(ThreadingHTTPServer):
    """A threading HTTP server with a bounded number of handler threads.

    The accept loop waits up to ``slot_wait`` seconds for a free slot; a connection that finds
    none is answered 503 and closed, so a flood of connections never grows the thread count.
    """

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], state: ViewerState,
                 max_threads: int = 16, slot_wait: float = 2.0) -> None:
        self.state = state
        self.slots = threading.BoundedSemaphore(max_threads)
        self.slot_wait = slot_wait
        self.policy: HostPolicy | None = None
        self.guard: Guard | None = None
        self.deadlines: dict[Any, float] = {}  # handler -> monotonic time its request must be in by
        self.deadlines_lock = threading.Lock()
        self.closed = threading.Event()
        super().__init__(address, handler)
        threading.Thread(target=self._watchdog, daemon=True).start()

    def watch(self, handler: Any, seconds: float) -> None:
        with self.deadlines_lock:
            self.deadlines[handler] = time.monotonic() + seconds

    def unwatch(self, handler: Any) -> None:
        with self.deadlines_lock:
            self.deadlines.pop(handler, None)

    def _watchdog(self) -> None:
        """One thread for every request's deadline: cut off those not received in time."""
        while not self.closed.wait(0.2):
            now = time.monotonic()
            with self.deadlines_lock:
                late = [h for h, t in self.deadlines.items() if t < now]
                for h in late:
                    del self.deadlines[h]
            for h in late:
                h.cut_off()

    def server_close(self) -> None:
        self.closed.set()
        super().server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(timeout=self.slot_wait):
            self._busy(request)
            return
        try:
            threading.Thread(target=self._handle, args=(request, client_address), daemon=True).start()
        except BaseException:
            self.slots.release()
            self.shutdown_request(request)
            raise

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _busy(self, request: socket.socket) -> None:
        body = b"the viewer is busy; retry in a moment\n"
        head = f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        try:
            request.settimeout(0.2)
            request.sendall(head.encode("ascii") + body)
            request.recv(65536)  # read what the client sent, so closing does not reset the connection before it reads the 503
        except OSError:
            pass
        self.shutdown_request(request)


class ViewerServer6(ViewerServer):
    address_family = socket.AF_INET6


def make_handler(state: ViewerState, idle_timeout: float = 10.0) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``state``: checks, the page, the JSON API and review posts.

    ``idle_timeout`` bounds each wait for the client; a request (line, headers and body) not
    received within three times that in all is cut off, so a client trickling bytes cannot hold a
    handler thread either.
    """

    class Handler(BaseHTTPRequestHandler):
        server_version = "grandrounds-viewer"
        sys_version = ""
        timeout = idle_timeout  # socket timeout: an idle or half-sent request is dropped (408 when begun)
        default_request_version = "HTTP/1.0"  # so even a garbled request line gets a status line back
        error_content_type = "text/plain; charset=utf-8"
        error_message_format = "%(code)d %(message)s\n"
        server: ViewerServer

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
            pass

        # ---- one request, always answered -------------------------------------------------
        def handle_one_request(self) -> None:
            self.answered = False
            self.server.watch(self, 3 * idle_timeout)
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
        def _send(self, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
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
            self._send(code, json.dumps(_finite(obj), ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

        def _text(self, code: int, message: str, headers: dict[str, str] | None = None) -> None:
            self._send(code, (message + "\n").encode("utf-8"), "text/plain; charset=utf-8", headers)

        def _set_cookie(self, name: str, value: str) -> None:
            self.cookies = [*getattr(self, "cookies", []), f"{name}={value}; Path=/; HttpOnly; SameSite=Strict"]

        # ---- checks, then the route ---------------------------------------------------------
        def route(self) -> None:
            srv = self.server
            assert srv.policy is not None and srv.guard is not None
            self.cookies = []
            host = self.headers.get("Host")
            if len(self.headers.get_all("Host") or ()) > 1 or not srv.policy.allows(host):
                return self._text(421, f"misdirected request: this viewer answers only {srv.policy.example()}")
            if not self.path.startswith("/") or self.path.startswith("//"):  # no absolute-form target naming another host
                return self._text(400, "bad request target")
            url = urlsplit(self.path)
            try:
                qs = parse_qs(url.query, max_num_fields=MAX_QUERY_FIELDS)
            except ValueError:
                return self._text(400, f"at most {MAX_QUERY_FIELDS} query parameters")
            if not self._access(srv.guard, url.path, qs):
                return
            if self.command == "GET":
                self.received()
                return self._get(url.path, qs)
            if self.command == "POST":
                return self._post(url.path, str(host))
            self._text(405, "method not allowed", {"Allow": "GET, POST"})

        def _access(self, guard: Guard, path: str, qs: dict[str, list[str]]) -> bool:
            """True when the request may proceed; beyond loopback it needs the access token."""
            given = qs.pop("token", [None])[0]
            if guard.token is None:
                return True
            if given is not None and guard.token_ok(given):
                self._set_cookie(guard.token_cookie, guard.token)
                if self.command == "GET" and path in ("/", "/index.html"):  # drop the token from the address bar
                    self._text(303, "see /", {"Location": "/"})
                    return False
                return True
            if guard.token_ok(cookie(self.headers.get("Cookie"), guard.token_cookie)):
                return True
            self._text(403, "this viewer needs its access token: open the address `grandrounds view` printed (with ?token=...)")
            return False

        def _get(self, path: str, qs: dict[str, list[str]]) -> None:
            """The page, its script, or an API answer (400 on a malformed parameter, 503 when too slow)."""
            guard = self.server.guard
            assert guard is not None
            if path in ("/", "/index.html"):
                session = cookie(self.headers.get("Cookie"), guard.session_cookie)
                if session is None or not 20 <= len(session) <= 64:
                    session = guard.new_session()
                    self._set_cookie(guard.session_cookie, session)
                return self._send(200, page_html(guard.csrf(session)).encode("utf-8"), "text/html; charset=utf-8")
            if path == "/app.js":
                return self._send(200, APP_JS.encode("utf-8"), "text/javascript; charset=utf-8")
            try:
                code, body = api_get(self.server.state, path, qs)
            except queries.QueryTooSlow as e:
                code, body = 503, {"error": str(e)}
            except (ValueError, OverflowError) as e:
                code, body = 400, {"error": str(e)}
            self._json(body, code)

        def _post(self, path: str, host: str) -> None:
            """Store one review: same origin, JSON, the session's CSRF token, validated input."""
            from grandrounds.reviews import ReviewError, add_review

            guard = self.server.guard
            assert guard is not None
            if path != "/api/review":
                return self._json({"error": "not found"}, 404)
            if not same_origin(self.headers, host):
                return self._json({"error": "cross-origin review refused (Origin or Referer must be this viewer)"}, 403)
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                return self._json({"error": "send JSON"}, 415)
            length = self.headers.get("Content-Length")
            if length is None:
                return self._json({"error": "Content-Length required"}, 411)
            if not length.isdigit():
                return self._json({"error": "bad Content-Length"}, 400)
            if int(length) > MAX_BODY:
                return self._json({"error": f"a review is limited to {MAX_BODY} bytes"}, 413)
            body = self.rfile.read(int(length))
            self.received()
            if len(body) < int(length):
                return self._json({"error": "the body ended before its Content-Length"}, 400)
            try:
                review, token = review_from_json(body)
            except (ValueError, RecursionError) as e:
                return self._json({"error": f"malformed review: {e}" if not isinstance(e, RecursionError) else "malformed review: nested too deeply"}, 400)
            if not guard.csrf_ok(cookie(self.headers.get("Cookie"), guard.session_cookie), token):
                return self._json({"error": "missing or wrong CSRF token: reload the page"}, 403)
            store = self.server.state.store()
            try:
                rid = add_review(store, review)  # checks a whole-answer score against the benchmark's scale
            except (ReviewError, ValueError, TypeError) as e:
                return self._json({"error": str(e)}, 400)
            self._json({"id": rid})

    return Handler


def make_server(store_path: Path, host: str = "127.0.0.1", port: int = 8765, *, token: str | None = None, require_token: bool | None = None,
                allow_hosts: tuple[str, ...] = (), max_threads: int = 16, idle_timeout: float = 10.0, slot_wait: float = 2.0) -> ViewerServer:
    """A ready server (port 0 picks a free one); call ``serve_forever`` on it.

    Beyond loopback an access token is required (``require_token`` forces it either way); one
    is generated unless ``token`` is given. ``allow_hosts`` adds names the Host header may use.
    """
    import secrets

    state = ViewerState(store_path)
    cls = ViewerServer6 if ":" in host else ViewerServer
    srv = cls((host, port), make_handler(state, idle_timeout), state, max_threads, slot_wait)
    bound_port = srv.server_address[1]
    need = (not is_loopback(host)) if require_token is None else require_token
    srv.policy = HostPolicy.for_bind(host, bound_port, allow_hosts)
    srv.guard = Guard(bound_port, (token or secrets.token_urlsafe(24)) if need else None)
    return srv


def viewer_url(srv: ViewerServer, host: str) -> str:
    """The address to open: the bound host (loopback for wildcard binds) and, when one is needed, the token."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host_literal(host)
    token = srv.guard.token if srv.guard else None
    return f"http://{shown}:{srv.server_address[1]}/" + (f"?token={token}" if token else "")


def serve(store_path: Path, host: str = "127.0.0.1", port: int = 8765, log: Callable[[str], None] = print, allow_hosts: tuple[str, ...] = ()) -> None:
    """Build the index, then serve the viewer until Ctrl-C."""
    t = time.perf_counter()
    srv = make_server(store_path, host, port, allow_hosts=allow_hosts)
    if not is_loopback(host):
        log(f"warning: the viewer listens on {host}, beyond this machine, over plain HTTP; anyone with the token in the address "
            "below can read every run and add reviews. Use the default --host 127.0.0.1 unless you need this.")
    log(f"index ready in {time.perf_counter() - t:.1f} s; viewer on {viewer_url(srv, host)} (Ctrl-C to stop)")
    if host in ("0.0.0.0", "::", ""):
        log(f"from other machines: {viewer_url(srv, socket.gethostname())}")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
