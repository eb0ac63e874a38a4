"""Official readings of generated multiple-choice replies with up to ten options (A-J), for the
``reference`` protocol of the exams whose authors publish one. Pure; each reimplements its source,
cited beside it, and tests compare them with the official functions on reply corpora.

- ``mmlu-pro``: TIGER-AI-Lab/MMLU-Pro evaluate_from_api.py (``**`` removed from the reply, then
  ``extract_answer`` -> ``extract_again`` -> ``extract_final``); an item with no letter read is
  scored by a random option (``update_result``);
- ``m-arc``: dbernardo05/medARC-QA evaluate_from_api.py (the same ``**`` removal, its five patterns
  in order, and the same random option for an item with none, drawn right after ``random.seed(12345)``);
- ``medxpertqa``: TsinghuaC3I/MedXpertQA eval/utils.py ``answer_cleansing`` in zero-shot mode: the
  text after the trigger (else after " answer is "), three phrases removed, then the first standalone
  option letter; ``set_correctness`` compares it with the label ignoring case.

Each returns the letter it read, or None; ``graders/exam_readings.py`` names them for the MCQ grader.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from grandrounds.core.choices import LETTERS
from grandrounds.sources.medxpertqa import template

__all__ = ["m_arc_guess", "m_arc_letter", "medxpertqa_letter", "mmlu_pro_letter"]

# MMLU-Pro evaluate_from_api.py: extract_answer, extract_again, extract_final (in this order).
_PRO_STATED = re.compile(r"answer is \(?([A-J])\)?")
_PRO_COLON = re.compile(r".*[aA]nswer:\s*([A-J])")
_PRO_LAST = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)


def mmlu_pro_letter(text: str | None, letters: Sequence[str] = LETTERS) -> str | None:
    """MMLU-Pro's reading: after ``**`` is removed, "answer is (X)", else the "Answer: X" of the first
    line holding one (its last on that line), else the last standalone capital A-J anywhere."""
    if text is None:
        return None
    body = text.replace("**", "")
    m = _PRO_STATED.search(body) or _PRO_COLON.search(body)
    if m:
        return m.group(1)
    m = _PRO_LAST.search(body)
    return m.group(0) if m else None


# medARC-QA evaluate_from_api.py extract_answer: its patterns, tried in order, first match of each.
_MARC_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"answer is \(?([A-J])\)?",
        r"[aA]nswer:\s*([A-J])",
        r"best course of action to perform immediately is [\(\[]([A-J])[\)\]]",
        r"best course of action.*[\(\[]([A-J])[\)\]]",
        r"(?=.*\bbest\b)(?=.*\baction\b).*[\(\[]([A-J])[\)\]]",
    )
)


def m_arc_letter(text: str | None, letters: Sequence[str] = LETTERS) -> str | None:
    """M-ARC's reading: after ``**`` is removed, the first of its five patterns that matches; None otherwise."""
    if text is None:
        return None
    body = text.replace("**", "")
    for pattern in _MARC_PATTERNS:
        m = pattern.search(body)
        if m:
            return m.group(1)
    return None


# eval/utils.py answer_cleansing: phrases taken out of the prediction before letters are looked for.
_MXQ_REMOVED = ("I understand", "A through J", "A through E", "A through D")


def medxpertqa_letter(
    text: str | None, letters: Sequence[str] = LETTERS, trigger: str | None = None
) -> str | None:
    """MedXpertQA's zero-shot reading of the reply to its answer trigger: the text after the trigger
    (after " answer is " when the trigger is absent; the whole reply when neither is there), stripped,
    the phrases of :data:`_MXQ_REMOVED` removed, then the first option letter standing as a word."""
    if text is None:
        return None
    if trigger is None:  # the zero-shot CoT trigger, read from the pinned prompt_templates.py
        trigger = template("zero_shot_cot_trigger").text
    said = trigger.format(start=letters[0], end=letters[-1])
    if said in text:
        text = text.split(said)[1].strip()
    elif " answer is " in text:
        text = text.split(" answer is ")[1].strip()
    for phrase in _MXQ_REMOVED:
        text = text.replace(phrase, "")
    m = re.search(r"\b(" + "|".join(re.escape(k) for k in letters) + r")\b", text)
    return m.group(1) if m else None


def m_arc_guess(n: int) -> int:
    """The option drawn for a reply read as nothing: M-ARC's ``random.seed(12345)`` right before
    ``randint(0, n - 1)`` (so it depends on n alone). MMLU-Pro's own draw continues one generator
    seeded once (12345) over every re-read of its results file, so which option it gets depends on
    the run's history and cannot be reproduced; the same seeded draw stands in for it."""
    return random.Random(12345).randint(0, n - 1)
