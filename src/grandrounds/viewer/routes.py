"""The viewer's routes and the checks before them: the page, its script, the JSON API and review posts.

Every request passes, in order:

1. **Host**: a request naming any other host is refused with 421 (DNS rebinding), see
   :mod:`grandrounds.viewer.security`; so is a target that is not a plain path (400), and more
   than ``MAX_QUERY_FIELDS`` query parameters (400);
2. **access token** (binds beyond loopback only): ``?token=`` once, then a cookie; else 403;
3. the route. ``GET /image/<sha256>`` answers an image of the store's image folder named by its
   hash only (64 lower-case hex digits, else 400; 404 when not stored), of a shown type (JPEG,
   PNG, GIF, WebP, its bytes checked) and at most 20 MB (``collect.MAX_IMAGE_BYTES``; else 403), with that
   type and ``nosniff``. A review POST also needs a same-origin Origin (or Referer), a JSON body, the
   page's CSRF token and a score on the benchmark's scale (:mod:`grandrounds.analyses.review_scales`).

The page is served with a Content-Security-Policy that allows no inline script, and its JS
inserts untrusted text with ``textContent`` only. API answers past the query time budget are 503.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from grandrounds.analyses.collect import ImageRefused
from grandrounds.viewer import queries
from grandrounds.viewer.api import api_get, review_from_json
from grandrounds.viewer.handler import RequestHandler
from grandrounds.viewer.page import APP_JS, page_html
from grandrounds.viewer.security import cookie, same_origin

MAX_BODY = 100_000
MAX_QUERY_FIELDS = 30
PAGES = ("/", "/index.html")
IMAGES = "/image/"

Query = dict[str, list[str]]


class ViewerHandler(RequestHandler):
    """The viewer's request handler: checks, then the route its method and path name."""

    # ---- checks, then the route ---------------------------------------------------------
    def route(self) -> None:
        self.cookies = []
        if not self._host_ok():
            return
        target = self._target()
        if target is None or not self._access(*target):
            return
        answer = self.METHODS.get(self.command)
        if answer is None:
            return self._text(405, "method not allowed", {"Allow": "GET, POST"})
        answer(self, *target)

    def _host_ok(self) -> bool:
        """True when the Host header names this viewer (one header only); else answers 421."""
        policy = self.ctx.policy
        if len(self.headers.get_all("Host") or ()) > 1 or not policy.allows(
            self.headers.get("Host")
        ):
            self._text(421, f"misdirected request: this viewer answers only {policy.example()}")
            return False
        return True

    def _target(self) -> tuple[str, Query] | None:
        """(path, query) of a plain-path target with few enough parameters; else answers 400."""
        if not self.path.startswith("/") or self.path.startswith(
            "//"
        ):  # no absolute-form target naming another host
            self._text(400, "bad request target")
            return None
        url = urlsplit(self.path)
        try:
            qs = parse_qs(url.query, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError:
            self._text(400, f"at most {MAX_QUERY_FIELDS} query parameters")
            return None
        return url.path, qs

    def _access(self, path: str, qs: Query) -> bool:
        """True when the request may proceed; beyond loopback it needs the access token."""
        guard = self.ctx.guard
        given = qs.pop("token", [None])[0]
        if guard.token is None:
            return True
        if given is not None and guard.token_ok(given):
            self._set_cookie(guard.token_cookie, guard.token)
            if self.command == "GET" and path in PAGES:  # drop the token from the address bar
                self._text(303, "see /", {"Location": "/"})
                return False
            return True
        if guard.token_ok(cookie(self.headers.get("Cookie"), guard.token_cookie)):
            return True
        self._text(
            403,
            "this viewer needs its access token: open the address `grandrounds view` printed (with ?token=...)",
        )
        return False

    # ---- GET ----------------------------------------------------------------------------
    def _get(self, path: str, qs: Query) -> None:
        """The page, its script, or an API answer."""
        self.received()
        page = self.GET_PAGES.get(path)
        if page is not None:
            return page(self)
        if path.startswith(IMAGES):
            return self._image(path[len(IMAGES) :])
        self._api(path, qs)

    def _page(self) -> None:
        """The page, with a session cookie (a new one unless it has a plausible one) and its CSRF token."""
        guard = self.ctx.guard
        session = cookie(self.headers.get("Cookie"), guard.session_cookie)
        if session is None or not 20 <= len(session) <= 64:
            session = guard.new_session()
            self._set_cookie(guard.session_cookie, session)
        self._send(200, page_html(guard.csrf(session)).encode("utf-8"), "text/html; charset=utf-8")

    def _app_js(self) -> None:
        self._send(200, APP_JS.encode("utf-8"), "text/javascript; charset=utf-8")

    def _image(self, name: str) -> None:
        """A stored image by its hash, as its own media type; no part of the request is a path."""
        try:
            got = self.ctx.state.image(name)
        except ValueError as e:
            return self._text(400, str(e))
        except ImageRefused as e:
            return self._text(403, f"image not shown: {e}")
        if got is None:
            return self._text(404, "no such image in this store")
        data, media_type = got
        self._send(200, data, media_type, {"Content-Disposition": "inline"})

    def _api(self, path: str, qs: Query) -> None:
        """A JSON answer (400 on a malformed parameter, 503 when too slow)."""
        try:
            code, body = api_get(self.ctx.state, path, qs)
        except queries.QueryTooSlow as e:
            code, body = 503, {"error": str(e)}
        except (ValueError, OverflowError) as e:
            code, body = 400, {"error": str(e)}
        self._json(body, code)

    # ---- POST ---------------------------------------------------------------------------
    def _post(self, path: str, qs: Query) -> None:
        answer = self.POST_ROUTES.get(path)
        if answer is None:
            return self._json({"error": "not found"}, 404)
        answer(self, str(self.headers.get("Host")))

    def _review(self, host: str) -> None:
        """Store one review: same origin, JSON, the session's CSRF token, validated input."""
        from grandrounds.analyses.reviews import ReviewError, add_review
        from grandrounds.core.errors import StoreError

        body = self._review_body(host)
        if body is None:
            return
        try:
            review, token = review_from_json(body)
        except (ValueError, RecursionError) as e:
            return self._json(
                {
                    "error": f"malformed review: {e}"
                    if not isinstance(e, RecursionError)
                    else "malformed review: nested too deeply"
                },
                400,
            )
        guard = self.ctx.guard
        if not guard.csrf_ok(cookie(self.headers.get("Cookie"), guard.session_cookie), token):
            return self._json({"error": "missing or wrong CSRF token: reload the page"}, 403)
        store = self.ctx.state.store()
        try:
            rid = add_review(
                store, review
            )  # checks a whole-answer score against the benchmark's scale
        except (ReviewError, ValueError, TypeError) as e:
            return self._json({"error": str(e)}, 400)
        except StoreError as e:  # a team store whose role may not add reviews
            return self._json({"error": e.problem}, 403)
        self._json({"id": rid})

    def _review_refusal(self, host: str) -> tuple[int, str] | None:
        """(status, message) refusing a review post before its body is read; None when it may be read."""
        if not same_origin(self.headers, host):
            return 403, "cross-origin review refused (Origin or Referer must be this viewer)"
        if not self.headers.get("Content-Type", "").startswith("application/json"):
            return 415, "send JSON"
        length = self.headers.get("Content-Length")
        if length is None:
            return 411, "Content-Length required"
        if not length.isdigit():
            return 400, "bad Content-Length"
        if int(length) > MAX_BODY:
            return 413, f"a review is limited to {MAX_BODY} bytes"
        return None

    def _review_body(self, host: str) -> bytes | None:
        """The posted body, once the checks pass and it arrived whole; else answers and returns None."""
        refusal = self._review_refusal(host)
        if refusal is None:
            length = int(self.headers["Content-Length"])
            body = self.rfile.read(length)
            self.received()
            if len(body) == length:
                return body
            refusal = 400, "the body ended before its Content-Length"
        self._json({"error": refusal[1]}, refusal[0])
        return None

    # ---- the routing tables -------------------------------------------------------------
    METHODS: dict[str, Callable[[ViewerHandler, str, Query], None]] = {"GET": _get, "POST": _post}
    GET_PAGES: dict[str, Callable[[ViewerHandler], None]] = {
        **dict.fromkeys(PAGES, _page),
        "/app.js": _app_js,
    }
    POST_ROUTES: dict[str, Callable[[ViewerHandler, str], None]] = {"/api/review": _review}
