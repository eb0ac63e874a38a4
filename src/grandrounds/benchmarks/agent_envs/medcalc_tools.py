"""MedCalc-Bench with tools: the patient note and the question, a calculator and a Python
sandbox as native tools; the final answer (a reply that calls no tool) is scored by MedCalc-Bench's
own rule under the run's protocol.

- ``calculator``: one arithmetic expression (numbers, + - * / // % **, comparisons, ``math.*``,
  ``min``, ``round``, ``abs`` ...), evaluated by the restricted evaluator of
  :mod:`grandrounds.graders.medcalc_extract`; anything else is refused with the reason.
- ``python``: a program run by :mod:`grandrounds.benchmarks.agent_envs.sandbox` (bubblewrap: only
  the standard library and a small private tmpfs, no network, no new processes, CPU, memory,
  output and time limits); what it prints is the result. MedCalc-Bench's own "code" setting runs model code inside the harness's
  process, unsandboxed: here it never is.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, ClassVar

from grandrounds.benchmarks.agent_envs.sandbox import (
    BUBBLEWRAP,
    Limits,
    Outcome,
    SandboxUnavailable,
    run_python,
)
from grandrounds.benchmarks.agents import Environment, EnvironmentFailure, Reaction, Simulate
from grandrounds.core.records import Message, Response, ToolResultPart, ToolSpec
from grandrounds.graders.medcalc_extract import evaluate_arithmetic

CALCULATOR = ToolSpec(
    "calculator",
    "Evaluate one arithmetic expression and return its value. Supports + - * / // % **, parentheses, "
    "comparisons, math.* functions (math.log, math.exp, math.sqrt...), min, max-free pow, round, abs, int, float.",
    {
        "type": "object",
        "properties": {
            "expression": {"type": "string", "description": "e.g. (140 - 65) * 72 / (72 * 1.2)"}
        },
        "required": ["expression"],
    },
)
PYTHON = ToolSpec(
    "python",
    "Run a short Python 3 program (standard library only, no network, no files outside a temporary folder, "
    "10 seconds) and return what it prints. Use print() to see values.",
    {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the program"}},
        "required": ["code"],
    },
)


class MedCalcToolsEnvironment(Environment):
    """One episode: the question as the run's protocol asks it, the two tools, the answer read at the end."""

    tools = (CALCULATOR, PYTHON)
    replays_safely: ClassVar[bool] = False  # runs the candidate's code

    def __init__(
        self, opening: list[Message], limits: Limits = Limits(), backend: str = BUBBLEWRAP
    ) -> None:
        self.opening = opening
        self.limits = limits
        self.backend = backend
        self.calls = 0
        self.refused: list[str] = []

    def start(self) -> list[Message]:
        return list(self.opening)

    async def react(self, reply: Response, simulate: Simulate) -> Reaction:
        if not reply.tool_calls:
            return Reaction(done=True, status="finished", final=reply.text or "")
        results, events = [], []
        for call in reply.tool_calls:
            self.calls += 1
            text, extra = await self._run(call.name, call.arguments)
            results.append(ToolResultPart(call.id, text, call.name))
            events.append(
                {"actor": "tool", "tool": call.name, "call_id": call.id, "text": text, **extra}
            )
        return Reaction(messages=[Message("tool", tuple(results))], events=events)

    async def _run(self, name: str, arguments: str) -> tuple[str, dict[str, Any]]:
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as e:
            return f"error: the arguments are not JSON ({e.msg})", {"error": "bad arguments"}
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object", {"error": "bad arguments"}
        if name == "calculator":
            try:
                return str(evaluate_arithmetic(str(args.get("expression", "")))), {}
            except (ValueError, RecursionError) as e:
                return f"error: {e}", {"error": str(e)}
        if name == "python":
            try:
                outcome = await _stoppable(str(args.get("code", "")), self.limits, self.backend)
            except SandboxUnavailable as e:  # checked before the run; gone since: an unknown
                raise EnvironmentFailure(f"the python tool cannot run: {e}") from None
            self.refused.extend(outcome.refused)
            extra: dict[str, Any] = {
                "refused": outcome.refused,
                "exit_code": outcome.exit_code,
                "timed_out": outcome.timed_out,
            }
            if outcome.output_cut:
                extra["output_cut"] = True
            if outcome.cleanup_error:
                extra["cleanup_error"] = outcome.cleanup_error
            return outcome.text(), extra
        return f"error: no tool named {name!r} (tools: calculator, python)", {
            "error": "unknown tool"
        }

    def state(self) -> dict[str, Any]:
        return {
            "tool_calls": self.calls,
            "sandbox_refused": list(self.refused),
            "sandbox": self.backend,
        }


async def _stoppable(code: str, limits: Limits, backend: str) -> Outcome:
    """run_python in a thread; cancelled (the episode's time budget ran out), the sandbox is killed
    before the cancellation goes on."""
    stop = threading.Event()
    running = asyncio.ensure_future(asyncio.to_thread(run_python, code, limits, backend, stop))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.wait([running])
        raise
