"""A provider that answers from a Python function: unit tests without any server."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from grandrounds.core.params import Param
from grandrounds.core.records import Request, Response, ToolCallPart, Usage
from grandrounds.providers.base import ModelSpec, Provider, ProviderError

Script = Callable[
    [Request], "str | tuple[str, str] | dict[str, float] | list[ToolCallPart] | Exception"
]


class ScriptedProvider(Provider):
    """``scripted/NAME``: ``script(request)`` returns text, (text, finish reason), option scores, or an exception to raise."""

    request_kinds = frozenset({"chat", "next_token", "loglikelihood"})
    model_options = (
        Param(
            name="script",
            type=cast(type, Callable),  # the ABC, which isinstance checks (a special form to mypy)
            help='Python function request -> reply (tests; default: always "A")',
        ),
    )
    example = "scripted/NAME (tests)"
    default_concurrency = 64
    sees_images = True
    supports_tools = True

    def __init__(self, spec: ModelSpec, script: Script | None = None, **options: Any) -> None:
        super().__init__(spec, **options)
        self.script = script or (lambda req: "A")
        self.calls = 0

    def image_limits(self) -> Any:
        from grandrounds.providers.images import ImageLimits

        return ImageLimits(source="the scripted provider")

    async def call(self, request: Request) -> Response:
        self.calls += 1
        start = time.perf_counter()
        out = self.script(request)
        if isinstance(out, ProviderError):
            raise out
        if isinstance(out, Exception):
            raise ProviderError(str(out), retryable=False)
        latency = time.perf_counter() - start
        if isinstance(out, dict):
            return Response(key=request.key(), scores=out, latency=latency)
        if isinstance(out, list):  # native tool calls
            return Response(
                key=request.key(),
                text="",
                latency=latency,
                finish_reason="tool_calls",
                tool_calls=tuple(out),
            )
        text, finish = out if isinstance(out, tuple) else (out, "stop")
        return Response(
            key=request.key(),
            text=text,
            usage=Usage(0, len(text.split())),
            latency=latency,
            finish_reason=finish,
        )
