"""MEDEC (MEDIQA-CORR 2024) scoring arithmetic, pure (predictions are read in graders.medec_extract).

Official scorer (abachaa/MEDIQA-CORR-2024 evaluation/...-all-metrics.py; PROTOCOLS.md section 6):
- Error-Flag accuracy and Error-Sentence-ID accuracy over all reference texts, a missing
  prediction counting as wrong; sentence ids compared as given (``-1`` for "no error").
- Corrections are "NA" when there is no error (a predicted flag 0 forces NA): both NA -> 1,
  one NA -> 0, otherwise ROUGE-1 F. ``R1FC = (sum of R1F over non-NA pairs + #correct NA) / #texts``.
ROUGE here is the ``rouge_score`` package (lower-cased, alphanumeric tokens, no stemming); the
official scorer used the ``rouge`` package, whose tokenisation differs slightly.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

NA = "NA"


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
