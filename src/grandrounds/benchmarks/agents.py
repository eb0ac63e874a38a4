"""Agent benchmarks: a model acts in an environment over several steps until it answers.

An episode starts from the environment's opening messages and goes step by step: the candidate
is asked (one cached request, whose key holds the whole conversation so far), the environment
reads its reply and answers (a tool's result, a simulated patient's words, a record system's
response), until the episode ends with a status:

- ``finished``: the candidate gave its final answer (graded);
- ``step_limit``: the benchmark's step budget (or ``--param max_tokens_per_episode`` /
  ``max_seconds_per_episode`` / ``max_tool_calls_per_reply`` / ``max_tool_calls_per_episode``)
  ran out first; the step that hit a budget names it (``limit``);
- ``invalid_action``: the reply could not be read as an action where the benchmark's own loop
  stops on that (MedAgentBench);
- ``context_limit``: the conversation no longer fits the candidate's context;
- ``environment_error``: the environment itself failed (a record server that cannot be reached);
- ``answer_failed``: the candidate's call failed after its retries (unscored, asked again on the
  next run, as any failed answer is).

Unfinished episodes (``step_limit``, ``invalid_action``, ``context_limit``) count as failures in the
same denominator as the finished ones, as the benchmarks' own loops count them; ``environment_error``
and ``answer_failed`` are unknowns, never zeros: unscored, counted, and run again.

Two action protocols (``--param actions``), named in the benchmark's spec, so runs of the two are
never ranked together: ``native`` sends the environment's tools in the request (OpenAI ``tools``,
Anthropic tool use; a provider without native tool use is refused, never emulated); ``text`` reads
actions out of the reply's text with the benchmark's own parser, as the authors' loops do.

``--param epochs=K`` runs each episode K times (each epoch's requests carry ``attempt=epoch``,
so they are asked apart and cached apart); a sample's value is its share of successful epochs,
and the result reports pass^k for k = 1..K beside the mean (tau-bench's estimator:
C(c, k) / C(n, k) per task, averaged; Yao et al. 2024, arXiv:2406.12045).

An environment that runs the candidate's code (``replays_safely = False``) has each step marked
in the store before it acts on the reply; a step found marked but unfinished on the next run (the
harness was killed or stopped while the tools ran) is not acted on again: its tool calls are
answered as stopped (:meth:`Environment.interrupted`), so a tool call that kills the harness
cannot repeat on every resume.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import comb
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, Benchmark, RunOptions
from grandrounds.core.params import Param
from grandrounds.core.records import (
    Cell,
    GenParams,
    Grade,
    Message,
    Response,
    Sample,
    ToolResultPart,
    ToolSpec,
)
from grandrounds.scoring.cells import mean_cell

#: How an episode ended (see the module's docstring).
EPISODE_STATUSES = (
    "finished",
    "step_limit",
    "invalid_action",
    "context_limit",
    "environment_error",
    "answer_failed",
)
#: Default caps on the candidate's tool calls (``--param max_tool_calls_per_reply`` / ``..._per_episode``).
MAX_TOOL_CALLS_PER_REPLY = 32
MAX_TOOL_CALLS_PER_EPISODE = 128
#: Episode statuses that are failures of the candidate (value 0); the others that did not finish are unknowns.
FAILED_EPISODE = frozenset({"step_limit", "invalid_action", "context_limit"})

#: The tool result of a call whose run stopped the harness (killed, hung and stopped), not run again.
INTERRUPTED = (
    "[not run again: the harness stopped while this call ran (killed, or stopped while it hung)]"
)

#: simulate(role, messages, params) -> the simulator model's reply (a cached call of its own).
Simulate = Callable[[str, Sequence[Message], GenParams], Awaitable[Response]]


class EnvironmentFailure(Exception):
    """The environment itself failed (not the candidate): the episode is an unknown, run again later."""


@dataclass
class Reaction:
    """What the environment does with one reply of the candidate.

    ``messages`` are appended to the candidate's conversation (a tool message with results, a user
    message with a patient's words); ``events`` are what the transcript shows for the step beyond the
    candidate's reply (``{"actor", "text", ...}``: a tool's result, the patient's answer, a recorded
    POST); ``done`` ends the episode with ``status`` and, where finished, the ``final`` answer.
    ``conversation``, where set, replaces the candidate's whole conversation for the next step
    (``messages`` and the reply are then not appended): for loops that ask the agent afresh each
    turn with its history inside the prompt, as AgentClinic's doctor is asked.
    """

    messages: list[Message] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    status: str = "finished"
    final: str | None = None
    conversation: list[Message] | None = None


class Environment(ABC):
    """One episode's world: made fresh for every episode of every sample, never shared."""

    #: The tools offered under the native action protocol (() where the environment has none).
    tools: tuple[ToolSpec, ...] = ()
    #: False where acting on a reply runs the candidate's code (see the module's docstring).
    replays_safely: ClassVar[bool] = True

    @abstractmethod
    def start(self) -> list[Message]:
        """The candidate's opening messages."""

    @abstractmethod
    async def react(self, reply: Response, simulate: Simulate) -> Reaction:
        """The environment's answer to the candidate's reply."""

    def interrupted(self, reply: Response) -> Reaction:
        """The reaction to a reply whose tool calls stopped the harness on an earlier run: each
        call answered as stopped, none run again."""
        results = tuple(ToolResultPart(c.id, INTERRUPTED, c.name) for c in reply.tool_calls)
        events = [
            {
                "actor": "tool",
                "tool": c.name,
                "call_id": c.id,
                "text": INTERRUPTED,
                "outcome": "interrupted",
            }
            for c in reply.tool_calls
        ]
        return Reaction(messages=[Message("tool", results)] if results else [], events=events)

    def on_step_limit(self) -> Reaction | None:
        """What happens when the step budget runs out (None: the episode ends as ``step_limit``)."""
        return None

    def state(self) -> dict[str, Any]:
        """What the grader checks beside the final answer (recorded actions, a tool's results)."""
        return {}

    async def close(self) -> None:
        """Release what the episode held (sandbox folders, connections)."""


class AgentBenchmark(Benchmark):
    """A benchmark whose samples are episodes (see the module's docstring)."""

    #: The runner asks these through :mod:`grandrounds.run.episodes`, not as one request.
    episodic = True
    #: The action protocols offered, the first being the reference's.
    action_protocols: ClassVar[tuple[str, ...]] = ("text",)
    #: The step budget of the benchmark's own loop.
    default_max_steps: ClassVar[int] = 10
    #: Where the benchmark's official code reads episodes its own way (AgentClinic's literal "yes"),
    #: its name: the result then holds that figure beside the headline (``extra["official"]``).
    official_reading: ClassVar[str] = ""

    @classmethod
    def agent_parameters(cls) -> tuple[Param, ...]:
        """The parameters every agent benchmark declares (added to its own)."""
        return (
            Param(
                name="actions",
                type=str,
                default=cls.action_protocols[0],
                help="action protocol: native tool calls or text actions read by the benchmark's parser",
                choices=cls.action_protocols,
            ),
            Param(
                name="max_steps",
                type=int,
                default=cls.default_max_steps,
                help="the candidate's replies per episode (the benchmark's own budget by default)",
                minimum=1,
            ),
            Param(
                name="epochs",
                type=int,
                default=1,
                help="episodes per sample; the result reports pass^k beside the mean",
                minimum=1,
            ),
            Param(
                name="max_tokens_per_episode",
                type=int,
                default=0,
                help="stop an episode past this many candidate tokens (0: no limit)",
                minimum=0,
            ),
            Param(
                name="max_seconds_per_episode",
                type=float,
                default=0.0,
                help="stop an episode past this many seconds of calls and tool runs, tools stopped "
                "where they run over (0: no limit)",
                minimum=0.0,
            ),
            Param(
                name="max_tool_calls_per_reply",
                type=int,
                default=MAX_TOOL_CALLS_PER_REPLY,
                help="stop an episode at a reply with more tool calls than this (none of them run)",
                minimum=1,
            ),
            Param(
                name="max_tool_calls_per_episode",
                type=int,
                default=MAX_TOOL_CALLS_PER_EPISODE,
                help="stop an episode at the reply that takes its tool calls past this",
                minimum=1,
            ),
        )

    @abstractmethod
    def environment(self, sample: Sample, options: RunOptions) -> Environment:
        """A fresh environment for one episode of ``sample``."""

    def answer_params(self, options: RunOptions) -> GenParams:
        """Generation settings of the candidate's calls (the protocol's, unless the user set them)."""
        g = self.protocol(options).answer
        return GenParams(
            temperature=g.temperature if g.temperature is not None else 0.0,
            max_tokens=g.max_tokens or 1024,
        )

    # ---- results ------------------------------------------------------------------------
    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Success rate (mean over samples of each sample's share of successful epochs), pass^k,
        episode statuses, and a breakdown by the samples' ``category`` where they have one."""
        values = [g.value if g.status == "scored" else None for g in grades]
        overall = mean_cell(values, seed=options.seed)
        statuses: dict[str, int] = {}
        for g in grades:
            for e in g.details.get("epochs", ()):
                statuses[e.get("status", "?")] = statuses.get(e.get("status", "?"), 0) + 1
        breakdown: dict[str, dict[str, Cell]] = {}
        cats: dict[str, list[float | None]] = {}
        for smp, v in zip(samples, values):
            cat = smp.metadata.get("category")
            if cat is not None:
                cats.setdefault(str(cat), []).append(v)
        if cats:
            breakdown["category"] = {
                k: mean_cell(v, seed=options.seed) for k, v in sorted(cats.items())
            }
        extra = {
            "episodes": statuses,
            "pass_k": pass_hat_k(grades),
            "epochs": int(self.param("epochs")),
            "actions": self.param("actions"),
            "max_steps": int(self.param("max_steps")),
        }
        if self.official_reading:
            extra["official"] = official_figure(grades, self.official_reading)
        return Aggregate.of("success_rate", overall, breakdown, extra)


def official_figure(grades: Sequence[Grade], reading: str) -> dict[str, Any]:
    """The paper's figure: over every episode (each sample's epochs), the share the official code
    counts correct. An episode the grader read has the official reading in ``official``; one that
    ended without an answer by the candidate's doing (step limit, invalid action) counts wrong, as
    the official loop counts it (presented, not correct); one whose call, environment or judge
    failed is unknown: counted apart (``unknown``), never a zero."""
    correct = wrong = unknown = 0
    for g in grades:
        for e in g.details.get("epochs", ()):
            said = e.get("official")
            if said is True:
                correct += 1
            elif said is False or ("official" not in e and e.get("status") in FAILED_EPISODE):
                wrong += 1
            else:
                unknown += 1
    n = correct + wrong
    return {
        "reading": reading,
        "correct": correct,
        "n": n,
        "score": correct / n if n else None,
        "unknown": unknown,
    }


def pass_hat_k(grades: Sequence[Grade]) -> dict[str, float | None]:
    """pass^k for k = 1..K over the scored samples: the chance that k epochs drawn from a task's n
    all succeed, C(c, k) / C(n, k), averaged over tasks (Yao et al. 2024, tau-bench, eq. 1)."""
    per_task = []
    for g in grades:
        if g.status != "scored":
            continue
        # an epoch's value, not its success: unfinished epochs (step limit, invalid action) are failures
        epochs = [e for e in g.details.get("epochs", ()) if e.get("value") is not None]
        if epochs:
            per_task.append((len(epochs), sum(1 for e in epochs if e["value"] >= 1.0)))
    if not per_task:
        return {}
    kmax = min(n for n, _ in per_task)
    return {
        str(k): sum(comb(c, k) / comb(n, k) for n, c in per_task) / len(per_task)
        for k in range(1, kmax + 1)
    }


def epoch_value(status: str, success: bool | None) -> float | None:
    """One epoch's value: 1/0 where it finished and was judged, 0 where it did not finish by the
    candidate's doing, None (unknown) where the environment or the call failed."""
    if status in FAILED_EPISODE:
        return 0.0
    if status != "finished" or success is None:
        return None
    return 1.0 if success else 0.0


def details_of(epochs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The grade details of a sample's epochs: each epoch's status, success and checks."""
    return {"epochs": [dict(e) for e in epochs]}
