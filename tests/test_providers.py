"""The OpenAI-compatible provider against a real loopback server: what it sends and how it reads replies."""

from __future__ import annotations

import asyncio

import pytest

from grandrounds.core.records import GenParams, Message, Request
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.providers.openai_compat import OpenAIProvider
from grandrounds.testing import Fault, LoopbackServer


def call(provider: OpenAIProvider, request: Request):
    """One call and the provider's close in the same event loop, as the runner does."""

    async def go():
        try:
            return await provider.call(request)
        finally:
            await provider.aclose()

    return asyncio.run(go())


MSGS = (
    Message("system", "Be brief."),
    Message("user", "Which organ pumps blood? A. liver B. heart"),
)


def test_chat_body_params_and_json_mode():
    with LoopbackServer(lambda b: "B", keep_bodies=True) as srv:
        p = OpenAIProvider(ModelSpec("openai", "m", srv.base_url))
        params = GenParams(
            temperature=0.3, max_tokens=17, seed=5, top_p=0.9, stop=("\n",), json_object=True
        )
        out = call(
            p,
            Request(
                provider="openai", model="m", messages=MSGS, params=params, base_url=srv.base_url
            ),
        )
        body = srv.stats.bodies[0]
    assert out.ok and out.text == "B" and out.usage.completion_tokens == 1
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": MSGS[1].content},
    ]
    assert (
        body["model"],
        body["temperature"],
        body["max_tokens"],
        body["seed"],
        body["top_p"],
        body["stop"],
    ) == ("m", 0.3, 17, 5, 0.9, ["\n"])
    assert body["response_format"] == {"type": "json_object"}


def test_json_mode_is_part_of_the_cache_key():
    a = Request(provider="openai", model="m", messages=MSGS)
    b = Request(provider="openai", model="m", messages=MSGS, params=GenParams(json_object=True))
    assert (
        a.key() != b.key() and a.key() == Request(provider="openai", model="m", messages=MSGS).key()
    )


def test_next_token_scores_from_top_logprobs():
    with LoopbackServer(lambda b: "C", keep_bodies=True) as srv:
        p = OpenAIProvider(ModelSpec("openai", "m", srv.base_url))
        req = Request(
            provider="openai",
            model="m",
            messages=MSGS,
            kind="next_token",
            continuations=("A", "B", "C", "D"),
        )
        out = call(p, req)
        body = srv.stats.bodies[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
    assert max(out.scores, key=out.scores.get) == "C" and set(out.scores) == {"A", "B", "C", "D"}


@pytest.mark.parametrize(
    "kind,retryable", [("429", True), ("500", True), ("drop", True), ("malformed", True)]
)
def test_faults_are_classified(kind, retryable):
    with LoopbackServer(lambda b: Fault(kind, retry_after=2.5)) as srv:
        p = OpenAIProvider(ModelSpec("openai", "m", srv.base_url), timeout=5)
        with pytest.raises(ProviderError) as err:
            call(p, Request(provider="openai", model="m", messages=MSGS))
    assert err.value.retryable is retryable
    if kind == "429":
        assert err.value.retry_after == 2.5


def test_client_error_is_final():
    def rule(body):
        raise ValueError("this request is malformed")  # the server answers 400

    with LoopbackServer(rule) as srv:
        p = OpenAIProvider(ModelSpec("openai", "m", srv.base_url))
        with pytest.raises(ProviderError) as err:
            call(p, Request(provider="openai", model="m", messages=MSGS))
    assert err.value.retryable is False and "400" in str(err.value)
