"""Official (or peer) readings of generated exam replies for CMMLU, C-Eval and HEAD-QA, reimplemented
from their published sources; pure. Named in :data:`grandrounds.graders.exam_readings.EXAM_READINGS`.

Each takes a reply and returns the option letter it reads, or None when it reads none. Where an
official reader would guess instead of giving up (CMMLU's falls back to ``random.randint`` with no
seed, which cannot be replayed), None is returned: the grade counts it wrong and flags it
unextracted, so the guess never becomes a score and such replies are counted.

- :func:`cmmlu_choice`: haonan-li/CMMLU src/mp_utils.py ``extract_choice`` (four rounds of
  patterns: single match, recursive match, weak single match, a reply naming one letter only).
- :func:`ceval_choice`: hkust-nlp/ceval code/evaluator_series/evaluators/chatgpt.py,
  ``ChatGPT_Evaluator.eval_subject`` without chain of thought: zero-shot, ``extract_ans`` and its
  last element; few-shot, the whole reply compared with the key after ``Evaluator.normalize_answer``.
- :func:`numbered_choice`: HEAD-QA's options are numbered 1-4 (``aid``), and the peer prompt it is
  asked with (Medmarks' head_qa environment) shows those numbers; the peer's own answer parser
  (verifiers' XML parser and ``multiple_choice_accuracy``) is not among the pinned files, so the
  number is read our way: an ``<answer>`` tag, an answer cue, a reply that is only the number, or
  a reply opening with it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from grandrounds.core.textutil import normalize_width, strip_reasoning

__all__ = ["ceval_choice", "cmmlu_choice", "numbered_choice"]

_ABCD = "ABCD"

# CMMLU mp_utils.extract_choice, round 1: (pattern, group) tried in order, first match wins.
_CMMLU_SINGLE = (
    (r"答案(选项)?(是|为)：? ?([ABCD])", 3),
    (r"答案(是|为)选项 ?([ABCD])", 2),
    (r"故?选择?：? ?([ABCD])", 1),
    (r"([ABCD]) ?选?项(是|为)?正确", 1),
    (r"正确的?选项(是|为) ?([ABCD])", 2),
    (r"答案(应该)?(是|为)([ABCD])", 3),
    (r"选项 ?([ABCD]) ?(是|为)?正确", 1),
    (r"选择答案 ?([ABCD])", 1),
    (r"答案?：?([ABCD])", 1),
    (r"([ABCD])(选?项)?是?符合题意", 1),
    (r"答案选项：? ?([ABCD])", 1),
    (r"答案(选项)?为(.*?)([ABCD])", 3),
)
# Round 2: the last of overlapping matches, found by searching again from one character in.
_CMMLU_RECURSIVE = ((r"([ABCD])(.*?)当选", 1), (r"([ABCD])(.*?)正确", 1))
# Round 3, weak: "是 X" not preceded by 不.
_CMMLU_WEAK = ((r"[^不]是：? ?([ABCD])", 1),)
# Round 4: the reply names exactly one of A-D.
_CMMLU_ONLY = r"^[^ABCD]*([ABCD])[^ABCD]*$"


def cmmlu_choice(text: str | None) -> str | None:
    """CMMLU's reading of a reply (src/mp_utils.py ``extract_choice``), None where it would guess."""
    if not text:
        return None  # the official code indexes text[0] and fails on an empty reply
    if text[0] in _ABCD:
        return text[0]
    for pattern, group in _CMMLU_SINGLE:
        m = re.search(pattern, text, re.M)
        if m:
            return m.group(group)
    for pattern, group in _CMMLU_RECURSIVE:
        m = re.search(pattern, text, re.M)
        if m:
            answer = m.group(group)
            while m:
                answer = m.group(group)
                m = re.search(pattern, m.group(0)[1:], re.M)
            return answer
    for pattern, group in _CMMLU_WEAK:
        m = re.search(pattern, text, re.M)
        if m:
            return m.group(group)
    m = re.match(_CMMLU_ONLY, text)
    return m.group(1) if m else None  # official: a random letter


# C-Eval ChatGPT_Evaluator.extract_ans: patterns in order; the first with any match gives the list.
_CEVAL_CUES = (
    r"^选([A-D])",
    r"^选项([A-D])",
    r"答案是\s?选?项?\s?([A-D])",
    r"答案为\s?选?项?\s?([A-D])",
    r"答案应为\s?选?项?\s?([A-D])",
    r"答案选\s?选?项?\s?([A-D])",
    r"答案是:\s?选?项?\s?([A-D])",
    r"答案应该是:\s?选?项?\s?([A-D])",
    r"正确的一项是\s?([A-D])",
    r"答案为:\s?选?项?\s?([A-D])",
    r"答案应为:\s?选?项?\s?([A-D])",
    r"答案:\s?选?项?\s?([A-D])",
    r"答案是：\s?选?项?\s?([A-D])",
    r"答案应该是：\s?选?项?\s?([A-D])",
    r"答案为：\s?选?项?\s?([A-D])",
    r"答案应为：\s?选?项?\s?([A-D])",
    r"答案：\s?选?项?\s?([A-D])",
)


def ceval_choice(text: str | None, few_shot: bool = False) -> str | None:
    """C-Eval's reading (chatgpt.py, no chain of thought) of a reply, after its ``.strip()``.

    Zero-shot: the first character when it is A-D, else every match of the first cue pattern that
    matches, and the LAST of them is the answer. Few-shot: the reply is the answer only if it
    equals a letter after ``normalize_answer`` (lower case, ASCII punctuation removed, whitespace
    collapsed), so "B." reads B and "答案：B" reads nothing.
    """
    body = (text or "").strip()
    if not body:
        return None
    if few_shot:
        norm = " ".join("".join(ch for ch in body.lower() if ch not in string.punctuation).split())
        return norm.upper() if len(norm) == 1 and norm.upper() in _ABCD else None
    if body[0] in _ABCD:
        return body[0]
    for pattern in _CEVAL_CUES:
        found = re.findall(pattern, body)
        if found:
            return found[-1]
    return None


# HEAD-QA numbered options: our reading of a number 1..n. A stated answer ("Answer: 2", "La respuesta
# correcta es la 3", "\boxed{4}") outranks a mention of an option ("Option 2 is incorrect").
_NUM_TAG = re.compile(r"<answer>\s*\(?\s*(\d+)\s*\)?\s*</answer>", re.I)
_NUM_TAIL = (
    r"[*_]*\s*[:=\-]?[*_]*\s*(?i:(?:the|la|el)\s+)?(?i:(?:option|opci[oó]n|number|n[uú]mero)\s+)?"
    r"[*_(\[{$]*\s*(\d+)(?![\d.,]\d)(?!\s*(?:(?i:or|o|and|y)\b|/|,)\s*\(?\d)"  # "1 or 2": none
)
_NUM_STATED = re.compile(
    r"(?:(?i:\b(?:final\s+)?answer(?:\s+(?:is|would be|should be|will be))?"
    r"|\brespuesta(?:\s+(?:correcta|final))?(?:\s+(?:es|ser[ií]a|debe ser))?"
    r"|\b(?:correct|best|right)\s+(?:option|choice)(?:\s+is)?"
    r"|\bopci[oó]n\s+correcta(?:\s+es)?)"
    r"|\\boxed\{)" + _NUM_TAIL
)
_NUM_MENTION = re.compile(
    r"(?i:\b(?:option|choice)(?:\s+is)?|\bopci[oó]n(?:\s+es)?)"
    + _NUM_TAIL
    + r"(?!\s*(?i:is|are|es)\s+(?i:not|no|incorrect|wrong|incorrecta|falsa))"
)
_NUM_ONLY = re.compile(r"[\s*_(\[{$]*(\d+)[\s*_)\]}$.:]*")
_NUM_LEAD = re.compile(r"^\s*[*_(\[]*(\d+)\s*[.):\-]\s+\S")


def numbered_choice(text: str | None, choices: Mapping[str, str]) -> str | None:
    """The option a reply names by its number (1 = the first option shown), as its letter; None if
    it names none or a number out of range. The last ``<answer>`` tag wins, then the last stated
    answer ("Answer: 2", "La respuesta correcta es la 3", "\\boxed{4}"), then the last option named
    and not rejected ("Option 3 is best"; "Option 2 is incorrect" names none), then a reply that is
    only a number, then a reply opening with "2." or "(2)"."""
    if not text:
        return None
    body = normalize_width(strip_reasoning(text)).strip()
    letters = list(choices)
    found = _NUM_TAG.findall(body) or _NUM_STATED.findall(body) or _NUM_MENTION.findall(body)
    if found:
        number = found[-1]
    else:
        m = _NUM_ONLY.fullmatch(body) or _NUM_LEAD.match(body)
        if m is None:
            return None
        number = m.group(1)
    index = int(number) - 1
    return letters[index] if 0 <= index < len(letters) else None
