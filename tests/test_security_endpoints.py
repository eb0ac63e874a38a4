"""Hostile OpenAI-compatible endpoints: every misbehaviour ends as a classified failed call.

Each test points the real provider (and, where the store matters, the executor or the whole
runner) at tests/hostile_server.py and asserts the outcome: the error text, whether it is
retried, that memory stays bounded by the size cap, and that no secret (API key, password in the
base URL) reaches the store. Credentials are fakes; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
import time
import tracemalloc
from pathlib import Path

import pytest

from grandrounds.core.records import Message, Request
from grandrounds.providers.base import ModelSpec, ProviderError
from grandrounds.providers.openai_compat import OpenAIProvider
from grandrounds.run.config import RunConfig
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.run.runner import run
from grandrounds.store import Store
from tests.hostile_server import MB, HostileServer

SECRET = "sk-live-7f3c9a51e2d84b06a9c1-NEVER-STORE"
MSGS = (Message("user", "Which drug reverses heparin? A. Vitamin K B. Protamine"),)
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in (
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def provider(url: str, **kw) -> OpenAIProvider:
    return OpenAIProvider(ModelSpec("openai", "m", url), **kw)


def request(**kw) -> Request:
    return Request(provider="openai", model="m", messages=MSGS, **kw)


def one(p: OpenAIProvider, req: Request | None = None):
    """The provider's outcome for one call (a Response or the ProviderError), closed in the same loop."""

    async def go():
        try:
            return await p.call(req or request())
        except ProviderError as e:
            return e
        finally:
            await p.aclose()

    return asyncio.run(go())


def through_executor(p: OpenAIProvider, db: Path, req: Request | None = None):
    """One call through the executor (retries, store), as a run makes it."""
    store = Store(db)

    async def go():
        try:
            return await Executor(store, p, retry=FAST)(
                req or request(base_url=p.request_base_url())
            )
        finally:
            await p.aclose()

    try:
        return asyncio.run(go())
    finally:
        store.close()


def store_bytes(folder: Path) -> bytes:
    """Every byte of every file in ``folder`` (the database, its WAL and journal)."""
    return b"".join(f.read_bytes() for f in folder.iterdir() if f.is_file())


def stored_errors(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [r[0] for r in con.execute("SELECT error FROM calls WHERE error IS NOT NULL")]


# ---- size cap -----------------------------------------------------------------------------------


def test_an_endless_stream_fails_as_too_large_and_memory_stays_near_the_cap():
    with HostileServer("endless") as srv:
        tracemalloc.start()
        try:
            t0 = time.monotonic()
            err = one(provider(srv.base_url, max_response_mb=2))
            elapsed = time.monotonic() - t0
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(err, ProviderError), err
    assert err.kind == "too_large" and err.retryable is False
    assert (
        str(err)
        == "response too large: over 2 MB, raise max_response_mb to accept more (the body did not end before the cap)"
    )
    assert peak < 6 * MB, f"peak {peak / MB:.1f} MB for a 2 MB cap"
    assert elapsed < 10
    # The client stopped reading at the cap: the server could push only what the socket buffers hold.
    assert srv.stats.bytes_sent[0] < 16 * MB


def test_a_huge_announced_body_is_refused_before_it_is_read():
    with HostileServer("huge_body", big=64 * MB) as srv:
        err = one(provider(srv.base_url, max_response_mb=1))
    assert isinstance(err, ProviderError) and err.kind == "too_large" and err.retryable is False
    assert str(err).endswith(
        "over 1 MB, raise max_response_mb to accept more (the server announced 67,108,864 bytes)"
    )
    assert srv.stats.bytes_sent[0] < 16 * MB, "the rest of the 64 MB was never accepted"


def test_a_huge_body_without_a_length_is_cut_at_the_cap():
    with HostileServer("huge_chunked", big=16 * MB) as srv:
        err = one(provider(srv.base_url, max_response_mb=1))
    assert isinstance(err, ProviderError) and err.kind == "too_large" and err.retryable is False
    assert "did not end before the cap" in str(err)


def test_a_body_under_the_cap_is_read_whole():
    # 1.5 MB of non-JSON under a 2 MB cap: read to the end, then refused as a body, not as too large.
    with HostileServer("huge_chunked", big=3 * MB // 2) as srv:
        err = one(provider(srv.base_url, max_response_mb=2))
    assert isinstance(err, ProviderError) and err.kind is None
    assert str(err) == "malformed response body: invalid JSON" and err.retryable is True


def test_a_compressed_body_is_capped_on_its_decoded_size():
    # 64 MB of spaces in about 64 KB of gzip: the cap counts what the body inflates to.
    with HostileServer("gzip_bomb", big=64 * MB) as srv:
        tracemalloc.start()
        try:
            err = one(provider(srv.base_url, max_response_mb=1))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sent = srv.stats.bytes_sent[0]
    assert sent < MB, "the compressed body is small"
    assert isinstance(err, ProviderError) and err.kind == "too_large" and err.retryable is False
    assert "did not end before the cap" in str(err)
    assert peak < 6 * MB, f"peak {peak / MB:.1f} MB for a 1 MB cap"


def test_a_compressed_completion_is_read():
    with HostileServer("gzip_ok") as srv:
        out = one(provider(srv.base_url))
    assert not isinstance(out, ProviderError), out
    assert out.text == HostileServer.TEXT


def test_too_large_is_not_retried_and_is_stored_as_the_reason(tmp_path):
    with HostileServer("endless") as srv:
        out = through_executor(provider(srv.base_url, max_response_mb=1), tmp_path / "s.db")
        n = srv.stats.requests
    assert n == 1, "the same server would send the same endless body again"
    assert not out.ok and out.error.startswith("response too large: over 1 MB")
    assert stored_errors(tmp_path / "s.db") == [out.error]


# ---- headers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["huge_header", "many_headers"])
def test_a_header_over_the_limit_is_a_failed_call_and_the_next_call_works(mode):
    modes = iter([mode, "ok"])
    with HostileServer(lambda body: next(modes)) as srv:
        p = provider(srv.base_url)

        async def go():
            out = []
            try:
                for i in range(2):
                    try:
                        out.append(await p.call(request(attempt=i)))
                    except ProviderError as e:
                        out.append(e)
            finally:
                await p.aclose()
            return out

        bad, good = asyncio.run(go())
    assert isinstance(bad, ProviderError) and bad.retryable is False and bad.kind == "too_large"
    want = (
        "response too large: a header over 64 KiB"
        if mode == "huge_header"
        else "response too large: over 128 header fields"
    )
    assert str(bad).startswith(want)
    assert "\n" not in str(bad)
    assert good.ok and good.text == HostileServer.TEXT


# ---- bodies that are not a completion -----------------------------------------------------------


def test_a_close_delimited_body_is_read_to_the_end():
    with HostileServer("close_delimited") as srv:
        out = one(provider(srv.base_url))
    assert not isinstance(out, ProviderError), out
    assert out.text == HostileServer.TEXT
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (12, 6)


def test_an_html_page_with_status_200_is_a_final_error_naming_the_page():
    with HostileServer("html") as srv:
        err = one(provider(srv.base_url))
    assert isinstance(err, ProviderError) and err.retryable is False
    assert str(err).startswith(
        "malformed response body: HTTP 200 with an HTML page instead of JSON (is --base-url the API's URL"
    )
    assert "Sign in to the network" in str(err)


def test_null_content_is_a_retryable_malformed_body():
    with HostileServer("null_content") as srv:
        err = one(provider(srv.base_url))
    assert isinstance(err, ProviderError) and err.retryable is True
    assert str(err) == "malformed response body: message content is null"


# ---- deadline -----------------------------------------------------------------------------------


def test_a_server_that_never_answers_hits_the_deadline():
    with HostileServer("hang") as srv:
        t0 = time.monotonic()
        err = one(provider(srv.base_url, timeout=0.3))
        elapsed = time.monotonic() - t0
    assert isinstance(err, ProviderError) and err.kind == "timeout" and err.retryable is True
    assert str(err) == "timeout: no complete reply within 0.3 s"
    assert 0.29 <= elapsed < 2.0


def test_the_deadline_covers_the_whole_body_even_while_bytes_keep_coming():
    with HostileServer("trickle") as srv:
        t0 = time.monotonic()
        err = one(provider(srv.base_url, timeout=0.5))
        elapsed = time.monotonic() - t0
    assert isinstance(err, ProviderError) and err.kind == "timeout"
    assert 0.49 <= elapsed < 2.5
    assert srv.stats.bytes_sent[0] > 0, "the body was flowing when the deadline hit"


# ---- secrets ------------------------------------------------------------------------------------


def test_an_error_echoing_the_key_is_redacted_before_it_is_stored(tmp_path):
    with HostileServer("echo_key") as srv:
        out = through_executor(provider(srv.base_url), tmp_path / "s.db")
        seen = srv.stats.authorizations
    assert seen == [f"Bearer {SECRET}"], "the key was sent"
    assert out.error.startswith("HTTP 401: Incorrect API key provided: [redacted].")
    assert "Authorization: Bearer [redacted]" in out.error
    assert SECRET not in out.error
    assert SECRET.encode() not in store_bytes(tmp_path)


def test_a_retried_plain_text_error_echoing_headers_stores_no_key(tmp_path):
    with HostileServer("echo_headers") as srv:
        out = through_executor(provider(srv.base_url), tmp_path / "s.db")
        n = srv.stats.requests
    assert n == FAST.max_attempts, "a 502 is retried"
    assert out.error.startswith("HTTP 502: upstream failed; request headers were:")
    assert "authorization: Bearer [redacted]" in out.error
    assert SECRET not in out.error and SECRET.encode() not in store_bytes(tmp_path)


def test_a_key_of_another_shape_is_redacted_too(monkeypatch, tmp_path):
    # A key named by api_key_env that has no known prefix: redacted because it is the key sent.
    monkeypatch.setenv("VENDOR_KEY", "Zq81vendorkeyTT09x")
    with HostileServer("echo_key") as srv:
        out = through_executor(provider(srv.base_url, api_key_env="VENDOR_KEY"), tmp_path / "s.db")
    assert "Zq81vendorkeyTT09x" not in out.error and "[redacted]" in out.error
    assert b"Zq81vendorkeyTT09x" not in store_bytes(tmp_path)


def test_credentials_in_the_base_url_are_used_but_never_stored(tmp_path):
    db = tmp_path / "s.db"
    with HostileServer("ok") as srv:
        url = f"http://alice:s3cret-pass@127.0.0.1:{srv.port}/v1"
        first = asyncio.run(
            run(Store(db), RunConfig(benchmark="demo", model="openai/m", base_url=url, limit=2))
        )
        again = asyncio.run(
            run(
                Store(db),
                RunConfig(benchmark="demo", model="openai/m", base_url=srv.base_url, limit=2),
            )
        )
        auths = srv.stats.authorizations
        requests = srv.stats.requests
    token = base64.b64encode(b"alice:s3cret-pass").decode()
    assert auths[:2] == [f"Basic {token}"] * 2, (
        "the URL's credentials were sent, as HTTP Basic, instead of the key"
    )
    assert first.answer_stats.made == 2 and all(r.ok for r in first.responses.values())
    # The URL's user is an account a gateway may route to another model: the run without it is
    # another run, asked again (the user's name reaches the keys only as a hash, never the password).
    assert again.run.id != first.run.id and again.answer_stats.made == 2 and requests == 4
    blob = store_bytes(tmp_path)
    for secret in (b"s3cret-pass", token.encode(), b"alice:", SECRET.encode()):
        assert secret not in blob


def test_a_base_url_password_echoed_back_is_redacted(tmp_path):
    with HostileServer("echo_key") as srv:
        p = provider(f"http://bob:pa55-w0rd-x@127.0.0.1:{srv.port}/v1")
        assert (
            p.request_base_url().startswith(srv.base_url + "#account:")
            and p.endpoint == srv.base_url
        )
        assert "bob" not in p.request_base_url() and "pa55" not in p.request_base_url()
        assert "pa55" not in repr(p.spec)
        out = through_executor(p, tmp_path / "s.db")
    assert "Basic [redacted]" in out.error
    blob = store_bytes(tmp_path)
    assert b"pa55-w0rd-x" not in blob and base64.b64encode(b"bob:pa55-w0rd-x") not in blob


# ---- a whole run against an endless stream --------------------------------------------------------


def test_a_run_against_an_endless_stream_ends_with_every_call_failed_once(tmp_path):
    with HostileServer("endless") as srv:
        cfg = RunConfig(
            benchmark="demo",
            model="openai/m",
            base_url=srv.base_url,
            limit=3,
            provider_options={"max_response_mb": 1},
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
        n = srv.stats.requests
    assert n == 3, "one request per question: too large is not retried"
    assert srv.stats.lookups <= 3, (
        "the server's slots are looked up once (three places to look), endless answers and all"
    )
    assert out.answer_stats.failed == 3 and out.result.extra["n_answer_failed"] == 3
    assert all(r.error.startswith("response too large: over 1 MB") for r in out.responses.values())


# ---- what redaction takes out, and what it leaves -------------------------------------------------


@pytest.mark.parametrize(
    "text,secrets,want",
    [
        ("key sk-proj-Ab12Cd34Ef56Gh78 refused", (), "key [redacted] refused"),
        ("Authorization: Bearer eyJhbGciOi.J9-x_y", (), "Authorization: Bearer [redacted]"),
        ("auth=Basic dXNlcjpwYXNz", (), "auth=Basic [redacted]"),
        ("google key AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv", (), "google key [redacted]"),
        (
            "token hf_abcdefghijklmnopqrstuvwxyz0123 and gsk_abcdefghij1234567890",
            (),
            "token [redacted] and [redacted]",
        ),
        (
            "your key Zq81vendorkeyTT09x is invalid",
            ("Zq81vendorkeyTT09x",),
            "your key [redacted] is invalid",
        ),
        # plain words after Bearer/Basic, short placeholders and ordinary text stay
        (
            "Basic authentication failed; Bearer token missing; Bearer EMPTY",
            (),
            "Basic authentication failed; Bearer token missing; Bearer EMPTY",
        ),
        ("the task-list is empty; ask-me later", (), "the task-list is empty; ask-me later"),
    ],
)
def test_redaction(text, secrets, want):
    from grandrounds.providers.base import redact

    assert redact(text, secrets) == want


@pytest.mark.parametrize(
    "url,public",
    [
        ("https://u:p@host:8443/v1", "https://host:8443/v1"),
        ("https://user%40corp:p%3Ass@[::1]:8000/v1?x=1", "https://[::1]:8000/v1?x=1"),
        ("https://token@host/v1", "https://host/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("", ""),
    ],
)
def test_public_url_drops_only_the_credentials(url, public):
    from grandrounds.providers.base import public_url

    assert public_url(url) == public
    assert repr(ModelSpec("openai", "m", url)).endswith(f"base_url={public!r})")
