"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

It answers ``/v1/chat/completions`` and ``/v1/completions`` by a rule you give it, after a
fixed latency, and can inject the faults a runner must survive: 429 with Retry-After, 500,
a dropped connection, a malformed body. It runs its own event loop in a thread, so a test
can use it from synchronous code while the runner under test uses ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The connection a request came on (each connection is served in its own task, so its own context).
_READER: contextvars.ContextVar[asyncio.StreamReader] = contextvars.ContextVar("loopback_reader")

#: rule(body) -> reply text for chat, a Reply (text with its finish reason), or a Fault to inject.
Rule = Callable[[dict[str, Any]], "str | Reply | Raw | Fault"]


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A rule's reply with its finish reason, e.g. ``Reply("...", "length")`` for a cut-off answer."""

    text: str
    finish_reason: str = "stop"
    #: Native tool calls to send in the reply's message: ``(name, arguments)`` pairs, ``arguments``
    #: a dict (sent as JSON text) or a string sent as written; ids are ``call_<n>``.
    tool_calls: tuple[tuple[str, Any], ...] = ()
    #: The reply body's ``system_fingerprint`` (None: left out, as most local servers do).
    system_fingerprint: str | None = None
    #: The reply body's ``model`` (None: the model asked for).
    model: str | None = None


@dataclass(frozen=True)
class Raw:
    """A rule's reply sent as it is: the whole JSON body (a stand-in for a server's own shapes and faults)."""

    body: dict[str, Any]


@dataclass(frozen=True)
class Fault:
    kind: str  # "429" | "500" | "400" | "drop" | "malformed"
    retry_after: float = 0.0
    #: The JSON error body to send instead of the default ``{"error": {"message": "injected KIND"}}``.
    body: dict[str, Any] | None = None


@dataclass(kw_only=True)
class ServerStats:
    requests: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    rule_errors: list[str] = field(default_factory=list)
    authorizations: set[str] = field(default_factory=set)
    in_flight: int = 0
    #: the most requests the server was answering at one time
    max_in_flight: int = 0
    #: with ``serial``: requests waiting in the server's line, and the most that waited at once
    waiting: int = 0
    max_waiting: int = 0
    #: with ``serial``: requests whose client had gone when their turn came (skipped, as llama.cpp's
    #: servers drop a request whose client disconnected while it waited)
    abandoned: int = 0


def last_user_text(body: dict[str, Any]) -> str:
    msgs = body.get("messages") or []
    for m in reversed(msgs):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    return str(body.get("prompt", ""))


def json_bytes(obj: Any) -> bytes:
    """``obj`` as UTF-8 JSON; a text holding a lone surrogate (no UTF-8 form) is written with
    ``\\uXXXX`` escapes, as a server in another language would send it."""
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj).encode("ascii")


class LoopbackServer:
    """``with LoopbackServer(rule, latency=0.05) as srv: srv.base_url`` -> ``http://127.0.0.1:PORT/v1``."""

    def __init__(
        self,
        rule: Rule,
        latency: float = 0.0,
        keep_bodies: bool = False,
        serial: bool = False,
        props: dict[str, Any] | None = None,
    ) -> None:
        self.rule = rule
        #: What ``GET /props`` answers (llama.cpp's server reports its slots there); None: 404, as other servers.
        self.props = props
        #: GET requests received, by path.
        self.gets: dict[str, int] = {}
        self.latency = latency
        self.keep_bodies = keep_bodies
        #: Answer one request at a time, the others waiting in line (as llama.cpp's server with one slot).
        self.serial = serial
        self._serial_lock: asyncio.Lock | None = None
        self.stats = ServerStats()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LoopbackServer:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("loopback server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(10)

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                body_bytes = await reader.readexactly(int(headers.get("content-length", "0")))
                _READER.set(reader)
                if "authorization" in headers:
                    self.stats.authorizations.add(headers["authorization"])
                keep = await self._respond(method, path, body_bytes, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(
        self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if (
            method == "GET"
        ):  # answered at once, beside the requests in line (as llama.cpp answers /props)
            with self._lock:
                self.gets[path] = self.gets.get(path, 0) + 1
            if path == "/props" and self.props is not None:
                self._write(writer, 200, json.dumps(self.props).encode())
            else:
                self._write(writer, 404, b'{"error": {"message": "not found"}}')
            return True
        if self.serial:
            if self._serial_lock is None:
                self._serial_lock = asyncio.Lock()
            queued = self._serial_lock.locked()
            if queued:
                self.stats.waiting += 1
                self.stats.max_waiting = max(self.stats.max_waiting, self.stats.waiting)
            try:
                async with self._serial_lock:
                    if queued:
                        self.stats.waiting -= 1
                        queued = False
                    reader = _READER.get(None)
                    if (
                        reader is not None and reader.at_eof()
                    ):  # the client gave up while this request waited
                        self.stats.abandoned += 1
                        return False
                    return await self._respond_now(method, path, raw, writer)
            finally:
                if queued:
                    self.stats.waiting -= 1
        return await self._respond_now(method, path, raw, writer)

    async def _respond_now(
        self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            return await self._answer(method, path, raw, writer)
        finally:
            self.stats.in_flight -= 1

    async def _answer(
        self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        body = json.loads(raw or b"{}")
        with self._lock:
            self.stats.requests += 1
            if self.keep_bodies:
                self.stats.bodies.append(body)
        try:
            out = self.rule(body)
        except Exception as e:  # a broken rule is a test bug: answer 400 so the client fails fast
            with self._lock:
                self.stats.rule_errors.append(repr(e))
            self._write(
                writer, 400, json.dumps({"error": {"message": f"rule failed: {e!r}"}}).encode()
            )
            return True
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(out, Raw):
            self._write(writer, 200, json_bytes(out.body))
            return True
        if isinstance(out, Fault):
            with self._lock:
                self.stats.faults[out.kind] = self.stats.faults.get(out.kind, 0) + 1
            if out.kind == "drop":
                return False
            if out.kind == "malformed":
                self._write(writer, 200, b'{"id": "x", "choices": [{"mess')
                return True
            status = {"429": 429, "400": 400}.get(out.kind, 500)
            extra = {"retry-after": f"{out.retry_after:g}"} if out.kind == "429" else {}
            error = (
                out.body if out.body is not None else {"error": {"message": f"injected {out.kind}"}}
            )
            self._write(writer, status, json.dumps(error).encode(), extra)
            return True
        text, finish = (out.text, out.finish_reason) if isinstance(out, Reply) else (out, "stop")
        payload = (
            _chat_payload(body, text, finish)
            if path.endswith("/chat/completions")
            else _completion_payload(body, text)
        )
        if isinstance(out, Reply) and out.tool_calls and path.endswith("/chat/completions"):
            message = payload["choices"][0]["message"]
            message["content"] = text or None
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
                for i, (name, args) in enumerate(out.tool_calls)
            ]
            payload["choices"][0]["finish_reason"] = "tool_calls"
        if isinstance(out, Reply) and out.system_fingerprint is not None:
            payload["system_fingerprint"] = out.system_fingerprint
        if isinstance(out, Reply) and out.model is not None:
            payload["model"] = out.model
        self._write(writer, 200, json_bytes(payload))
        return True

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter,
        status: int,
        data: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }[status]
        hdr = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
        for k, v in (headers or {}).items():
            hdr += f"{k}: {v}\r\n"
        writer.write(hdr.encode() + b"\r\n" + data)


def _chat_payload(body: dict[str, Any], text: str, finish: str = "stop") -> dict[str, Any]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish,
    }
    if body.get("logprobs"):
        # The rule's text is the preferred next token; other letters get lower log-probs.
        letters = ["A", "B", "C", "D", "E"]
        tops = [{"token": text, "logprob": -0.1, "bytes": None}] + [
            {"token": x, "logprob": -3.0 - i, "bytes": None}
            for i, x in enumerate(t for t in letters if t != text)
        ]
        choice["logprobs"] = {
            "content": [{"token": text, "logprob": -0.1, "bytes": None, "top_logprobs": tops}]
        }
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "loopback"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(text.split()),
            "total_tokens": prompt_tokens + len(text.split()),
        },
    }


def _completion_payload(body: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "id": "cmpl-loopback",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model", "loopback"),
        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
    }
