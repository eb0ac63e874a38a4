"""Anthropic's Message Batches, as a :class:`~grandrounds.run.batches.wire.Wire`: the batch created
with its requests (``POST /v1/messages/batches``), its status (``GET
/v1/messages/batches/{id}``) and its results read line by line (``results_url``).

Message batches carry no metadata, and their requests cannot be seen before they end: when a
creation's reply is lost, the next try lists the batches (newest first) and takes the one batch
created since shortly before the first try, unknown to the store, with as many requests as this
one; where none or several fit, it creates the batch again (a batch of other requests, if ever
taken, ends without these keys' results, and they are sent again)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from secrets import token_hex
from typing import Any, cast

from grandrounds.core.records import Request, Response
from grandrounds.providers.anthropic import (
    AnthropicProvider,
    error_from_body,
    message_body,
    read_message,
)
from grandrounds.providers.base import Provider, ProviderError, error_reason, redact
from grandrounds.run.batches.http import BatchHttp
from grandrounds.run.batches.settings import BatchSettings
from grandrounds.run.batches.wire import Remote, Submission, Wire, object_at

#: How far back (seconds before the first try, for clock skew) a batch may have been created to be
#: the one whose creation reply was lost.
FIND_SKEW = 300


#: Anthropic error types -> the HTTP status a live call would have had.
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class AnthropicWire(Wire):
    """Anthropic's Message Batches."""

    name = "anthropic"

    def __init__(self, provider: AnthropicProvider, settings: BatchSettings) -> None:
        timeout = max(settings.transfer_timeout, provider.timeout)
        self.client = lambda: cast(BatchHttp, provider.client(timeout, BatchHttp))
        self.base_url, self.secrets = provider.spec.base_url, provider.secrets
        self.endpoint = f"{provider.spec.base_url}/v1/messages"

    def body(self, provider: Provider, request: Request) -> dict[str, Any]:
        return message_body(request.model, request)

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        return json.dumps({"custom_id": key, "params": body}, ensure_ascii=False).encode("utf-8")

    async def submit(self, lines: list[bytes], attempt: Submission | None = None) -> Remote:
        attempt = attempt or Submission(marker=token_hex(16), started=time.time())
        if attempt.sent:
            found = await self.find(attempt, len(lines))
            if found is not None:
                attempt.found = True
                return found
        # The requests are already JSON: joined into the body as they are, not parsed again.
        data = b'{"requests":[' + b",".join(lines) + b"]}"
        attempt.sent = True
        return self._remote(
            await self._call(lambda http: http.post_bytes("/v1/messages/batches", data))
        )

    async def find(self, attempt: Submission, size: int) -> Remote | None:
        """The one batch (of the newest 100) created since shortly before the first try, unknown to
        the store, with ``size`` requests; None where there is none or more than one."""
        page = await self._call(lambda http: http.fetch("/v1/messages/batches?limit=100"))
        fits = []
        for b in page.get("data") or []:
            if not isinstance(b, dict) or b.get("id") in attempt.known:
                continue
            counts = object_at(b, "request_counts")
            total = sum(
                v for v in counts.values() if isinstance(v, int) and not isinstance(v, bool)
            )
            if total == size and _created(b.get("created_at")) >= attempt.started - FIND_SKEW:
                fits.append(b)
        return self._remote(fits[0]) if len(fits) == 1 else None

    async def status(self, batch_id: str) -> Remote:
        return self._remote(
            await self._call(lambda http: http.fetch(f"/v1/messages/batches/{batch_id}"))
        )

    def _remote(self, out: dict[str, Any]) -> Remote:
        batch_id, state = out.get("id"), out.get("processing_status")
        if not isinstance(batch_id, str) or not isinstance(state, str):
            raise ProviderError(
                "malformed response body: a message batch without id or processing_status",
                retryable=True,
            )
        counts = object_at(out, "request_counts")
        return Remote(
            batch_id=batch_id,
            state=state,
            done=state == "ended",
            counts=counts,
            detail="",
            results=(out.get("results_url"),),
        )

    def outcome(self, remote: Remote) -> str:
        """A message batch only "ends": it was cancelled or expired when some of its requests were."""
        for count, outcome in (("canceled", "cancelled"), ("expired", "expired")):
            n = remote.counts.get(count)
            if isinstance(n, int) and n > 0:
                return outcome
        return "completed"

    async def results(self, remote: Remote) -> AsyncIterator[tuple[str, Response | ProviderError]]:
        url = remote.results[0] if remote.results else None
        own = f"/v1/messages/batches/{remote.batch_id}/results"
        # The key goes only to the endpoint's own host: a results URL elsewhere is read at the documented path.
        where = url if isinstance(url, str) and url.startswith(self.base_url + "/") else own
        async for raw in self._lines(where):
            got = self._line(raw)
            if got is not None:
                yield got

    def _line(self, raw: bytes) -> tuple[str, Response | ProviderError] | None:
        try:
            line = json.loads(raw)
            key, result = line["custom_id"], line["result"]
            kind = result["type"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(key, str):
            return None
        if kind == "succeeded":
            try:
                return key, read_message(result.get("message"), key)
            except ProviderError as e:
                return key, e
        if kind == "errored":
            parsed = result.get("error")
            inner = parsed.get("error") if isinstance(parsed, dict) else None
            etype = inner.get("type") if isinstance(inner, dict) else None
            status = _ANTHROPIC_STATUS.get(str(etype), 500)
            reason = " ".join(
                redact(error_reason(parsed) or str(etype or "error"), self.secrets).split()
            )[:500]
            return key, error_from_body(status, parsed, reason, None)
        if kind in ("canceled", "expired"):
            cause = "batch_cancelled" if kind == "canceled" else "batch_expired"
            return key, ProviderError(
                f"batch request {kind} before it was processed", retryable=True, kind=cause
            )
        return key, ProviderError(f"batch result of unknown type {kind!r}", retryable=True)


def _created(value: Any) -> float:
    """A batch's ``created_at`` (RFC 3339, or seconds) as seconds; 0 where it cannot be read."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
