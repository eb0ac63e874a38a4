"""HTTP for batch APIs beyond JSON POSTs (:class:`BatchHttp`: GETs, a multipart upload, a body
already encoded, JSONL downloads read line by line) and the reading of a batch endpoint's reply
as a JSON object or a :class:`~grandrounds.providers.base.ProviderError`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import aiohttp

from grandrounds.providers.base import ProviderError, error_reason, redact
from grandrounds.providers.http import HttpClient, HttpReply


class BatchHttp(HttpClient):
    """The provider's HTTP client (same pool, proxy, credentials and error mapping) with what batch
    APIs need besides JSON POSTs: GETs, a multipart file upload, a body already encoded, and JSONL
    downloads read line by line (memory bounded by the longest line, itself capped at
    ``max_response_bytes``)."""

    def _url(self, where: str) -> str:
        return where if "://" in where else self.base_url + where

    def _via(self) -> dict[str, Any]:
        """The proxy settings HttpClient read from the environment, as aiohttp takes them."""
        out: dict[str, Any] = {"proxy": getattr(self, "_proxy", None)}
        for name in ("proxy_headers", "proxy_auth"):
            value = getattr(self, f"_{name}", None)
            if value:
                out[name] = value
        return out

    def _headers_for(self, content_type: str | None) -> dict[str, str]:
        out = {k: v for k, v in self.headers.items() if k.lower() != "content-type"}
        if content_type:
            out["Content-Type"] = content_type
        return out

    async def _send(
        self, method: str, where: str, data: Any = None, content_type: str | None = None
    ) -> HttpReply:
        session = self._session()
        try:
            async with asyncio.timeout(self.timeout):
                async with session.request(
                    method,
                    self._url(where),
                    data=data,
                    headers=self._headers_for(content_type),
                    allow_redirects=False,
                    **self._via(),
                ) as resp:
                    return HttpReply(resp.status, resp.headers, await self._read(resp))
        except TimeoutError:
            raise ProviderError(
                f"timeout: no complete reply within {self.timeout:g} s",
                retryable=True,
                kind="timeout",
            ) from None
        except aiohttp.ClientError as err:
            raise self._failure(err) from None
        except OSError as err:
            raise ProviderError(
                self._redact(f"connection error: {type(err).__name__}: {err}"), retryable=True
            ) from None

    async def fetch(self, where: str) -> HttpReply:
        """GET ``where`` on this client's endpoint."""
        return await self._send("GET", where)

    async def post_bytes(self, where: str, data: bytes) -> HttpReply:
        """POST a body that is already JSON."""
        return await self._send("POST", where, data, "application/json")

    async def post_file(
        self, where: str, fields: Mapping[str, str], filename: str, data: bytes
    ) -> HttpReply:
        """POST a multipart form: ``fields`` and one file."""
        form = aiohttp.FormData()
        for name, value in fields.items():
            form.add_field(name, value)
        form.add_field("file", data, filename=filename, content_type="application/jsonl")
        return await self._send("POST", where, form)

    async def lines(self, where: str) -> AsyncIterator[bytes]:
        """The non-empty lines of a JSONL body as they arrive; ProviderError for a non-2xx status,
        a transport failure, a line over the cap, or ``timeout`` seconds without data."""
        session = self._session()
        cap = self.max_response_bytes
        try:
            async with session.get(
                self._url(where),
                headers=self._headers_for(None),
                allow_redirects=False,
                **self._via(),
            ) as resp:
                if resp.status >= 300:
                    raise status_failure(
                        HttpReply(resp.status, resp.headers, await self._read(resp)), self.secrets
                    )
                parts: list[bytes] = []  # the line being read, in pieces (no quadratic re-joining)
                size = 0
                while True:
                    async with asyncio.timeout(self.timeout):
                        chunk = await resp.content.readany()
                    if not chunk:
                        break
                    *ends, rest = chunk.split(b"\n")
                    for i, piece in enumerate(ends):
                        line = b"".join((*parts, piece)) if i == 0 and parts else piece
                        if i == 0:
                            parts, size = [], 0
                        if len(line) > cap:
                            raise _line_too_large(cap)
                        if line.strip():
                            yield line
                    parts.append(rest)
                    size += len(rest)
                    if size > cap:
                        resp.close()
                        raise _line_too_large(cap)
                tail = b"".join(parts)
                if tail.strip():
                    yield tail
        except TimeoutError:
            raise ProviderError(
                f"timeout: no data for {self.timeout:g} s while reading results",
                retryable=True,
                kind="timeout",
            ) from None
        except aiohttp.ClientError as err:
            raise self._failure(err) from None
        except OSError as err:
            raise ProviderError(
                self._redact(f"connection error: {type(err).__name__}: {err}"), retryable=True
            ) from None


def _line_too_large(cap: int) -> ProviderError:
    return ProviderError(
        f"response too large: a result line over {cap / 2**20:g} MB (raise max_response_mb to accept more)",
        retryable=False,
        kind="too_large",
    )


def status_failure(reply: HttpReply, secrets: Iterable[str]) -> ProviderError:
    """A non-2xx reply of a batch endpoint (submit, status, download) as a ProviderError."""
    try:
        parsed = json.loads(reply.body)
    except ValueError:
        parsed = None
    text = error_reason(parsed) or reply.body[:2000].decode("utf-8", "replace")
    reason = " ".join(redact(text, secrets).split())[:300]
    retry_after = reply.headers.get("retry-after")
    try:
        after = float(retry_after) if retry_after is not None else None
    except ValueError:
        after = None
    retryable = reply.status >= 500 or reply.status in (408, 409, 429)
    return ProviderError(f"HTTP {reply.status}: {reason}", retryable=retryable, retry_after=after)


def json_object(reply: HttpReply, secrets: Iterable[str]) -> dict[str, Any]:
    if reply.status >= 300:
        raise status_failure(reply, secrets)
    try:
        out = json.loads(reply.body)
    except ValueError:
        raise ProviderError("malformed response body: invalid JSON", retryable=True) from None
    if not isinstance(out, dict):
        raise ProviderError("malformed response body: not a JSON object", retryable=True)
    return out
