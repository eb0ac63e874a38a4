"""HTTP for OpenAI-compatible calls: aiohttp, one keep-alive connection pool per endpoint.

Every call of the OpenAI-compatible provider, answers and judges alike, is a JSON POST through
:class:`HttpClient`. aiohttp does the protocol (keep-alive, chunked, close-delimited and
compressed bodies, TLS, proxies, header limits); this module adds what a run needs on top:

- a total deadline per call (``timeout``): connecting, sending and reading the whole body, from
  the moment the request goes out;
- a cap on the response size (``max_response_bytes``), counted on the decoded bytes as they
  arrive, so an endless or huge body costs at most the cap in memory; over it the call fails
  as "response too large" and is not retried;
- the proxy named by ``HTTPS_PROXY``/``HTTP_PROXY`` (or ``ALL_PROXY``) unless ``NO_PROXY`` covers
  the host, read once when the client is made (aiohttp's ``trust_env`` would read the
  environment and ``~/.netrc`` again in a worker thread on every call, and a ``.netrc`` entry for
  the host would clash with the Authorization header);
- every transport failure as a :class:`ProviderError` (retryable or not) with a one-line
  message, never a traceback; a response header over :data:`MAX_HEADER_BYTES` is one of them.

Clients of one endpoint (scheme, host, port) in one event loop share one session and so one
pool; the pool is not limited in size, since the executor bounds the calls in flight.
bench/http_overhead.py measures the client CPU per call against the alternatives.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.request
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import orjson
from multidict import CIMultiDictProxy

import grandrounds
from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import escape_surrogates
from grandrounds.providers.base import ProviderError, redact, split_userinfo

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: The longest status line or header field accepted (aiohttp's own default is 8 KiB), and the
#: most header fields (aiohttp >= 3.13.4 takes ``max_headers``).
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 128
#: Idle keep-alive connections are dropped after this many seconds: below the 5 s idle timeout
#: of uvicorn (vLLM, SGLang), so a connection the server is about to close is not reused.
KEEPALIVE_SECONDS = 4.0


@dataclass(frozen=True)
class HttpReply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower()


@dataclass
class _Pool:
    session: aiohttp.ClientSession
    users: int = 0


#: Open sessions: event loop -> endpoint origin -> pool. A session belongs to the loop it was
#: made in; entries go when their last client closes.
_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Pool]] = (
    weakref.WeakKeyDictionary()
)
_SSL: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """The system's trust store (and ``SSL_CERT_FILE``), plus certifi's bundle when it is installed."""
    global _SSL
    if _SSL is None:
        ctx = ssl.create_default_context()
        try:
            import certifi

            ctx.load_verify_locations(certifi.where())
        except (ImportError, OSError):
            pass
        _SSL = ctx
    return _SSL


def env_proxy(url: str) -> tuple[str | None, dict[str, str] | None, tuple[str, ...]]:
    """The proxy the environment names for ``url`` (None when there is none or NO_PROXY covers
    the host), the Proxy-Authorization header made from the credentials in its URL, and those
    credentials (to redact)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    # proxy_bypass_environment is public in urllib.request but missing from typeshed's stubs
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not proxy or bypass(parts.hostname or "", proxies):
        return None, None, ()
    if "://" not in proxy:
        proxy = "http://" + proxy
    plain, user, password = split_userinfo(proxy)
    if urlsplit(plain).scheme not in ("http", "https"):
        raise ConfigError(
            f"proxy {plain} for {parts.scheme} URLs: only http:// and https:// proxies are supported"
        )
    if user is None:
        return plain, None, ()
    pair = f"{unquote(user)}:{unquote(password or '')}".encode()
    token = base64.b64encode(pair).decode("ascii")
    return (
        plain,
        {"Proxy-Authorization": f"Basic {token}"},
        (token, password or "", unquote(password or "")),
    )


def _new_session(https: bool) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        limit=0,  # the executor bounds calls in flight; a pool limit would only queue them
        ssl=_ssl_context() if https else True,
        keepalive_timeout=KEEPALIVE_SECONDS,
        ttl_dns_cache=300,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            total=None
        ),  # the deadline is HttpClient's, around the whole call
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": f"grandrounds/{grandrounds.__version__}"},
        max_line_size=MAX_HEADER_BYTES,
        max_field_size=MAX_HEADER_BYTES,
        max_headers=MAX_HEADERS,
    )


class HttpClient:
    """JSON POSTs to one base URL (no credentials in it: pass them in ``headers``).

    ``secrets`` are redacted from every error message this client writes.
    """

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float = 120.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        secrets: Iterable[str] = (),
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL {base_url!r} must be http(s)://HOST[:PORT]/PATH")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._origin = f"{parts.scheme}://{parts.netloc.lower()}"
        self._proxy, self._proxy_headers, proxy_secrets = env_proxy(self.base_url)
        self.secrets = tuple(s for s in (*secrets, *proxy_secrets) if s)
        if self._proxy_headers and parts.scheme == "http":
            # A plain-HTTP request goes to the proxy as is: its credentials ride on the request
            # (aiohttp puts proxy_headers only on the CONNECT of an https tunnel).
            self.headers |= self._proxy_headers
            self._proxy_headers = None
        self._pool: _Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop and not self._pool.session.closed:
            return self._pool.session
        pools = _POOLS.setdefault(loop, {})
        pool = pools.get(self._origin)
        if pool is None or pool.session.closed:
            pool = pools[self._origin] = _Pool(_new_session(self._origin.startswith("https:")))
        pool.users += 1
        self._pool, self._loop = pool, loop
        return pool.session

    async def aclose(self) -> None:
        """Give the pool back; the last client of an endpoint closes its connections."""
        pool, loop = self._pool, self._loop
        self._pool = self._loop = None
        if pool is None or loop is None:
            return
        pool.users -= 1
        if pool.users <= 0 and loop is asyncio.get_running_loop():
            pools = _POOLS.get(loop, {})
            if pools.get(self._origin) is pool:
                del pools[self._origin]
            await pool.session.close()

    async def post(self, path: str, body: Any) -> HttpReply:
        """POST ``body`` as JSON to ``base_url + path``; any status comes back, transport failures raise."""
        try:
            data = orjson.dumps(body)  # UTF-8, about ten times faster than json.dumps(...).encode()
        except TypeError:  # a value orjson does not know, or text with a lone surrogate
            # (a candidate's reply quoted to a judge): escaped, as JSON allows, never refused
            data = escape_surrogates(json.dumps(body, ensure_ascii=False)).encode("utf-8")
        session = self._session()
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    return await self._exchange(session, self.base_url + path, data)
                except aiohttp.ClientOSError as err:
                    if not _unsent(err):
                        raise
                    # A kept-alive connection the server had closed before the request went out
                    # (it never saw the request, so sending it again cannot double it): once more.
                    return await self._exchange(session, self.base_url + path, data)
        except TimeoutError:
            raise ProviderError(
                f"timeout: no complete reply within {self.timeout:g} s",
                retryable=True,
                kind="timeout",
            ) from None
        except aiohttp.ClientError as err:
            raise self._failure(err) from None
        except OSError as err:  # a socket error aiohttp did not wrap
            raise ProviderError(
                self._redact(f"connection error: {type(err).__name__}: {err}"), retryable=True
            ) from None

    async def get(self, url: str, timeout: float) -> HttpReply:
        """GET ``url`` (on this client's endpoint, e.g. a server's ``/props``) within ``timeout``
        seconds, under the same size cap; any status comes back, transport failures raise."""
        session = self._session()
        try:
            async with asyncio.timeout(timeout):
                async with session.get(
                    url,
                    headers=self.headers,
                    allow_redirects=False,
                    proxy=self._proxy,
                    proxy_headers=self._proxy_headers,
                ) as resp:
                    return HttpReply(resp.status, resp.headers, await self._read(resp))
        except TimeoutError:
            raise ProviderError(
                f"timeout: no complete reply within {timeout:g} s", retryable=True, kind="timeout"
            ) from None
        except aiohttp.ClientError as err:
            raise self._failure(err) from None
        except OSError as err:
            raise ProviderError(
                self._redact(f"connection error: {type(err).__name__}: {err}"), retryable=True
            ) from None

    async def _exchange(self, session: aiohttp.ClientSession, url: str, data: bytes) -> HttpReply:
        async with session.post(
            url,
            data=data,
            headers=self.headers,
            allow_redirects=False,
            proxy=self._proxy,
            proxy_headers=self._proxy_headers,
        ) as resp:
            return HttpReply(resp.status, resp.headers, await self._read(resp))

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The whole body, decoded, failing as soon as it passes the cap (nothing past it is kept)."""
        cap = self.max_response_bytes
        length = resp.content_length
        if length is not None and length > cap and "Content-Encoding" not in resp.headers:
            resp.close()
            raise self._too_large(f"the server announced {length:,} bytes")
        if length is not None and "Content-Encoding" not in resp.headers:
            return await resp.read()  # exactly Content-Length bytes, already known to fit
        chunks, size = [], 0  # chunked, close-delimited or compressed: count as it comes
        while chunk := await resp.content.readany():
            size += len(chunk)
            if size > cap:
                resp.close()
                raise self._too_large("the body did not end before the cap")
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, why: str) -> ProviderError:
        mb = self.max_response_bytes / 1024 / 1024
        return ProviderError(
            f"response too large: over {mb:g} MB, raise max_response_mb to accept more ({why})",
            retryable=False,
            kind="too_large",
        )

    def _redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def _failure(self, err: aiohttp.ClientError) -> ProviderError:
        """One transport failure as a one-line ProviderError."""
        if isinstance(err, aiohttp.ClientConnectorCertificateError):
            return ProviderError(
                self._redact(f"TLS certificate rejected: {err.certificate_error}"), retryable=False
            )
        if isinstance(err, aiohttp.ClientConnectorError):
            return ProviderError(self._redact(f"connection error: {err}"), retryable=True)
        if isinstance(err, aiohttp.ServerDisconnectedError):
            return ProviderError(
                "connection error: the server closed the connection without a reply", retryable=True
            )
        if isinstance(err, aiohttp.ClientPayloadError):
            return ProviderError(
                self._redact(f"connection error: the reply was cut off ({_first_line(err)})"),
                retryable=True,
            )
        if isinstance(
            err, aiohttp.ClientResponseError
        ):  # the status line or headers could not be parsed
            why = _first_line(err.message) or type(err).__name__
            if "Too many headers" in why:
                return ProviderError(
                    f"response too large: over {MAX_HEADERS} header fields",
                    retryable=False,
                    kind="too_large",
                )
            if "Got more than" in why or "too long" in why.lower():
                return ProviderError(
                    self._redact(
                        f"response too large: a header over {MAX_HEADER_BYTES // 1024} KiB ({why[:60]}…)"
                    ),
                    retryable=False,
                    kind="too_large",
                )
            return ProviderError(self._redact(f"malformed response: {why}"), retryable=True)
        if isinstance(err, aiohttp.InvalidURL):
            return ProviderError(self._redact(f"invalid URL: {err}"), retryable=False)
        return ProviderError(
            self._redact(f"connection error: {type(err).__name__}: {_first_line(err)}"),
            retryable=True,
        )


def _unsent(err: aiohttp.ClientOSError) -> bool:
    """True when aiohttp could not write the request because the connection was already closing:
    the request did not reach the server whole (aiohttp wraps that in this message)."""
    return str(err.strerror or "").startswith("Can not write request body")


def _first_line(err: object) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else ""
