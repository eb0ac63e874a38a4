"""Medmarks' reading of generated exam replies (the ``reference`` of the exams that name Medmarks as
their peer: HEAD-QA, CareQA, SuperGPQA, MedConceptsQA, MetaMedQA); pure. Reimplemented from
tmabraham/med-lm-envs at the pinned commit and the verifiers release its environments run
(``verifiers<0.1.8``: v0.1.7.post0, :data:`~grandrounds.sources.upstream.VERIFIERS`).

A Medmarks environment first takes the answer out of the reply with its parser, then grades it with
``multiple_choice_accuracy`` (REDACTED_verifiers/rewards/multiple_choice_accuracy.py) against the
key's label and text:

- XML format (HEAD-QA, MedConceptsQA): verifiers' ``XMLParser.parse_answer`` over a chat completion
  calls ``parse`` without ``last``, so it is the FIRST ``<answer>...</answer>`` of the reply (content
  stripped); a reply without one gives "" and is wrong (:func:`xml_answer`);
- boxed format (CareQA, SuperGPQA): verifiers' ``extract_boxed_answer``, the LAST ``\\boxed{...}``
  with braces matched, else the whole reply (:func:`boxed_answer`);
- MetaMedQA: the whole reply (a plain ``vf.Parser()``).

``multiple_choice_accuracy`` (:func:`medmarks_correct`) answers "is this the key?", not "which option
is it?": after dropping a think block and LaTeX (pylatexenc's ``LatexNodes2Text``, a Medmarks
dependency: "50% sure" loses the rest of its line as a TeX comment) it tries, in order, a reply that
is only the key's label, a leading label ("B. ..."), the last anchored label ("answer is B",
"therefore C", not negated), any label in the reply's last sentence that is not negated or followed
by "is incorrect", and the key's text near the start or end of the reply; the last two only when no
explicit choice of the label's kind was found. So one reply can be credited to several options ("1
or 2"); :func:`medmarks_choice` names the option only when exactly one is credited.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping

__all__ = ["boxed_answer", "medmarks_choice", "medmarks_correct", "xml_answer"]

_XML_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)


def xml_answer(text: str | None) -> str:
    """The first ``<answer>`` element's content, stripped ("" when there is none)."""
    m = _XML_ANSWER.search(text or "")
    return m.group(1).strip() if m else ""


def boxed_answer(text: str | None) -> str:
    """verifiers' extract_boxed_answer: the last ``\\boxed{...}`` with braces matched, else the text."""
    text = text or ""
    start = text.rfind("\\boxed{")
    if start == -1:
        return text
    i, depth = start + len("\\boxed{"), 1
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start + len("\\boxed{") : i - 1] if depth == 0 else text


# The patterns of multiple_choice_accuracy.py (facts of the reference reading, cited there by name).
# ANCHOR_PATTERN: an answer phrase, optional "is" / negation, the option token.
_ANCHOR = re.compile(
    r"(?:\bfinal\s+answer\b|\banswer\b|\bans\b|\bchoice\b|\boption\b|\bselected\b|\bi\s+choose\b"
    r"|\bi\s+pick\b|\btherefore\b|\bthus\b|\bso\b|\bconclusion\b|\bin\s+conclusion\b|\bmost\s+likely\b"
    r"|\bbest[-\s]+supported\s+answer\b|<answer>)\s*"
    r"[:\-–—]?\s*(?:is\s*)?(?P<neg>not\s+|isn['’]t\s+)?"
    r"(?:[*_`~]+\s*)*"
    r"\(?\s*(?P<opt>[A-Za-z]|\d{1,2})\s*\)?"
    r"\s*[\)\.:]?\s*"
    r"(?:[*_`~]+\s*)*"
    r"(?![\w+\-/])",
    re.IGNORECASE,
)
# TOKEN_PATTERN: any lone letter or one/two-digit number.
_TOKEN = re.compile(r"(?<![\w+\-/])\(?\s*([A-Za-z]|\d{1,2})\s*[\)\.:]?(?![\w+\-/])", re.IGNORECASE)
# LEADING_OPTION_PATTERN: "B. ...", "- (C) ...", "> **D)** ..." at the very start.
_LEADING = re.compile(
    r"^\s*(?:>\s*)?(?:(?:[-*+]\s+)|(?:\d{1,3}[.)]\s+))?\s*"
    r"(?:[*_`~]+)?\s*\(?\s*([A-Za-z]|\d{1,2})\s*[\)\.:]\s*\)?\s*(?:[*_`~]+)?\s*(?!\w)",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|isn['’]t)\b", re.IGNORECASE)
_NEGATIVE_AFTER = re.compile(
    r"^\s*(?:is|are|was|were)\s+(?:incorrect|wrong|false|not\s+correct)\b|^\s*not\s+correct\b",
    re.IGNORECASE,
)
_SENTENCE_BOUNDARY = re.compile(r"[.!?]\s+|\n+")
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_THINK_PAIR = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_TAIL_TOKENS = 64


def _after_think(text: str) -> str:
    """The reply past its reasoning: after the last "</think>" when no "<think>" opens; after the one
    closed pair when there is exactly one; otherwise the whole reply (stripped in every case)."""
    if _THINK_OPEN.search(text) is None:
        closes = list(_THINK_CLOSE.finditer(text))
        return text[closes[-1].end() :].strip() if closes else text.strip()
    pairs = list(_THINK_PAIR.finditer(text))
    return text[pairs[0].end() :].strip() if len(pairs) == 1 else text.strip()


@functools.lru_cache(maxsize=4096)
def _detex(text: str) -> str:
    """pylatexenc's text rendering (math as text), as Medmarks' _strip_tex; unchanged if it fails."""
    try:
        from pylatexenc.latex2text import LatexNodes2Text

        return str(LatexNodes2Text(math_mode="text").latex_to_text(text))
    except Exception:  # as there: any failure (the package missing included) keeps the text
        return text


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text or "").casefold()


def _label(token: str) -> str | None:
    """An option label: a digit string as it is, a single letter upper-cased, else None."""
    token = (token or "").strip()
    if not token:
        return None
    if token.isdigit():
        return token
    return token.upper() if token.isalpha() and len(token) == 1 else None


def _same_kind(predicted: str | None, key: str) -> bool:
    if predicted is None:
        return False
    return predicted.isdigit() if key.isdigit() else predicted.isalpha()


def _sentence(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """(start, end) of the sentence holding ``span``, cut at _SENTENCE_BOUNDARY."""
    start, end = span
    before = [m.end() for m in _SENTENCE_BOUNDARY.finditer(text[:start])]
    after = _SENTENCE_BOUNDARY.search(text[end:])
    return (before[-1] if before else 0), (end + after.start() if after else len(text))


def _negated_before(text: str, span: tuple[int, int]) -> bool:
    s_start, _ = _sentence(text, span)
    return bool(_NEGATION.search(text[s_start : span[0]]))


def _rejected_after(text: str, span: tuple[int, int]) -> bool:
    _, s_end = _sentence(text, span)
    return bool(_NEGATIVE_AFTER.search(text[span[1] : s_end]))


def _tail(text: str) -> str:
    bounds = list(_SENTENCE_BOUNDARY.finditer(text))
    tail = (text[bounds[-1].end() :] if bounds else text).strip()
    if not tail:
        tail = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
    words = tail.split()
    return " ".join(words[-_TAIL_TOKENS:]) if len(words) > _TAIL_TOKENS else tail


def medmarks_correct(answer: str | None, key: str, key_text: str | None) -> bool:
    """Medmarks' ``multiple_choice_accuracy(llm_answer=answer, answer_letter=key, answer_text=key_text)``
    (no prefix, option text accepted, LaTeX stripped): is the parsed ``answer`` the key?"""
    if not answer:
        return False
    body = _detex(_after_think(answer))
    folded = _fold(body)
    label = _label(key)
    if label is None:
        raise ValueError(f"not an option label: {key!r}")
    gold_text = _fold(re.sub(r"\s+", " ", _detex(key_text) if key_text else "").strip())
    if _label(folded) == label:
        return True
    explicit = False
    lead = _LEADING.match(body)
    if lead:
        predicted = _label(lead.group(1))
        explicit = _same_kind(predicted, label)
        if predicted == label:
            return True
    anchors = list(_ANCHOR.finditer(folded))
    if anchors:
        last = anchors[-1]
        predicted, negated = _label(last.group("opt")), last.group("neg") is not None
        explicit = explicit or (not negated and _same_kind(predicted, label))
        if predicted == label and not negated:
            return True
    if not explicit:
        tail = _tail(folded)
        for tok in reversed(list(_TOKEN.finditer(tail))):
            predicted = _label(tok.group(1))
            if predicted is None or _negated_before(tail, tok.span(1)):
                continue
            if _rejected_after(tail, tok.span(1)):
                continue
            if predicted == label:
                return True
    if gold_text and not explicit:
        width = len(gold_text.split()) + 15
        words = folded.split()
        regions = (
            " ".join(words[:width]),
            " ".join(words[-width:] if len(words) > width else words),
        )
        pattern = re.compile(
            rf"(?<!\w){re.escape(gold_text).replace(chr(92) + ' ', chr(92) + 's+')}(?!\w)",
            re.IGNORECASE,
        )
        for region in regions:
            m = pattern.search(region)
            if m and not _negated_before(region, m.span()):
                return True
    return False


def medmarks_choice(answer: str | None, options: Mapping[str, str]) -> str | None:
    """The one option (a key of ``options``: label -> text) Medmarks credits ``answer`` with, or None
    when it credits none or several."""
    credited = [k for k, text in options.items() if medmarks_correct(answer, k, text)]
    return credited[0] if len(credited) == 1 else None
