"""OpenAI's Batch API for Chat Completions, as a :class:`~grandrounds.run.batches.wire.Wire`: the
JSONL input file uploaded (``POST /files``, ``purpose=batch``), the batch created (``POST
/batches``), its status (``GET /batches/{id}``) and its output and error files read line by line
(``GET /files/{id}/content``).

A batch is created with a marker of ours in its ``metadata``; when a creation's reply is lost (a
proxy's 502, a dropped connection) the next try lists the batches (``GET /batches``, newest first)
and takes the one made from the same uploaded file or carrying the marker, instead of creating
(and paying for) the batch again. The file is uploaded once per submission."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from functools import partial
from secrets import token_hex
from typing import Any, cast

from grandrounds.core.records import Request, Response, Usage
from grandrounds.providers.base import Provider, ProviderError, error_reason, public_url, redact
from grandrounds.providers.images import openai_messages
from grandrounds.providers.openai_compat import (
    OpenAIProvider,
    context_message,
    context_overflow,
    served_by,
)
from grandrounds.run.batches.http import BatchHttp
from grandrounds.run.batches.settings import BatchSettings
from grandrounds.run.batches.wire import Remote, Submission, Wire, object_at

#: The metadata key of the marker each batch is created with.
MARKER_KEY = "grandrounds_submission"
#: Pages of 100 batches looked through for one whose creation reply was lost, and how far back
#: (seconds before the first try, for clock skew) a batch may have been created to be it.
FIND_PAGES, FIND_SKEW = 10, 600

#: OpenAI batch statuses after which nothing more happens to a batch.
_OPENAI_DONE = frozenset({"completed", "expired", "cancelled", "failed"})


class OpenAIWire(Wire):
    """OpenAI's Batch API (files + batches), for Chat Completions."""

    name = "openai"
    PATH = "/v1/chat/completions"

    def __init__(self, provider: OpenAIProvider, settings: BatchSettings) -> None:
        http = (
            provider._http
        )  # the provider's client: its base URL, credentials and secrets to redact
        headers = {
            k: v for k, v in http.headers.items() if k.lower() not in ("content-type", "accept")
        }
        timeout = max(settings.transfer_timeout, http.timeout)
        self.client = lambda: BatchHttp(
            http.base_url, headers, timeout, http.max_response_bytes, http.secrets
        )
        self.base_url, self.secrets = http.base_url, tuple(http.secrets)
        self.endpoint = f"{public_url(http.base_url)}/chat/completions"
        self.model = provider.spec.model

    def body(self, provider: Provider, request: Request) -> dict[str, Any]:
        kwargs = cast(OpenAIProvider, provider)._gen_kwargs(request)
        return {"messages": openai_messages(request.messages), **kwargs, "model": request.model}

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        return (
            json.dumps(
                {"custom_id": key, "method": "POST", "url": self.PATH, "body": body},
                ensure_ascii=False,
            ).encode("utf-8")
            + b"\n"
        )

    async def submit(self, lines: list[bytes], attempt: Submission | None = None) -> Remote:
        attempt = attempt or Submission(marker=token_hex(16), started=time.time())
        if attempt.file_id is None:
            up = await self._call(
                lambda http: http.post_file(
                    "/files", {"purpose": "batch"}, "batch.jsonl", b"".join(lines)
                )
            )
            file_id = up.get("id")
            if not isinstance(file_id, str):
                raise ProviderError(
                    "malformed response body: the uploaded file has no id", retryable=True
                )
            attempt.file_id = file_id
        if attempt.sent:
            found = await self.find(attempt, len(lines))
            if found is not None:
                attempt.found = True
                return found
        created = {
            "input_file_id": attempt.file_id,
            "endpoint": self.PATH,
            "completion_window": "24h",
            "metadata": {MARKER_KEY: attempt.marker},
        }
        attempt.sent = True
        return self._remote(await self._call(lambda http: http.post("/batches", created)))

    async def find(self, attempt: Submission, size: int) -> Remote | None:
        """The batch made from ``attempt``'s uploaded file or carrying its marker, looked for among
        the batches listed newest first, back to shortly before the first try."""
        after: str | None = None
        for _ in range(FIND_PAGES):
            where = "/batches?limit=100" + (f"&after={after}" if after else "")
            page = await self._call(partial(BatchHttp.fetch, where=where))
            data = [b for b in page.get("data") or [] if isinstance(b, dict)]
            for b in data:
                meta = object_at(b, "metadata")
                if b.get("id") not in attempt.known and (
                    b.get("input_file_id") == attempt.file_id
                    or meta.get(MARKER_KEY) == attempt.marker
                ):
                    return self._remote(b)
            oldest = data[-1].get("created_at") if data else None
            if (
                not page.get("has_more")
                or not data
                or (isinstance(oldest, (int, float)) and oldest < attempt.started - FIND_SKEW)
            ):
                return None
            after = str(page.get("last_id") or data[-1].get("id"))
        return None

    async def status(self, batch_id: str) -> Remote:
        return self._remote(await self._call(lambda http: http.fetch(f"/batches/{batch_id}")))

    def _remote(self, out: dict[str, Any]) -> Remote:
        batch_id, state = out.get("id"), out.get("status")
        if not isinstance(batch_id, str) or not isinstance(state, str):
            raise ProviderError(
                "malformed response body: a batch without id or status", retryable=True
            )
        errors = (
            (out.get("errors") or {}).get("data") if isinstance(out.get("errors"), dict) else None
        )
        detail = "; ".join(
            f"{e.get('code') or 'error'}: {e.get('message') or ''}".strip()
            + (f" (line {e['line']})" if e.get("line") else "")
            for e in (errors or [])
            if isinstance(e, dict)
        )
        detail = " ".join(redact(detail, self.secrets).split())[:300]
        counts = object_at(out, "request_counts")
        return Remote(
            batch_id=batch_id,
            state=state,
            done=state in _OPENAI_DONE,
            counts=counts,
            detail=detail,
            results=(out.get("output_file_id"), out.get("error_file_id")),
        )

    async def results(self, remote: Remote) -> AsyncIterator[tuple[str, Response | ProviderError]]:
        for file_id in remote.results:
            if not file_id:
                continue
            async for raw in self._lines(f"/files/{file_id}/content"):
                got = self._line(raw)
                if got is not None:
                    yield got

    def _line(self, raw: bytes) -> tuple[str, Response | ProviderError] | None:
        try:
            line = json.loads(raw)
            key = line["custom_id"]
        except (ValueError, KeyError, TypeError):
            return None  # not a result line: nothing to attribute it to
        if not isinstance(key, str):
            return None
        resp, err = line.get("response"), line.get("error")
        if isinstance(resp, dict) and resp.get("status_code") == 200:
            try:
                return key, _chat_response(resp.get("body"), key, self.model)
            except ProviderError as e:
                return key, e
        if isinstance(resp, dict) and isinstance(resp.get("status_code"), int):
            body = resp.get("body")
            reason = " ".join(
                redact(error_reason(body) or json.dumps(body)[:300], self.secrets).split()
            )[:500]
            status = resp["status_code"]
            overflow = context_overflow(reason, body)
            if overflow is not None:
                limit, prompt = overflow
                return key, ProviderError(
                    context_message(limit, prompt, None),
                    retryable=False,
                    kind="context_length",
                    context_limit=limit,
                    prompt_tokens=prompt,
                )
            label = "429 rate limited" if status == 429 else f"HTTP {status}"
            return key, ProviderError(
                f"{label}: {reason}", retryable=status >= 500 or status in (408, 409, 429)
            )
        if isinstance(err, dict):
            code, message = str(err.get("code") or "error"), str(err.get("message") or "")
            reason = " ".join(redact(f"{code}: {message}", self.secrets).split())[:500]
            kind = code if code in ("batch_expired", "batch_cancelled") else None
            return key, ProviderError(f"batch line failed: {reason}", retryable=True, kind=kind)
        return key, ProviderError(
            "malformed batch result line: neither response nor error", retryable=True
        )


def _chat_response(body: Any, key: str, asked: str = "") -> Response:
    """A Chat Completions body (from a batch's output file) as a Response."""
    try:
        choice = body["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ProviderError(
            "malformed response body: no choices[0].message.content", retryable=True
        ) from None
    if not isinstance(text, str):
        raise ProviderError("malformed response body: empty message content", retryable=True)
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    usage = body.get("usage") or {}
    try:
        tokens = Usage(
            int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        )
    except (TypeError, ValueError, AttributeError):
        tokens = Usage()
    return Response(
        key=key,
        text=text,
        usage=tokens,
        finish_reason=finish if isinstance(finish, str) else None,
        system_fingerprint=served_by(body, asked),
    )
