"""The OpenAI-compatible provider and its HTTP transport, against real servers on 127.0.0.1.

tests/test_providers.py covers the request body, json mode, next-token scores and the four
faults grandrounds.testing.LoopbackServer injects. Here a scriptable HTTP/1.1 server adds what
that one cannot do: any status code and header, non-JSON and oddly shaped bodies, chunked
replies, closed keep-alive connections, slow replies, path prefixes, and what the client sends
(path, Authorization). Hostile servers (endless streams, huge headers, secrets echoed back) are
in tests/test_security_endpoints.py. Nothing touches any address beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import GenParams, Message, Request
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.providers.openai_compat import DEFAULT_BASE_URL, OpenAIProvider
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer

MSGS = (
    Message("system", "Answer with one letter."),
    Message("user", "Which drug reverses heparin? A. Vitamin K B. Protamine"),
)


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list -> JSON; bytes -> sent as-is
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    close_after: bool = False  # close the socket after replying, without saying so
    delay: float = 0.0


def chat_body(text: str | None = "B", usage: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    if usage is not None:
        out["usage"] = usage
    return out


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptServer:
    """ThreadingHTTPServer on 127.0.0.1 answering every POST with ``script(seen) -> Reply``."""

    def __init__(self, script: Callable[[Seen], Reply]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.connections = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with outer._lock:
                    outer.connections += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                seen = Seen(
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw or b"{}"),
                )
                with outer._lock:
                    outer.seen.append(seen)
                reply = outer.script(seen)
                if reply.delay:
                    time.sleep(reply.delay)
                data = (
                    reply.body
                    if isinstance(reply.body, bytes)
                    else json.dumps(reply.body).encode("utf-8")
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    if reply.chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for i in range(0, len(data), 7):  # many small chunks
                            part = data[i : i + 7]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                if reply.close_after:
                    self.close_connection = True

        class Server(ThreadingHTTPServer):
            request_queue_size = (
                128  # the default backlog of 5 refuses bursts of concurrent connects
            )

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def url(self, prefix: str = "/v1") -> str:
        return f"http://127.0.0.1:{self.port}{prefix}"

    def __enter__(self) -> ScriptServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


@pytest.fixture(autouse=True)
def _no_proxy_no_env(monkeypatch):
    """Loopback requests must go straight to the server; no ambient key or base URL leaks in."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def calls(provider: OpenAIProvider, *requests: Request) -> list:
    """Each request in turn (exceptions returned, not raised), then close, in one event loop."""

    async def go():
        out = []
        try:
            for r in requests:
                try:
                    out.append(await provider.call(r))
                except ProviderError as e:
                    out.append(e)
        finally:
            await provider.aclose()
        return out

    return asyncio.run(go())


def one(provider: OpenAIProvider, request: Request | None = None):
    return calls(provider, request or chat())[0]


def chat(**kw) -> Request:
    return Request(provider="openai", model="m", messages=MSGS, **kw)


def provider_for(url: str, **kw) -> OpenAIProvider:
    return OpenAIProvider(ModelSpec("openai", "m", url), **kw)


# ---- status codes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status,retryable",
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
    ],
)
def test_status_codes_map_to_retryable_or_final(status, retryable):
    body = {"error": {"message": f"server says {status}", "type": "x"}}
    with ScriptServer(lambda s: Reply(status, body)) as srv:
        err = one(provider_for(srv.url()))
    assert isinstance(err, ProviderError)
    assert err.retryable is retryable
    assert str(status) in str(err)
    assert f"server says {status}" in str(err)
    if status == 429:
        assert str(err).startswith("429 rate limited")
    else:
        assert str(err).startswith(f"HTTP {status}")


@pytest.mark.parametrize(
    "status,header,want", [(429, "3", 3.0), (429, "0.5", 0.5), (503, "7", 7.0)]
)
def test_retry_after_header_is_read(status, header, want):
    with ScriptServer(
        lambda s: Reply(status, {"error": {"message": "busy"}}, {"Retry-After": header})
    ) as srv:
        err = one(provider_for(srv.url()))
    assert isinstance(err, ProviderError) and err.retryable
    assert err.retry_after == pytest.approx(want)


def test_retry_after_as_http_date_or_absent_is_none():
    replies = [
        Reply(
            429, {"error": {"message": "slow"}}, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}
        ),
        Reply(429, {"error": {"message": "slow"}}),
    ]
    with ScriptServer(lambda s: replies[len(srv.seen) - 1]) as srv:
        errs = calls(provider_for(srv.url()), chat(), chat())
    assert [e.retry_after for e in errs] == [None, None]
    assert all(e.retryable for e in errs)


def test_error_body_that_is_not_json_still_gives_a_classified_error():
    html = b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"
    with ScriptServer(lambda s: Reply(502, html, {"Content-Type": "text/html"})) as srv:
        err = one(provider_for(srv.url()))
    assert isinstance(err, ProviderError) and err.retryable
    assert "502" in str(err)


@pytest.mark.parametrize(
    "status,body",
    [
        (
            400,
            {
                "error": {
                    "message": "model 'm' does not support logit_bias",
                    "type": "invalid_request_error",
                }
            },
        ),
        (
            400,
            {
                "object": "error",
                "message": "model 'm' does not support logit_bias",
                "type": "BadRequestError",
                "code": 400,
            },
        ),
        (404, {"error": "model 'm' does not support logit_bias"}),
        (422, {"detail": "model 'm' does not support logit_bias"}),
    ],
    ids=["nested", "flat", "string", "detail"],
)
def test_the_servers_reason_reaches_the_error_message(status, body):
    with ScriptServer(lambda s: Reply(status, body)) as srv:
        err = one(provider_for(srv.url()))
    assert isinstance(err, ProviderError) and err.retryable is False and err.kind is None
    assert str(err) == f"HTTP {status}: model 'm' does not support logit_bias"


# ---- context-length overflow --------------------------------------------------------------------

OVERFLOWS = {
    # name: (status, body, context limit, prompt tokens)
    "openai-split": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                "(3000 in the messages, 2000 in the completion). Please reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
        4096,
        3000,
    ),
    "openai-messages": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                "9000 tokens. Please reduce the length of the messages.",
                "code": "context_length_exceeded",
            }
        },
        8192,
        9000,
    ),
    "openai-code-only": (
        400,
        {
            "error": {
                "message": "Your input exceeds the context window of this model.",
                "code": "context_length_exceeded",
            }
        },
        None,
        None,
    ),
    "vllm-at-least": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested 2000 output "
            "tokens and your prompt contains at least 3001 input tokens, for a total of at least 5001 tokens. Please reduce the "
            "length of the input prompt or the number of requested output tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
        4096,
        3001,
    ),
    "vllm-max-tokens": (
        400,
        {
            "error": {
                "message": "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context "
                "length is 4096 tokens and your request has 3000 input tokens (2000 > 4096 - 3000). None",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
        4096,
        3000,
    ),
    "llamacpp-fields": (
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 5000,
                "n_ctx": 4096,
            }
        },
        4096,
        5000,
    ),
    "llamacpp-numbers": (
        400,
        {
            "error": {
                "code": 400,
                "message": "request (5000 tokens) exceeds the available context size (4096 tokens)",
                "type": "exceed_context_size_error",
            }
        },
        4096,
        5000,
    ),
    "llamacpp-bare": (
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "invalid_request_error",
            }
        },
        None,
        None,
    ),
    "sglang-total": (
        400,
        {
            "object": "error",
            "message": "Requested token count exceeds the model's maximum context length of 4096 tokens. "
            "You requested a total of 5000 tokens: 3000 tokens from the input messages and 2000 tokens for the completion. "
            "Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        4096,
        3000,
    ),
    "sglang-input": (
        400,
        {
            "object": "error",
            "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
            "type": "BadRequestError",
            "code": 400,
        },
        4096,
        5000,
    ),
    "tgi": (
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 3000 `inputs` tokens and "
            "2000 `max_new_tokens`",
            "error_type": "validation",
        },
        4096,
        3000,
    ),
    "prompt-too-long": (
        400,
        {
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 5000 tokens > 4096 maximum",
            }
        },
        4096,
        5000,
    ),
}


@pytest.mark.parametrize("name", list(OVERFLOWS))
def test_a_context_overflow_is_final_with_its_numbers(name):
    status, body, limit, prompt = OVERFLOWS[name]
    with ScriptServer(lambda s: Reply(status, body)) as srv:
        err = one(provider_for(srv.url()), chat(params=GenParams(max_tokens=2000)))
    assert isinstance(err, ProviderError), err
    assert (err.kind, err.retryable, err.context_limit, err.prompt_tokens) == (
        "context_length",
        False,
        limit,
        prompt,
    )
    ctx = f"context {limit}" if limit else "context"
    asked = f"prompt {prompt}" if prompt else "the prompt"
    tail = " (the server gave no sizes)" if limit is None and prompt is None else ""
    assert str(err) == f"{ctx} exceeded: {asked} + max_tokens 2000{tail}"


def test_other_client_errors_are_not_taken_for_an_overflow():
    for body in (
        {"error": {"message": "max_tokens must be at least 1, got 0.", "code": 400}},
        {
            "error": {
                "message": "Invalid 'messages': the context field is not allowed",
                "type": "invalid_request_error",
            }
        },
    ):
        with ScriptServer(lambda s: Reply(400, body)) as srv:
            err = one(provider_for(srv.url()))
        assert isinstance(err, ProviderError) and err.kind is None and err.context_limit is None
        assert str(err).startswith("HTTP 400: ")


# ---- malformed success bodies -----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "x", "choices": [{"mess',  # truncated JSON
        b"not json at all",
        [{"choices": []}],  # a JSON array, not an object
        {"choices": []},
        {"id": "no choices"},
        {"choices": [{"index": 0}]},
        {"choices": [{"message": {"role": "assistant", "content": None}}]},
        {"choices": [{"message": {"role": "assistant", "content": 42}}]},
        {"choices": "oops"},
    ],
    ids=[
        "truncated",
        "text",
        "array",
        "empty-choices",
        "no-choices",
        "no-message",
        "null-content",
        "int-content",
        "choices-str",
    ],
)
def test_malformed_success_bodies_are_retryable_errors(body):
    with ScriptServer(lambda s: Reply(200, body)) as srv:
        err = one(provider_for(srv.url()))
    assert isinstance(err, ProviderError), f"got {err!r}"
    assert err.retryable is True
    assert "malformed" in str(err)


def test_empty_string_content_is_a_valid_answer():
    with ScriptServer(lambda s: Reply(200, chat_body(""))) as srv:
        out = one(provider_for(srv.url()))
    assert out.ok and out.text == ""


# ---- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "usage,want",
    [
        ({"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168}, (123, 45)),
        ({"prompt_tokens": 7}, (7, 0)),
        (None, (0, 0)),
        ({"prompt_tokens": None, "completion_tokens": None}, (0, 0)),
        ({"prompt_tokens": "12", "completion_tokens": "3"}, (12, 3)),
        ({"prompt_tokens": "lots", "completion_tokens": 3}, (0, 0)),
        ("not a dict", (0, 0)),
    ],
)
def test_usage_tokens_are_read_leniently(usage, want):
    body = chat_body("B")
    if usage is not None:
        body["usage"] = usage
    with ScriptServer(lambda s: Reply(200, body)) as srv:
        out = one(provider_for(srv.url()))
    assert out.ok and out.text == "B"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == want


def test_latency_is_measured():
    with ScriptServer(lambda s: Reply(200, chat_body("B"), delay=0.15)) as srv:
        out = one(provider_for(srv.url()))
    assert 0.14 <= out.latency < 5.0


# ---- what is sent ------------------------------------------------------------------------------


def test_path_and_defaults_of_a_plain_chat_request():
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        out = one(provider_for(srv.url()))
        seen = srv.seen[0]
    assert out.text == "B"
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["content-type"].startswith("application/json")
    # GenParams defaults: temperature 0, 1024 tokens, seed 0; nothing optional is sent.
    assert (seen.body["temperature"], seen.body["max_tokens"], seen.body["seed"]) == (0.0, 1024, 0)
    for absent in ("response_format", "top_p", "stop", "logprobs", "top_logprobs"):
        assert absent not in seen.body


def test_seed_none_is_not_sent_and_json_object_is():
    with ScriptServer(lambda s: Reply(200, chat_body('{"criteria_met": true}'))) as srv:
        out = one(provider_for(srv.url()), chat(params=GenParams(seed=None, json_object=True)))
        body = srv.seen[0].body
    assert out.text == '{"criteria_met": true}'
    assert "seed" not in body
    assert body["response_format"] == {"type": "json_object"}


def test_non_ascii_messages_arrive_intact():
    msgs = (Message("user", "患者，男，45岁，发热３天。诊断？"),)
    with ScriptServer(lambda s: Reply(200, chat_body("肺炎"))) as srv:
        out = one(provider_for(srv.url()), Request(provider="openai", model="m", messages=msgs))
        body = srv.seen[0].body
    assert body["messages"] == [{"role": "user", "content": msgs[0].content}]
    assert out.text == "肺炎"


def test_api_key_from_environment_is_sent_as_bearer(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abc123")
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        one(provider_for(srv.url()))
        auth = srv.seen[0].headers.get("authorization")
    assert auth == "Bearer sk-test-abc123"


def test_api_key_env_option_names_another_variable(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    monkeypatch.setenv("MY_VENDOR_KEY", "vendor-key-9")
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        one(provider_for(srv.url(), api_key_env="MY_VENDOR_KEY"))
        auth = srv.seen[0].headers.get("authorization")
    assert auth == "Bearer vendor-key-9"


def test_without_a_key_a_placeholder_is_sent():
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        one(provider_for(srv.url()))
        auth = srv.seen[0].headers.get("authorization")
    assert auth == "Bearer EMPTY"


def test_api_key_never_reaches_the_store(tmp_path, monkeypatch):
    secret = "sk-live-DO-NOT-STORE-5f3c9a"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with LoopbackServer(lambda b: "B") as srv:
        provider = OpenAIProvider(ModelSpec("openai", "m", srv.base_url))
        store = Store(tmp_path / "s.db")
        ex = Executor(store, provider, retry=RetryPolicy(2, 0.001, 0.001))

        async def go():
            try:
                return await ex(
                    Request(
                        provider="openai",
                        model="m",
                        messages=MSGS,
                        base_url=provider.request_base_url(),
                    )
                )
            finally:
                await provider.aclose()

        out = asyncio.run(go())
        store.close()
        assert srv.stats.authorizations == {f"Bearer {secret}"}
    assert out.ok and out.text == "B"
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert secret.encode() not in blob


# ---- base URL ----------------------------------------------------------------------------------


def test_trailing_slash_is_removed_so_keys_do_not_split():
    a = OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:9/v1/"))
    b = OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:9/v1"))
    assert a.spec.base_url == b.spec.base_url == "http://127.0.0.1:9/v1"
    assert a.request_base_url() == b.request_base_url()
    assert a.endpoint == "http://127.0.0.1:9/v1"


def test_base_url_from_environment_when_spec_has_none(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:7/api/v1/")
    p = OpenAIProvider(ModelSpec("openai", "m"))
    assert p.spec.base_url == "http://127.0.0.1:7/api/v1"
    q = OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:8/v1"))
    assert q.spec.base_url == "http://127.0.0.1:8/v1", (
        "an explicit --base-url wins over the environment"
    )


def test_default_base_url_is_openai():
    p = OpenAIProvider(ModelSpec("openai", "gpt-4o-mini"))
    assert p.spec.base_url == DEFAULT_BASE_URL == "https://api.openai.com/v1"
    assert (p.spec.provider, p.spec.model) == ("openai", "gpt-4o-mini")
    asyncio.run(p.aclose())


@pytest.mark.parametrize("prefix", ["/v1", "/api/openai/v1", "/v1/"])
def test_path_prefix_of_base_url_is_kept(prefix):
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        out = one(provider_for(srv.url(prefix)))
        path = srv.seen[0].path
    assert out.ok
    assert path == prefix.rstrip("/") + "/chat/completions"


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8000/v1", "http:///v1"])
def test_a_base_url_that_is_not_http_is_a_config_error(url):
    with pytest.raises(ConfigError, match="must be http"):
        OpenAIProvider(ModelSpec("openai", "m", url))


# ---- next-token scoring ------------------------------------------------------------------------


def logprob_body(tops: list[tuple[str, float]]) -> dict[str, Any]:
    body = chat_body(tops[0][0] if tops else "")
    body["choices"][0]["logprobs"] = {
        "content": [
            {
                "token": tops[0][0] if tops else "",
                "logprob": tops[0][1] if tops else 0.0,
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in tops],
            }
        ]
    }
    return body


def test_next_token_scores_only_requested_continuations_that_appear():
    tops = [("B", -0.05), ("A", -3.2), ("The", -4.0), ("C", -6.5)]
    with ScriptServer(lambda s: Reply(200, logprob_body(tops))) as srv:
        req = chat(
            kind="next_token",
            continuations=("A", "B", "C", "D"),
            params=GenParams(temperature=0.7, max_tokens=300),
        )
        out = one(provider_for(srv.url()), req)
        body = srv.seen[0].body
    assert out.ok and out.text is None
    assert out.scores == {"A": -3.2, "B": -0.05, "C": -6.5}  # D is not among the top tokens
    # Scoring overrides generation settings: one token, greedy, 20 alternatives.
    assert (body["max_tokens"], body["temperature"], body["logprobs"], body["top_logprobs"]) == (
        1,
        0.0,
        True,
        20,
    )


def test_next_token_matches_tokens_with_leading_space():
    tops = [(" C", -0.3), (" A", -1.7)]
    with ScriptServer(lambda s: Reply(200, logprob_body(tops))) as srv:
        out = one(provider_for(srv.url()), chat(kind="next_token", continuations=("A", "C", " D")))
    assert out.scores == {"A": -1.7, "C": -0.3}


def test_next_token_takes_the_likelier_of_two_spellings():
    tops = [(" B", -0.2), ("A", -2.0), ("B", -5.0)]
    with ScriptServer(lambda s: Reply(200, logprob_body(tops))) as srv:
        out = one(provider_for(srv.url()), chat(kind="next_token", continuations=("A", "B")))
    assert out.scores["B"] == pytest.approx(-0.2)


@pytest.mark.parametrize("logprobs", [None, {"content": None}, {"content": []}])
def test_next_token_without_logprobs_is_a_final_error(logprobs):
    body = chat_body("B")
    body["choices"][0]["logprobs"] = logprobs
    with ScriptServer(lambda s: Reply(200, body)) as srv:
        err = one(provider_for(srv.url()), chat(kind="next_token", continuations=("A", "B")))
    assert isinstance(err, ProviderError)
    assert err.retryable is False, "a server without logprobs will not grow them on retry"
    assert "no logprobs" in str(err)


def test_next_token_with_empty_choices_is_retryable():
    with ScriptServer(lambda s: Reply(200, {"choices": []})) as srv:
        err = one(provider_for(srv.url()), chat(kind="next_token", continuations=("A",)))
    assert isinstance(err, ProviderError) and err.retryable is True


# ---- log-likelihood scoring ----------------------------------------------------------------------


def echo_body(prompt: str, tokens: list[tuple[str, float | None]]) -> dict[str, Any]:
    offsets, pos = [], 0
    for tok, _ in tokens:
        offsets.append(pos)
        pos += len(tok)
    assert "".join(t for t, _ in tokens) == prompt
    return {
        "choices": [
            {
                "text": prompt,
                "logprobs": {
                    "tokens": [t for t, _ in tokens],
                    "token_logprobs": [lp for _, lp in tokens],
                    "text_offset": offsets,
                },
            }
        ]
    }


def test_loglikelihood_sums_continuation_tokens_after_the_context():
    msgs = (Message("user", "Q: heparin antidote?"), Message("user", "A:"))
    context = "Q: heparin antidote?\n\nA:"
    # Tokenisation of context + continuation; the first token has no log-prob (echo convention).
    token_sets = {
        " protamine": [
            ("Q:", None),
            (" heparin", -5.0),
            (" antidote?", -3.0),
            ("\n\nA:", -1.0),
            (" prot", -0.4),
            ("amine", -0.1),
        ],
        " vitamin K": [
            ("Q:", None),
            (" heparin", -5.0),
            (" antidote?", -3.0),
            ("\n\nA:", -1.0),
            (" vitamin", -2.5),
            (" K", -0.7),
        ],
    }

    def script(s: Seen) -> Reply:
        cont = s.body["prompt"][len(context) :]
        return Reply(200, echo_body(s.body["prompt"], token_sets[cont]))

    with ScriptServer(script) as srv:
        req = Request(
            provider="openai",
            model="m",
            messages=msgs,
            kind="loglikelihood",
            continuations=(" protamine", " vitamin K"),
        )
        out = one(provider_for(srv.url()), req)
        seen = list(srv.seen)
    assert out.ok
    assert out.scores == pytest.approx({" protamine": -0.5, " vitamin K": -3.2})
    assert [s.path for s in seen] == ["/v1/completions", "/v1/completions"]
    for s, cont in zip(seen, req.continuations):
        assert s.body["prompt"] == context + cont
        # max_tokens 1, never 0 (llama-cpp-python reads 0 as no limit); the generated token is not summed
        assert (
            s.body["echo"],
            s.body["max_tokens"],
            s.body["logprobs"],
            s.body["temperature"],
        ) == (True, 1, 1, 0.0)
        assert s.body["model"] == "m"


def test_loglikelihood_without_echo_logprobs_is_a_final_error():
    with ScriptServer(lambda s: Reply(200, {"choices": [{"text": "", "logprobs": None}]})) as srv:
        err = one(provider_for(srv.url()), chat(kind="loglikelihood", continuations=(" x",)))
    assert isinstance(err, ProviderError) and err.retryable is False
    assert "echo logprobs" in str(err)


# ---- the transport: HTTP details ----------------------------------------------------------------


def test_chunked_replies_are_read():
    with ScriptServer(
        lambda s: Reply(
            200,
            chat_body("Protamine sulfate", usage={"prompt_tokens": 9, "completion_tokens": 2}),
            chunked=True,
        )
    ) as srv:
        out = one(provider_for(srv.url()))
    assert out.text == "Protamine sulfate"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (9, 2)


def test_the_connection_is_kept_alive_between_calls():
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        outs = calls(provider_for(srv.url()), chat(), chat(attempt=1), chat(attempt=2))
        conns = srv.connections
    assert all(o.ok for o in outs)
    assert conns == 1


def test_providers_of_one_endpoint_share_one_pool_until_the_last_closes():
    # An answering model and a judge on one server: one pool, one kept-alive connection.
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        answers, judge = provider_for(srv.url()), provider_for(srv.url("/v1/"))

        async def go():
            outs = [await answers.call(chat()), await judge.call(chat(attempt=1))]
            await answers.aclose()
            outs.append(await judge.call(chat(attempt=2)))  # the pool outlives the first to close
            await judge.aclose()
            return outs

        outs = asyncio.run(go())
        conns = srv.connections
    assert [o.text for o in outs] == ["B", "B", "B"]
    assert conns == 1


def test_a_new_connection_after_connection_close():
    with ScriptServer(
        lambda s: Reply(200, chat_body("B"), {"Connection": "close"}, close_after=True)
    ) as srv:
        outs = calls(provider_for(srv.url()), chat(), chat(attempt=1))
        conns = srv.connections
    assert all(o.ok for o in outs)
    assert conns == 2


def test_a_connection_the_server_closed_silently_costs_at_most_a_retry(tmp_path):
    # The server closes after each reply without saying so. A request aiohttp could not write
    # (the close already seen) goes out again at once; one written into the closing socket fails
    # as retryable, and the executor sends it again. Each call reaches the server exactly once.
    with ScriptServer(lambda s: Reply(200, chat_body("B"), close_after=True)) as srv:
        provider = provider_for(srv.url())
        store = Store(tmp_path / "s.db")
        ex = Executor(store, provider, concurrency=1, retry=RetryPolicy(4, 0.001, 0.001))

        async def go():
            try:
                return [await ex(chat(attempt=i)) for i in range(6)]
            finally:
                await provider.aclose()

        outs = asyncio.run(go())
        store.close()
        n_requests = len(srv.seen)
    assert [o.text for o in outs] == ["B"] * 6
    assert n_requests == 6, "each call reached the server exactly once"


def test_slow_server_times_out_as_retryable():
    with ScriptServer(lambda s: Reply(200, chat_body("B"), delay=1.2)) as srv:
        provider = provider_for(srv.url(), timeout=0.25)
        t0 = time.monotonic()
        err = one(provider)
        elapsed = time.monotonic() - t0
    assert isinstance(err, ProviderError) and err.retryable is True
    assert "timeout" in str(err).lower() or "timed out" in str(err).lower()
    assert elapsed < 1.15, "the client gave up before the 1.2 s reply"


def test_many_concurrent_calls_on_one_provider():
    def script(s: Seen) -> Reply:
        q = s.body["messages"][-1]["content"]
        return Reply(200, chat_body(q.upper()))

    async def go(p):
        try:
            return await asyncio.gather(
                *(
                    p.call(
                        Request(provider="openai", model="m", messages=(Message("user", f"q{i}"),))
                    )
                    for i in range(24)
                )
            )
        finally:
            await p.aclose()

    with ScriptServer(script) as srv:
        outs = asyncio.run(go(provider_for(srv.url())))
    assert [o.text for o in outs] == [f"Q{i}" for i in range(24)]


# ---- proxies and redirects ---------------------------------------------------------------------


def test_the_proxy_from_the_environment_is_used_with_its_credentials(monkeypatch):
    # The script server plays an HTTP proxy: it receives the absolute URL of the real endpoint.
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://proxyuser:proxy%40pw@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "localhost")
        monkeypatch.setenv("no_proxy", "localhost")
        out = one(provider_for("http://llm.example.invalid:8000/v1"))
        seen = proxy.seen[0]
    assert out.ok and out.text == "B"
    assert seen.path == "http://llm.example.invalid:8000/v1/chat/completions"
    assert (
        seen.headers["proxy-authorization"]
        == "Basic " + base64.b64encode(b"proxyuser:proxy@pw").decode()
    )
    assert seen.headers["authorization"] == "Bearer EMPTY"


def test_no_proxy_sends_the_host_straight_to_the_server(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        out = one(provider_for(srv.url()))
    assert out.ok and out.text == "B"


def test_a_socks_proxy_is_refused_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ConfigError, match="only http:// and https:// proxies are supported"):
        OpenAIProvider(ModelSpec("openai", "m", "https://api.example.invalid/v1"))


def test_a_redirect_is_not_followed_and_names_its_target():
    with ScriptServer(
        lambda s: Reply(307, b"", {"Location": "https://other.example.invalid/v1/chat/completions"})
    ) as srv:
        err = one(provider_for(srv.url()))
        n = len(srv.seen)
    assert isinstance(err, ProviderError) and err.retryable is False
    assert (
        str(err)
        == "HTTP 307: the endpoint redirects to https://other.example.invalid/v1/chat/completions; use that as --base-url"
    )
    assert n == 1, "the key is not sent on to another host"


@pytest.mark.parametrize(
    "raw,text",
    [
        (
            b'{"choices": [{"message": {"role": "assistant", "content": "B"}, "finish_reason": "stop", "logprob": NaN}]}',
            "B",
        ),
        (
            b'{"choices": [{"message": {"role": "assistant", "content": "a\\ud800b"}, "finish_reason": "stop"}]}',
            "a\ud800b",
        ),
        (
            '{"choices": [{"message": {"role": "assistant", "content": "中文"}, "finish_reason": "stop"}]}'.encode(
                "utf-16"
            ),
            "中文",
        ),
    ],
    ids=["nan-literal", "lone-surrogate", "utf-16"],
)
def test_bodies_the_fast_parser_refuses_are_read_as_the_standard_library_reads_them(raw, text):
    with ScriptServer(lambda s: Reply(200, raw)) as srv:
        out = one(provider_for(srv.url()))
    assert not isinstance(out, ProviderError), f"got {out!r}"
    assert out.ok and out.text == text
