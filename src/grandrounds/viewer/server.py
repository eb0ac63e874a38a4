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

from grandrounds.store import Store
from grandrounds.viewer import index, queries
from grandrounds.viewer.page import APP_JS, PAGE_HTML

CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


class ViewerState:
    """The store path, the sidecar index and per-thread connections to both."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = Path(store_path)
        Store(self.store_path).close()  # create / migrate before anything reads it
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
        with self.lock:
            con = sqlite3.connect(self.store_path)
            try:
                if not index.is_current(self.index_path, con):
                    index.build(self.index_path, con)
                    self.generation += 1
            finally:
                con.close()
            self.checked = time.monotonic()

    def con(self) -> sqlite3.Connection:
        """This thread's index connection, with the store attached as ``st``."""
        c = getattr(self.local, "con", None)
        if c is None or getattr(self.local, "gen", -1) != self.generation:
            if c is not None:
                c.close()
            c = sqlite3.connect(self.index_path, check_same_thread=False)
            c.execute("ATTACH DATABASE ? AS st", (str(self.store_path),))
            self.local.con, self.local.gen = c, self.generation
        return c

    def store(self) -> Store:
        s = getattr(self.local, "store", None)
        if s is None:
            s = self.local.store = Store(self.store_path)
        return s


def _flag(qs: dict[str, list[str]], name: str) -> bool:
    return qs.get(name, [""])[0] in ("1", "true", "on")


def make_handler(state: ViewerState) -> type[BaseHTTPRequestHandler]:
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
            url = urlparse(self.path)
            qs = parse_qs(url.query)
            p = url.path
            try:
                if p in ("/", "/index.html"):
                    return self._send(200, PAGE_HTML.encode("utf-8"), "text/html; charset=utf-8")
                if p == "/app.js":
                    return self._send(200, APP_JS.encode("utf-8"), "text/javascript; charset=utf-8")
                state.refresh()
                con = state.con()
                if p == "/api/facets":
                    return self._json(queries.facets(con))
                if p == "/api/runs":
                    return self._json(queries.runs(con))
                if p == "/api/items":
                    f = queries.Filters(
                        benchmark=qs.get("benchmark", [""])[0], model=qs.get("model", [""])[0], dimension=qs.get("dimension", [""])[0],
                        verdict=qs.get("verdict", [""])[0], disagree=_flag(qs, "disagree"), unknown=_flag(qs, "unknown"),
                        queued=_flag(qs, "queued"), q=qs.get("q", [""])[0],
                    )
                    return self._json(queries.list_items(con, f, int(qs.get("page", ["1"])[0] or 1), int(qs.get("per_page", ["50"])[0] or 50)))
                if p.startswith("/api/item/"):
                    got = queries.item(con, int(p.rsplit("/", 1)[1]))
                    return self._json(got) if got else self._json({"error": "no such item"}, 404)
                self._json({"error": "not found"}, 404)
            except ValueError as e:
                self._json({"error": str(e)}, 400)

        def do_POST(self) -> None:  # noqa: N802
            from grandrounds.reviews import ReviewError, ReviewInput, add_review

            if urlparse(self.path).path != "/api/review":
                return self._json({"error": "not found"}, 404)
            origin = self.headers.get("Origin")
            host = self.headers.get("Host", "")
            if origin is not None and origin != f"http://{host}":
                return self._json({"error": "cross-origin review refused"}, 403)
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                return self._json({"error": "send JSON"}, 415)
            try:
                n = int(self.headers.get("Content-Length", "0"))
                if n > 100_000:
                    raise ReviewError("review too large")
                d = json.loads(self.rfile.read(n) or b"{}")
                score = d.get("score")
                r = ReviewInput(
                    run_id=str(d.get("run_id", "")), grader_fp=str(d.get("grader_fp", "")), sample_id=str(d.get("sample_id", "")),
                    reviewer=str(d.get("reviewer", "")), reason=str(d.get("reason", "")), criterion_id=str(d.get("criterion_id", "") or ""),
                    verdict=d.get("verdict") or None, score=None if score in (None, "") else float(score),
                )
                rid = add_review(state.store(), r)
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
    t = time.perf_counter()
    srv = make_server(store_path, host, port)
    log(f"index ready in {time.perf_counter() - t:.1f} s; viewer on http://{host}:{srv.server_address[1]}/ (Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
