"""The viewer's HTTP server: stdlib ThreadingHTTPServer, a JSON API and one static page.

Binds 127.0.0.1 by default. The page is served with a Content-Security-Policy that allows
no inline script, and its JS inserts untrusted text with ``textContent`` only. Reviews are
POSTed as JSON; cross-origin posts are refused (Origin must match, JSON content type).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from grandrounds.store import ReviewInput, Store
from grandrounds.viewer import index, queries
from grandrounds.viewer.page import APP_JS, PAGE_HTML

CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


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
        """This thread's connection to the index (reopened after each rebuild)."""
        c = getattr(self.local, "con", None)
        if c is None or getattr(self.local, "gen", -1) != self.generation:
            if c is not None:
                c.close()
            c = sqlite3.connect(self.index_path, check_same_thread=False)
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


def api_get(state: ViewerState, path: str, qs: dict[str, list[str]]) -> tuple[int, Any]:
    """(HTTP status, JSON body) of one GET under ``/api/``; ValueError on a malformed parameter."""
    state.refresh()
    con = state.con()
    if path == "/api/facets":
        return 200, queries.facets(con)
    if path == "/api/runs":
        return 200, queries.runs(state.store())
    if path == "/api/items":
        f = queries.Filters(
            benchmark=_arg(qs, "benchmark"), model=_arg(qs, "model"), dimension=_arg(qs, "dimension"), verdict=_arg(qs, "verdict"),
            disagree=_flag(qs, "disagree"), unknown=_flag(qs, "unknown"), queued=_flag(qs, "queued"), q=_arg(qs, "q"),
        )
        return 200, queries.list_items(con, f, int(_arg(qs, "page", "1")), int(_arg(qs, "per_page", "50")))
    if path.startswith("/api/item/"):
        got = queries.item(con, state.store(), int(path.rsplit("/", 1)[1]))
        return (200, got) if got else (404, {"error": "no such item"})
    return 404, {"error": "not found"}


def review_from_json(body: bytes) -> ReviewInput:
    """The review a posted JSON body describes (ValueError / TypeError when malformed)."""
    d = json.loads(body or b"{}")
    score = d.get("score")
    return ReviewInput(
        run_id=str(d.get("run_id", "")), grader_fp=str(d.get("grader_fp", "")), sample_id=str(d.get("sample_id", "")),
        reviewer=str(d.get("reviewer", "")), reason=str(d.get("reason", "")), criterion_id=str(d.get("criterion_id", "") or ""),
        verdict=d.get("verdict") or None, score=None if score in (None, "") else float(score),
    )


def make_handler(state: ViewerState) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``state``: the page, the JSON API and review posts."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "grandrounds-viewer"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CSP)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj: Any, code: int = 200) -> None:
            self._send(code, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

        def do_GET(self) -> None:  # noqa: N802
            """The page, its script, or an API answer (400 on a malformed parameter)."""
            url = urlparse(self.path)
            if url.path in ("/", "/index.html"):
                return self._send(200, PAGE_HTML.encode("utf-8"), "text/html; charset=utf-8")
            if url.path == "/app.js":
                return self._send(200, APP_JS.encode("utf-8"), "text/javascript; charset=utf-8")
            try:
                code, body = api_get(state, url.path, parse_qs(url.query))
            except ValueError as e:
                code, body = 400, {"error": str(e)}
            self._json(body, code)

        def do_POST(self) -> None:  # noqa: N802
            """Store one review: same-origin JSON only, validated by ``add_review``."""
            from grandrounds.reviews import ReviewError, add_review

            if urlparse(self.path).path != "/api/review":
                return self._json({"error": "not found"}, 404)
            origin = self.headers.get("Origin")
            if origin is not None and origin != f"http://{self.headers.get('Host', '')}":
                return self._json({"error": "cross-origin review refused"}, 403)
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                return self._json({"error": "send JSON"}, 415)
            try:
                n = int(self.headers.get("Content-Length", "0"))
                if n > 100_000:
                    raise ReviewError("review too large")
                rid = add_review(state.store(), review_from_json(self.rfile.read(n)))
            except (ReviewError, ValueError, TypeError) as e:
                return self._json({"error": str(e)}, 400)
            self._json({"id": rid})

    return Handler


def make_server(store_path: Path, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A ready server (port 0 picks a free one); call ``serve_forever`` on it."""
    state = ViewerState(store_path)
    srv = ThreadingHTTPServer((host, port), make_handler(state))
    srv.daemon_threads = True
    return srv


def serve(store_path: Path, host: str = "127.0.0.1", port: int = 8765, log: Callable[[str], None] = print) -> None:
    """Build the index, then serve the viewer until Ctrl-C."""
    t = time.perf_counter()
    srv = make_server(store_path, host, port)
    log(f"index ready in {time.perf_counter() - t:.1f} s; viewer on http://{host}:{srv.server_address[1]}/ (Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
