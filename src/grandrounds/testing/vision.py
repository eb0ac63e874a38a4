"""A loopback server on 127.0.0.1 that checks the images a client sends, in both chat wire formats.

``POST /v1/chat/completions`` takes OpenAI-compatible image parts
(``{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,...", "detail": "auto"}}``)
and ``POST /v1/messages`` Anthropic's (``{"type": "image", "source": {"type": "base64",
"media_type": "image/jpeg", "data": "..."}}``). Every image part of every message is decoded and
opened with Pillow to the last pixel; a part that is not a complete image in a supported format
(JPEG, PNG, GIF, WebP), whose declared media type is not what the bytes are, or that carries no
data is a *problem*: it goes to ``stats.problems`` and the request is answered 400 with the
provider's error body, so the client fails as a real API would make it fail.

A good request is answered by ``rule(seen)``, where :class:`Seen` holds the request's texts and
images (sha256 of the decoded bytes, format, size, mode, and where each part stood), as
:class:`grandrounds.testing.LoopbackServer` answers by its rule: text, a
:class:`~grandrounds.testing.Reply` with a finish reason, or a :class:`~grandrounds.testing.Fault`.
With ``expected`` (question text -> sha256 of the image that must come with it, or a callable
``expect(seen) -> problem | None``) the server also checks that each question came with its own
image, in its own message, and no other: each miss is a problem and counts in ``stats.mismatches``.
A test asserts ``stats.problems == []`` and ``stats.mismatches == 0``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hashlib
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal

from PIL import Image

from grandrounds.testing import Fault, LoopbackServer, Reply, ServerStats, _chat_payload, json_bytes

#: The media types both APIs take for images.
SUPPORTED = ("image/jpeg", "image/png", "image/gif", "image/webp")
#: Prompt tokens an image counts for in the usage the server reports (words count one each).
IMAGE_TOKENS = 85
#: Fault kind -> (HTTP status, Anthropic error type), as in testing/batch.py.
_FAULTS = {
    "429": (429, "rate_limit_error"),
    "500": (500, "api_error"),
    "529": (529, "overloaded_error"),
    "400": (400, "invalid_request_error"),
}
_PATHS: dict[str, Literal["openai", "anthropic"]] = {
    "/v1/chat/completions": "openai",
    "/v1/messages": "anthropic",
}
_DATA_URL = re.compile(r"data:([^;,]*)((?:;[^;,]*)*),(.*)", re.DOTALL)
#: The image part's type on each wire.
_IMAGE_PART = {"openai": "image_url", "anthropic": "image"}


@dataclass(frozen=True, kw_only=True)
class SeenImage:
    sha256: str  #: of the decoded bytes
    media_type: str  #: what the bytes are (Pillow's format as a MIME type), e.g. "image/jpeg"
    width: int
    height: int
    mode: str  #: Pillow's mode, e.g. "RGB", "L"
    #: where it stood: index in ``body["messages"]`` and in that message's content list
    message: int = 0
    part: int = 0


@dataclass(frozen=True, kw_only=True)
class Seen:
    """One request as the rule sees it. ``texts`` are every text in order (Anthropic's ``system``
    first, at message -1; a string content is one text at part 0); ``text_places`` gives each
    one's (message, part)."""

    texts: list[str]
    images: list[SeenImage]
    body: dict[str, Any]
    wire: Literal["openai", "anthropic"]
    text_places: list[tuple[int, int]] = field(default_factory=list)


#: rule(seen) -> reply text, a Reply (with its finish reason), or a Fault to inject.
VisionRule = Callable[[Seen], "str | Reply | Fault"]
Expect = Callable[[Seen], "str | None"]


@dataclass(kw_only=True)
class VisionStats(ServerStats):
    """ServerStats (requests, faults, bodies, rule_errors, in_flight, max_in_flight, ...) and the images."""

    #: image parts received, good or bad
    images: int = 0
    #: decoded bytes of the image parts that decoded from base64
    image_bytes: int = 0
    #: sha256 of every complete image seen
    distinct_images: set[str] = field(default_factory=set)
    #: one line each: a bad image part, a malformed request, or a miss against ``expected``
    problems: list[str] = field(default_factory=list)
    #: misses against ``expected`` (each also a line of ``problems``)
    mismatches: int = 0
    #: per request answered by the rule, the sha256 of its images in order
    request_images: list[list[str]] = field(default_factory=list)
    #: requests per wire, "openai" and "anthropic"
    wires: dict[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class _Reading:
    """What one request body holds: its texts and images, the problems found, the body to keep."""

    kept: dict[str, Any]
    texts: list[str] = field(default_factory=list)
    text_places: list[tuple[int, int]] = field(default_factory=list)
    images: list[SeenImage] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    parts: int = 0
    size: int = 0


def image_file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def by_image(answers: Mapping[str, str], default: str) -> VisionRule:
    """A rule answering ``answers[sha256 of the first image]``, or ``default`` (no image, or not listed)."""

    def rule(seen: Seen) -> str:
        return answers.get(seen.images[0].sha256, default) if seen.images else default

    return rule


class VisionServer(LoopbackServer):
    """``with VisionServer(rule, expected={question: sha256}) as srv``: ``srv.base_url``
    (``http://127.0.0.1:PORT/v1``, OpenAI-compatible) and ``srv.anthropic_url``
    (``http://127.0.0.1:PORT``, the Messages API's base)."""

    def __init__(
        self,
        rule: VisionRule,
        expected: Mapping[str, str] | Expect | None = None,
        image_order: Literal["before", "after", "any"] = "any",
        latency: float = 0.0,
        keep_bodies: bool = False,
        serial: bool = False,
        reject_mismatches: bool = False,
    ) -> None:
        # the base server keeps the rule; this one calls it with a Seen, not the body
        super().__init__(rule, latency=latency, keep_bodies=keep_bodies, serial=serial)  # type: ignore[arg-type]
        self.vision_rule = rule
        self.expected = expected
        #: with ``expected`` as a mapping: where a question's image must stand in its message
        self.image_order = image_order
        #: answer a request that misses ``expected`` with 400 instead of the rule's answer
        self.reject_mismatches = reject_mismatches
        self.stats: VisionStats = VisionStats()

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> VisionServer:
        super().__enter__()
        return self

    async def _answer(
        self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        wire = _PATHS.get(path.split("?", 1)[0])
        with self._lock:
            self.stats.requests += 1
            n = self.stats.requests
            if wire:
                self.stats.wires[wire] = self.stats.wires.get(wire, 0) + 1
        body = _json_object(raw)
        if wire is None or method != "POST" or body is None:
            what = (
                f"{method} {path}"
                if wire is None or method != "POST"
                else "a body that is not a JSON object"
            )
            return self._reject(
                writer,
                wire or "openai",
                n,
                [f"{what}: not a chat request"],
                404 if wire is None else 400,
            )
        reading = await asyncio.to_thread(read_request, body, wire)
        self._count(reading)
        if reading.problems:
            return self._reject(writer, wire, n, reading.problems)
        seen = Seen(
            texts=reading.texts,
            images=reading.images,
            body=body,
            wire=wire,
            text_places=reading.text_places,
        )
        misses = self._misses(seen)
        with self._lock:
            self.stats.request_images.append([im.sha256 for im in seen.images])
            self.stats.mismatches += len(misses)
            self.stats.problems.extend(f"request {n} ({wire}): {m}" for m in misses)
        if misses and self.reject_mismatches:
            return self._reject(writer, wire, n, misses, record=False)
        try:
            out = self.vision_rule(seen)
        except Exception as e:  # a broken rule is a test bug: answer 400 so the client fails fast
            with self._lock:
                self.stats.rule_errors.append(repr(e))
            return self._reject(writer, wire, n, [f"rule failed: {e!r}"], record=False)
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(out, Fault):
            return self._fault(writer, wire, out)
        reply = out if isinstance(out, Reply) else Reply(text=out)
        payload = (
            _openai_reply(body, seen, reply)
            if wire == "openai"
            else _anthropic_reply(body, seen, reply)
        )
        self._write(writer, 200, json_bytes(payload))
        return True

    def _count(self, reading: _Reading) -> None:
        with self._lock:
            self.stats.images += reading.parts
            self.stats.image_bytes += reading.size
            self.stats.distinct_images.update(im.sha256 for im in reading.images)
            if self.keep_bodies:
                self.stats.bodies.append(reading.kept)

    def _misses(self, seen: Seen) -> list[str]:
        if self.expected is None:
            return []
        if callable(self.expected):
            problem = self.expected(seen)
            return [problem] if problem else []
        return expectation_problems(seen, self.expected, self.image_order)

    def _reject(
        self,
        writer: asyncio.StreamWriter,
        wire: str,
        n: int,
        problems: list[str],
        status: int = 400,
        record: bool = True,
    ) -> bool:
        if record:
            with self._lock:
                self.stats.problems.extend(f"request {n} ({wire}): {p}" for p in problems)
        message = "; ".join(problems)
        if wire == "anthropic":
            kind = "not_found_error" if status == 404 else "invalid_request_error"
            err: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
        else:
            err = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_image",
                }
            }
        self._write(writer, status, json_bytes(err))
        return True

    def _fault(self, writer: asyncio.StreamWriter, wire: str, out: Fault) -> bool:
        with self._lock:
            self.stats.faults[out.kind] = self.stats.faults.get(out.kind, 0) + 1
        if out.kind == "drop":
            return False
        if out.kind == "malformed":
            self._write(
                writer,
                200,
                b'{"id": "x", "choices": [{"mess'
                if wire == "openai"
                else b'{"id": "x", "type": "message", "content": [{"ty',
            )
            return True
        status, etype = _FAULTS.get(out.kind, (500, "api_error"))
        if out.body is not None:
            error = out.body
        elif wire == "anthropic":
            error = {"type": "error", "error": {"type": etype, "message": f"injected {out.kind}"}}
        else:
            error = {"error": {"message": f"injected {out.kind}"}}
        extra = {"retry-after": f"{out.retry_after:g}"} if out.kind in ("429", "529") else {}
        self._write(writer, status, json.dumps(error).encode(), extra)
        return True

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter,
        status: int,
        data: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:  # 529, Anthropic's "overloaded"
            reason = "Overloaded"
        hdr = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: {len(data)}\r\n"
        for k, v in (headers or {}).items():
            hdr += f"{k}: {v}\r\n"
        writer.write(hdr.encode() + b"\r\n" + data)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


# ---- reading a request ------------------------------------------------------------------------
def read_request(body: dict[str, Any], wire: str) -> _Reading:
    """The texts and images of a chat request on ``wire`` ("openai" or "anthropic"), every problem
    with them, and a copy of the body with each image's data replaced by ``<sha256:...>``."""
    r = _Reading(kept=copy.deepcopy(body))
    if wire == "anthropic":
        for k in ("model", "max_tokens"):
            if k not in body:
                r.problems.append(f"no {k}")
        _read_system(r, body.get("system"))
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        r.problems.append("no messages list")
        return r
    for i, m in enumerate(msgs):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            r.texts.append(content)
            r.text_places.append((i, 0))
        elif isinstance(content, list):
            for j, part in enumerate(content):
                _read_part(r, wire, i, j, m.get("role"), part, r.kept["messages"][i]["content"][j])
        else:
            r.problems.append(f"message {i}: content is neither a string nor a list of parts")
    return r


def _read_system(r: _Reading, system: Any) -> None:
    if system is None:
        return
    if isinstance(system, str):
        r.texts.append(system)
        r.text_places.append((-1, 0))
        return
    if not isinstance(system, list):
        r.problems.append("system is neither a string nor a list of text blocks")
        return
    for j, block in enumerate(system):
        if (
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ):
            r.texts.append(block["text"])
            r.text_places.append((-1, j))
        else:
            r.problems.append(f"system block {j}: not a text block")


def _read_part(r: _Reading, wire: str, i: int, j: int, role: Any, part: Any, kept: Any) -> None:
    where = f"message {i} part {j}"
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        if isinstance(part.get("text"), str):
            r.texts.append(part["text"])
            r.text_places.append((i, j))
        else:
            r.problems.append(f"{where}: a text part without text")
        return
    if kind != _IMAGE_PART[wire]:
        r.problems.append(
            f"{where}: part type {kind!r} is not one the {wire} wire takes (text, {_IMAGE_PART[wire]})"
        )
        return
    r.parts += 1
    if role != "user":
        r.problems.append(f"{where}: an image in a {role!r} message (images go in user messages)")
    data, declared, problem = _openai_source(part) if wire == "openai" else _anthropic_source(part)
    if problem is None:
        decoded, problem = _decode(data, declared)
    if problem is not None:
        r.problems.append(f"{where}: {problem}")
        _replace_data(kept, wire, declared, f"<bad: {len(data or '')} chars>")
        return
    r.size += len(decoded)
    sha = hashlib.sha256(decoded).hexdigest()
    _replace_data(kept, wire, declared, f"<sha256:{sha}>")
    image, problem = _open_image(decoded, declared, sha, i, j)
    if image is None:
        r.problems.append(f"{where}: {problem}")
    else:
        r.images.append(image)


def _openai_source(part: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """(base64 data, declared media type, problem) of an OpenAI ``image_url`` part."""
    iu = part.get("image_url")
    if not isinstance(iu, dict) or not isinstance(iu.get("url"), str):
        return None, "", "an image_url part without image_url.url"
    if "detail" in iu and iu["detail"] not in ("auto", "low", "high"):
        return None, "", f"image_url.detail is {iu['detail']!r}, not auto, low or high"
    url = iu["url"]
    m = _DATA_URL.fullmatch(url)
    if not m:
        return None, "", f"not a data URL: {url[:60]!r}"
    if "base64" not in m.group(2).split(";"):
        return None, m.group(1), "a data URL without ;base64"
    return m.group(3), m.group(1), None


def _anthropic_source(part: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """(base64 data, declared media type, problem) of an Anthropic ``image`` block."""
    src = part.get("source")
    if not isinstance(src, dict):
        return None, "", "an image block without source"
    if src.get("type") != "base64":
        return None, "", f"source type {src.get('type')!r}, not base64"
    media, data = src.get("media_type"), src.get("data")
    if not isinstance(media, str):
        return None, "", "source without media_type"
    if isinstance(data, str) and data.startswith("data:"):
        return None, media, "source.data is a data URL, not bare base64"
    return data if isinstance(data, str) else None, media, None


def _decode(data: str | None, declared: str) -> tuple[bytes, str | None]:
    if not data:
        return b"", "an image part with no data"
    if declared not in SUPPORTED:
        return b"", f"media type {declared!r} is not one of {', '.join(SUPPORTED)}"
    try:
        return base64.b64decode(data, validate=True), None
    except (binascii.Error, ValueError) as e:
        return b"", f"data is not base64 ({e})"


def _open_image(
    data: bytes, declared: str, sha: str, i: int, j: int
) -> tuple[SeenImage | None, str]:
    """The image opened to its last pixel (and a PNG's chunks checked to the end), or why it can't be."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            fmt, size, mode = im.format or "", im.size, im.mode
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, ... for a bad file
        return (
            None,
            f"not a complete image: {type(e).__name__}: {e} ({len(data)} bytes, declared {declared})",
        )
    actual = Image.MIME.get(fmt, f"image/{fmt.lower()}")
    if actual != declared:
        return None, f"media type {declared} but the data is {fmt} ({actual})"
    return SeenImage(
        sha256=sha, media_type=actual, width=size[0], height=size[1], mode=mode, message=i, part=j
    ), ""


def _replace_data(kept: Any, wire: str, declared: str, mark: str) -> None:
    if not isinstance(kept, dict):
        return
    if (
        wire == "openai"
        and isinstance(kept.get("image_url"), dict)
        and isinstance(kept["image_url"].get("url"), str)
    ):
        if kept["image_url"]["url"].startswith("data:"):
            kept["image_url"]["url"] = f"data:{declared};base64,{mark}"
    elif wire == "anthropic" and isinstance(kept.get("source"), dict) and "data" in kept["source"]:
        kept["source"]["data"] = mark


# ---- expectations -------------------------------------------------------------------------------
def expectation_problems(seen: Seen, expected: Mapping[str, str], order: str = "any") -> list[str]:
    """Each miss of ``seen`` against ``expected`` (question -> sha256 of its image): a text holding a
    question (the longest one it contains) must share its message with that image, and no other;
    with ``order`` "before" (or "after") the image must come before (after) the text in the message.
    An image no question accounts for is extra; a request with no expected question is a miss too."""
    out: list[str] = []
    claimed: set[int] = set()
    asked = 0
    for text, (mi, pj) in zip(seen.texts, seen.text_places):
        key = max((k for k in expected if k and k in text), key=len, default=None)
        if key is None:
            continue
        asked += 1
        want, q = expected[key], _short(key)
        here = [k for k, im in enumerate(seen.images) if im.message == mi and k not in claimed]
        match = next((k for k in here if seen.images[k].sha256 == want), None)
        if match is None:
            elsewhere = [im.message for im in seen.images if im.sha256 == want]
            got = ", ".join(seen.images[k].sha256[:12] for k in here)
            if elsewhere:
                out.append(
                    f"{q}: its image {want[:12]} is in message {elsewhere[0]}, not with the question in message {mi}"
                )
            elif here:
                out.append(f"{q}: wrong image {got}, expected {want[:12]}")
            else:
                out.append(f"{q}: missing image, expected {want[:12]} in message {mi}")
            claimed.update(here)
            continue
        claimed.add(match)
        part = seen.images[match].part
        if (order == "before" and part > pj) or (order == "after" and part < pj):
            out.append(
                f"{q}: the image is part {part}, the text part {pj} (expected the image {order} the text)"
            )
    for k, im in enumerate(seen.images):
        if k not in claimed:
            out.append(f"extra image {im.sha256[:12]} in message {im.message} part {im.part}")
    if not asked:
        out.append(f"no expected question in the request (texts: {_short(' | '.join(seen.texts))})")
    return out


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[: n - 1] + "…")


# ---- replies ----------------------------------------------------------------------------------
def _prompt_tokens(seen: Seen) -> int:
    return sum(len(t.split()) for t in seen.texts) + IMAGE_TOKENS * len(seen.images)


def _openai_reply(body: dict[str, Any], seen: Seen, reply: Reply) -> dict[str, Any]:
    payload = _chat_payload(body, reply.text, reply.finish_reason)
    prompt, completion = _prompt_tokens(seen), len(reply.text.split())
    payload["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return payload


def _anthropic_reply(body: dict[str, Any], seen: Seen, reply: Reply) -> dict[str, Any]:
    stop = {"stop": "end_turn", "length": "max_tokens"}.get(
        reply.finish_reason, reply.finish_reason
    )
    return {
        "id": "msg_vision",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "vision"),
        "content": [{"type": "text", "text": reply.text}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": _prompt_tokens(seen), "output_tokens": len(reply.text.split())},
    }
