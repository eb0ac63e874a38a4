"""A context overflow's hint names only what can help, and a call whose prompt alone is over the
context is stored as final: a re-run takes its failure from the store instead of asking again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from grandrounds.cli.common import NOTHING_SCORED
from grandrounds.core.records import GenParams, Message, Request, Response
from grandrounds.providers.base import ModelSpec, Provider, ProviderError
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.test_real_use import calls, healthbench_rows, invoke


def overflow(n_ctx: int, prompt_tokens: int):
    """Every request overflows as llama.cpp's server says it, with its prompt of ``prompt_tokens``."""

    def rule(body: dict[str, Any]) -> Any:
        if prompt_tokens + int(body.get("max_tokens") or 0) > n_ctx:
            return Fault(
                "400",
                body={
                    "error": {
                        "code": 400,
                        "message": "the request exceeds the available context size, try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": prompt_tokens,
                        "n_ctx": n_ctx,
                    }
                },
            )
        return "fine"

    return rule


def run_twice(tmp_path: Path, rule: Any) -> tuple[Any, Any, int, int]:
    data, _ = healthbench_rows(1)
    db = tmp_path / "s.db"
    args = (
        "run",
        "healthbench",
        "--data",
        str(data),
        "--limit",
        "1",
        "--model",
        "openai/cand",
        "--judge",
        "openai/j",
        "--store",
        str(db),
        "--protocol",
        "grandrounds",
        "--max-tokens",
        "2000",
    )
    with LoopbackServer(rule) as srv:
        first = invoke(*args, "--base-url", srv.base_url, "--judge-base-url", srv.base_url)
        asked_first = srv.stats.requests
        second = invoke(*args, "--base-url", srv.base_url, "--judge-base-url", srv.base_url)
        return first, second, asked_first, srv.stats.requests - asked_first


def test_a_prompt_over_the_context_is_not_suggested_max_tokens_and_not_asked_again(
    tmp_path: Path,
) -> None:
    first, second, asked_first, asked_again = run_twice(tmp_path, overflow(4096, 5000))
    assert first.exit_code == second.exit_code == NOTHING_SCORED
    assert asked_first == 1 and asked_again == 0, "the impossible call is not asked again on re-run"
    (answer,) = calls(tmp_path / "s.db", "answer")
    assert answer["finish_reason"] == "context_length" and answer["attempts"] == 1
    assert (
        "the prompt alone is over the model's context (5000 tokens, context 4096)"
        in answer["error"]
    )
    assert (
        "--max-tokens" not in answer["error"] and "--max-tokens" not in first.output + second.output
    )
    assert "0 calls made, 1 from the store, 1 failed" not in second.output
    assert (
        "1 failed as before (the prompt alone is over the model's context: not asked again)"
        in second.output
    )


def test_an_overflow_that_a_smaller_max_tokens_mends_is_hinted_so_and_asked_again(
    tmp_path: Path,
) -> None:
    first, second, asked_first, asked_again = run_twice(tmp_path, overflow(4096, 3000))
    assert asked_first == 1 and asked_again == 1, (
        "not final: a re-run (perhaps with a smaller --max-tokens) asks again"
    )
    (answer,) = calls(tmp_path / "s.db", "answer")
    assert answer["finish_reason"] is None
    assert answer["error"].endswith("lower --max-tokens or serve the model with a larger context")


class Overflowing(Provider):
    request_kinds = frozenset({"chat", "loglikelihood"})

    def __init__(self) -> None:
        super().__init__(ModelSpec("fake", "m"))
        self.calls = 0

    async def call(self, request: Request) -> Response:
        self.calls += 1
        raise ProviderError(
            "context exceeded: the prompt + max_tokens 0 (the server gave no sizes)",
            retryable=False,
            kind="context_length",
        )


def test_a_log_likelihood_request_over_the_context_is_final_without_numbers(tmp_path: Path) -> None:
    """A log-likelihood request generates nothing: only its prompt can overflow, whatever the server says."""
    provider = Overflowing()
    req = Request(
        provider="fake",
        model="m",
        messages=(Message("user", "long context"),),
        params=GenParams(),
        kind="loglikelihood",
        continuations=(" A", " B"),
    )

    async def ask() -> tuple[Response, int]:
        with Store(tmp_path / "s.db") as st:
            ex = Executor(st, provider, 1, RetryPolicy(3, 0.001, 0.001))
            return await ex(req), ex.stats.final

    out, final = asyncio.run(ask())
    assert (
        not out.ok
        and out.finish_reason == "context_length"
        and "--max-tokens" not in (out.error or "")
    )
    assert provider.calls == 1 and final == 0, "not retried: asking again cannot help"
    again, final = asyncio.run(ask())
    assert provider.calls == 1 and again.error == out.error and final == 1, (
        "taken from the store, not asked again"
    )
