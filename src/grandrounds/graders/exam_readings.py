"""Official readings of generated exam replies, by name, for the MCQ grader's ``reference_reading``.

The readings themselves live in ``readings_aj.py`` (MedXpertQA, MMLU-Pro, M-ARC), ``readings_cn.py``
(CMMLU, C-Eval, numbered options) and ``readings_peers.py`` (CMExam, KorMedMCQA).

Each entry: ``read(text, choices) -> letter or None``; ``source`` (where the rule comes from, recorded
in the grading's fingerprint); ``numbered`` (options shown by number under both protocols, so our reading
reads the number too); ``guess(n) -> index`` (the option an official scorer draws at random for a reply it
read nothing from; None: such a reply is wrong); ``correct(text, choices, key) -> bool`` (a reference
that grades "is this the key?" rather than reading one option, as Medmarks' does: the grade's value
is its answer, ``read`` only names the option it credits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from grandrounds.graders.readings_aj import (
    m_arc_guess,
    m_arc_letter,
    medxpertqa_letter,
    mmlu_pro_letter,
)
from grandrounds.graders.readings_cn import ceval_choice, cmmlu_choice, numbered_choice
from grandrounds.graders.readings_medmarks import (
    boxed_answer,
    medmarks_choice,
    medmarks_correct,
    xml_answer,
)
from grandrounds.graders.readings_peers import cmexam_choice, kormedmcqa_choice
from grandrounds.sources.medxpertqa import MEDXPERTQA
from grandrounds.sources.upstream import CEVAL, CMEXAM, CMMLU, LM_EVAL, M_ARC, MEDMARKS, MMLU_PRO

__all__ = ["EXAM_READINGS", "ExamReading"]


@dataclass(frozen=True, kw_only=True)
class ExamReading:
    read: Callable[[str | None, Mapping[str, str]], str | None]
    source: str
    numbered: bool = False
    guess: Callable[[int], int] | None = None
    correct: Callable[[str | None, Mapping[str, str], str], bool] | None = None


def _medmarks(parse: Callable[[str | None], str], numbered: bool, source: str) -> ExamReading:
    """Medmarks' reading: ``parse`` takes the answer out of the reply, multiple_choice_accuracy grades it;
    ``numbered`` options are labelled 1.. and their texts stripped (HEAD-QA's ``aid``/``atext.strip()``)."""

    def labelled(choices: Mapping[str, str]) -> dict[str, str]:
        if not numbered:
            return dict(choices)
        return {str(i): text.strip() for i, text in enumerate(choices.values(), 1)}

    def read(text: str | None, choices: Mapping[str, str]) -> str | None:
        got = medmarks_choice(parse(text), labelled(choices))
        if got is None or not numbered:
            return got
        return list(choices)[int(got) - 1]

    def correct(text: str | None, choices: Mapping[str, str], key: str) -> bool:
        label = str(list(choices).index(key) + 1) if numbered else key
        return medmarks_correct(parse(text), label, labelled(choices)[label])

    return ExamReading(read=read, source=source, numbered=numbered, correct=correct)


_MEDMARKS_MCA = f"{MEDMARKS.short} multiple_choice_accuracy"
_VERIFIERS = "verifiers v0.1.7.post0"


EXAM_READINGS: dict[str, ExamReading] = {
    "mmlu-pro": ExamReading(
        read=lambda text, choices: mmlu_pro_letter(text, list(choices)),
        source=f"{MMLU_PRO.short} evaluate_from_api.py extract_answer/extract_again/extract_final, random option if none",
        guess=m_arc_guess,
    ),
    "m-arc": ExamReading(
        read=lambda text, choices: m_arc_letter(text, list(choices)),
        source=f"{M_ARC.short} evaluate_from_api.py extract_answer, random option (seed 12345) if none",
        guess=m_arc_guess,
    ),
    "medxpertqa": ExamReading(
        read=lambda text, choices: medxpertqa_letter(text, list(choices)),
        source=f"{MEDXPERTQA.short} eval/utils.py answer_cleansing (zero_shot), set_correctness",
    ),
    # CMMLU, C-Eval, HEAD-QA (graders/readings_cn.py)
    "cmmlu": ExamReading(
        read=lambda text, choices: cmmlu_choice(text),
        source=f"{CMMLU.short} src/mp_utils.py extract_choice (its random fallback: unextracted)",
    ),
    "ceval": ExamReading(
        read=lambda text, choices: ceval_choice(text),
        source=f"{CEVAL.short} evaluators/chatgpt.py extract_ans, last match (zero-shot)",
    ),
    "ceval-fewshot": ExamReading(
        read=lambda text, choices: ceval_choice(text, few_shot=True),
        source=f"{CEVAL.short} evaluators/chatgpt.py exact_match (few-shot)",
    ),
    "numbered": ExamReading(
        read=numbered_choice, source="ours: the option's number (HEAD-QA aid)", numbered=True
    ),
    # Medmarks' environments (graders/readings_medmarks.py)
    "medmarks-xml": _medmarks(
        xml_answer, False, f"{_VERIFIERS} XMLParser.parse_answer (first <answer>), {_MEDMARKS_MCA}"
    ),
    "medmarks-xml-numbered": _medmarks(
        xml_answer, True, f"{_VERIFIERS} XMLParser.parse_answer (first <answer>), {_MEDMARKS_MCA}"
    ),
    "medmarks-boxed": _medmarks(
        boxed_answer, False, f"{_VERIFIERS} extract_boxed_answer (last), {_MEDMARKS_MCA}"
    ),
    "medmarks-plain": _medmarks(
        lambda text: text or "", False, f"{_VERIFIERS} Parser (whole reply), {_MEDMARKS_MCA}"
    ),
    # KorMedMCQA, CMExam (graders/readings_peers.py)
    "kormedmcqa": ExamReading(
        read=lambda text, choices: kormedmcqa_choice(text),
        source=f"{LM_EVAL.short} kormedmcqa utils.ExtractChoiceFilter after until",
    ),
    "cmexam": ExamReading(
        read=lambda text, choices: cmexam_choice(text, choices),
        source=f"{CMEXAM.short} src/evaluation/evaluate_lora_result.py parse_options",
    ),
}
