"""MedAgentBench v1's environment: a FHIR record server the agent reads, POSTs recorded and never sent.

Text actions are read as the official loop reads them (MedAgentBench ``src/server/tasks/medagentbench/
__init__.py``, ``start_sample``): the reply, stripped and without code fences, starting with

- ``GET``: the rest (plus ``&_format=json``, as the official loop appends) is fetched from the
  record server and the official "Here is the response from the GET request" text returned (the
  official error text where the server answers with an error status);
- ``POST``: the first line is the URL, the other lines the JSON payload; a payload that is not JSON
  gets the official "Invalid POST request"; otherwise the POST is recorded (never sent) and
  answered with the official acceptance text;
- ``FINISH(``: the text up to the last character is the final answer and the episode ends;
- anything else: the episode ends as ``invalid_action``, as the official loop ends it.

Under the native protocol the same semantics are offered as tools (the nine functions of
``funcs_v1.json`` and a ``finish`` tool); a reply that calls no tool is an invalid action.

Two things differ from the official loop, both for safety: a GET is sent only to the configured
server, under its base path once the URL is normalised (any other URL, ``%2e%2e`` and ``//`` in
its path included, is answered with an error text, never fetched), and a server that cannot be
reached at all ends the episode as ``environment_error`` (an unknown, run again later) instead of
an error text the agent reads. When the agent finishes, the environment fetches what the checks
need (:func:`grandrounds.graders.medagentbench_grader.reference_query`) and keeps it in
:meth:`MedAgentBenchEnvironment.state`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

import aiohttp

from grandrounds.benchmarks.agents import Environment, EnvironmentFailure, Reaction, Simulate
from grandrounds.core.records import Message, Response, ToolResultPart, ToolSpec
from grandrounds.graders.medagentbench_grader import reference_facts, reference_query

#: The most a GET may read from the record server.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: How much of a response the transcript keeps (the agent reads it all).
EVENT_CHARS = 4000


@dataclass(frozen=True)
class Replies:
    """The official texts the environment answers with (read from the pinned official file)."""

    get_ok: Callable[[str], str]
    get_error: Callable[[str], str]
    post_ok: str
    post_invalid: str


@dataclass(frozen=True)
class NativeTool:
    """A native tool and what it stands for: ``GET``/``POST`` of a resource, or ``FINISH``."""

    spec: ToolSpec
    method: str
    resource: str = ""


def official_action(reply: str) -> str:
    """The reply as the official loop reads it: stripped, code fences removed, stripped again."""
    return reply.strip().replace("```tool_code", "").replace("```", "").strip()


def _clip(text: str) -> str:
    return (
        text
        if len(text) <= EVENT_CHARS
        else text[:EVENT_CHARS] + f"\n[... {len(text) - EVENT_CHARS} more characters]"
    )


class MedAgentBenchEnvironment(Environment):
    """One task's episode against the record server at ``base`` (``.../fhir/``)."""

    def __init__(
        self,
        case: Mapping[str, Any],
        opening: list[Message],
        base: str,
        replies: Replies,
        native: Mapping[str, NativeTool] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.case = dict(case)
        self.opening = opening
        self.base = base
        self.replies = replies
        self.native = dict(native or {})
        self.tools = tuple(t.spec for t in self.native.values())
        self.timeout = timeout
        self.posts: list[dict[str, Any]] = []
        self.gets: list[str] = []
        self.post_replies = 0
        #: The finishing reply holds "POST" (the re-implementation's extract_posts raises on it).
        self.finish_post = False
        self.final: str | None = None
        self.reference: dict[str, Any] | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> list[Message]:
        return list(self.opening)

    async def react(self, reply: Response, simulate: Simulate) -> Reaction:
        if self.native:
            return await self._react_native(reply)
        raw = reply.text or ""
        if "POST" in raw:  # the re-implementation's check_has_post reads the reply as written
            self.post_replies += 1
        r = official_action(raw)
        if r.startswith("GET"):
            text, event = await self._get(r[3:].strip() + "&_format=json")
            return Reaction(messages=[Message("user", text)], events=[event])
        if r.startswith("POST"):
            try:
                payload = json.loads("\n".join(r.split("\n")[1:]))
            except (ValueError, RecursionError):
                return Reaction(
                    messages=[Message("user", self.replies.post_invalid)],
                    events=[
                        {
                            "actor": "environment",
                            "method": "POST",
                            "text": self.replies.post_invalid,
                        }
                    ],
                )
            counted = self._record_post(raw)
            return Reaction(
                messages=[Message("user", self.replies.post_ok)],
                events=[
                    {
                        "actor": "environment",
                        "method": "POST",
                        "url": r.split("\n")[0][4:].strip(),
                        "payload": payload,
                        "counted": counted,
                        "text": "recorded, not sent: " + self.replies.post_ok,
                    }
                ],
            )
        if r.startswith("FINISH("):
            self.finish_post = "POST" in raw
            return await self._finish(r[len("FINISH(") : -1])
        return Reaction(
            done=True,
            status="invalid_action",
            events=[
                {
                    "actor": "environment",
                    "text": "invalid action: the reply is not GET, POST or FINISH(...)",
                }
            ],
        )

    def _record_post(self, raw: str) -> bool:
        """Keep an accepted POST as the re-implementation's ``extract_posts`` reads it from the reply
        as written (first line's URL, the other lines' JSON); False where that reading fails."""
        lines = raw.split("\n")
        try:
            self.posts.append(
                {"url": lines[0][4:].strip(), "payload": json.loads("\n".join(lines[1:]))}
            )
        except (ValueError, RecursionError):
            return False
        return True

    async def _finish(self, final: str) -> Reaction:
        self.final = final
        await self._fetch_reference()
        return Reaction(
            done=True,
            status="finished",
            final=final,
            events=[{"actor": "environment", "text": f"FINISH({final})"}],
        )

    async def _react_native(self, reply: Response) -> Reaction:
        if "POST" in (reply.text or "") or any(
            self.native.get(c.name, _NONE).method == "POST" for c in reply.tool_calls
        ):
            self.post_replies += 1
        if not reply.tool_calls:
            return Reaction(
                done=True,
                status="invalid_action",
                events=[
                    {"actor": "environment", "text": "invalid action: the reply calls no tool"}
                ],
            )
        results: list[ToolResultPart] = []
        events: list[dict[str, Any]] = []
        event: dict[str, Any]
        for call in reply.tool_calls:
            tool = self.native.get(call.name)
            try:
                args = json.loads(call.arguments or "{}")
                if not isinstance(args, dict):
                    raise ValueError("not an object")
            except ValueError:
                text, event = (
                    "error: the arguments must be one JSON object",
                    {"actor": "environment", "tool": call.name, "error": "bad arguments"},
                )
            else:
                if tool is None:
                    text, event = (
                        f"error: no tool named {call.name!r}",
                        {"actor": "environment", "tool": call.name, "error": "unknown tool"},
                    )
                elif tool.method == "FINISH":
                    self.finish_post = "POST" in (reply.text or "")
                    return await self._finish(
                        json.dumps(args.get("answers"), ensure_ascii=False)
                        if "answers" in args
                        else ""
                    )
                elif tool.method == "GET":
                    text, event = await self._get(
                        f"{self.base}{tool.resource}?{urlencode(args, doseq=True)}&_format=json"
                    )
                else:
                    url = f"{self.base}{tool.resource}"
                    self.posts.append({"url": url, "payload": args})
                    text, event = (
                        self.replies.post_ok,
                        {
                            "actor": "environment",
                            "method": "POST",
                            "url": url,
                            "payload": args,
                            "counted": True,
                            "text": "recorded, not sent: " + self.replies.post_ok,
                        },
                    )
            results.append(ToolResultPart(call.id, text, call.name))
            events.append({**event, "call_id": call.id})
        return Reaction(messages=[Message("tool", tuple(results))], events=events)

    # ---- the record server -------------------------------------------------------------
    def _allowed(self, url: str) -> bool:
        """Only the configured server, under its base path. The path is read as a server may read
        it (percent-decoded until it no longer changes, so ``%2e%2e`` and ``%252e`` are dots);
        any ``.`` or ``..`` segment (``..;x`` too), doubled slash or backslash is refused, and
        the base path is compared as written (``/FHIR/`` is not ``/fhir/``); scheme and host
        are compared without case, and a user name in the address is refused."""
        got, base = urlsplit(url), urlsplit(self.base)
        if (got.scheme.lower(), got.netloc.lower()) != (base.scheme.lower(), base.netloc.lower()):
            return False
        path = got.path
        for _ in range(4):
            path, before = unquote(path), path
            if path == before:
                break
        else:
            return False  # encoded more deeply than any client writes
        segments = path.split("/")
        return (
            "\\" not in path
            and "//" not in path
            and not any(seg.split(";")[0] in (".", "..") for seg in segments)
            and path.startswith(base.path)
        )

    async def _get(self, url: str) -> tuple[str, dict[str, Any]]:
        """The official text for a GET of ``url`` and the transcript's event."""
        self.gets.append(url)
        if not self._allowed(url):
            refused = f"refused: {url!r} is not on the FHIR server {self.base}"
            return self.replies.get_error(refused), {
                "actor": "fhir",
                "method": "GET",
                "url": url,
                "error": refused,
            }
        status, data, error = await self._fetch(url)
        if error is not None:
            return self.replies.get_error(error), {
                "actor": "fhir",
                "method": "GET",
                "url": url,
                "status": status,
                "error": error,
            }
        return self.replies.get_ok(data), {
            "actor": "fhir",
            "method": "GET",
            "url": url,
            "status": status,
            "text": _clip(data),
        }

    async def _fetch(self, url: str) -> tuple[int, str, str | None]:
        """(status, data as the official loop shows it, error text or None); a server that cannot be
        reached raises :class:`EnvironmentFailure`."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        try:
            async with self._session.get(url, allow_redirects=False) as resp:
                body = await resp.content.read(MAX_RESPONSE_BYTES + 1)
                if len(body) > MAX_RESPONSE_BYTES:
                    return resp.status, "", f"the response is over {MAX_RESPONSE_BYTES} bytes"
                if resp.status >= 400:
                    kind = "Client" if resp.status < 500 else "Server"
                    return (
                        resp.status,
                        "",
                        f"{resp.status} {kind} Error: {resp.reason} for url: {url}",
                    )
                text = body.decode(resp.charset or "utf-8", errors="replace")
                if (
                    resp.headers.get("Content-Type") == "application/json"
                ):  # the official loop shows it parsed
                    try:
                        return resp.status, str(json.loads(text)), None
                    except ValueError:
                        return resp.status, text, None
                return resp.status, text, None
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise EnvironmentFailure(
                f"the FHIR server {self.base} cannot be reached: {type(e).__name__}: {e}"
            ) from None

    async def _fetch_reference(self) -> None:
        """What the checks need from the server, fetched once the agent has finished."""
        query = reference_query(str(self.case.get("category")), str(self.case.get("eval_MRN", "")))
        if query is None:
            return
        url = f"{self.base}{query}&_format=json"
        status, data, error = await self._fetch(url)
        if error is not None:
            raise EnvironmentFailure(
                f"the FHIR server could not answer the check's search {url}: {error}"
            )
        try:
            bundle = json.loads(data)
            self.reference = reference_facts(str(self.case["category"]), bundle)
        except (ValueError, TypeError, AttributeError) as e:
            # the re-implementation's task function raises on it and fails the task: the grader
            # counts it so (and says our own reading would leave it unscored)
            self.reference = {"unreadable": f"the answer to {url} is not a FHIR Bundle: {e}"}

    def state(self) -> dict[str, Any]:
        out = {
            "fhir_base": self.base,
            "posts": list(self.posts),
            "gets": list(self.gets),
            "post_replies": self.post_replies,
            "final": self.final,
        }
        if self.finish_post:
            out["finish_post"] = True
        if self.reference is not None:
            out["reference"] = self.reference
        return out

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_NONE = NativeTool(ToolSpec("", ""), "")
