"""MedCalc-Bench with tools (``medcalc-bench-tools``): each MedCalc-Bench row as an episode in
which the candidate may call a calculator and run Python in a sandbox before it answers.

The data, the versions (``--param version``), the prompt under each protocol (``reference``: the
official zero-shot system and user messages read from the pinned run.py; ``grandrounds``: ours)
and the scoring of the final answer (MedCalc-Bench's tolerance rules, read as each protocol reads
answers) are MedCalc-Bench's own (:mod:`grandrounds.benchmarks.medcalc`); the tools are offered
natively (``--param actions=native``, the only action protocol here, as tool-using peers run it),
so a provider without native tool use is refused. The episode ends at the first reply that calls
no tool; that reply is the answer. Ten replies per episode by default (``--param max_steps``).
The environment is :mod:`grandrounds.benchmarks.agent_envs.medcalc_tools`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from grandrounds.benchmarks.agent_envs.medcalc_tools import MedCalcToolsEnvironment
from grandrounds.benchmarks.agents import AgentBenchmark, Environment
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.core.params import Param
from grandrounds.core.records import Message, Sample
from grandrounds.sources.protocols import system_text


class MedCalcTools(AgentBenchmark, MedCalcBench):
    """MedCalc-Bench rows as tool-using episodes; success = the final answer within tolerance."""

    name = "medcalc-bench-tools"
    description = (
        "MedCalc-Bench with tools: a calculator and a sandboxed Python as native tool calls, "
        "the final answer scored by MedCalc-Bench's rules (agent; same versions as medcalc-bench)"
    )
    action_protocols: ClassVar[tuple[str, ...]] = ("native",)
    default_max_steps: ClassVar[int] = 10
    parameters: ClassVar[tuple[Param, ...]] = ()

    def environment(self, sample: Sample, options: RunOptions) -> Environment:
        opening = list(self.prompt(sample, options).messages)
        system = system_text(self.protocol(options).answer)
        if system is not None and (not opening or opening[0].role != "system"):
            opening.insert(0, Message("system", system))
        return MedCalcToolsEnvironment(opening)

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.benchmarks.agent_envs.medcalc_tools import CALCULATOR, PYTHON
        from grandrounds.core.hashing import content_hash

        return MedCalcBench.template_hashes(self, options) | {
            "tools": content_hash([CALCULATOR, PYTHON])[:16]
        }


MedCalcTools.parameters = MedCalcBench.parameters + MedCalcTools.agent_parameters()
