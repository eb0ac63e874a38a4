"""Any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp's server, vendor APIs).

The key comes from ``OPENAI_API_KEY`` (or the variable named by ``api_key_env``) and never
enters a request record, the store or a log. The base URL comes from ``--base-url``, else
``OPENAI_BASE_URL``, else OpenAI's.
"""

from __future__ import annotations

import math

import os
import time
from typing import Any

from grandrounds.errors import ConfigError
from grandrounds.params import Param
from grandrounds.providers.base import ModelSpec, Provider, ProviderError
from grandrounds.providers.lean_http import LeanClient
from grandrounds.records import Request, Response, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIProvider(Provider):
    """``openai/MODEL``: by default through the official SDK's async client (its retries off: the
    runner retries); ``transport="lean"`` uses the small built-in HTTP client instead, for local
    servers at high concurrency where the SDK's CPU cost per call limits throughput."""

    request_kinds = frozenset({"chat", "next_token", "loglikelihood"})
    model_options = (
        Param("timeout", float, 120.0, "seconds before a call is abandoned (and retried)", minimum=0.001),
        Param("api_key_env", str, "OPENAI_API_KEY", "environment variable holding the API key"),
        Param("transport", str, "sdk", "sdk: the official openai client; lean: the small built-in one", ("sdk", "lean")),
    )
    example = "openai/gpt-4o (any OpenAI-compatible server with --base-url)"
    default_concurrency = 32

    def __init__(
        self,
        spec: ModelSpec,
        timeout: float = 120.0,
        api_key_env: str = "OPENAI_API_KEY",
        transport: str = "sdk",
        **options: Any,
    ) -> None:
        base = spec.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        super().__init__(ModelSpec(spec.provider, spec.model, base.rstrip("/")), **options)
        self._key = os.environ.get(api_key_env) or "EMPTY"  # local servers accept any key
        if transport == "sdk":
            from grandrounds.providers.openai_sdk import SdkTransport  # the SDK is imported only when used

            self._transport: Any = SdkTransport(self.spec.base_url, self._key, timeout)
        elif transport == "lean":
            self._transport = LeanClient(self.spec.base_url, self._key, timeout)
        else:
            raise ConfigError(f"transport must be sdk or lean, not {transport!r}")

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def call(self, request: Request) -> Response:
        start = time.perf_counter()
        try:
            if request.kind == "chat":
                text, usage, finish = await self._chat(request)
                return Response(key=request.key(), text=text, usage=usage, latency=time.perf_counter() - start, finish_reason=finish)
            if request.kind == "next_token":
                scores, usage = await self._next_token(request)
            else:
                scores, usage = await self._loglikelihood(request)
            return Response(key=request.key(), scores=scores, usage=usage, latency=time.perf_counter() - start)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
            raise ProviderError(f"malformed response body: {type(err).__name__}: {err}", retryable=True) from None

    def _gen_kwargs(self, request: Request) -> dict[str, Any]:
        p = request.params
        kw: dict[str, Any] = {"model": self.spec.model, "temperature": p.temperature, "max_tokens": p.max_tokens}
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
        """POST a JSON body through the transport; the reply must be a JSON object."""
        out = await self._transport.post_json(path, body)
        if not isinstance(out, dict):
            raise ProviderError("malformed response body: not a JSON object", retryable=True)
        return out

    async def _chat(self, request: Request) -> tuple[str, Usage, str | None]:
        msgs = [{"role": m.role, "content": m.content} for m in request.messages]
        out = await self._post("/chat/completions", {"messages": msgs, **self._gen_kwargs(request)})
        try:
            text = out["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ProviderError("malformed response body: no choices[0].message.content", retryable=True) from None
        if not isinstance(text, str):
            raise ProviderError("malformed response body: empty message content", retryable=True)
        finish = out["choices"][0].get("finish_reason")
        return text, _usage(out), finish if isinstance(finish, str) else None

    async def _next_token(self, request: Request) -> tuple[dict[str, float], Usage]:
        """Log-prob of each continuation as the first generated token (top_logprobs=20)."""
        msgs = [{"role": m.role, "content": m.content} for m in request.messages]
        kw = self._gen_kwargs(request) | {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
        out = await self._post("/chat/completions", {"messages": msgs, **kw})
        try:
            content = (out["choices"][0].get("logprobs") or {}).get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError("malformed response body: no choices", retryable=True) from None
        if not content:
            raise ProviderError("endpoint returned no logprobs for next-token scoring", retryable=False)
        top: dict[str, float] = {}
        for t in content[0].get("top_logprobs", []):  # " B" and "B" are one option: keep the likelier spelling
            token, lp = str(t["token"]).strip(), float(t["logprob"])
            top[token] = max(lp, top.get(token, -math.inf))
        scores = {c: top[c.strip()] for c in request.continuations if c.strip() in top}
        return scores, _usage(out)

    async def _loglikelihood(self, request: Request) -> tuple[dict[str, float], Usage]:
        """Sum of token log-probs of each continuation after the context, via completions echo."""
        context = "\n\n".join(m.content for m in request.messages)
        scores: dict[str, float] = {}
        for cont in request.continuations:
            out = await self._post(
                "/completions",
                {"model": self.spec.model, "prompt": context + cont, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0.0},
            )
            try:
                lp = out["choices"][0]["logprobs"]
                pairs = list(zip(lp["token_logprobs"], lp["text_offset"]))
            except (KeyError, IndexError, TypeError):
                raise ProviderError("endpoint returned no echo logprobs for log-likelihood scoring", retryable=False) from None
            scores[cont] = float(sum(x for x, off in pairs if off >= len(context) and x is not None))
        return scores, Usage()


def _usage(out: dict[str, Any]) -> Usage:
    u = out.get("usage") or {}
    try:
        return Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
    except (TypeError, ValueError, AttributeError):
        return Usage()
