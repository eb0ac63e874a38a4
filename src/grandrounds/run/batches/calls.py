"""What the store keeps of a batched call: the request JSON marked ``"batch": true`` (billed at
batch prices), that JSON read back as ``Store.put_call`` reads a request (for results nobody in
this process asked for), and the stored reason of a context overflow."""

from __future__ import annotations

import json
from dataclasses import dataclass

from grandrounds.core.records import Request
from grandrounds.providers.base import ProviderError
from grandrounds.providers.openai_compat import context_message
from grandrounds.run.executor import overflow_advice


def marked_request(request: Request) -> str:
    """The request's canonical JSON with ``"batch": true`` added (stored with the call: billed at
    batch prices). The key is still the request's own."""
    data = json.loads(request.canonical())
    data["batch"] = True
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, kw_only=True)
class MarkedRequest:
    """What ``Store.put_call`` reads of a request, from the JSON kept with a batch."""

    provider: str
    model: str
    purpose: str
    json_text: str
    key_text: str

    def canonical(self) -> str:
        return self.json_text

    def key(self) -> str:
        return self.key_text

    @classmethod
    def of(cls, key: str, request_json: str) -> MarkedRequest:
        data = json.loads(request_json)
        return cls(
            provider=str(data.get("provider", "")),
            model=str(data.get("model", "")),
            purpose=str(data.get("purpose", "answer")),
            json_text=request_json,
            key_text=key,
        )

    @classmethod
    def from_request(cls, request: Request) -> MarkedRequest:
        return cls(
            provider=request.provider,
            model=request.model,
            purpose=request.purpose,
            json_text=marked_request(request),
            key_text=request.key(),
        )


def context_reason(err: ProviderError, request_json: str, max_tokens: int | None = None) -> str:
    """A context overflow's stored reason, with the max_tokens sent (``max_tokens``, else the
    request's) and the flag to lower, as the live executor says it."""
    params = json.loads(request_json)
    if max_tokens is None:
        max_tokens = (params.get("params") or {}).get("max_tokens")
    advice = overflow_advice(
        str(params.get("kind", "chat")), str(params.get("purpose", "answer")), err
    )
    return f"{context_message(err.context_limit, err.prompt_tokens, max_tokens)}: {advice}"
