"""MEDEC (MEDIQA-CORR 2024) prediction parsing and scoring, pure.

Official scorer (abachaa/MEDIQA-CORR-2024 evaluation/...-all-metrics.py; PROTOCOLS.md section 6):
- Error-Flag accuracy and Error-Sentence-ID accuracy over all reference texts, a missing
  prediction counting as wrong; sentence ids compared as given (``-1`` for "no error").
- Corrections are "NA" when there is no error (a predicted flag 0 forces NA): both NA -> 1,
  one NA -> 0, otherwise ROUGE-1 F. ``R1FC = (sum of R1F over non-NA pairs + #correct NA) / #texts``.
ROUGE here is the ``rouge_score`` package (lower-cased, alphanumeric tokens, no stemming); the
official scorer used the ``rouge`` package, whose tokenisation differs slightly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from grandrounds.graders.judge_parse import as_bool, extract_json_object
from grandrounds.textutil import normalize_width, strip_reasoning

NA = "NA"
# Submission line: "<text_id> <flag> <sentence_id> <corrected sentence>" (the scorer's regex).
_LINE = re.compile(r"^\s*([a-z0-9\-]+)\s+([01])\s+(-?\d+)\s+(.+?)\s*$", re.I | re.M)


@dataclass(frozen=True)
class Prediction:
    flag: int
    sentence_id: int | None
    corrected: str  # "NA" when no error is claimed or no correction was given


def parse_prediction(reply: str | None, text_id: str | None = None) -> Prediction | None:
    """A prediction from JSON ``{"error", "sentence_id", "corrected"}`` or a submission line.

    With ``text_id`` a submission line must start with it (so prose is not misread as one).
    None when neither form can be read (the official scorer counts that text as missed).
    """
    if not reply:
        return None
    body = normalize_width(strip_reasoning(reply))
    obj = extract_json_object(body)
    if obj is not None and "error" in obj:
        flag = as_bool(obj.get("error"))
        if flag is None:
            return None
        sid = _int(obj.get("sentence_id"))
        corrected = _clean(obj.get("corrected"))
        if not flag:
            return Prediction(0, -1 if sid is None else sid, NA)
        return Prediction(1, sid, corrected or NA)
    m = next((m for m in _LINE.finditer(body) if text_id is None or m.group(1) == text_id), None)
    if m is None:
        return None
    flag, sid = int(m.group(2)), int(m.group(3))
    return Prediction(flag, sid, NA if flag == 0 else (_clean(m.group(4)) or NA))


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def _clean(v: Any) -> str:
    """The scorer strips surrounding quotes and joins lines; "NA"/null stay NA-like (empty)."""
    if v is None:
        return ""
    text = str(v).replace("\r", " ").replace("\n", " ").strip()
    while len(text) > 1 and text.startswith('"'):
        text = text[1:]
    while len(text) > 1 and text.endswith('"'):
        text = text[:-1]
    return "" if text.strip().upper() == NA else text.strip()


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1"], use_stemmer=False)


def rouge1_f(reference: str, candidate: str) -> float:
    return float(_scorer().score(reference, candidate)["rouge1"].fmeasure)


def correction_score(reference: str, candidate: str | None) -> float:
    """Both NA -> 1, exactly one NA -> 0, else ROUGE-1 F; a missing prediction scores 0."""
    if candidate is None:
        return 0.0
    ref_na, cand_na = reference == NA, candidate == NA
    if ref_na and cand_na:
        return 1.0
    if ref_na or cand_na:
        return 0.0
    return rouge1_f(reference, candidate)
