"""Any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp's server, vendor APIs).

The key comes from ``OPENAI_API_KEY`` (or the variable named by ``api_key_env``) and never
enters a request record, the store or a log. The base URL comes from ``--base-url``, else
``OPENAI_BASE_URL``, else OpenAI's. A user name and password in the URL
(``https://user:pass@host/v1``) are sent as HTTP Basic authentication instead of the key, and
are kept out of everything stored: the run id, request keys and fingerprints see the URL
without them.

Calls go through :mod:`grandrounds.providers.http` (aiohttp). The openai SDK is not used: for a
JSON POST it adds its own retries (the executor retries), typed models (the replies are read
here) and httpx's connection pool, and costs five to seven times the CPU per call
(bench/http_overhead.py).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import time
from typing import Any, ClassVar
from urllib.parse import unquote

import orjson

from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param
from grandrounds.core.records import Request, Response, ToolCallPart, Usage
from grandrounds.providers.base import (
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
from grandrounds.providers.images import OPENAI_MAX_IMAGES, OPENAI_MAX_REQUEST_MB, openai_messages
from grandrounds.providers.logprob_probe import probe, prompt_sum
from grandrounds.providers.tools import (
    openai_tool_choice,
    openai_tool_messages,
    openai_tools,
    read_openai_tool_calls,
    uses_tools,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIProvider(Provider):
    """``openai/MODEL``: chat, next-token and log-likelihood requests over HTTP (aiohttp)."""

    request_kinds = frozenset({"chat", "next_token", "loglikelihood"})
    model_options: ClassVar[tuple[Param, ...]] = (
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
            default="OPENAI_API_KEY",
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
            name="max_image_mb",
            type=float,
            default=20.0,
            help="largest image the server takes, in MB (checked before any call)",
            minimum=0.001,
        ),
        Param(
            name="max_images",
            type=int,
            default=OPENAI_MAX_IMAGES,
            help="most images one request may carry (OpenAI's published limit by default)",
            minimum=1,
        ),
        Param(
            name="max_request_mb",
            type=float,
            default=OPENAI_MAX_REQUEST_MB,
            help="most MB of images (base64) one request may carry (OpenAI's published limit by default)",
            minimum=0.001,
        ),
        ENDPOINT_ID,
    )
    example = "openai/gpt-4o (any OpenAI-compatible server with --base-url)"
    #: Calls in flight when --concurrency is not given: as many as vllm/ and sglang/ keep, which
    #: their continuous batching takes without queueing and hosted APIs take within their rate
    #: limits (a 429 is retried after its Retry-After). A server with fewer slots (llama.cpp's,
    #: Ollama) queues the rest, and a queued call's --timeout runs: set --concurrency to its slots.
    default_concurrency = 64
    sees_images = True
    supports_tools = True

    def __init__(
        self,
        spec: ModelSpec,
        timeout: float = 120.0,
        api_key_env: str = "OPENAI_API_KEY",
        max_response_mb: float = DEFAULT_MAX_RESPONSE_BYTES / 2**20,
        max_image_mb: float = 20.0,
        max_images: int = OPENAI_MAX_IMAGES,
        max_request_mb: float = OPENAI_MAX_REQUEST_MB,
        **options: Any,
    ) -> None:
        self.max_image_mb = max_image_mb
        self.max_images = max_images
        self.max_request_mb = max_request_mb
        base = (spec.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        url, user, password = split_userinfo(base)
        super().__init__(ModelSpec(spec.provider, spec.model, url), **options)
        self.account = account_label(api_key_env, "OPENAI_API_KEY", user)
        key = os.environ.get(api_key_env) or "EMPTY"  # local servers accept any key
        secrets = [key] if key != "EMPTY" else []
        if user is not None or password is not None:
            pair = f"{unquote(user or '')}:{unquote(password or '')}"
            token = base64.b64encode(pair.encode("utf-8")).decode("ascii")
            auth = f"Basic {token}"
            secrets += [token, unquote(password or ""), password or ""]
        else:
            auth = f"Bearer {key}"
        try:
            self._http = HttpClient(
                url, {"Authorization": auth}, timeout, int(max_response_mb * 2**20), secrets
            )
        except ValueError as e:
            raise ConfigError(f"provider {spec.provider}: {e}") from None
        self._secrets = self._http.secrets  # the key, the URL's password, the proxy's

    async def aclose(self) -> None:
        await self._http.aclose()

    async def server_slots(self) -> tuple[int, str] | None:
        """The slots a local server reports (:mod:`grandrounds.providers.slots`); hosted OpenAI is not asked."""
        from grandrounds.providers.slots import probe_slots

        if self.spec.base_url == DEFAULT_BASE_URL:
            return None
        return await probe_slots(self._http, self.spec.base_url)

    def image_limits(self) -> Any:
        from grandrounds.providers.images import openai_limits

        return openai_limits(self.max_image_mb, self.max_images, self.max_request_mb)

    async def call(self, request: Request) -> Response:
        start = time.perf_counter()
        try:
            if request.kind == "chat":
                text, usage, finish, calls, served = await self._chat(request)
                return Response(
                    key=request.key(),
                    text=text,
                    usage=usage,
                    latency=time.perf_counter() - start,
                    finish_reason=finish,
                    tool_calls=calls,
                    system_fingerprint=served,
                )
            if request.kind == "next_token":
                scores, usage = await self._next_token(request)
            else:
                scores, usage = await self._loglikelihood(request)
            return Response(
                key=request.key(), scores=scores, usage=usage, latency=time.perf_counter() - start
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
            raise ProviderError(
                f"malformed response body: {type(err).__name__}: {self._snippet(str(err))}",
                retryable=True,
            ) from None

    def _gen_kwargs(self, request: Request) -> dict[str, Any]:
        p = request.params
        kw: dict[str, Any] = {
            "model": self.spec.model,
            "temperature": p.temperature,
            "max_tokens": p.max_tokens,
        }
        if p.top_p is not None:
            kw["top_p"] = p.top_p
        if p.seed is not None:
            kw["seed"] = p.seed
        if p.stop:
            kw["stop"] = list(p.stop)
        if p.json_object:
            kw["response_format"] = {"type": "json_object"}
        return kw

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON body; the reply must be a JSON object with a 2xx status."""
        reply = await self._http.post(path, body)
        if reply.status >= 300:
            raise self._status_error(reply, body)
        try:
            out = orjson.loads(reply.body)  # about five times faster than json.loads
        except orjson.JSONDecodeError:
            try:  # what orjson refuses and the standard library reads (NaN, a lone surrogate, UTF-16)
                out = json.loads(reply.body)
            except ValueError:
                raise self._not_json(reply) from None
        if not isinstance(out, dict):
            raise ProviderError("malformed response body: not a JSON object", retryable=True)
        return out

    def _not_json(self, reply: HttpReply) -> ProviderError:
        """A 2xx reply that is not JSON. An HTML page or an event stream will not turn into JSON on
        a retry (the base URL points at a web page, or the server streams unasked); a cut or
        garbled JSON body might."""
        kind = reply.content_type
        if kind in ("text/html", "application/xhtml+xml", "text/event-stream"):
            what = "an event stream" if kind == "text/event-stream" else "an HTML page"
            hint = (
                ""
                if kind == "text/event-stream"
                else " (is --base-url the API's URL, usually ending in /v1?)"
            )
            return ProviderError(
                f"malformed response body: HTTP {reply.status} with {what} instead of JSON{hint}: {self._snippet(reply.body)}",
                retryable=False,
            )
        return ProviderError("malformed response body: invalid JSON", retryable=True)

    def _snippet(self, body: bytes | str, limit: int = 200) -> str:
        """Server-sent text for an error message: secrets redacted (before it is cut, so no part of
        a key survives), on one line, at most ``limit`` characters."""
        text = body[:65536].decode("utf-8", "replace") if isinstance(body, bytes) else body[:65536]
        text = " ".join(redact(text, self._secrets).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def _status_error(self, reply: HttpReply, sent: dict[str, Any]) -> ProviderError:
        """A non-2xx reply as a classified ProviderError, with the server's reason (secrets redacted)."""
        status = reply.status
        try:
            parsed = json.loads(reply.body)
        except ValueError:
            parsed = None
        reason = self._snippet(error_reason(parsed), 500) or self._snippet(reply.body)
        if status < 400:
            where = self._snippet(reply.headers.get("Location", "?"))
            return ProviderError(
                f"HTTP {status}: the endpoint redirects to {where}; use that as --base-url",
                retryable=False,
            )
        overflow = context_overflow(reason, parsed)
        if overflow is not None:
            limit, prompt = overflow
            return ProviderError(
                context_message(limit, prompt, sent.get("max_tokens")),
                retryable=False,
                kind="context_length",
                context_limit=limit,
                prompt_tokens=prompt,
            )
        retryable = status >= 500 or status in (408, 409, 429)
        label = "429 rate limited" if status == 429 else f"HTTP {status}"
        kind = {429: "rate_limited", 503: "overloaded"}.get(
            status
        )  # the server is full: fewer calls at once
        return ProviderError(
            f"{label}: {reason}", retryable=retryable, retry_after=_retry_after(reply), kind=kind
        )

    async def _chat(
        self, request: Request
    ) -> tuple[str, Usage, str | None, tuple[ToolCallPart, ...], str | None]:
        body: dict[str, Any]
        if uses_tools(request):
            body = {"messages": openai_tool_messages(request.messages), **self._gen_kwargs(request)}
            if request.tools:
                body["tools"] = openai_tools(request.tools)
            if request.tool_choice:
                body["tool_choice"] = openai_tool_choice(request.tool_choice)
        else:
            body = {"messages": openai_messages(request.messages), **self._gen_kwargs(request)}
        out = await self._post("/chat/completions", body)
        try:
            message = out["choices"][0]["message"]
            text = message["content"] if "content" in message else None  # noqa: SIM401
        except (KeyError, IndexError, TypeError):
            raise ProviderError(
                "malformed response body: no choices[0].message.content", retryable=True
            ) from None
        calls = read_openai_tool_calls(message) if request.tools else ()
        if text is None and calls:
            text = ""  # a reply that only calls tools
        if not isinstance(text, str):
            what = "null" if text is None else f"a {type(text).__name__}, not text"
            raise ProviderError(
                f"malformed response body: message content is {what}", retryable=True
            )
        finish = out["choices"][0].get("finish_reason")
        return (
            text,
            _usage(out),
            finish if isinstance(finish, str) else None,
            calls,
            served_by(out, self.spec.model),
        )

    async def _next_token(self, request: Request) -> tuple[dict[str, float], Usage]:
        """Log-prob of each continuation as the first generated token (top_logprobs=20)."""
        msgs = openai_messages(request.messages)
        kw = self._gen_kwargs(request) | {
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": 20,
        }
        out = await self._post("/chat/completions", {"messages": msgs, **kw})
        try:
            content = (out["choices"][0].get("logprobs") or {}).get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError("malformed response body: no choices", retryable=True) from None
        if not content:
            raise ProviderError(
                "endpoint returned no logprobs for next-token scoring", retryable=False
            )
        top: dict[str, float] = {}
        for t in content[0].get(
            "top_logprobs", []
        ):  # " B" and "B" are one option: keep the likelier spelling
            token, lp = str(t["token"]).strip(), float(t["logprob"])
            top[token] = max(lp, top.get(token, -math.inf))
        scores = {c: top[c.strip()] for c in request.continuations if c.strip() in top}
        return scores, _usage(out)

    async def _loglikelihood(self, request: Request) -> tuple[dict[str, float], Usage]:
        """Sum of token log-probs of each continuation after the context, via completions echo."""
        context = "\n\n".join(m.text for m in request.messages)
        scores: dict[str, float] = {}
        for cont in request.continuations:
            # max_tokens 1 on every server (llama-cpp-python reads 0 as no limit, vLLM refuses it);
            # the generated token is not summed (providers.logprob_probe)
            out = await self._post(
                "/completions",
                {
                    "model": self.spec.model,
                    "prompt": context + cont,
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": 1,
                    "temperature": 0.0,
                },
            )
            try:
                lp = out["choices"][0]["logprobs"]
                pairs = list(zip(lp["token_logprobs"], lp["text_offset"]))
            except (KeyError, IndexError, TypeError):
                raise ProviderError(
                    "endpoint returned no echo logprobs for log-likelihood scoring", retryable=False
                ) from None
            scores[cont] = prompt_sum(pairs, len(context), len(context) + len(cont))
        return scores, Usage()

    async def check_logprobs(self, kind: str) -> bool:
        """Probe the server's log-probabilities before a log-probability run of ``kind``
        (:func:`grandrounds.providers.logprob_probe.probe`): a ConfigError if they are not right;
        False where a next-token run's server echoes nothing (not checked)."""
        return await probe(self._post, self.spec.model, echo_needed=kind == "loglikelihood")


def served_by(out: Any, asked: str) -> str | None:
    """What a Chat Completions body says answered: its ``system_fingerprint``, and the ``model`` it
    names where that differs from ``asked`` (a dated version behind an alias); None when it says
    neither. Server text, kept to one short line."""
    if not isinstance(out, dict):
        return None
    parts: list[str] = []
    fp = out.get("system_fingerprint")
    if isinstance(fp, str) and fp.strip():
        parts.append(fp.strip())
    model = out.get("model")
    if isinstance(model, str) and model.strip() and model.strip() != asked:
        parts.append(f"model {model.strip()}")
    joined = " ".join("; ".join(parts).split())
    return joined[:200] or None


def _usage(out: dict[str, Any]) -> Usage:
    u = out.get("usage") or {}
    try:
        return Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
    except (TypeError, ValueError, AttributeError):
        return Usage()


def _retry_after(reply: HttpReply) -> float | None:
    """Retry-After in seconds; None when absent or given as an HTTP date."""
    value = reply.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# ---- context-length overflow ------------------------------------------------------------------
#
# How servers word "the prompt plus max_tokens does not fit" (HTTP 400; TGI uses 422). Each shape
# is matched on its own wording; the numbers are read where the message gives them.
#   OpenAI:   "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens
#              (3000 in the messages, 2000 in the completion). ..." / "... However, your messages
#              resulted in 5000 tokens. ..."; error code "context_length_exceeded"
#   vLLM:     the OpenAI wording; "... However, you requested 2000 output tokens and your prompt
#              contains at least 3001 input tokens, for a total of at least 5001 tokens."; and
#              "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum
#              context length is 4096 tokens and your request has 3000 input tokens (2000 > 4096 - 3000)."
#   llama.cpp server: "the request exceeds the available context size, try increasing it" with
#              n_prompt_tokens and n_ctx beside the message (type "exceed_context_size_error");
#              "request (5000 tokens) exceeds the available context size (4096 tokens)"
#   SGLang:   "Requested token count exceeds the model's maximum context length of 4096 tokens. You
#              requested a total of 5000 tokens: 3000 tokens from the input messages and 2000 tokens
#              for the completion. ..."; "The input (5000 tokens) is longer than the model's context
#              length (4096 tokens)."
#   TGI:      "`inputs` tokens + `max_new_tokens` must be <= 4096. Given: 3000 `inputs` tokens and
#              2000 `max_new_tokens`"
#   Anthropic-style gateways: "prompt is too long: 5000 tokens > 4096 maximum"

_OVERFLOW = re.compile(
    r"maximum context length|context_length_exceeded|exceeds? the available context size"
    r"|longer than the model's context length|`inputs` tokens \+ `max_new_tokens` must be"
    r"|prompt is too long: \d+ tokens > \d+|exceed_context_size_error",
    re.IGNORECASE,
)
_LIMIT = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"maximum context length (?:is|of) (\d+)",
        r"context (?:size|length) \((\d+) tokens\)",
        r"must be <= (\d+)",
        r"tokens > (\d+) maximum",
    )
]
_PROMPT = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\((\d+) in the messages",
        r"messages resulted in (\d+) tokens",
        r"prompt contains at least (\d+) input tokens",
        r"request has (\d+) input tokens",
        r"(\d+) tokens from the input messages",
        r"(?:input|request) \((\d+) tokens\)",
        r"requested (\d+) tokens in the messages",
        r"Given: (\d+) `inputs` tokens",
        r"prompt is too long: (\d+) tokens",
    )
]


def _first_int(patterns: list[re.Pattern[str]], text: str) -> int | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return int(m.group(1))
    return None


def context_overflow(reason: str, body: Any) -> tuple[int | None, int | None] | None:
    """(context limit, prompt tokens) when an error says the request does not fit the model's
    context, each None where the server does not say; None for any other error."""
    err = body.get("error") if isinstance(body, dict) else None
    fields = err if isinstance(err, dict) else body if isinstance(body, dict) else {}
    code = " ".join(str(fields.get(k, "")) for k in ("code", "type"))
    if not _OVERFLOW.search(reason) and not _OVERFLOW.search(code):
        return None
    limit, prompt = _first_int(_LIMIT, reason), _first_int(_PROMPT, reason)
    if limit is None and isinstance(
        fields.get("n_ctx"), int
    ):  # llama.cpp's server gives both beside the message
        limit = fields["n_ctx"]
    if prompt is None and isinstance(fields.get("n_prompt_tokens"), int):
        prompt = fields["n_prompt_tokens"]
    return limit, prompt


def context_message(limit: int | None, prompt: int | None, max_tokens: Any) -> str:
    """One short line (summaries cut reasons at 80 characters): the context the server named,
    exceeded by the prompt plus max_tokens, with the sizes it gave, e.g.
    "context 4096 exceeded: prompt 5000 + max_tokens 1024"."""
    ctx = f"context {limit}" if limit is not None else "context"
    asked = f"prompt {prompt}" if prompt is not None else "the prompt"
    unsaid = " (the server gave no sizes)" if limit is None and prompt is None else ""
    return f"{ctx} exceeded: {asked} + max_tokens {max_tokens}{unsaid}"
