"""How many requests an OpenAI-compatible server works on at once, where it says so.

A server answers a few requests at a time and queues the rest; the client's timeout runs while a
request waits in that queue, so sending more than the server's slots only turns waiting into
timeouts. Where the server reports its slots, the executor starts from that number:

- llama.cpp's server: ``GET /props`` holds ``total_slots`` (its ``--parallel``); older builds give
  ``n_parallel`` in ``default_generation_settings``.
- SGLang: ``GET /get_server_info`` holds its settings, ``max_running_requests`` among them (None
  when left to SGLang, which then sizes it from memory: nothing to read).
- llama-cpp-python's server answers one request at a time (one lock around its model); it is known
  by the title of its ``GET /openapi.json``.

vLLM publishes no setting for its ``max_num_seqs`` (256 by default), nor Ollama its
``OLLAMA_NUM_PARALLEL``: for those, and any other local or unknown server that says nothing, the
window slow-starts from a few calls up to the provider's default (:func:`slow_start`); hosted APIs
with high published limits (:data:`HOSTED_APIS`) start at the default.
Each look is a GET with a short deadline; any failure (404, not JSON, a refused connection) means
"not reported", and the next look is tried.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from grandrounds.providers.base import ProviderError
from grandrounds.providers.http import HttpClient

#: Seconds each look may take.
PROBE_TIMEOUT = 3.0
#: The title llama-cpp-python's server gives its OpenAPI document (llama_cpp/server/app.py).
LLAMA_CPP_PYTHON_TITLE = "llama.cpp Python API"


#: Hosts of hosted APIs whose limits are high and published (calls are limited by rate, not by a
#: queue in front of one model): their calls start at the provider's default without slow start.
HOSTED_APIS = frozenset(
    {
        "api.openai.com",
        "api.anthropic.com",
        "generativelanguage.googleapis.com",
        "openrouter.ai",
        "api.together.xyz",
        "api.groq.com",
        "api.mistral.ai",
        "api.deepseek.com",
        "api.fireworks.ai",
        "api.x.ai",
        "dashscope.aliyuncs.com",
        "dashscope-intl.aliyuncs.com",
        "open.bigmodel.cn",
        "api.moonshot.cn",
        "api.siliconflow.cn",
    }
)
#: Host suffixes of hosted APIs served under per-account names (Azure OpenAI).
HOSTED_SUFFIXES = (".openai.azure.com",)


def slow_start(base_url: str) -> bool:
    """Whether calls to ``base_url`` start from a small window when the server reports no slots:
    any server over HTTP but a known hosted API (a provider without a URL runs in this process)."""
    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return False
    return bool(host) and host not in HOSTED_APIS and not host.endswith(HOSTED_SUFFIXES)


def server_root(base_url: str) -> str:
    """The server's own root: the API base without its trailing ``/v1``."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def llama_cpp_slots(props: Any) -> int | None:
    """llama.cpp's ``/props``: ``total_slots``, else ``default_generation_settings.n_parallel``."""
    if not isinstance(props, dict):
        return None
    found = _positive(props.get("total_slots"))
    settings = props.get("default_generation_settings")
    if found is None and isinstance(settings, dict):
        found = _positive(settings.get("n_parallel"))
    return found


def sglang_slots(info: Any) -> int | None:
    """SGLang's ``/get_server_info``: ``max_running_requests`` where it was set."""
    return _positive(info.get("max_running_requests")) if isinstance(info, dict) else None


def llama_cpp_python_slots(openapi: Any) -> int | None:
    """One for llama-cpp-python's server (known by its OpenAPI title), None for any other."""
    info = openapi.get("info") if isinstance(openapi, dict) else None
    title = info.get("title") if isinstance(info, dict) else None
    return 1 if isinstance(title, str) and LLAMA_CPP_PYTHON_TITLE in title else None


#: (path under the server's root, how to read its slots, where it said so), in the order asked.
LOOKS = (
    ("/props", llama_cpp_slots, "llama.cpp /props"),
    ("/get_server_info", sglang_slots, "SGLang /get_server_info max_running_requests"),
    ("/openapi.json", llama_cpp_python_slots, "llama-cpp-python: one request at a time"),
)


async def probe_slots(http: HttpClient, base_url: str) -> tuple[int, str] | None:
    """The server's own number of slots and where it said so, or None where it reports none."""
    root = server_root(base_url)
    for path, read, source in LOOKS:
        try:
            reply = await http.get(root + path, PROBE_TIMEOUT)
        except ProviderError:
            continue
        if reply.status != 200:
            continue
        try:
            body = json.loads(reply.body)
        except ValueError:
            continue
        slots = read(body)
        if slots is not None:
            return slots, source
    return None
