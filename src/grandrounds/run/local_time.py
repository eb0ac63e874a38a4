"""What a run on the local model (``llamacpp/``) will cost in time, said before it starts.

A CPU model is slow enough that a judged or agent run of a few items can take many minutes: the
line printed before such a run comes from the dry-run plan (:mod:`grandrounds.run.plan`: its
calls, prompt tokens and output bound on each ``llamacpp/`` line) and the speeds measured for the
default model in ``docs/cpu.md``. Reading a prompt (prefill) and writing a reply (decode) have
their own speeds; a small model that rambles to its output bound (a judge writing 2,048 tokens
instead of a short JSON verdict) spends most of its time writing.

The range's low end writes a tenth of each call's output bound at the quicker writing speed; its
high end writes the whole bound at the slower one. An agent benchmark's plan counts each episode's first call only: its high end takes every step of every episode (and
as many simulator calls), each at the first call's size, which is still short of a long episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Tokens per second of SmolLM2-135M-Instruct (Q4_1) through llama-cpp-python 0.3.36 on one
#: thread of a 2-core x86-64 machine shared by other work (load average 5-12), from the runs in
#: docs/cpu.md: writing, 13 tokens/s at the busiest (128 tokens alone) and 17 in a judged run (two
#: judge replies of 2,048 tokens in 246 s); reading, 35 tokens/s (the 20-question exam: 5,535
#: prompt tokens in the 252 s its 1,644 generated tokens at 17 tokens/s left).
PREFILL_TOKENS_PER_S = 35.0
DECODE_TOKENS_PER_S = 13.0
QUICK_PREFILL_TOKENS_PER_S = 35.0
QUICK_DECODE_TOKENS_PER_S = 17.0
#: The share of its output bound a call writes at the quick end (small models often stop early).
QUICK_OUTPUT_SHARE = 0.1
LOCAL_PREFIX = "llamacpp/"


@dataclass(frozen=True, kw_only=True)
class LocalCost:
    """The local model's share of a planned run."""

    calls: int
    prompt_tokens: int
    output_bound: int
    #: The largest max_tokens of a call, for the line ("up to 512 tokens").
    max_tokens: int
    low_s: float
    high_s: float


def local_cost(p: Any, steps: int = 1, simulator_local: bool = False) -> LocalCost | None:
    """The calls of ``p`` (a :class:`~grandrounds.run.plan.Plan`) that go to ``llamacpp/`` models
    and the time they take at the measured speeds, or None when none does. ``steps``: the calls an
    agent episode may make for the one the plan counts (``max_steps``); ``simulator_local``: the
    simulated patient runs on the local model too (as many calls again)."""
    lines = [line for line in p.lines if str(line.model).startswith(LOCAL_PREFIX)]
    calls = sum(line.to_make for line in lines)
    if not lines and not simulator_local:
        return None
    prompt = sum(line.prompt_tokens for line in lines)
    bound = sum(line.output_bound for line in lines)
    largest = max((line.largest_output for line in lines), default=0)
    low = (
        prompt / QUICK_PREFILL_TOKENS_PER_S + bound * QUICK_OUTPUT_SHARE / QUICK_DECODE_TOKENS_PER_S
    )
    high = prompt / PREFILL_TOKENS_PER_S + bound / DECODE_TOKENS_PER_S
    if steps > 1:
        answers = p.lines[0] if p.lines else None
        per_call = (
            answers.prompt_tokens / PREFILL_TOKENS_PER_S
            + answers.output_bound / DECODE_TOKENS_PER_S
            if answers is not None and answers.to_make
            else 0.0
        )
        extra_calls = (answers.to_make if answers is not None else 0) * (steps - 1)
        high += per_call * (steps - 1) * (2 if simulator_local else 1)
        calls += extra_calls * (2 if simulator_local else 1)
    return LocalCost(
        calls=calls,
        prompt_tokens=prompt,
        output_bound=bound,
        max_tokens=largest,
        low_s=low,
        high_s=high,
    )


def fmt_span(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``: rounded as an estimate is."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def local_time_line(p: Any, steps: int = 1, simulator_local: bool = False) -> str | None:
    """One line for the start of a run on the local model, or None when nothing runs locally."""
    cost = local_cost(p, steps, simulator_local)
    if cost is None:
        return None
    if cost.calls == 0:
        return "local model on the CPU: nothing to ask (every call is stored)"
    each = f" of up to {cost.max_tokens:,} tokens" if cost.max_tokens else ""
    agent = f" (agent episodes: up to {steps} steps each)" if steps > 1 else ""
    low, high = fmt_span(cost.low_s), fmt_span(cost.high_s)
    span = low if low == high else f"{low} to {high}"
    return (
        f"local model on the CPU: about {cost.calls:,} calls{each}{agent}, "
        f"{cost.prompt_tokens:,} prompt tokens to read; expect {span} here "
        f"(reading {PREFILL_TOKENS_PER_S:g} and writing "
        f"{DECODE_TOKENS_PER_S:g}-{QUICK_DECODE_TOKENS_PER_S:g} tokens/s, see docs/cpu.md)"
    )


def runs_local(cfg: Any) -> bool:
    """Whether ``cfg``'s model, a judge or the simulator is a ``llamacpp/`` model."""
    specs: Sequence[str] = (
        str(cfg.model),
        *(str(j.spec) for j in getattr(cfg, "judges", ())),
        str(getattr(cfg, "simulator", "") or ""),
    )
    return any(s.startswith(LOCAL_PREFIX) for s in specs)


def announce(cfg: Any, store: Any, say: Any) -> None:
    """Print (with ``say``) the local model's expected time for ``cfg`` before it runs; nothing for
    a run with no local model. A plan that cannot be made says why in the line, and the run goes on
    (the run itself reports the same problem properly)."""
    if not runs_local(cfg):
        return
    from grandrounds.core.errors import GrandroundsError
    from grandrounds.run.plan import plan

    try:
        p = plan(store, cfg)
    except GrandroundsError as e:
        say(f"local model on the CPU: no time estimate ({e})")
        return
    sim_local = p.simulator.startswith(LOCAL_PREFIX)
    line = local_time_line(p, p.episode_steps, sim_local)
    if line:
        say(line)
