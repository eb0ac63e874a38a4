"""Agent episodes: the candidate asked step by step in its environment, every step stored.

Each step is one request through the run's cached executor, whose key holds the conversation so
far (and the epoch, as ``attempt``): running the same command again replays every finished step
from the store, with 0 calls, and goes on where an interrupted episode stopped. The simulators
(AgentClinic's patient and measurement agents) are asked through an executor of their own
(``--simulator``), cached the same way. After every step the episode's steps so far are written
to the store's ``episodes`` table, so a transcript shows how far an interrupted episode got.
See :mod:`grandrounds.benchmarks.agents` for statuses, action protocols and epochs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grandrounds.benchmarks.agents import (
    AgentBenchmark,
    Environment,
    EnvironmentFailure,
    Reaction,
    details_of,
    epoch_value,
)
from grandrounds.core.records import (
    GenParams,
    Grade,
    Message,
    Part,
    Request,
    Response,
    Sample,
    TextPart,
    ToolCallPart,
)
from grandrounds.graders.base import GradeContext, unscored
from grandrounds.graders.flags import flag_outcome
from grandrounds.graders.guard import checked
from grandrounds.providers.base import Provider
from grandrounds.run.executor import Executor
from grandrounds.store import Store


def reply_message(resp: Response) -> Message:
    """The candidate's reply as the assistant message the next step's conversation holds."""
    if not resp.tool_calls:
        return Message("assistant", resp.text or "")
    parts: list[Part] = [TextPart(resp.text)] if resp.text else []
    parts.extend(resp.tool_calls)
    return Message("assistant", tuple(parts))


def _calls_json(calls: Sequence[ToolCallPart]) -> list[dict[str, str]]:
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]


@dataclass(kw_only=True)
class EpisodeRunner:
    """Plays the episodes of one run: the candidate's executor, the simulator's, the store."""

    store: Store
    run_id: str
    bench: AgentBenchmark
    provider: Provider
    answers: Executor
    gen: GenParams
    simulator: Executor | None = None
    #: What a final answer that addresses the grader counts for (``--flagged``), as for any answer.
    flagged: str = "keep"
    #: The model asked whether a final answer addresses its grader (``--guard``), or None.
    guard: Any = None

    async def play(self, sample: Sample, epoch: int, env: Environment) -> dict[str, Any]:
        """One episode: ``{status, final, steps, state, key}`` (``key``: the last candidate call's)."""
        steps: list[dict[str, Any]] = []
        messages = list(env.start())
        budget = _Budget(self.bench)
        earlier = self._unfinished_steps(sample.id, epoch, env)
        status, final, key = "step_limit", None, ""
        step: dict[str, Any] | None = None
        sim_keys: list[str] = []  # the simulator calls of the step being played, in the order asked
        try:
            for index in range(int(self.bench.param("max_steps"))):
                sim_keys = []
                req = self._request(messages, env, epoch)
                key = req.key()
                resp = await self.answers(req)
                step = {
                    "step": index,
                    "key": key,
                    "reply": resp.text,
                    "tool_calls": _calls_json(resp.tool_calls),
                }
                if not resp.ok:
                    step["error"] = resp.error
                    steps.append(step)
                    status = (
                        "context_limit" if _is_context_overflow(resp.error) else "answer_failed"
                    )
                    break
                messages.append(reply_message(resp))
                limit = budget.over_tool_calls(resp)
                if limit is None:
                    reaction, limit = await self._react(
                        (sample.id, epoch),
                        env,
                        resp,
                        step,
                        steps,
                        earlier,
                        budget,
                        self._simulate(epoch, sim_keys),
                    )
                if limit is not None or reaction is None:  # the step that hit a budget names it
                    steps.append(_over_budget(step, limit, budget.per_reply))
                    status = "step_limit"
                    break
                step["events"] = reaction.events
                if sim_keys:  # counted with the run's usage (store.simulator_usage)
                    step["simulator_keys"] = list(sim_keys)
                steps.append(step)
                self.store.put_episode(self.run_id, sample.id, epoch, "running", steps)
                if (
                    reaction.conversation is not None
                ):  # the environment asks the agent afresh (AgentClinic)
                    messages = list(reaction.conversation)
                else:
                    messages.extend(reaction.messages)
                if reaction.done:
                    status, final = reaction.status, reaction.final
                    break
                if budget.spent(resp):
                    break
            else:
                status, final = _at_step_limit(env.on_step_limit(), steps)
        except EnvironmentFailure as e:
            if step is not None and not any(
                st is step for st in steps
            ):  # the reply the environment failed on stays in the transcript
                steps.append(
                    step
                    | {"error": f"environment: {e}"}
                    | ({"simulator_keys": list(sim_keys)} if sim_keys else {})
                )
            else:
                steps.append({"step": len(steps), "error": f"environment: {e}"})
            status = "environment_error"
        state = env.state()
        await env.close()
        self.store.put_episode(self.run_id, sample.id, epoch, status, steps)
        return {"status": status, "final": final, "steps": steps, "state": state, "key": key}

    def _unfinished_steps(self, sample_id: str, epoch: int, env: Environment) -> list[Any]:
        """The stored steps of an earlier, unfinished try of this episode (for an environment that
        runs the candidate's code: its steps are marked before it acts)."""
        if env.replays_safely:
            return []
        for e in self.store.episodes(self.run_id, sample_id):
            if e["epoch"] == epoch and e["status"] == "running":
                return list(e["steps"])
        return []

    async def _react(
        self,
        where: tuple[str, int],
        env: Environment,
        resp: Response,
        step: dict[str, Any],
        steps: list[dict[str, Any]],
        earlier: list[Any],
        budget: _Budget,
        simulate: Any,
    ) -> tuple[Reaction | None, str | None]:
        """The environment's reaction to one reply within the episode's time budget (None and the
        budget's name where it ran out while the tools ran); a reply whose tools stopped the
        harness on an earlier try is answered as stopped, not acted on again."""
        index = step["step"]
        if (
            index < len(earlier)
            and earlier[index].get("acting")
            and earlier[index].get("key") == step["key"]
        ):
            return env.interrupted(resp), None
        if env.replays_safely:
            return await budget.react(env.react(resp, simulate), resp.latency)
        # marked, and on disk, before any tool runs; unmarked where the run is stopped in order
        # (Ctrl-C, SIGTERM), so only a harness that died with the tool running skips it next time
        marked = [*steps, step | {"acting": True}]
        self.store.put_episode(self.run_id, where[0], where[1], "running", marked)
        self.store.flush()
        try:
            return await budget.react(env.react(resp, simulate), resp.latency)
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.store.put_episode(self.run_id, where[0], where[1], "running", steps)
            raise

    def _request(self, messages: Sequence[Message], env: Environment, epoch: int) -> Request:
        native = self.bench.param("actions") == "native" and bool(env.tools)
        return Request(
            provider=self.provider.spec.provider,
            model=self.provider.spec.model,
            messages=tuple(messages),
            params=self.gen,
            purpose="answer",
            base_url=self.provider.request_base_url(),
            attempt=epoch,
            tools=env.tools if native else (),
            tool_choice="auto" if native else "",
        )

    def _simulate(self, epoch: int, keys: list[str]) -> Any:
        """The simulator callable an environment is handed for one step; each request's key is
        added to ``keys`` before it is asked, so a call that fails is named too."""
        sim = self.simulator

        async def simulate(role: str, messages: Sequence[Message], params: GenParams) -> Response:
            if sim is None:
                raise EnvironmentFailure(
                    f"the {role} is a simulator model: pass --simulator PROVIDER/MODEL"
                )
            req = Request(
                provider=sim.provider.spec.provider,
                model=sim.provider.spec.model,
                messages=tuple(messages),
                params=params,
                purpose="simulate",
                base_url=sim.provider.request_base_url(),
                attempt=epoch,
            )
            keys.append(req.key())
            resp = await sim(req)
            if not resp.ok:
                raise EnvironmentFailure(f"the {role} (simulator) failed: {resp.error}")
            return resp

        return simulate

    async def episodes(
        self, sample: Sample, grader: Any, ctx: GradeContext
    ) -> tuple[Response, Grade]:
        """Every epoch of ``sample`` played and graded; the sample's grade combines them."""
        epochs: list[dict[str, Any]] = []
        last = Response(key="", error="no episode")
        judge_keys: list[str] = []
        for epoch in range(int(self.bench.param("epochs"))):
            episode = await self.play(
                sample, epoch, self.bench.environment(sample, ctx_options(ctx))
            )
            last = Response(key=episode["key"], text=episode["final"] or "")
            grade = await self._grade(sample, episode, grader, ctx)
            judge_keys.extend(grade.judge_keys if grade else ())
            epochs.append(
                {
                    "epoch": epoch,
                    "status": episode["status"],
                    "success": _success(grade, episode["status"]),
                    "value": epoch_value(episode["status"], _success(grade, episode["status"])),
                    "final": episode["final"],
                    "checks": _checks(grade),
                    "judge": grade.extracted if grade else None,
                    "error": grade.error if grade else None,
                    **_flag_details(grade),
                }
                | _official(grade)
            )
        # the judge calls behind each epoch's grade, linked to the sample's grade (their tokens and costs count)
        return last, replace(combine(sample, epochs), judge_keys=tuple(dict.fromkeys(judge_keys)))

    async def _grade(
        self, sample: Sample, episode: dict[str, Any], grader: Any, ctx: GradeContext
    ) -> Grade | None:
        """The grader's say on a finished episode (None for one that did not finish)."""
        if episode["status"] != "finished":
            return None
        try:
            grade = await grader.grade(
                sample,
                Response(key=episode["key"], text=episode["final"] or ""),
                replace(ctx, episode=episode),
            )
            return await checked(grade, episode["final"], self.flagged, self.guard, ctx.max_reask)
        except (
            Exception
        ) as e:  # a grader bug on one episode is counted and shown, not fatal to the run
            return unscored(sample, "grader_error", f"grading failed: {type(e).__name__}: {e}")


def _checks(grade: Grade | None) -> list[dict[str, Any]]:
    """The grader's named checks; for a grader that names none, one check: the answer as it read it."""
    if grade is None:
        return []
    named = grade.details.get("checks")
    if named:
        return list(named)
    if grade.status != "scored":
        return [{"name": "answer read", "passed": False, "detail": grade.error or grade.status}]
    return [
        {
            "name": "answer correct",
            "passed": bool(grade.value and grade.value >= 1.0),
            "detail": f"read {grade.extracted!r}",
        }
    ]


def _official(grade: Grade | None) -> dict[str, Any]:
    """The official reading of the episode, where the grader keeps one (AgentClinic's
    ``official_correct``, the first judge's first reply): ``{"official": bool | None}``, with the
    judge's replies to re-asks kept apart from that first reply (``judge_reasks``)."""
    said = grade.details.get("official_correct") if grade is not None else None
    if grade is None or not isinstance(said, list) or not said:
        return {}
    reasks = grade.details.get("moderator_reasks") or [[]]
    return {"official": said[0], "judge_reasks": list(reasks[0])}


def ctx_options(ctx: GradeContext) -> Any:
    """The run's options, carried in the grading context for environments that read them."""
    return ctx.options


def _success(grade: Grade | None, status: str) -> bool | None:
    if status != "finished" or grade is None or grade.status != "scored" or grade.value is None:
        return None
    return grade.value >= 1.0


def _flag_details(grade: Grade | None) -> dict[str, Any]:
    """An epoch's flags (its final answer addresses the grader) and what ``--flagged`` made of them."""
    if grade is None or not grade.details.get("flags"):
        return {}
    return {"flags": list(grade.details["flags"]), "flag_outcome": flag_outcome(grade)}


def combine(sample: Sample, epochs: Sequence[dict[str, Any]]) -> Grade:
    """A sample's grade from its epochs: the share of successes where every epoch is known; an
    epoch that is unknown (a failed call, an environment or grader failure) leaves the sample
    unscored, with that epoch's reason, so the next run plays it again. An epoch whose final answer
    was flagged and excluded (``--flagged exclude``) excludes the sample (status ``flagged``); the
    epochs' flags are the sample's."""
    details = details_of(epochs)
    flags = sorted({f for e in epochs for f in e.get("flags") or ()})
    if flags:
        details["flags"] = flags
        if any(e.get("flag_outcome") == "scored 0" for e in epochs):
            details["flag_scored_zero"] = True
        if any(e.get("flag_outcome") == "excluded" for e in epochs):
            return Grade(
                sample_id=sample.id,
                value=None,
                details=details,
                error=f"answer flagged ({', '.join(flags)}): excluded by --flagged exclude",
                status="flagged",
            )
    for e in epochs:
        if e["value"] is None:
            why = {"answer_failed": "answer_failed", "environment_error": "grader_error"}.get(
                e["status"]
            )
            if why is None:  # finished, but the grader could not say
                why = "unreadable" if e.get("error") is None else "grader_error"
            reason = e.get("error") or f"episode {e['epoch']}: {e['status']}"
            return replace(unscored(sample, why, reason), details=details)  # type: ignore[arg-type]  # why is a GradeStatus
    value = sum(e["value"] for e in epochs) / len(epochs)
    return Grade(
        sample_id=sample.id, value=value, extracted=epochs[-1].get("final"), details=details
    )


class _Budget:
    """The episode's budgets (0: none): tokens and seconds counted from the candidate's replies,
    seconds also while the environment acts (stopped where they run out), tool calls per reply
    and per episode."""

    def __init__(self, bench: AgentBenchmark) -> None:
        self.max_tokens = int(bench.param("max_tokens_per_episode"))
        self.max_seconds = float(bench.param("max_seconds_per_episode"))
        self.per_reply = int(bench.param("max_tool_calls_per_reply"))
        self.per_episode = int(bench.param("max_tool_calls_per_episode"))
        self.tokens, self.seconds, self.calls = 0, 0.0, 0

    def spent(self, resp: Response) -> bool:
        self.tokens += resp.usage.prompt_tokens + resp.usage.completion_tokens
        self.seconds += resp.latency
        return bool(self.max_tokens and self.tokens > self.max_tokens) or bool(
            self.max_seconds and self.seconds > self.max_seconds
        )

    def over_tool_calls(self, resp: Response) -> str | None:
        """The tool-call cap this reply goes past (none of its calls then run), else None."""
        n = len(resp.tool_calls)
        self.calls += n
        if n > self.per_reply:
            return f"max_tool_calls_per_reply: {n} tool calls in one reply, over {self.per_reply}"
        if self.calls > self.per_episode:
            return (
                f"max_tool_calls_per_episode: {self.calls} tool calls in the episode, "
                f"over {self.per_episode}"
            )
        return None

    async def react(
        self, acting: Awaitable[Reaction], latency: float
    ) -> tuple[Reaction | None, str | None]:
        """``acting`` run within the seconds left of the episode (and those it takes counted); where
        they run out it is stopped (its tools killed), and the budget named."""
        start = time.monotonic()
        try:
            if not self.max_seconds:
                return await acting, None
            left = max(self.max_seconds - self.seconds - latency, 0.0)
            return await asyncio.wait_for(acting, left), None
        except TimeoutError:
            return (
                None,
                f"max_seconds_per_episode: {self.max_seconds:g} s ran out while the tools ran",
            )
        finally:
            self.seconds += time.monotonic() - start


def _over_budget(step: dict[str, Any], limit: str | None, shown: int) -> dict[str, Any]:
    """The step that hit a budget, naming it; of a reply's tool calls, the first ``shown`` kept."""
    calls = step["tool_calls"]
    out = step | {"limit": limit, "tool_calls": calls[:shown]}
    return out | ({"tool_calls_not_shown": len(calls) - shown} if len(calls) > shown else {})


def _at_step_limit(
    reaction: Reaction | None, steps: list[dict[str, Any]]
) -> tuple[str, str | None]:
    if reaction is None:
        return "step_limit", None
    if reaction.events:
        steps.append({"step": len(steps), "events": reaction.events})
    return reaction.status, reaction.final


def _is_context_overflow(error: str | None) -> bool:
    """The call failed because the conversation no longer fits the model's context."""
    return bool(error) and "exceeded: " in str(error) and "context" in str(error)
