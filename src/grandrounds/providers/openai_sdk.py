"""The official ``openai`` SDK as the HTTP transport of the OpenAI-compatible provider.

Calls go through the SDK's async client (auth, timeouts, error types) with its own retries
off, since the runner retries. ``post`` with ``cast_to=object`` skips the SDK's per-call
TypedDict transforms and model construction, which cost more CPU than the rest of the harness.
The HTTP connection pool scans every connection on each request, so several small pools
("lanes") are kept instead of one large one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai

from grandrounds.providers.base import ProviderError, error_reason

LANE_WIDTH = 8


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
        reason = error_reason(err.body if isinstance(err.body, dict) else {"error": err.body}) or err.message
        return ProviderError(f"HTTP {code}: {reason}", retryable=retry, retry_after=_retry_after(err))
    if isinstance(err, openai.APITimeoutError):
        return ProviderError("timeout", retryable=True)
    if isinstance(err, openai.APIConnectionError):
        return ProviderError(f"connection error: {err.message}", retryable=True)
    if isinstance(err, (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError, TypeError)):
        return ProviderError(f"malformed response body: {type(err).__name__}: {err}", retryable=True)
    return ProviderError(f"{type(err).__name__}: {err}", retryable=False)


class SdkTransport:
    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self.base_url = base_url
        self._key = api_key
        self._timeout = timeout
        self._lanes: list[openai.AsyncOpenAI] = []
        self._busy: list[int] = []

    def _lane(self) -> int:
        """The least busy lane, opening a new one when all hold LANE_WIDTH calls."""
        if self._busy:
            i = min(range(len(self._busy)), key=self._busy.__getitem__)
            if self._busy[i] < LANE_WIDTH:
                return i
        limits = httpx2.Limits(max_connections=LANE_WIDTH, max_keepalive_connections=LANE_WIDTH)
        self._lanes.append(
            openai.AsyncOpenAI(
                api_key=self._key,
                base_url=self.base_url,
                max_retries=0,
                timeout=self._timeout,
                http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=self._timeout),
            )
        )
        self._busy.append(0)
        return len(self._lanes) - 1

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        lane = self._lane()
        self._busy[lane] += 1
        try:
            return await self._lanes[lane].post(path, cast_to=object, body=body)
        except ProviderError:
            raise
        except Exception as err:  # every SDK failure becomes a classified ProviderError
            raise classify(err) from None
        finally:
            if lane < len(self._busy):
                self._busy[lane] -= 1

    async def aclose(self) -> None:
        for c in self._lanes:
            await c.close()
        self._lanes.clear()
        self._busy.clear()
