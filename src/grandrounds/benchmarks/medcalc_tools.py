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

The Python tool runs model code under bubblewrap (:mod:`grandrounds.benchmarks.agent_envs.sandbox`).
Where bubblewrap cannot start, the run stops before its first call with one line saying what is
missing; ``--param sandbox=unsafe-audit-hook-only`` runs the code under the audit hook and
resource limits only (not a sandbox): a setting of the run's spec, so such runs are recorded and
ranked apart. Each result says which isolation ran (``extra.sandbox``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from grandrounds.benchmarks.agent_envs import sandbox
from grandrounds.benchmarks.agent_envs.medcalc_tools import MedCalcToolsEnvironment
from grandrounds.benchmarks.agents import AgentBenchmark, Environment
from grandrounds.benchmarks.base import Aggregate, RunOptions
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Message, Sample
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
        return MedCalcToolsEnvironment(opening, backend=str(self.param("sandbox")))

    def preflight(self) -> dict[str, str]:
        """The isolation the Python tool will run under; a one-line :class:`ConfigError` before
        any call where it cannot start."""
        try:
            return sandbox.check(str(self.param("sandbox")))
        except sandbox.SandboxUnavailable as e:
            raise ConfigError(f"{self.name}: the python tool cannot run: {e}") from None

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """MedCalc-Bench-with-tools' figures, with the isolation the Python tool ran under (a run
        cannot start without it, see :meth:`preflight`)."""
        agg = super().aggregate(samples, grades, options)
        extra = {**agg.extra, "sandbox": str(self.param("sandbox"))}
        if extra["sandbox"] == sandbox.BUBBLEWRAP:  # the seccomp filter inside it, on this machine
            extra["seccomp"] = sandbox.seccomp_state()
        return replace(agg, extra=extra)

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.benchmarks.agent_envs.medcalc_tools import CALCULATOR, PYTHON
        from grandrounds.core.hashing import content_hash

        return MedCalcBench.template_hashes(self, options) | {
            "tools": content_hash([CALCULATOR, PYTHON])[:16]
        }


MedCalcTools.parameters = (
    MedCalcBench.parameters
    + MedCalcTools.agent_parameters()
    + (
        Param(
            name="sandbox",
            type=str,
            default=sandbox.BUBBLEWRAP,
            help="what runs the python tool: bubblewrap, or the audit hook and limits only "
            f"({sandbox.UNSAFE}: not a sandbox, recorded with the run)",
            choices=sandbox.BACKENDS,
        ),
    )
)
