"""A conversation with tool calls, as grandrounds sends it, is taken by llama-cpp-python's own
server on the default local model (a null content beside tool calls is refused there with HTTP
500, so the second turn of an agent benchmark never got an answer)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from grandrounds.core.records import Message, ToolCallPart, ToolResultPart
from grandrounds.providers.tools import openai_tool_messages

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llama_cpp.server") is None
        or importlib.util.find_spec("uvicorn") is None,
        reason="llama-cpp-python's server is not installed (the dev extra installs it)",
    ),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    from grandrounds.providers.llamacpp import packaged_gguf

    port = _port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(packaged_gguf("smollm2")),
            "--n_ctx",
            "2048",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/models", timeout=2).read()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("llama-cpp-python's server did not start")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _post(base: str, messages: list[dict[str, object]]) -> int:
    body = {
        "model": "smollm2",
        "max_tokens": 4,
        "temperature": 0,
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": "evaluates an arithmetic expression",
                    "parameters": {
                        "type": "object",
                        "properties": {"expression": {"type": "string"}},
                    },
                },
            }
        ],
    }
    req = urllib.request.Request(
        base + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_the_second_turn_of_a_tool_conversation_is_answered(server: str) -> None:
    conversation = (
        Message("user", "What is 6*7? Use the calculator."),
        Message("assistant", (ToolCallPart("call_0", "calculator", '{"expression": "6*7"}'),)),
        Message("tool", (ToolResultPart("call_0", "42", "calculator"),)),
    )
    wire = openai_tool_messages(conversation)
    assert wire[1]["content"] == "" and wire[1]["tool_calls"]
    assert _post(server, wire) == 200
    # the same conversation with a null content, as it used to go out: the server refuses it
    wire[1]["content"] = None
    assert _post(server, wire) == 500
