"""The Anthropic provider against a loopback server speaking the Messages API: what it sends, how it
reads replies and stop reasons, how it classifies failures, and that the key stays out of the store."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import GenParams, Message, Request
from grandrounds.providers.anthropic import (
    DEFAULT_BASE_URL,
    AnthropicProvider,
    message_body,
    read_message,
)
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.store import Store
from grandrounds.testing import Fault, Reply, last_user_text
from grandrounds.testing.batch import BatchServer
from tests.conftest import offline_env
from tests.test_resume_and_bad_input import ROOT

KEY = "sk-ant-test-5d1c9e7a3b2f4c6e8a0b"
MSGS = (
    Message("system", "You are a careful physician."),
    Message("system", "Answer with one letter."),
    Message("user", "Which drug reverses heparin? A. Vitamin K B. Protamine"),
    Message("assistant", "Let me think."),
    Message("user", "Answer now."),
)


def provider(url: str, **options) -> AnthropicProvider:
    return AnthropicProvider(ModelSpec("anthropic", "claude-test", url), **options)


def call(p: AnthropicProvider, request: Request):
    async def go():
        try:
            return await p.call(request)
        finally:
            await p.aclose()

    return asyncio.run(go())


def req(p: AnthropicProvider, messages=MSGS, **params) -> Request:
    return Request(
        provider="anthropic",
        model="claude-test",
        messages=messages,
        params=GenParams(**params),
        base_url=p.request_base_url(),
    )


def test_request_shape_system_top_level_headers_and_params(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with BatchServer(lambda b: "B") as srv:
        p = provider(srv.anthropic_url)
        out = call(
            p,
            req(
                p,
                temperature=0.4,
                max_tokens=33,
                top_p=0.9,
                stop=("\n\n",),
                seed=7,
                json_object=True,
            ),
        )
        body, headers = srv.stats.live_bodies[0], srv.stats.headers[0]
    assert out.ok and out.text == "B" and out.finish_reason == "stop" and not out.truncated
    assert body["system"] == "You are a careful physician.\n\nAnswer with one letter."
    assert body["messages"] == [
        {"role": "user", "content": MSGS[2].content},
        {"role": "assistant", "content": "Let me think."},
        {"role": "user", "content": "Answer now."},
    ]
    assert (
        body["model"],
        body["temperature"],
        body["max_tokens"],
        body["top_p"],
        body["stop_sequences"],
    ) == ("claude-test", 0.4, 33, 0.9, ["\n\n"])
    assert "seed" not in body and "response_format" not in body  # the Messages API has neither
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert srv.stats.headers[0]["content-type"].startswith("application/json")


def test_no_system_field_without_system_messages_and_no_top_p_unless_set(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    body = message_body(
        "m", Request(provider="anthropic", model="m", messages=(Message("user", "hi"),))
    )
    assert "system" not in body and "top_p" not in body and "stop_sequences" not in body
    assert body == {
        "model": "m",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
    }


@pytest.mark.parametrize(
    "stop_reason,finish,truncated",
    [
        ("end_turn", "stop", False),
        ("stop_sequence", "stop", False),
        ("max_tokens", "max_tokens", True),
        ("model_context_window_exceeded", "length", True),
        ("refusal", "refusal", False),
        ("pause_turn", "pause_turn", False),
    ],
)
def test_stop_reasons_map_to_finish_reason_and_truncation(
    monkeypatch, stop_reason, finish, truncated
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with BatchServer(lambda b: Reply(text="cut off mid", finish_reason=stop_reason)) as srv:
        p = provider(srv.anthropic_url)
        out = call(p, req(p))
    assert out.finish_reason == finish and out.truncated is truncated


def test_reply_text_blocks_joined_and_usage_counts_cached_input():
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "stop_reason": "end_turn",
        "content": [
            {"type": "thinking", "thinking": "hidden", "signature": "x"},
            {"type": "text", "text": "Protamine "},
            {"type": "text", "text": "sulfate."},
        ],
        "usage": {
            "input_tokens": 11,
            "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 100,
            "output_tokens": 3,
        },
    }
    out = read_message(message, "k")
    assert (
        out.text == "Protamine sulfate."
        and out.usage.prompt_tokens == 116
        and out.usage.completion_tokens == 3
    )
    with pytest.raises(ProviderError) as err:
        read_message({"type": "message"}, "k")
    assert err.value.retryable


@pytest.mark.parametrize(
    "fault,retryable,label",
    [
        (Fault("429", retry_after=3.0), True, "429 rate limited"),
        (Fault("529", retry_after=1.5), True, "529 overloaded"),
        (Fault("500"), True, "HTTP 500"),
        (Fault("400"), False, "HTTP 400"),
    ],
)
def test_errors_are_classified(monkeypatch, fault, retryable, label):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with BatchServer(lambda b: fault) as srv:
        p = provider(srv.anthropic_url)
        with pytest.raises(ProviderError) as err:
            call(p, req(p))
    assert err.value.retryable is retryable and str(err.value).startswith(label)
    assert err.value.retry_after == (fault.retry_after if fault.kind in ("429", "529") else None)
    # 429 and 529 are congestion for the adaptive window, as OpenAI-compatible 429 and 503 are
    assert err.value.kind == {"429": "rate_limited", "529": "overloaded"}.get(fault.kind)


def _overflow(message: str) -> Fault:
    return Fault(
        "400",
        body={"type": "error", "error": {"type": "invalid_request_error", "message": message}},
    )


@pytest.mark.parametrize(
    "message,limit,prompt",
    [
        ("prompt is too long: 5000 tokens > 4096 maximum", 4096, 5000),
        (
            "input length and `max_tokens` exceed context limit: 3000 + 2000 > 4096, decrease input length or `max_tokens` and try again",
            4096,
            3000,
        ),
    ],
)
def test_context_overflow_is_classified_with_its_sizes(monkeypatch, message, limit, prompt):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with BatchServer(lambda b: _overflow(message)) as srv:
        p = provider(srv.anthropic_url)
        with pytest.raises(ProviderError) as err:
            call(p, req(p, max_tokens=2000))
    e = err.value
    assert (e.kind, e.context_limit, e.prompt_tokens, e.retryable) == (
        "context_length",
        limit,
        prompt,
        False,
    )
    assert str(e) == f"context {limit} exceeded: prompt {prompt} + max_tokens 2000"


def test_a_judge_that_overflows_is_asked_again_with_max_tokens_that_fit(monkeypatch, tmp_path):
    """The executor's shrink-to-fit works on Anthropic's wording as on the OpenAI path."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)

    def rule(body):
        if 3000 + body["max_tokens"] > 4096:
            return _overflow(
                f"input length and `max_tokens` exceed context limit: 3000 + {body['max_tokens']} > 4096, decrease ..."
            )
        return "met"

    with BatchServer(rule) as srv, Store(tmp_path / "s.db") as st:
        p = provider(srv.anthropic_url)

        async def go():
            ex = Executor(st, p, retry=RetryPolicy(max_attempts=2, base_delay=0.0))
            try:
                return await ex(
                    Request(
                        provider="anthropic",
                        model="claude-test",
                        messages=MSGS,
                        params=GenParams(max_tokens=2000),
                        purpose="judge",
                    )
                ), ex
            finally:
                await p.aclose()

        out, ex = asyncio.run(go())
        sent = [b["max_tokens"] for b in srv.stats.live_bodies]
    assert out.ok and out.text == "met" and ex.stats.shrunk == 1
    assert sent == [2000, 4096 - 3000 - 16]


def test_key_from_environment_required_for_anthropic_but_not_for_a_gateway(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="set ANTHROPIC_API_KEY"):
        AnthropicProvider(ModelSpec("anthropic", "m"))
    gateway = AnthropicProvider(ModelSpec("anthropic", "m", "http://127.0.0.1:9/anthropic/v1/"))
    assert (
        gateway.spec.base_url == "http://127.0.0.1:9/anthropic"
    )  # a trailing /v1 is dropped: paths add it
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/proxy")
    assert (
        AnthropicProvider(ModelSpec("anthropic", "m")).spec.base_url == "http://127.0.0.1:9/proxy"
    )
    monkeypatch.setenv("OTHER_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert (
        AnthropicProvider(ModelSpec("anthropic", "m"), api_key_env="OTHER_KEY").spec.base_url
        == DEFAULT_BASE_URL
    )


def test_a_dry_run_needs_no_key_and_the_run_still_does(tmp_path, monkeypatch):
    """The cost preview of an Anthropic candidate and judge works before any key is set (nothing
    is sent); the run itself still refuses to start without one, before any call."""
    from typer.testing import CliRunner

    from grandrounds.cli.main import app

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    args = [
        "run",
        "demo",
        "--model",
        "anthropic/claude-sonnet-4-5",
        "--store",
        str(tmp_path / "s.db"),
    ]
    r = CliRunner().invoke(
        app, [*args, "--dry-run", "--out", str(tmp_path / "plan")], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 0, r.output
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text(encoding="utf-8"))
    assert (
        plan["lines"][0]["model"] == "anthropic/claude-sonnet-4-5"
        and plan["lines"][0]["to_make"] == 12
    )
    assert plan["cost_usd"] is not None and plan["cost_usd"] > 0  # priced from the packaged table
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code != 0 and "set ANTHROPIC_API_KEY to the Anthropic API key" in " ".join(
        r.output.split()
    )
    # and a provider made outside a dry run still insists
    with pytest.raises(ConfigError, match="set ANTHROPIC_API_KEY"):
        AnthropicProvider(ModelSpec("anthropic", "m"))


def test_a_key_echoed_in_an_error_is_redacted(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with BatchServer(
        lambda b: Fault(
            "400",
            body={
                "type": "error",
                "error": {"type": "authentication_error", "message": f"invalid x-api-key: {KEY}"},
            },
        )
    ) as srv:
        p = provider(srv.anthropic_url)
        with pytest.raises(ProviderError) as err:
            call(p, req(p))
    assert KEY not in str(err.value) and "[redacted]" in str(err.value)


def test_demo_exam_through_the_cli_with_an_anthropic_model(tmp_path):
    """A whole run as a user types it: answers read, truncated replies counted, the key nowhere on disk."""

    def rule(body):
        assert "system" not in body or isinstance(body["system"], str)
        text = last_user_text(body)
        return (
            Reply(text="Answer: A", finish_reason="max_tokens")
            if "heart" in text.lower()
            else "Answer: A"
        )

    db = tmp_path / "s.db"
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "ANTHROPIC_API_KEY": KEY,
        **offline_env(),
    }
    with BatchServer(rule) as srv:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "grandrounds",
                "run",
                "demo",
                "--model",
                "anthropic/claude-test",
                "--base-url",
                srv.anthropic_url,
                "--protocol",
                "grandrounds",
                "--store",
                str(db),
                "--out",
                str(tmp_path / "out"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert srv.stats.live == 12 and {h.get("x-api-key") for h in srv.stats.headers} == {KEY}
        truncated = sum(1 for b in srv.stats.live_bodies if "heart" in last_user_text(b).lower())
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert truncated == 2
    assert (
        res["model"] == "anthropic/claude-test"
        and res["n"] == 12
        and res["extra"]["n_truncated"] == truncated
    )
    blobs = [r.stdout, r.stderr] + [
        p.read_bytes().decode("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()
    ]
    assert all(KEY not in b for b in blobs)
