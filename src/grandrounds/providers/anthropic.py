"""Anthropic's Messages API: ``anthropic/MODEL`` as a candidate or a judge.

A request becomes ``POST {base}/v1/messages`` with the headers ``x-api-key`` (from
``ANTHROPIC_API_KEY``, or the variable named by ``api_key_env``) and ``anthropic-version:
2023-06-01``. The base URL is ``--base-url``, else ``ANTHROPIC_BASE_URL``, else Anthropic's; it
names the host and any path prefix of a proxy or gateway (``https://gateway.example/anthropic``),
without ``/v1`` (a trailing ``/v1`` is accepted and dropped). A user name and password in the URL
are sent as HTTP Basic authentication and, like the key, never reach a request record, the store
or a log.

How a :class:`~grandrounds.core.records.Request` maps onto the API:

- system messages go to the top-level ``system`` field (several are joined by a blank line, in
  order); the other messages keep their roles and order;
- ``temperature``, ``max_tokens`` and ``top_p`` are sent as given (the API accepts temperatures
  from 0 to 1, and some models refuse ``temperature`` and ``top_p`` together: the server's 400 is
  the call's failure, not retried); ``stop`` becomes ``stop_sequences``; the API has no seed and
  no JSON-object mode, so ``seed`` and ``json_object`` are not sent (they stay in the request key);
- the reply's text blocks are joined (thinking and tool blocks are left out);
- ``stop_reason`` becomes ``Response.finish_reason``: ``end_turn`` and ``stop_sequence`` are
  "stop", ``max_tokens`` stays "max_tokens" and ``model_context_window_exceeded`` becomes
  "length" (both count as truncated: :data:`grandrounds.core.records.TRUNCATED_REASONS`); any other
  reason (``refusal``, ``tool_use``, ``pause_turn``) is kept as the API says it;
- usage: prompt tokens are ``input_tokens`` plus the cache-read and cache-write input tokens,
  completion tokens are ``output_tokens``.

Failures: 429 (rate limited), 529 (overloaded), 408, 409 and other 5xx are retryable with the
server's ``retry-after``; 400, 401, 403, 404 and 413 are not. A prompt that does not fit the
context ("prompt is too long: N tokens > M maximum", "input length and `max_tokens` exceed
context limit: P + T > M") is a ``context_length`` failure with the sizes the server gave, so a
judge is asked again with ``max_tokens`` shrunk to fit, as on the OpenAI-compatible path.

:func:`message_body` and :func:`read_message` are shared with Message Batches
(:mod:`grandrounds.run.batches.executor`), so a batched call sends and reads exactly what a live one does.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from typing import Any
from urllib.parse import unquote

from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param
from grandrounds.core.records import Request, Response, Usage
from grandrounds.providers.base import (
    CREDENTIALS_REQUIRED,
    ENDPOINT_ID,
    ModelSpec,
    Provider,
    ProviderError,
    account_label,
    error_reason,
    redact,
    split_userinfo,
)
from grandrounds.providers.http import DEFAULT_MAX_RESPONSE_BYTES, HttpClient, HttpReply
from grandrounds.providers.images import anthropic_content, anthropic_limits
from grandrounds.providers.openai_compat import context_message, context_overflow
from grandrounds.providers.tools import (
    anthropic_tool_choice,
    anthropic_tool_messages,
    anthropic_tools,
    read_anthropic_tool_calls,
    uses_tools,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
#: The API version this module speaks (Anthropic's versioning page: the only version of the Messages API).
API_VERSION = "2023-06-01"

#: stop_reason -> finish_reason where they differ (see the module docstring).
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "model_context_window_exceeded": "length"}

#: "input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000, decrease ..."
_INPUT_PLUS_MAX = re.compile(
    r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)", re.IGNORECASE
)


def anthropic_base(url: str) -> str:
    """The base URL with a trailing ``/v1`` (and slashes) dropped: paths are added as ``/v1/...``."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def message_body(model: str, request: Request) -> dict[str, Any]:
    """The Messages API body of ``request`` (the ``params`` of a Message Batches request)."""
    p = request.params
    system = [m.text for m in request.messages if m.role == "system"]
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": p.max_tokens,
        "messages": anthropic_tool_messages(request.messages)
        if uses_tools(request)
        else [
            {"role": m.role, "content": anthropic_content(m)}
            for m in request.messages
            if m.role != "system"
        ],
        "temperature": p.temperature,
    }
    if uses_tools(request):
        choice = anthropic_tool_choice(request.tool_choice)
        if request.tools and choice is not None:
            body["tools"] = anthropic_tools(request.tools)
            if request.tool_choice:
                body["tool_choice"] = choice
    if system:
        body["system"] = "\n\n".join(system)
    if p.top_p is not None:
        body["top_p"] = p.top_p
    if p.stop:
        body["stop_sequences"] = list(p.stop)
    return body


def read_message(out: Any, key: str, latency: float = 0.0) -> Response:
    """A Messages API reply (a ``message`` object) as a Response; ProviderError when it is not one."""
    if not isinstance(out, dict) or not isinstance(out.get("content"), list):
        raise ProviderError("malformed response body: no content list", retryable=True)
    parts = []
    for block in out["content"]:
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise ProviderError(
                    "malformed response body: a text block without text", retryable=True
                )
            parts.append(text)
    reason = out.get("stop_reason")
    finish = _FINISH.get(reason, reason) if isinstance(reason, str) else None
    calls = read_anthropic_tool_calls(out["content"])
    return Response(
        key=key,
        text="".join(parts),
        usage=_usage(out.get("usage")),
        latency=latency,
        finish_reason=finish,
        tool_calls=calls,
    )


def _usage(u: Any) -> Usage:
    if not isinstance(u, dict):
        return Usage()
    try:
        prompt = sum(
            int(u.get(k) or 0)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return Usage(prompt, int(u.get("output_tokens") or 0))
    except (TypeError, ValueError):
        return Usage()


def error_from_body(
    status: int, parsed: Any, reason: str, max_tokens: Any, retry_after: float | None = None
) -> ProviderError:
    """An Anthropic error (HTTP status and body, live or in a batch result) as a classified ProviderError."""
    overflow = _overflow(reason, parsed)
    if overflow is not None:
        limit, prompt = overflow
        return ProviderError(
            context_message(limit, prompt, max_tokens),
            retryable=False,
            kind="context_length",
            context_limit=limit,
            prompt_tokens=prompt,
        )
    err = parsed.get("error") if isinstance(parsed, dict) else None
    kind = err.get("type") if isinstance(err, dict) else None
    retryable = (
        status >= 500
        or status in (408, 409, 429)
        or kind in ("overloaded_error", "rate_limit_error", "api_error")
    )
    label = {429: "429 rate limited", 529: "529 overloaded"}.get(status, f"HTTP {status}")
    typed = f" ({kind})" if isinstance(kind, str) and kind and kind not in reason else ""
    # 429 and 529 (or their error types) say the server is full: congestion for the adaptive window
    congestion = "rate_limited" if status == 429 or kind == "rate_limit_error" else None
    if status == 529 or kind == "overloaded_error":
        congestion = "overloaded"
    return ProviderError(
        f"{label}{typed}: {reason}", retryable=retryable, retry_after=retry_after, kind=congestion
    )


def _overflow(reason: str, parsed: Any) -> tuple[int | None, int | None] | None:
    """(context limit, prompt tokens) when the error says the request does not fit the context."""
    m = _INPUT_PLUS_MAX.search(reason)
    if m:
        return int(m.group(3)), int(m.group(1))
    return context_overflow(reason, parsed)  # "prompt is too long: N tokens > M maximum"


class AnthropicProvider(Provider):
    """``anthropic/MODEL``: chat requests through the Messages API (aiohttp)."""

    request_kinds = frozenset({"chat"})
    sees_images = True
    supports_tools = True
    model_options = (
        Param(
            name="timeout",
            type=float,
            default=120.0,
            help="seconds a call may take, from sending it to the last byte of the reply (then retried)",
            minimum=0.001,
        ),
        Param(
            name="api_key_env",
            type=str,
            default="ANTHROPIC_API_KEY",
            help="environment variable holding the API key",
        ),
        Param(
            name="max_response_mb",
            type=float,
            default=DEFAULT_MAX_RESPONSE_BYTES / 2**20,
            help="largest reply accepted, in MB; a larger one fails the call (not retried)",
            minimum=0.001,
        ),
        Param(
            name="max_images",
            type=int,
            default=100,
            help="most images one request may carry (Anthropic's published limit by default)",
            minimum=1,
        ),
        Param(
            name="max_request_mb",
            type=float,
            default=32.0,
            help="most MB of images (base64) one request may carry (Anthropic's published limit by default)",
            minimum=0.001,
        ),
        ENDPOINT_ID,
    )
    example = "anthropic/claude-sonnet-4-5 (Messages API; --base-url for a proxy or gateway)"
    default_concurrency = 16

    def __init__(
        self,
        spec: ModelSpec,
        timeout: float = 120.0,
        api_key_env: str = "ANTHROPIC_API_KEY",
        max_response_mb: float = DEFAULT_MAX_RESPONSE_BYTES / 2**20,
        max_images: int = 100,
        max_request_mb: float = 32.0,
        **options: Any,
    ) -> None:
        self.image_request = (max_images, max_request_mb)
        base = anthropic_base(
            spec.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        )
        url, user, password = split_userinfo(base)
        super().__init__(ModelSpec(spec.provider, spec.model, url), **options)
        self.account = account_label(api_key_env, "ANTHROPIC_API_KEY", user)
        key = os.environ.get(api_key_env, "")
        headers = {"anthropic-version": API_VERSION}
        secrets = [key]
        if key:
            headers["x-api-key"] = key
        elif url == DEFAULT_BASE_URL and CREDENTIALS_REQUIRED.get():
            raise ConfigError(
                f"provider {spec.provider}: set {api_key_env} to the Anthropic API key (it is read from the environment only)"
            )
        if user is not None or password is not None:
            token = base64.b64encode(
                f"{unquote(user or '')}:{unquote(password or '')}".encode()
            ).decode("ascii")
            headers["Authorization"] = f"Basic {token}"
            secrets += [token, unquote(password or ""), password or ""]
        self._secrets = tuple(s for s in secrets if s)
        #: what error messages must never show (the key, Basic credentials)
        self.secrets = self._secrets
        self.timeout = timeout
        self.max_response_bytes = int(max_response_mb * 2**20)
        self._headers = headers
        try:
            self.http = HttpClient(url, headers, timeout, self.max_response_bytes, self._secrets)
        except ValueError as e:
            raise ConfigError(f"provider {spec.provider}: {e}") from None

    def client(self, timeout: float, cls: type[HttpClient] = HttpClient) -> HttpClient:
        """Another client (of class ``cls``) to this endpoint with the same credentials and reply
        cap: Message Batches uses one with a longer deadline. Its connection pool is the provider's."""
        return cls(
            self.spec.base_url, self._headers, timeout, self.max_response_bytes, self._secrets
        )

    def image_limits(self) -> Any:
        return anthropic_limits(*self.image_request)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(self, request: Request) -> Response:
        start = time.perf_counter()
        body = message_body(self.spec.model, request)
        reply = await self.http.post("/v1/messages", body)
        if reply.status >= 300:
            raise self.status_error(reply, body.get("max_tokens"))
        try:
            out = json.loads(reply.body)
        except ValueError:
            raise ProviderError(
                f"malformed response body: not JSON: {self.snippet(reply.body)}", retryable=True
            ) from None
        return read_message(out, request.key(), time.perf_counter() - start)

    def snippet(self, body: bytes | str, limit: int = 200) -> str:
        """Server-sent text for an error message: secrets redacted, on one line, at most ``limit`` characters."""
        text = body[:65536].decode("utf-8", "replace") if isinstance(body, bytes) else body[:65536]
        text = " ".join(redact(text, self._secrets).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def status_error(self, reply: HttpReply, max_tokens: Any) -> ProviderError:
        """A non-2xx reply as a classified ProviderError, with the server's reason (secrets redacted)."""
        try:
            parsed = json.loads(reply.body)
        except ValueError:
            parsed = None
        if reply.status < 400:
            where = self.snippet(reply.headers.get("Location", "?"))
            return ProviderError(
                f"HTTP {reply.status}: the endpoint redirects to {where}; use that as --base-url",
                retryable=False,
            )
        reason = self.snippet(error_reason(parsed), 500) or self.snippet(reply.body)
        return error_from_body(reply.status, parsed, reason, max_tokens, _retry_after(reply))


def _retry_after(reply: HttpReply) -> float | None:
    """retry-after in seconds; None when absent or not a number."""
    value = reply.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
