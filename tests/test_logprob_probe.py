"""Log-probabilities that are right or refused: a stand-in completions server with a known table of
log-probabilities, correct or with llama-cpp-python's faults (an echo shifted by one token, a token
left out of the echo, ``max_tokens: 0`` read as "no limit"). A faulty echo is refused before any
answer, with the reason and what works instead; a correct one scores exactly the table's figures."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import GenParams, Message, Request
from grandrounds.providers.base import ModelSpec
from grandrounds.providers.openai_compat import OpenAIProvider
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer, Raw

#: The characters the stand-in model generates from (it is a character-level model).
GENERATES = " abcdefghijklmnopqrstuvwxyz"


def lp(prefix: str, token: str) -> float:
    """The stand-in model's log-probability of ``token`` after ``prefix`` (a fixed table, by hash)."""
    h = int.from_bytes(hashlib.sha256((prefix[-4:] + "\x00" + token).encode()).digest()[:4], "big")
    return -(0.25 + (h % 1000) / 250.0)


def greedy(prefix: str) -> str:
    return max(GENERATES, key=lambda t: lp(prefix, t))


def expected(context: str, continuation: str) -> float:
    """The continuation's log-likelihood from the table: what an in-process evaluation gives."""
    full = context + continuation
    return sum(lp(full[:i], full[i]) for i in range(len(context), len(full)))


def stand_in(faults: frozenset[str] = frozenset()):
    """A completions endpoint over the table; ``faults``: ``shift``, ``drop``, ``max0``."""

    def rule(body: dict[str, Any]) -> Raw | str:
        if "prompt" not in body:
            return "A"
        prompt, asked = str(body["prompt"]), int(body.get("max_tokens", 16))
        n_gen = 5 if asked == 0 and "max0" in faults else asked
        text = prompt
        for _ in range(n_gen):
            text += greedy(text)
        tokens = list(text)
        values: list[float | None] = [None] + [lp(text[:i], text[i]) for i in range(1, len(text))]
        offsets = list(range(len(text)))
        if (
            "shift" in faults
        ):  # each echoed prompt token read off the next position's row: log P(t_i | t_0..t_i)
            values = (
                [None]
                + [lp(text[: i + 1], text[i]) for i in range(1, len(prompt))]
                + values[len(prompt) :]
            )
        if "drop" in faults and len(prompt) > 1:  # one prompt token left out of the echo
            k = len(prompt) - 1
            del tokens[k], values[k], offsets[k]
        logprobs = {
            "tokens": tokens,
            "token_logprobs": values,
            "text_offset": offsets,
            "top_logprobs": None,
        }
        return Raw(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": body.get("model"),
                "choices": [
                    {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}
                ],
            }
        )

    return rule


def _provider(server: LoopbackServer) -> OpenAIProvider:
    return OpenAIProvider(ModelSpec("openai", "standin", server.base_url))


async def _scores(
    provider: OpenAIProvider, context: str, conts: tuple[str, ...]
) -> dict[str, float]:
    try:
        req = Request(
            provider="openai",
            model="standin",
            messages=(Message("user", context),),
            params=GenParams(),
            kind="loglikelihood",
            continuations=conts,
        )
        return dict((await provider.call(req)).scores or {})
    finally:
        await provider.aclose()


async def _probe(provider: OpenAIProvider, kind: str = "loglikelihood") -> bool:
    try:
        return await provider.check_logprobs(kind)
    finally:
        await provider.aclose()


def test_a_correct_server_passes_and_scores_the_tables_figures() -> None:
    context, conts = "Question: which? Answer:", (" A", " B", " C", " D")
    with LoopbackServer(stand_in(), keep_bodies=True) as srv:
        assert asyncio.run(_probe(_provider(srv))) is True
        scores = asyncio.run(_scores(_provider(srv), context, conts))
    for c in conts:
        assert scores[c] == pytest.approx(expected(context, c), abs=1e-6)
    assert all(b.get("max_tokens") == 1 for b in srv.stats.bodies)  # never 0


@pytest.mark.parametrize(
    "faults, reason",
    [
        ({"shift"}, "shifted by one token"),
        ({"drop"}, "a token left out"),
        ({"shift", "drop", "max0"}, "a token left out"),
    ],
)
def test_llama_cpp_python_faults_are_refused_with_the_reason(faults: set[str], reason: str) -> None:
    with LoopbackServer(stand_in(frozenset(faults))) as srv:
        with pytest.raises(ConfigError, match=reason) as err:
            asyncio.run(_probe(_provider(srv)))
    assert "llamacpp/" in str(err.value) and "--answer-mode generate" in str(err.value)


def test_max_tokens_zero_as_no_limit_does_no_harm_as_one_is_sent() -> None:
    """The stand-in generates 5 tokens when sent 0; grandrounds sends 1 and sums the prompt's own tokens."""
    context, conts = "Pick one:", (" x", " yy")
    with LoopbackServer(stand_in(frozenset({"max0"}))) as srv:
        assert asyncio.run(_probe(_provider(srv))) is True
        scores = asyncio.run(_scores(_provider(srv), context, conts))
    assert scores == pytest.approx({c: expected(context, c) for c in conts}, abs=1e-6)


def test_a_next_token_run_on_a_server_without_echo_is_not_checked_but_a_loglik_run_is_refused() -> (
    None
):
    with LoopbackServer(lambda body: "A") as srv:  # completions without logprobs
        assert asyncio.run(_probe(_provider(srv), "next_token")) is False
        with pytest.raises(ConfigError, match="no echoed log-probabilities"):
            asyncio.run(_probe(_provider(srv), "loglikelihood"))


def test_the_run_is_refused_before_any_answer(tmp_path: Path) -> None:
    with LoopbackServer(stand_in(frozenset({"shift"}))) as srv, Store(tmp_path / "s.db") as st:
        cfg = RunConfig(
            benchmark="demo",
            model="openai/standin",
            base_url=srv.base_url,
            options=RunOptions(answer_mode="letter-loglik"),
        )
        with pytest.raises(ConfigError, match="shifted by one token"):
            asyncio.run(run(st, cfg))
        assert srv.stats.requests == 2  # the probe's two questions, and no answer
