"""The OpenAI-compatible provider over both transports, against real servers on 127.0.0.1.

tests/test_providers.py covers the request body, json mode, next-token scores and the four
faults grandrounds.testing.LoopbackServer injects. Here a scriptable HTTP/1.1 server adds what
that one cannot do: any status code and header, non-JSON and oddly shaped bodies, chunked
replies, closed keep-alive connections, slow replies, path prefixes, and what the client sends
(path, Authorization). Nothing touches any address beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

from grandrounds.errors import ConfigError
from grandrounds.executor import Executor, RetryPolicy
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.providers.openai_compat import DEFAULT_BASE_URL, OpenAIProvider
from grandrounds.records import GenParams, Message, Request
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer

TRANSPORTS = ["sdk", "lean"]
MSGS = (Message("system", "Answer with one letter."), Message("user", "Which drug reverses heparin? A. Vitamin K B. Protamine"))


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
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
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
                seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}"))
                with outer._lock:
                    outer.seen.append(seen)
                reply = outer.script(seen)
                if reply.delay:
                    time.sleep(reply.delay)
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode("utf-8")
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
            request_queue_size = 128  # the default backlog of 5 refuses bursts of concurrent connects

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def url(self, prefix: str = "/v1") -> str:
        return f"http://127.0.0.1:{self.port}{prefix}"

    def __enter__(self) -> "ScriptServer":
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
    return Request("openai", "m", MSGS, **kw)


def provider_for(url: str, transport: str, **kw) -> OpenAIProvider:
    return OpenAIProvider(ModelSpec("openai", "m", url), transport=transport, **kw)


# ---- status codes ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "status,retryable",
    [(400, False), (401, False), (403, False), (404, False), (422, False), (408, True), (409, True),
     (429, True), (500, True), (502, True), (503, True), (504, True)],
)
def test_status_codes_map_to_retryable_or_final(transport, status, retryable):
    body = {"error": {"message": f"server says {status}", "type": "x"}}
    with ScriptServer(lambda s: Reply(status, body)) as srv:
        err = one(provider_for(srv.url(), transport))
    assert isinstance(err, ProviderError)
    assert err.retryable is retryable
    assert str(status) in str(err)
    assert f"server says {status}" in str(err)
    if status == 429:
        assert str(err).startswith("429 rate limited")
    else:
        assert str(err).startswith(f"HTTP {status}")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("status,header,want", [(429, "3", 3.0), (429, "0.5", 0.5), (503, "7", 7.0)])
def test_retry_after_header_is_read(transport, status, header, want):
    with ScriptServer(lambda s: Reply(status, {"error": {"message": "busy"}}, {"Retry-After": header})) as srv:
        err = one(provider_for(srv.url(), transport))
    assert isinstance(err, ProviderError) and err.retryable
    assert err.retry_after == pytest.approx(want)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_retry_after_as_http_date_or_absent_is_none(transport):
    replies = [
        Reply(429, {"error": {"message": "slow"}}, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        Reply(429, {"error": {"message": "slow"}}),
    ]
    with ScriptServer(lambda s: replies[len(srv.seen) - 1]) as srv:
        errs = calls(provider_for(srv.url(), transport), chat(), chat())
    assert [e.retry_after for e in errs] == [None, None]
    assert all(e.retryable for e in errs)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_error_body_that_is_not_json_still_gives_a_classified_error(transport):
    html = b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"
    with ScriptServer(lambda s: Reply(502, html, {"Content-Type": "text/html"})) as srv:
        err = one(provider_for(srv.url(), transport))
    assert isinstance(err, ProviderError) and err.retryable
    assert "502" in str(err)


@pytest.mark.parametrize(
    "transport,status,body",
    [
        ("sdk", 400, {"error": {"message": "maximum context length exceeded", "type": "invalid_request_error"}}),
        ("lean", 400, {"error": {"message": "maximum context length exceeded", "type": "invalid_request_error"}}),
        ("sdk", 400, {"object": "error", "message": "maximum context length exceeded", "type": "BadRequestError", "code": 400}),
        ("lean", 400, {"object": "error", "message": "maximum context length exceeded", "type": "BadRequestError", "code": 400}),
        ("lean", 404, {"error": "model 'm' maximum context length exceeded"}),
        ("sdk", 404, {"error": "model 'm' maximum context length exceeded"}),
        ("sdk", 422, {"detail": "maximum context length exceeded"}),
        ("lean", 422, {"detail": "maximum context length exceeded"}),
    ],
    ids=["nested-sdk", "nested-lean", "flat-sdk", "flat-lean", "string-lean", "string-sdk", "detail-sdk", "detail-lean"],
)
def test_the_servers_reason_reaches_the_error_message(transport, status, body):
    with ScriptServer(lambda s: Reply(status, body)) as srv:
        err = one(provider_for(srv.url(), transport))
    assert isinstance(err, ProviderError) and err.retryable is False
    assert str(status) in str(err)
    assert "maximum context length exceeded" in str(err)


# ---- malformed success bodies -----------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
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
    ids=["truncated", "text", "array", "empty-choices", "no-choices", "no-message", "null-content", "int-content", "choices-str"],
)
def test_malformed_success_bodies_are_retryable_errors(transport, body):
    with ScriptServer(lambda s: Reply(200, body)) as srv:
        err = one(provider_for(srv.url(), transport))
    assert isinstance(err, ProviderError), f"got {err!r}"
    assert err.retryable is True
    assert "malformed" in str(err)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_empty_string_content_is_a_valid_answer(transport):
    with ScriptServer(lambda s: Reply(200, chat_body(""))) as srv:
        out = one(provider_for(srv.url(), transport))
    assert out.ok and out.text == ""


# ---- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
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
def test_usage_tokens_are_read_leniently(transport, usage, want):
    body = chat_body("B")
    if usage is not None:
        body["usage"] = usage
    with ScriptServer(lambda s: Reply(200, body)) as srv:
        out = one(provider_for(srv.url(), transport))
    assert out.ok and out.text == "B"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == want


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_latency_is_measured(transport):
    with ScriptServer(lambda s: Reply(200, chat_body("B"), delay=0.15)) as srv:
        out = one(provider_for(srv.url(), transport))
    assert 0.14 <= out.latency < 5.0


# ---- what is sent ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_path_and_defaults_of_a_plain_chat_request(transport):
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        out = one(provider_for(srv.url(), transport))
        seen = srv.seen[0]
    assert out.text == "B"
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["content-type"].startswith("application/json")
    # GenParams defaults: temperature 0, 1024 tokens, seed 0; nothing optional is sent.
    assert (seen.body["temperature"], seen.body["max_tokens"], seen.body["seed"]) == (0.0, 1024, 0)
    for absent in ("response_format", "top_p", "stop", "logprobs", "top_logprobs"):
        assert absent not in seen.body


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_seed_none_is_not_sent_and_json_object_is(transport):
    with ScriptServer(lambda s: Reply(200, chat_body('{"criteria_met": true}'))) as srv:
        out = one(provider_for(srv.url(), transport), chat(params=GenParams(seed=None, json_object=True)))
        body = srv.seen[0].body
    assert out.text == '{"criteria_met": true}'
    assert "seed" not in body
    assert body["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_non_ascii_messages_arrive_intact(transport):
    msgs = (Message("user", "患者，男，45岁，发热３天。诊断？"),)
    with ScriptServer(lambda s: Reply(200, chat_body("肺炎"))) as srv:
        out = one(provider_for(srv.url(), transport), Request("openai", "m", msgs))
        body = srv.seen[0].body
    assert body["messages"] == [{"role": "user", "content": msgs[0].content}]
    assert out.text == "肺炎"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_api_key_from_environment_is_sent_as_bearer(transport, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abc123")
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        one(provider_for(srv.url(), transport))
        auth = srv.seen[0].headers.get("authorization")
    assert auth == "Bearer sk-test-abc123"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_api_key_env_option_names_another_variable(transport, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    monkeypatch.setenv("MY_VENDOR_KEY", "vendor-key-9")
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        one(provider_for(srv.url(), transport, api_key_env="MY_VENDOR_KEY"))
        auth = srv.seen[0].headers.get("authorization")
    assert auth == "Bearer vendor-key-9"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_a_key_a_placeholder_is_sent(transport):
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        one(provider_for(srv.url(), transport))
        auth = srv.seen[0].headers.get("authorization")
    assert auth == "Bearer EMPTY"


def test_api_key_never_reaches_the_store(tmp_path, monkeypatch):
    secret = "sk-live-DO-NOT-STORE-5f3c9a"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with LoopbackServer(lambda b: "B") as srv:
        provider = OpenAIProvider(ModelSpec("openai", "m", srv.base_url), transport="lean")
        store = Store(tmp_path / "s.db")
        ex = Executor(store, provider, retry=RetryPolicy(2, 0.001, 0.001))

        async def go():
            try:
                return await ex(Request("openai", "m", MSGS, base_url=provider.request_base_url()))
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
    a = OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:9/v1/"), transport="lean")
    b = OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:9/v1"), transport="lean")
    assert a.spec.base_url == b.spec.base_url == "http://127.0.0.1:9/v1"
    assert a.request_base_url() == b.request_base_url()
    assert a.endpoint == "http://127.0.0.1:9/v1"


def test_base_url_from_environment_when_spec_has_none(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:7/api/v1/")
    p = OpenAIProvider(ModelSpec("openai", "m"), transport="lean")
    assert p.spec.base_url == "http://127.0.0.1:7/api/v1"
    q = OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:8/v1"), transport="lean")
    assert q.spec.base_url == "http://127.0.0.1:8/v1", "an explicit --base-url wins over the environment"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_default_base_url_is_openai(transport):
    p = OpenAIProvider(ModelSpec("openai", "gpt-4o-mini"), transport=transport)
    assert p.spec.base_url == DEFAULT_BASE_URL == "https://api.openai.com/v1"
    assert (p.spec.provider, p.spec.model) == ("openai", "gpt-4o-mini")
    asyncio.run(p.aclose())


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("prefix", ["/v1", "/api/openai/v1", "/v1/"])
def test_path_prefix_of_base_url_is_kept(transport, prefix):
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        out = one(provider_for(srv.url(prefix), transport))
        path = srv.seen[0].path
    assert out.ok
    assert path == prefix.rstrip("/") + "/chat/completions"


def test_unknown_transport_is_a_config_error():
    with pytest.raises(ConfigError, match="transport"):
        OpenAIProvider(ModelSpec("openai", "m", "http://127.0.0.1:9/v1"), transport="curl")


# ---- next-token scoring ------------------------------------------------------------------------


def logprob_body(tops: list[tuple[str, float]]) -> dict[str, Any]:
    body = chat_body(tops[0][0] if tops else "")
    body["choices"][0]["logprobs"] = {
        "content": [
            {"token": tops[0][0] if tops else "", "logprob": tops[0][1] if tops else 0.0,
             "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in tops]}
        ]
    }
    return body


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_next_token_scores_only_requested_continuations_that_appear(transport):
    tops = [("B", -0.05), ("A", -3.2), ("The", -4.0), ("C", -6.5)]
    with ScriptServer(lambda s: Reply(200, logprob_body(tops))) as srv:
        req = chat(kind="next_token", continuations=("A", "B", "C", "D"), params=GenParams(temperature=0.7, max_tokens=300))
        out = one(provider_for(srv.url(), transport), req)
        body = srv.seen[0].body
    assert out.ok and out.text is None
    assert out.scores == {"A": -3.2, "B": -0.05, "C": -6.5}  # D is not among the top tokens
    # Scoring overrides generation settings: one token, greedy, 20 alternatives.
    assert (body["max_tokens"], body["temperature"], body["logprobs"], body["top_logprobs"]) == (1, 0.0, True, 20)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_next_token_matches_tokens_with_leading_space(transport):
    tops = [(" C", -0.3), (" A", -1.7)]
    with ScriptServer(lambda s: Reply(200, logprob_body(tops))) as srv:
        out = one(provider_for(srv.url(), transport), chat(kind="next_token", continuations=("A", "C", " D")))
    assert out.scores == {"A": -1.7, "C": -0.3}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_next_token_takes_the_likelier_of_two_spellings(transport):
    tops = [(" B", -0.2), ("A", -2.0), ("B", -5.0)]
    with ScriptServer(lambda s: Reply(200, logprob_body(tops))) as srv:
        out = one(provider_for(srv.url(), transport), chat(kind="next_token", continuations=("A", "B")))
    assert out.scores["B"] == pytest.approx(-0.2)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("logprobs", [None, {"content": None}, {"content": []}])
def test_next_token_without_logprobs_is_a_final_error(transport, logprobs):
    body = chat_body("B")
    body["choices"][0]["logprobs"] = logprobs
    with ScriptServer(lambda s: Reply(200, body)) as srv:
        err = one(provider_for(srv.url(), transport), chat(kind="next_token", continuations=("A", "B")))
    assert isinstance(err, ProviderError)
    assert err.retryable is False, "a server without logprobs will not grow them on retry"
    assert "no logprobs" in str(err)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_next_token_with_empty_choices_is_retryable(transport):
    with ScriptServer(lambda s: Reply(200, {"choices": []})) as srv:
        err = one(provider_for(srv.url(), transport), chat(kind="next_token", continuations=("A",)))
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


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_loglikelihood_sums_continuation_tokens_after_the_context(transport):
    msgs = (Message("user", "Q: heparin antidote?"), Message("user", "A:"))
    context = "Q: heparin antidote?\n\nA:"
    # Tokenisation of context + continuation; the first token has no log-prob (echo convention).
    token_sets = {
        " protamine": [("Q:", None), (" heparin", -5.0), (" antidote?", -3.0), ("\n\nA:", -1.0), (" prot", -0.4), ("amine", -0.1)],
        " vitamin K": [("Q:", None), (" heparin", -5.0), (" antidote?", -3.0), ("\n\nA:", -1.0), (" vitamin", -2.5), (" K", -0.7)],
    }

    def script(s: Seen) -> Reply:
        cont = s.body["prompt"][len(context):]
        return Reply(200, echo_body(s.body["prompt"], token_sets[cont]))

    with ScriptServer(script) as srv:
        req = Request("openai", "m", msgs, kind="loglikelihood", continuations=(" protamine", " vitamin K"))
        out = one(provider_for(srv.url(), transport), req)
        seen = list(srv.seen)
    assert out.ok
    assert out.scores == pytest.approx({" protamine": -0.5, " vitamin K": -3.2})
    assert [s.path for s in seen] == ["/v1/completions", "/v1/completions"]
    for s, cont in zip(seen, req.continuations):
        assert s.body["prompt"] == context + cont
        assert (s.body["echo"], s.body["max_tokens"], s.body["logprobs"], s.body["temperature"]) == (True, 0, 1, 0.0)
        assert s.body["model"] == "m"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_loglikelihood_without_echo_logprobs_is_a_final_error(transport):
    with ScriptServer(lambda s: Reply(200, {"choices": [{"text": "", "logprobs": None}]})) as srv:
        err = one(provider_for(srv.url(), transport), chat(kind="loglikelihood", continuations=(" x",)))
    assert isinstance(err, ProviderError) and err.retryable is False
    assert "echo logprobs" in str(err)


# ---- lean transport: the HTTP details -----------------------------------------------------------


def test_lean_reads_chunked_replies():
    with ScriptServer(lambda s: Reply(200, chat_body("Protamine sulfate", usage={"prompt_tokens": 9, "completion_tokens": 2}), chunked=True)) as srv:
        out = one(provider_for(srv.url(), "lean"))
    assert out.text == "Protamine sulfate"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (9, 2)


def test_lean_keeps_the_connection_alive_between_calls():
    with ScriptServer(lambda s: Reply(200, chat_body("B"))) as srv:
        outs = calls(provider_for(srv.url(), "lean"), chat(), chat(attempt=1), chat(attempt=2))
        conns = srv.connections
    assert all(o.ok for o in outs)
    assert conns == 1


def test_lean_opens_a_new_connection_after_connection_close():
    with ScriptServer(lambda s: Reply(200, chat_body("B"), {"Connection": "close"}, close_after=True)) as srv:
        outs = calls(provider_for(srv.url(), "lean"), chat(), chat(attempt=1))
        conns = srv.connections
    assert all(o.ok for o in outs)
    assert conns == 2


def test_lean_retries_once_on_a_kept_alive_connection_the_server_closed():
    # The server closes after each reply without saying so; the client finds out on reuse.
    with ScriptServer(lambda s: Reply(200, chat_body("B"), close_after=True)) as srv:
        outs = calls(provider_for(srv.url(), "lean"), chat(), chat(attempt=1), chat(attempt=2))
        n_requests = len(srv.seen)
    assert all(not isinstance(o, ProviderError) and o.text == "B" for o in outs)
    assert n_requests == 3, "each call reached the server exactly once"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_slow_server_times_out_as_retryable(transport):
    with ScriptServer(lambda s: Reply(200, chat_body("B"), delay=1.2)) as srv:
        provider = provider_for(srv.url(), transport, timeout=0.25)
        t0 = time.monotonic()
        err = one(provider)
        elapsed = time.monotonic() - t0
    assert isinstance(err, ProviderError) and err.retryable is True
    assert "timeout" in str(err).lower() or "timed out" in str(err).lower()
    assert elapsed < 1.15, "the client gave up before the 1.2 s reply"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_many_concurrent_calls_on_one_provider(transport):
    def script(s: Seen) -> Reply:
        q = s.body["messages"][-1]["content"]
        return Reply(200, chat_body(q.upper()))

    async def go(p):
        try:
            return await asyncio.gather(*(p.call(Request("openai", "m", (Message("user", f"q{i}"),))) for i in range(24)))
        finally:
            await p.aclose()

    with ScriptServer(script) as srv:
        outs = asyncio.run(go(provider_for(srv.url(), transport)))
    assert [o.text for o in outs] == [f"Q{i}" for i in range(24)]
