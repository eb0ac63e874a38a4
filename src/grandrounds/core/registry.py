"""One registry pattern for benchmarks, providers and graders.

Built-in components are listed by import path and imported only when asked for, so
``grandrounds list`` stays fast and nothing runs at import. Plugins register through the
entry-point groups ``grandrounds.benchmarks``, ``grandrounds.providers`` and ``grandrounds.graders``, exactly like
built-ins. A component is named by a :class:`Spec` (name + arguments) that is recorded in
the store, so it can be rebuilt later.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from grandrounds.core.hashing import canonical_json

T = TypeVar("T")


class UnknownComponent(KeyError):
    """Raised for a name nobody registered; the message suggests the closest names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


@dataclass(frozen=True)
class Spec:
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}{canonical_json(self.args)}"


class Registry(Generic[T]):
    """Name -> component class, resolved lazily from ``module:attr`` strings or entry points."""

    def __init__(self, kind: str, builtins: Mapping[str, str], group: str) -> None:
        self.kind = kind
        self._paths: dict[str, str] = dict(builtins)
        self._loaded: dict[str, type[T]] = {}
        self._group = group
        self._plugins_scanned = False

    def register(self, name: str, cls: type[T]) -> None:
        self._loaded[name] = cls

    @contextmanager
    def registered(self, name: str, cls: type[T]) -> Iterator[None]:
        """``cls`` registered as ``name`` for the duration of a block (tests, scoped plugins);
        whatever the name meant before is restored afterwards."""
        before = self._loaded.get(name)
        self._loaded[name] = cls
        try:
            yield
        finally:
            if before is None:
                self._loaded.pop(name, None)
            else:
                self._loaded[name] = before

    def _scan_plugins(self) -> None:
        if self._plugins_scanned:
            return
        self._plugins_scanned = True
        for ep in entry_points(group=self._group):
            self._paths.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        self._scan_plugins()
        return sorted(set(self._paths) | set(self._loaded))

    def get(self, name: str) -> type[T]:
        if name in self._loaded:
            return self._loaded[name]
        path = self._paths.get(name)
        if (
            path is None
        ):  # built-ins win over plugins of the same name, so only other names need the scan (about 0.06 s)
            self._scan_plugins()
            path = self._paths.get(name)
        if path is None:
            close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownComponent(
                f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})"
            )
        module_name, _, attr = path.partition(":")
        cls = getattr(importlib.import_module(module_name), attr)
        self._loaded[name] = cls
        return cls


BENCHMARKS: Registry[Any] = Registry(
    "benchmark",
    {
        "demo": "grandrounds.benchmarks.demo:DemoExam",
        "medqa": "grandrounds.benchmarks.medqa:MedQA",
        "medmcqa": "grandrounds.benchmarks.medmcqa:MedMCQA",
        "pubmedqa": "grandrounds.benchmarks.pubmedqa:PubMedQA",
        "mmlu-medical": "grandrounds.benchmarks.mmlu_medical:MMLUMedical",
        "cmb": "grandrounds.benchmarks.cmb:CMB",
        "healthbench": "grandrounds.benchmarks.healthbench:HealthBench",
        "healthbench-hard": "grandrounds.benchmarks.healthbench:HealthBenchHard",
        "healthbench-consensus": "grandrounds.benchmarks.healthbench:HealthBenchConsensus",
        "healthbench-professional": "grandrounds.benchmarks.healthbench_professional:HealthBenchProfessional",
        "medeqbench": "grandrounds.benchmarks.medeqbench:MedEQBench",
        "llmeval-med": "grandrounds.benchmarks.llmeval_med:LLMEvalMed",
        "gaps": "grandrounds.benchmarks.gaps:GAPS",
        "medcalc-bench": "grandrounds.benchmarks.medcalc:MedCalcBench",
        "medcalc-bench-tools": "grandrounds.benchmarks.medcalc_tools:MedCalcTools",
        "medagentbench": "grandrounds.benchmarks.medagentbench:MedAgentBench",
        "agentclinic": "grandrounds.benchmarks.agentclinic:AgentClinic",
        "medec": "grandrounds.benchmarks.medec:MEDEC",
        "medbench": "grandrounds.benchmarks.medbench:MedBench",
        "medbullets": "grandrounds.benchmarks.medbullets:MedBullets",
        "medhallu": "grandrounds.benchmarks.medhallu:MedHallu",
        "med-halt": "grandrounds.benchmarks.med_halt:MedHALT",
        "sct-public": "grandrounds.benchmarks.sct_public:SCTPublic",
        "medicationqa": "grandrounds.benchmarks.medicationqa:MedicationQA",
        "mediqa-qa-2019": "grandrounds.benchmarks.mediqa_qa:MediqaQA",
        "medxpertqa-text": "grandrounds.benchmarks.medxpertqa:MedXpertQA",
        "mmlu-pro-health": "grandrounds.benchmarks.mmlu_pro:MMLUProHealth",
        "m-arc": "grandrounds.benchmarks.mmlu_pro:MARC",
        "medqa-usmle-5opt": "grandrounds.benchmarks.medqa_5opt:MedQA5",
        "medqa-mcmle": "grandrounds.benchmarks.medqa_mcmle:MedQAMCMLE",
        "medqa-taiwan": "grandrounds.benchmarks.medqa_taiwan:MedQATaiwan",
        "careqa-mc": "grandrounds.benchmarks.careqa:CareQAMC",
        "careqa-open": "grandrounds.benchmarks.careqa_open:CareQAOpen",
        "meddialog": "grandrounds.benchmarks.meddialog:MedDialog",
        "longhealth": "grandrounds.benchmarks.longhealth:LongHealth",
        "metamedqa": "grandrounds.benchmarks.metamedqa:MetaMedQA",
        "supergpqa-medicine": "grandrounds.benchmarks.supergpqa:SuperGPQAMedicine",
        "kormedmcqa": "grandrounds.benchmarks.kormedmcqa:KorMedMCQA",
        "cmexam": "grandrounds.benchmarks.cmexam:CMExam",
        "medconceptsqa": "grandrounds.benchmarks.medconceptsqa:MedConceptsQA",
        "vqa-rad": "grandrounds.benchmarks.vqa:VQARAD",
        "slake": "grandrounds.benchmarks.vqa:SLAKE",
        "pathvqa": "grandrounds.benchmarks.pathvqa:PathVQA",
        "pmc-vqa": "grandrounds.benchmarks.image_exams:PMCVQA",
        "omnimedvqa": "grandrounds.benchmarks.image_exams:OmniMedVQA",
        "gmai-mmbench": "grandrounds.benchmarks.image_exams:GMAIMMBench",
        "mmmu-health": "grandrounds.benchmarks.mmmu_health:MMMUHealth",
        "medxpertqa-mm": "grandrounds.benchmarks.medxpertqa_mm:MedXpertQAMM",
        "head-qa": "grandrounds.benchmarks.headqa:HeadQA",
        "cmmlu-medical": "grandrounds.benchmarks.cmmlu:CMMLUMedical",
        "ceval-medical": "grandrounds.benchmarks.ceval:CEvalMedical",
        "medagentsbench": "grandrounds.benchmarks.medagentsbench:MedAgentsBench",
        "medexqa": "grandrounds.benchmarks.medagentsbench:MedExQA",
    },
    "grandrounds.benchmarks",
)

PROVIDERS: Registry[Any] = Registry(
    "provider",
    {
        "openai": "grandrounds.providers.openai_compat:OpenAIProvider",
        "anthropic": "grandrounds.providers.anthropic:AnthropicProvider",
        "llamacpp": "grandrounds.providers.llamacpp:LlamaCppProvider",
        "scripted": "grandrounds.providers.scripted:ScriptedProvider",
        "vllm": "grandrounds.providers.engines:VLLMProvider",
        "sglang": "grandrounds.providers.engines:SGLangProvider",
    },
    "grandrounds.providers",
)

GRADERS: Registry[Any] = Registry(
    "grader",
    {
        "mcq": "grandrounds.graders.mcq_grader:MCQGrader",
        "medcalc": "grandrounds.graders.medcalc_grader:MedCalcGrader",
        "medagentbench": "grandrounds.graders.medagentbench_grader:MedAgentBenchGrader",
        "agentclinic": "grandrounds.graders.agentclinic_grader:AgentClinicGrader",
        "medec": "grandrounds.graders.medec_grader:MEDECGrader",
        "medbench": "grandrounds.graders.medbench_grader:MedBenchGrader",
        "healthbench": "grandrounds.graders.healthbench_grader:HealthBenchGrader",
        "healthbench-professional": "grandrounds.graders.healthbench_professional_grader:ProfessionalGrader",
        "medeq": "grandrounds.graders.medeq_grader:MedEQGrader",
        "gaps": "grandrounds.graders.gaps_grader:GAPSGrader",
        "llmeval-med": "grandrounds.graders.llmeval_grader:LLMEvalGrader",
        "rubric": "grandrounds.graders.rubric_grader:RubricGrader",
        "medhallu": "grandrounds.graders.medhallu_grader:MedHalluGrader",
        "med-halt": "grandrounds.graders.med_halt_grader:MedHALTGrader",
        "sct": "grandrounds.graders.sct_grader:SCTGrader",
        "medicationqa": "grandrounds.graders.medicationqa_grader:MedicationQAGrader",
        "careqa-open": "grandrounds.graders.careqa_open_grader:CareQAOpenGrader",
        "meddialog": "grandrounds.graders.meddialog_grader:MedDialogGrader",
        "mediqa-qa": "grandrounds.graders.mediqa_grader:MediqaGrader",
        "vqa": "grandrounds.graders.vqa_grader:VQAGrader",
        "pathvqa": "grandrounds.graders.pathvqa_grader:PathVQAGrader",
    },
    "grandrounds.graders",
)
