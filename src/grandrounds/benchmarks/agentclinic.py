"""AgentClinic (``agentclinic``): the candidate is the doctor of a simulated clinic; it questions a
patient, orders tests and names a diagnosis, judged by a moderator model as the official code does.

Cases (``--param dataset=...``), from SamuelSchmidgall/AgentClinic @ b6570ed (sha256 pinned):

- ``medqa`` (the default): ``agentclinic_medqa.jsonl``, 107 OSCE cases written from MedQA test questions;
- ``medqa_extended``: ``agentclinic_medqa_extended.jsonl``, 214 cases (its first 107 are ``medqa``'s);
- ``nejm_extended``: ``agentclinic_nejm_extended.jsonl``, 120 NEJM Image Challenge cases, text only,
  as the official code runs them (the doctor sees only "What is the most likely diagnosis?" and asks
  the rest). The 15 cases of ``agentclinic_nejm.jsonl`` are left out: the official loop sends their
  image from NEJM's content server with every doctor prompt, which a run here never fetches.

The loop is the official one (``main`` in agentclinic.py), each turn one step of an episode
(:mod:`grandrounds.benchmarks.agent_envs.agentclinic`): at most 20 doctor inferences
(``--param max_steps``); a reply holding "DIAGNOSIS READY" ends the case and is judged; one holding
"REQUEST TEST" is answered by the measurement reader, any other by the patient, both played by the
``--simulator`` model with their official prompts. A case with no diagnosis by the last inference
is wrong (status ``step_limit``). The moderator (``--judge``; the official default is GPT-4
Turbo) answers whether the doctor's diagnosis and the correct one are the same disease
(:mod:`grandrounds.graders.agentclinic_grader`). The headline is the share of cases diagnosed
correctly; a case the moderator's reply could not settle is unscored and counted, never a zero.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.agent_envs.agentclinic import AgentClinicEnvironment, Case
from grandrounds.benchmarks.agents import AgentBenchmark, Environment
from grandrounds.benchmarks.base import Aggregate, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import text_hash
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Sample
from grandrounds.core.registry import Spec
from grandrounds.sources import agentclinic as official


@dataclass(frozen=True)
class CaseSet:
    """One published case file: where it is, its checksum, its size, its layout."""

    file: RemoteFile
    cases: int
    layout: str  # "osce" (MedQA) or "nejm"


DATASETS: dict[str, CaseSet] = {
    "medqa": CaseSet(
        RemoteFile(
            official.AGENTCLINIC.url("agentclinic_medqa.jsonl"),
            "agentclinic_medqa.jsonl",
            "d91038a2984f21bb1d43edd88c7958d090ef42ba80f5be487b22b903bf3a35ea",
        ),
        107,
        "osce",
    ),
    "medqa_extended": CaseSet(
        RemoteFile(
            official.AGENTCLINIC.url("agentclinic_medqa_extended.jsonl"),
            "agentclinic_medqa_extended.jsonl",
            "54a024eb2705c6c55d1988766adf4ab02ea7bbe2a28f843107b740032200f232",
        ),
        214,
        "osce",
    ),
    "nejm_extended": CaseSet(
        RemoteFile(
            official.AGENTCLINIC.url("agentclinic_nejm_extended.jsonl"),
            "agentclinic_nejm_extended.jsonl",
            "d945305ee17ee1456053fbfe2e9d9c5e8b27d14538bf48ab8ace7306dc437b85",
        ),
        120,
        "nejm",
    ),
}
OSCE_FIELDS = (
    "Objective_for_Doctor",
    "Patient_Actor",
    "Physical_Examination_Findings",
    "Test_Results",
    "Correct_Diagnosis",
)
NEJM_FIELDS = ("question", "patient_info", "physical_exams", "answers")


def osce_case(path: Path, where: str, rec: dict[str, Any]) -> tuple[Case, str]:
    """A MedQA case as ScenarioMedQA reads it, with its correct diagnosis; the measurement reader's
    information is the physical exam with the test results added under ``tests`` (exam_information)."""
    osce = rec.get("OSCE_Examination")
    if not isinstance(osce, dict):
        raise DataError(path, where, "expected an object under 'OSCE_Examination'")
    missing = [f for f in OSCE_FIELDS if f not in osce]
    if missing:
        raise DataError(
            path, where, f"OSCE_Examination has no {', '.join(repr(m) for m in missing)}"
        )
    for name in ("Objective_for_Doctor", "Correct_Diagnosis"):
        if not isinstance(osce[name], str) or not osce[name].strip():
            raise DataError(path, where, f"OSCE_Examination.{name} must be a non-empty string")
    exams = osce["Physical_Examination_Findings"]
    if not isinstance(exams, dict):
        raise DataError(
            path,
            where,
            f"OSCE_Examination.Physical_Examination_Findings must be an object, not {type(exams).__name__}",
        )
    exams = dict(exams)
    exams["tests"] = osce["Test_Results"]
    # the official prompts format these objects with "{}".format: Python's str() of the parsed JSON
    return Case(osce["Objective_for_Doctor"], str(osce["Patient_Actor"]), str(exams)), osce[
        "Correct_Diagnosis"
    ]


def nejm_case(path: Path, where: str, rec: dict[str, Any]) -> tuple[Case, str]:
    """A NEJM case as ScenarioNEJMExtended reads it (the doctor is told only its examiner line)."""
    missing = [f for f in NEJM_FIELDS if f not in rec]
    if missing:
        raise DataError(path, where, f"no {', '.join(repr(m) for m in missing)}")
    for name in ("patient_info", "physical_exams"):
        if not isinstance(rec[name], str) or not rec[name].strip():
            raise DataError(path, where, f"{name!r} must be a non-empty string")
    answers = rec["answers"]
    if not isinstance(answers, list) or not all(
        isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers
    ):
        raise DataError(path, where, "'answers' must be a list of objects with a 'text'")
    correct = [a["text"] for a in answers if a.get("correct") is True]
    if len(correct) != 1:
        raise DataError(
            path, where, f'expected exactly one answer with "correct": true, found {len(correct)}'
        )
    return Case(official.nejm_presentation(), rec["patient_info"], rec["physical_exams"]), correct[
        0
    ]


class AgentClinic(AgentBenchmark):
    """AgentClinic-MedQA (107), MedQA-Extended (214) or NEJM-Extended (120, text only): diagnostic accuracy."""

    name = "agentclinic"
    description = (
        "AgentClinic: the model is the doctor, a --simulator model plays patient and measurement reader, "
        "a --judge moderator checks the diagnosis; medqa (107 cases), medqa_extended (214), nejm_extended "
        "(120, text only; the 15 image NEJM cases are left out: their images are remote). Licence MIT"
    )
    action_protocols: ClassVar[tuple[str, ...]] = ("text",)
    default_max_steps: ClassVar[int] = 20  # main's --total_inferences
    needs_simulator: ClassVar[bool] = True
    official_reading: ClassVar[str] = "AgentClinic's (moderator's first reply exactly yes)"
    needs_judge = True
    protocols = {"reference": official.REFERENCE, "grandrounds": official.GRANDROUNDS}
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (DATASETS["medqa"].file,)
    parameters: ClassVar[tuple[Param, ...]] = ()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.cases = DATASETS[self.param("dataset")]
        self.remote_files = (self.cases.file,)  # type: ignore[misc]  # the chosen case file only

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, self.cases.file.filename)
        read = osce_case if self.cases.layout == "osce" else nejm_case
        for index, (no, rec) in enumerate(iter_jsonl(path)):
            case, diagnosis = read(path, f"line {no}", rec)
            meta: dict[str, Any] = {
                "case": index,
                "dataset": self.param("dataset"),
                "objective": case.objective,
                "patient": case.patient,
                "exam": case.exam,
            }
            if isinstance(rec.get("type"), list):
                meta["category"] = " + ".join(str(t) for t in rec["type"])
            yield Sample(
                id=str(index), benchmark=self.name, messages=(), target=diagnosis, metadata=meta
            )

    def environment(self, sample: Sample, options: RunOptions) -> Environment:
        m = sample.metadata
        return AgentClinicEnvironment(
            Case(m["objective"], m["patient"], m["exam"]),
            int(self.param("max_steps")),
            official.OFFICIAL_GENERATION.params(seed=options.seed),
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("agentclinic", {"protocol": options.protocol})

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        t = official.texts()
        names = ("doctor_base", "doctor_presentation", "doctor_user", "final_question")
        return {
            "doctor": text_hash("\x1f".join(t[n].text for n in names))[:16],
            "source": official.AGENTCLINIC_PY.describe(),
        }

    def simulator_templates(self) -> dict[str, Any]:
        return official.simulator_fingerprint()

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        agg = super().aggregate(samples, grades, options)
        return Aggregate(
            agg.metric,
            agg.score,
            agg.ci95,
            agg.n,
            agg.n_unscored,
            agg.breakdown,
            {**agg.extra, "dataset": self.param("dataset")},
        )


AgentClinic.parameters = (
    Param(
        name="dataset",
        type=str,
        default="medqa",
        help="case file: medqa (107 cases), medqa_extended (214), nejm_extended (120, text only)",
        choices=tuple(DATASETS),
    ),
) + AgentClinic.agent_parameters()
