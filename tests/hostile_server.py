"""An OpenAI-compatible endpoint on 127.0.0.1 that misbehaves on purpose, one way per request.

``HostileServer(mode)`` answers each request by ``mode`` (a name, or ``mode(body) -> name`` to
vary it by request):

- ``ok``: a well-formed chat completion whose text is ``HostileServer.TEXT``;
- ``endless``: 200 and a chunked JSON-looking body that never ends;
- ``huge_body``: 200 announcing ``big`` bytes in Content-Length, and sending them;
- ``huge_chunked``: 200 and ``big`` bytes in chunks, with no length announced;
- ``huge_header``: a 200 whose one header is ``header_size`` bytes long;
- ``many_headers``: a 200 with 500 headers;
- ``close_delimited``: a well-formed completion without Content-Length or chunking, sent in
  pieces, its end marked only by the server closing the connection (HTTP/1.1 allows it);
- ``gzip_bomb``: 200, ``Content-Encoding: gzip``, a small body that inflates to ``big`` bytes;
- ``gzip_ok``: a well-formed completion, gzip-compressed;
- ``html``: 200 with an HTML page, as a web server or captive portal at the wrong URL would;
- ``null_content``: 200 JSON whose message content is null;
- ``hang``: reads the request and never answers;
- ``trickle``: 200 headers, then one byte of body every 50 ms, forever;
- ``echo_key``: 401 JSON echoing the Authorization header and the bare token, as some gateways do;
- ``echo_headers``: 502 plain text listing every request header, as a debugging proxy does.

``stats`` counts requests (calls; GET look-ups apart), body bytes written per request and the Authorization headers seen with calls.
Nothing is sent beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MB = 1024 * 1024


@dataclass
class HostileStats:
    requests: int = 0
    #: GET requests (a client looking up the server's slots before its calls), answered in the same mode
    lookups: int = 0
    modes: list[str] = field(default_factory=list)
    #: body bytes the server managed to write, per request (what the client let into its socket)
    bytes_sent: list[int] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)


class HostileServer:
    TEXT = "B. Protamine sulfate reverses heparin."

    def __init__(
        self,
        mode: str | Callable[[dict[str, Any]], str],
        big: int = 64 * MB,
        header_size: int = 100 * 1024,
    ) -> None:
        self.mode = mode
        self.big = big
        self.header_size = header_size
        self.stats = HostileStats()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("hostile server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in list(self._tasks):  # hanging and endless answers end with the server
                task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.loads(raw or b"{}")
                mode = self.mode(body) if callable(self.mode) else self.mode
                if lines[0].startswith(
                    "GET "
                ):  # a client asking what the server is (its slots): not a call
                    self.stats.lookups += 1
                else:
                    self.stats.requests += 1
                    self.stats.authorizations.append(headers.get("authorization", ""))
                self.stats.modes.append(mode)
                self.stats.bytes_sent.append(0)
                if not await self._answer(mode, body, headers, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError, ValueError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]

    def _count(self, n: int) -> None:
        self.stats.bytes_sent[-1] += n

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()  # blocks while the client does not read: what it refuses stays unsent
        self._count(len(data))

    async def _answer(
        self, mode: str, body: dict[str, Any], headers: dict[str, str], writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False closes the connection."""
        ok = json.dumps(completion(self.TEXT)).encode()
        if mode == "ok":
            writer.write(head(200, "application/json", {"Content-Length": str(len(ok))}) + ok)
            return True
        if mode == "close_delimited":
            writer.write(head(200, "application/json", {"Connection": "close"}))
            for i in range(0, len(ok), 50):
                await self._send(writer, ok[i : i + 50])
                await asyncio.sleep(0.01)
            return False
        if mode == "endless":
            writer.write(head(200, "application/json", {"Transfer-Encoding": "chunked"}))
            piece = b'{"choices": [' + b" " * (64 * 1024)
            while True:
                await self._send(writer, b"%x\r\n%s\r\n" % (len(piece), piece))
        if mode in ("huge_body", "huge_chunked"):
            chunked = mode == "huge_chunked"
            writer.write(
                head(
                    200,
                    "application/json",
                    {"Transfer-Encoding": "chunked"}
                    if chunked
                    else {"Content-Length": str(self.big)},
                )
            )
            piece, left = b"x" * (256 * 1024), self.big
            while left > 0:
                part = piece[: min(left, len(piece))]
                await self._send(writer, b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                left -= len(part)
            if chunked:
                await self._send(writer, b"0\r\n\r\n")
            return True
        if mode in ("gzip_bomb", "gzip_ok"):
            data = gzip.compress(ok) if mode == "gzip_ok" else inflating_to(self.big)
            writer.write(
                head(
                    200,
                    "application/json",
                    {"Content-Encoding": "gzip", "Content-Length": str(len(data))},
                )
            )
            await self._send(writer, data)
            return True
        if mode == "huge_header":
            writer.write(
                head(
                    200,
                    "application/json",
                    {"X-Padding": "a" * self.header_size, "Content-Length": str(len(ok))},
                )
                + ok
            )
            return True
        if mode == "many_headers":
            extra = {f"X-Filler-{i}": "1" for i in range(500)} | {"Content-Length": str(len(ok))}
            writer.write(head(200, "application/json", extra) + ok)
            return True
        if mode == "html":
            page = b"<!DOCTYPE html><html><head><title>Sign in to the network</title></head><body><h1>Welcome</h1></body></html>"
            writer.write(
                head(200, "text/html; charset=utf-8", {"Content-Length": str(len(page))}) + page
            )
            return True
        if mode == "null_content":
            data = json.dumps(completion(None)).encode()
            writer.write(head(200, "application/json", {"Content-Length": str(len(data))}) + data)
            return True
        if mode == "hang":
            await asyncio.Event().wait()  # until the server stops or the client goes
        if mode == "trickle":
            writer.write(head(200, "application/json", {"Transfer-Encoding": "chunked"}))
            while True:
                await self._send(writer, b"1\r\n \r\n")
                await asyncio.sleep(0.05)
        if mode == "echo_key":
            auth = headers.get("authorization", "")
            token = auth.split(" ", 1)[-1]
            msg = (
                f"Incorrect API key provided: {token}. You sent the header 'Authorization: {auth}'."
            )
            data = json.dumps(
                {
                    "error": {
                        "message": msg,
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                }
            ).encode()
            writer.write(head(401, "application/json", {"Content-Length": str(len(data))}) + data)
            return True
        if mode == "echo_headers":
            data = (
                "upstream failed; request headers were:\n"
                + "\n".join(f"{k}: {v}" for k, v in headers.items())
            ).encode()
            writer.write(head(502, "text/plain", {"Content-Length": str(len(data))}) + data)
            return True
        raise ValueError(f"unknown mode {mode!r}")


def head(status: int, content_type: str, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 401: "Unauthorized", 502: "Bad Gateway"}[status]
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {content_type}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def completion(text: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
    }


def inflating_to(size: int) -> bytes:
    """A gzip body that inflates to ``size`` spaces, made without holding them (about size/1000 bytes)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip framing
    block, parts = b" " * (1024 * 1024), []
    for _ in range(size // len(block)):
        parts.append(z.compress(block))
    return b"".join(parts) + z.compress(b" " * (size % len(block))) + z.flush()
