"""Native tool use on the wire: tool specifications, tool calls and their results as each API
takes them, and the tool calls read back out of a reply.

OpenAI's Chat Completions API (and the vLLM, SGLang and llama.cpp servers that speak it) takes
``tools: [{"type": "function", "function": {name, description, parameters}}]``; an assistant
message that called tools carries ``tool_calls: [{id, type: "function", function: {name,
arguments}}]`` (``arguments`` a JSON text), and each result is a ``{"role": "tool",
"tool_call_id", "content"}`` message. Anthropic's Messages API takes ``tools: [{name,
description, input_schema}]``; a call is a ``tool_use`` content block (``input`` an object) and
its result a ``tool_result`` block in the next user message. A request without tools and without
tool parts is sent exactly as before tools existed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grandrounds.core.records import Message, Request, ToolCallPart, ToolSpec
from grandrounds.providers.base import ProviderError
from grandrounds.providers.images import anthropic_content, openai_content


def uses_tools(request: Request) -> bool:
    """The request offers tools or carries tool calls or results in its messages."""
    return bool(request.tools) or any(m.tool_calls or m.tool_results for m in request.messages)


def _plain(message: Message) -> Message:
    """The message without its tool parts (what remains is text and images)."""
    if isinstance(message.content, str):
        return message
    rest = tuple(p for p in message.content if p.type in ("text", "image"))
    return Message(message.role, rest)


# ---- OpenAI-compatible ------------------------------------------------------------------------
def openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def openai_tool_choice(choice: str) -> Any:
    """``auto`` / ``required`` / ``none`` as given; any other value names one tool."""
    return (
        choice
        if choice in ("auto", "required", "none")
        else {"type": "function", "function": {"name": choice}}
    )


def openai_tool_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages for the Chat Completions API, tool calls and results included."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.tool_results:
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                for r in m.tool_results
            )
            continue
        wire: dict[str, Any] = {"role": m.role, "content": openai_content(_plain(m))}
        if m.tool_calls:
            # "" rather than null beside tool calls: llama-cpp-python's server (and some others)
            # refuse a null content with HTTP 500; OpenAI and vLLM take either
            wire["content"] = m.text or ""
            wire["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
        out.append(wire)
    return out


def read_openai_tool_calls(message: Any) -> tuple[ToolCallPart, ...]:
    """The tool calls of a Chat Completions ``message``; ProviderError where they are malformed."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not calls:
        return ()
    if not isinstance(calls, list):
        raise ProviderError("malformed response body: tool_calls is not a list", retryable=True)
    out = []
    for i, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ProviderError(
                f"malformed response body: tool call {i} has no function name", retryable=True
            )
        args = fn.get("arguments")
        text = (
            args
            if isinstance(args, str)
            else json.dumps(args if args is not None else {}, ensure_ascii=False)
        )
        out.append(
            ToolCallPart(id=str(c.get("id") or f"call_{i}"), name=fn["name"], arguments=text)
        )
    return tuple(out)


# ---- Anthropic ------------------------------------------------------------------------------
def anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": dict(t.parameters) or {"type": "object"},
        }
        for t in tools
    ]


def anthropic_tool_choice(choice: str) -> dict[str, Any] | None:
    """OpenAI-style choices in Anthropic's shape (``none`` is sent as no tools: None)."""
    if choice == "required":
        return {"type": "any"}
    if choice in ("", "auto"):
        return {"type": "auto"}
    if choice == "none":
        return None
    return {"type": "tool", "name": choice}


def _tool_input(arguments: str) -> Any:
    """A call's arguments as the object Anthropic takes back (text that is not an object is wrapped)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_unparsed": arguments}
    return value if isinstance(value, dict) else {"_value": value}


def anthropic_tool_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Non-system messages for the Messages API, tool use and results included."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.tool_results:
            blocks = [
                {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content}
                for r in m.tool_results
            ]
            out.append({"role": "user", "content": blocks})
            continue
        if m.tool_calls:
            text = [{"type": "text", "text": m.text}] if m.text else []
            uses = [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)}
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": text + uses})
            continue
        out.append({"role": m.role, "content": anthropic_content(m)})
    return out


def read_anthropic_tool_calls(content: Sequence[Any]) -> tuple[ToolCallPart, ...]:
    """The ``tool_use`` blocks of a Messages API reply as tool calls."""
    out = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            name = block.get("name")
            if not isinstance(name, str):
                raise ProviderError(
                    "malformed response body: a tool_use block without a name", retryable=True
                )
            args = json.dumps(
                block.get("input") if block.get("input") is not None else {},
                ensure_ascii=False,
                sort_keys=True,
            )
            out.append(ToolCallPart(id=str(block.get("id") or ""), name=name, arguments=args))
    return tuple(out)
