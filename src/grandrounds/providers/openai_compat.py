"""Any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp's server, vendor APIs).

The key comes from ``OPENAI_API_KEY`` (or the variable named by ``api_key_env``) and never
enters a request record, the store or a log. The base URL comes from ``--base-url``, else
``OPENAI_BASE_URL``, else OpenAI's.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import openai

from grandrounds.providers.base import ModelSpec, Provider, ProviderError
from grandrounds.records import Request, Response, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _retry_after(err: openai.APIStatusError) -> float | None:
    try:
        value = err.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError):
        return None


def classify(err: BaseException) -> ProviderError:
    """Map SDK errors onto retryable / final failures (never includes secrets)."""
    if isinstance(err, ProviderError):
        return err
    if isinstance(err, openai.RateLimitError):
        return ProviderError(f"429 rate limited: {err.message}", retryable=True, retry_after=_retry_after(err))
    if isinstance(err, openai.APIStatusError):
        code = err.status_code
        retry = code >= 500 or code in (408, 409, 429)
        return ProviderError(f"HTTP {code}: {err.message}", retryable=retry, retry_after=_retry_after(err))
    if isinstance(err, openai.APITimeoutError):
        return ProviderError("timeout", retryable=True)
    if isinstance(err, openai.APIConnectionError):
        return ProviderError(f"connection error: {err.message}", retryable=True)
    if isinstance(err, (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError, TypeError)):
        return ProviderError(f"malformed response body: {type(err).__name__}: {err}", retryable=True)
    return ProviderError(f"{type(err).__name__}: {err}", retryable=False)


class OpenAIProvider(Provider):
    """``openai/MODEL`` through the official SDK's async client, with the SDK's own retries off."""

    supports = frozenset({"chat", "next_token", "loglikelihood"})
    default_concurrency = 32

    def __init__(self, spec: ModelSpec, timeout: float = 120.0, api_key_env: str = "OPENAI_API_KEY", **options: Any) -> None:
        base = spec.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        super().__init__(ModelSpec(spec.provider, spec.model, base.rstrip("/")), **options)
        key = os.environ.get(api_key_env) or "EMPTY"  # local servers accept any key
        self.client = openai.AsyncOpenAI(api_key=key, base_url=self.spec.base_url, max_retries=0, timeout=timeout)

    async def aclose(self) -> None:
        await self.client.close()

    async def call(self, request: Request) -> Response:
        start = time.perf_counter()
        try:
            if request.kind == "chat":
                text, usage = await self._chat(request)
                return Response(key=request.key(), text=text, usage=usage, latency=time.perf_counter() - start)
            if request.kind == "next_token":
                scores, usage = await self._next_token(request)
            else:
                scores, usage = await self._loglikelihood(request)
            return Response(key=request.key(), scores=scores, usage=usage, latency=time.perf_counter() - start)
        except BaseException as err:  # noqa: BLE001 - every failure becomes data
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            import asyncio

            if isinstance(err, asyncio.CancelledError):
                raise
            raise classify(err) from None

    def _gen_kwargs(self, request: Request) -> dict[str, Any]:
        p = request.params
        kw: dict[str, Any] = {"model": self.spec.model, "temperature": p.temperature, "max_tokens": p.max_tokens}
        if p.top_p is not None:
            kw["top_p"] = p.top_p
        if p.seed is not None:
            kw["seed"] = p.seed
        if p.stop:
            kw["stop"] = list(p.stop)
        return kw

    async def _chat(self, request: Request) -> tuple[str, Usage]:
        msgs = [{"role": m.role, "content": m.content} for m in request.messages]
        out = await self.client.chat.completions.create(messages=msgs, **self._gen_kwargs(request))
        if isinstance(out, str) or not getattr(out, "choices", None):
            raise ProviderError("malformed response body: no choices", retryable=True)
        text = out.choices[0].message.content
        if text is None:
            raise ProviderError("malformed response body: empty message content", retryable=True)
        return text, _usage(out)

    async def _next_token(self, request: Request) -> tuple[dict[str, float], Usage]:
        """Log-prob of each continuation as the first generated token (top_logprobs=20)."""
        msgs = [{"role": m.role, "content": m.content} for m in request.messages]
        kw = self._gen_kwargs(request) | {"max_tokens": 1, "temperature": 0.0}
        out = await self.client.chat.completions.create(messages=msgs, logprobs=True, top_logprobs=20, **kw)
        if isinstance(out, str) or not getattr(out, "choices", None) or out.choices[0].logprobs is None:
            raise ProviderError("endpoint returned no logprobs for next-token scoring", retryable=False)
        content = out.choices[0].logprobs.content or []
        if not content:
            raise ProviderError("malformed response body: empty logprobs", retryable=True)
        top = {t.token.strip(): t.logprob for t in content[0].top_logprobs}
        scores = {c: top[c.strip()] for c in request.continuations if c.strip() in top}
        return scores, _usage(out)

    async def _loglikelihood(self, request: Request) -> tuple[dict[str, float], Usage]:
        """Sum of token log-probs of each continuation after the context, via completions echo."""
        context = "\n\n".join(m.content for m in request.messages)
        scores: dict[str, float] = {}
        for cont in request.continuations:
            out = await self.client.completions.create(
                model=self.spec.model, prompt=context + cont, max_tokens=0, echo=True, logprobs=1, temperature=0.0
            )
            lp = out.choices[0].logprobs if getattr(out, "choices", None) else None
            if lp is None or lp.token_logprobs is None or lp.text_offset is None:
                raise ProviderError("endpoint returned no echo logprobs for log-likelihood scoring", retryable=False)
            scores[cont] = float(
                sum(x for x, off in zip(lp.token_logprobs, lp.text_offset) if off >= len(context) and x is not None)
            )
        return scores, Usage()


def _usage(out: Any) -> Usage:
    u = getattr(out, "usage", None)
    if u is None:
        return Usage()
    return Usage(int(getattr(u, "prompt_tokens", 0) or 0), int(getattr(u, "completion_tokens", 0) or 0))
