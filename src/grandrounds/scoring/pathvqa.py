"""PathVQA's own figures: what its authors' evaluation script computes for one answer.

Source: UCSD-AI4H/PathVQA @ dd51804, ``Evaluation script/evaluation_script.py`` (``bleu``,
``calculate_bleu``, ``calculate_exactmatch``, ``calculate_f1score``) and ``Evaluation
script/utils.py`` (``split_sentence``, ``modified_precision``, ``brevity_penalty``). The rules,
restated (tests/test_vqa_sets.py compares these functions with the official ones on a corpus):

- **words**: every character other than ASCII letters and spaces is deleted (not made a space:
  "x-ray" is one word, "xray"), the text lower-cased and split on white space; the n-grams of a
  text are its runs of n consecutive words, counted.
- **exact match** (the script's name; it is a precision): the number of *distinct* reference words
  found among the candidate's words, divided by the number of candidate words (repeats counted);
  0 for a candidate with no words.
- **F1**: over word counts, true positives are the candidate's counts of words both hold, false
  positives its counts of words the reference lacks, false negatives the reference's counts of
  words the candidate lacks; 0 when the candidate has no words, the reference has none, or no word
  is shared.
- **BLEU-k** (called here with n = k and k equal weights 1/k, our choice of the script's arguments):
  brevity penalty from the *character* lengths of candidate c and reference r (the script passes
  strings): 1 when c > r, else exp(1 - r / c); modified n-gram precision per order, clipped by the
  reference's counts; BLEU = penalty x exp(sum of weight x log p over the orders whose p is not 0):
  an order with no matching n-gram is skipped, not made to zero the score.

Where the script divides by zero (an empty candidate: c = 0; a candidate with fewer than n words:
no n-grams to divide by), it raises; :func:`bleu` returns None there, and the benchmark counts such
answers as 0 and reports how many there were.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

_NOT_LETTER = re.compile(r"[^a-zA-Z ]")
BLEU_ORDERS = (1, 2, 3)


def ngrams(text: str, n: int) -> Counter[str]:
    """The n-grams of ``text`` after the script's word rule, counted."""
    words = _NOT_LETTER.sub("", text).lower().strip().split()
    return Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def exact_match(candidate: str, reference: str) -> float:
    cand, ref = ngrams(candidate, 1), ngrams(reference, 1)
    total = sum(cand.values())
    return sum(1 for w in ref if w in cand) / total if total else 0.0


def f1(candidate: str, reference: str) -> float:
    cand, ref = ngrams(candidate, 1), ngrams(reference, 1)
    if not cand or not ref:
        return 0.0
    tp = sum(c for w, c in cand.items() if w in ref)
    fp = sum(c for w, c in cand.items() if w not in ref)
    fn = sum(c for w, c in ref.items() if w not in cand)
    if tp == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2 * precision * recall / (precision + recall)


def bleu(candidate: str, reference: str, k: int) -> float | None:
    """BLEU-k as the script computes it for one reference; None where the script divides by zero."""
    c, r = len(candidate), len(reference)
    if c == 0:
        return None
    penalty = 1.0 if c > r else math.exp(1 - r / c)
    total = 0.0
    for n in range(1, k + 1):
        cand, ref = ngrams(candidate, n), ngrams(reference, n)
        if not cand:
            return None
        p = sum(min(count, ref[g]) for g, count in cand.items()) / sum(cand.values())
        if p != 0:
            total += (1 / k) * math.log(p)
    return penalty * math.exp(total)


def authors_figures(candidate: str, reference: str) -> dict[str, Any]:
    """One answer's figures under the authors' script: exact match, F1, BLEU-1..3 (None: undefined)."""
    return {
        "exact_match": exact_match(candidate, reference),
        "f1": f1(candidate, reference),
        **{f"bleu{k}": bleu(candidate, reference, k) for k in BLEU_ORDERS},
    }


def mean_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over answers of :func:`authors_figures`; an undefined BLEU counts 0 and is counted."""
    out: dict[str, Any] = {"n": len(rows)}
    for key in ("exact_match", "f1", *(f"bleu{k}" for k in BLEU_ORDERS)):
        values = [r.get(key) for r in rows]
        out[key] = sum(v or 0.0 for v in values) / len(rows) if rows else None
        if key.startswith("bleu"):
            out[f"n_{key}_undefined"] = sum(v is None for v in values)
    return out
