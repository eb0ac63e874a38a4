"""MEDEC (MEDIQA-CORR 2024) scoring arithmetic, pure (predictions are read in graders.medec_extract).

Official scorer: abachaa/MEDIQA-CORR-2024 ``evaluation/mediqa-corr-2024-eval-script-2-all-metrics.py``
as ``compute_accuracy``, ``get_nlg_eval_data`` and ``NLGMetrics`` do it:

- Error-Flag and Error-Sentence-ID accuracy: string equality with the reference, over all
  reference texts; a text without a prediction counts as wrong.
- Corrections are "NA" where there is no error: both NA -> 1, exactly one NA -> 0 (``continue``
  in ``get_nlg_eval_data``), otherwise the pair is scored with ROUGE-1/2/L F of the ``rouge``
  package (``Rouge().get_scores(predictions, references)``: case-sensitive, sentences split on
  ".", tokens split on spaces, F = 2PR / (P + R + 1e-8)).
- ``XFC = (sum of X F over scored pairs + #both-NA) / #texts`` (``composite_score_rouge1`` ...);
  ``X_subset`` = the mean of X F over the scored pairs (``R1F_subset_check`` ...).
- BERTScore (microsoft/deberta-xlarge-mnli, rescaled, clipped to [0, 1]), BLEURT-20 (clipped) and
  ``AggregateC`` (the per-pair mean of R1F, BERTScore and BLEURT, composed like XFC) need model
  checkpoints grandrounds does not fetch: they are reported as not computed (None), never as 0.

The ``grandrounds`` protocol scores a pair with ``rouge_score`` instead (lower-cased, alphanumeric
tokens, no stemming), so "Schistosoma mansoni." and "schistosoma mansoni" match, and counts only
the texts that were answered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

NA = "NA"
#: Spellings pandas' ``read_csv`` reads as missing by default (the official reference parser turns them into NA).
PANDAS_NA = frozenset(
    {
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "<NA>",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "None",
        "n/a",
        "nan",
        "null",
    }
)
NOT_COMPUTED = ("bertc", "bleurtc", "aggregate_c")
NOT_COMPUTED_WHY = (
    "BERTScore (microsoft/deberta-xlarge-mnli), BLEURT-20 and AggregateC need model checkpoints "
    "grandrounds does not download or run; not computed"
)


@lru_cache(maxsize=1)
def _rouge_score() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)


@lru_cache(maxsize=1)
def _rouge() -> Any:
    from rouge import Rouge

    return Rouge()  # the official scorer's constructor: default metrics, exclusive n-grams


def rouge1_f(reference: str, candidate: str) -> float:
    """ROUGE-1 F of the ``grandrounds`` protocol (``rouge_score``, lower-cased)."""
    return float(_rouge_score().score(reference, candidate)["rouge1"].fmeasure)


def official_rouge(reference: str, candidate: str) -> tuple[float, float, float]:
    """(R1 F, R2 F, RL F) of one pair with the ``rouge`` package, called as the official scorer calls it.

    Raises ValueError where the package does ("Hypothesis is empty." for a candidate made only of
    full stops or whitespace): the official scorer stops there.
    """
    s = _rouge().get_scores([candidate], [reference])[0]
    return s["rouge-1"]["f"], s["rouge-2"]["f"], s["rouge-l"]["f"]


def _na_rule(reference: str, candidate: str) -> float | None:
    """Both NA -> 1, exactly one NA -> 0, None when the pair is scored by ROUGE."""
    ref_na, cand_na = reference == NA, candidate == NA
    if ref_na and cand_na:
        return 1.0
    if ref_na or cand_na:
        return 0.0
    return None


def correction_scores(reference: str, candidate: str, official: bool) -> dict[str, Any]:
    """One text's contributions to R1FC, R2FC and RLFC (``correction_score``, ``r2_score``, ``rl_score``).

    ``in_rouge``: the pair was scored by ROUGE (it enters the ``*_subset`` means). With
    ``official`` a pair the ``rouge`` package refuses scores 0 and carries ``rouge_error``.
    """
    fixed = _na_rule(reference, candidate)
    if fixed is not None:
        return {"correction_score": fixed, "r2_score": fixed, "rl_score": fixed, "in_rouge": False}
    if not official:
        s = _rouge_score().score(reference, candidate)
        return {
            "correction_score": float(s["rouge1"].fmeasure),
            "r2_score": float(s["rouge2"].fmeasure),
            "rl_score": float(s["rougeL"].fmeasure),
            "in_rouge": True,
        }
    try:
        r1, r2, rl = official_rouge(reference, candidate)
    except ValueError as e:
        return {
            "correction_score": 0.0,
            "r2_score": 0.0,
            "rl_score": 0.0,
            "in_rouge": True,
            "rouge_error": str(e),
        }
    return {"correction_score": r1, "r2_score": r2, "rl_score": rl, "in_rouge": True}


def missing_item() -> dict[str, Any]:
    """A text with no readable prediction: wrong on every metric, outside the ROUGE pairs."""
    return {
        "flag_correct": False,
        "sentence_correct": False,
        "correction_score": 0.0,
        "r2_score": 0.0,
        "rl_score": 0.0,
        "in_rouge": False,
        "unparseable": True,
    }


def figures(items: Sequence[Mapping[str, Any] | None], count_missing: bool) -> dict[str, Any]:
    """The official figures over texts; ``None`` items are texts without an answer (failed calls).

    ``count_missing``: the denominator is every text, a text without an answer counting wrong on
    every metric (the official convention); otherwise only answered texts count (ours).
    """
    answered = [d for d in items if d is not None]
    n = len(items) if count_missing else len(answered)
    pairs = [d for d in answered if d.get("in_rouge")]

    def share(key: str) -> float | None:
        return math.fsum(float(d.get(key, 0.0)) for d in answered) / n if n else None

    def subset(key: str) -> float | None:
        return math.fsum(float(d[key]) for d in pairs) / len(pairs) if pairs else None

    return {
        "error_flag_accuracy": share("flag_correct"),
        "error_sentence_accuracy": share("sentence_correct"),
        "r1fc": share("correction_score"),
        "r2fc": share("r2_score"),
        "rlfc": share("rl_score"),
        "r1f_subset": subset("correction_score"),
        "r2f_subset": subset("r2_score"),
        "rlf_subset": subset("rl_score"),
        "n": n,
        "n_texts": len(items),
        "n_flag_correct": sum(1 for d in answered if d.get("flag_correct")),
        "n_sentence_correct": sum(1 for d in answered if d.get("sentence_correct")),
        "n_no_answer": len(items) - len(answered),
        "n_unparseable": sum(1 for d in answered if d.get("unparseable")),
        "n_rouge_pairs": len(pairs),
        "n_rouge_errors": sum(1 for d in answered if d.get("rouge_error")),
        "n_official_errors": sum(1 for d in answered if d.get("official_error")),
    }
