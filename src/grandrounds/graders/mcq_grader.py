"""Multiple-choice grading: option shuffling, the answer modes, and the 1/0 score.

A multiple-choice :class:`Sample` keeps its options in ``choices`` (letter -> text, source
order) and its key in ``target`` ("B", or sorted letters "ACD" for multiple-answer items with
``metadata["multi"]``). The option shuffle is deterministic in (seed, sample id), so the prompt
(built by the benchmark) and the grader (here) apply the same permutation without sharing state.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.choice_extract import extract_choice
from grandrounds.records import Grade, Response, Sample

LETTERS = "ABCDEFGHIJ"
MODES = ("generate", "letter", "loglik")


def _unit(seed: int, sample_id: str, i: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{sample_id}:{i}".encode()).digest()[:8], "big")


def permutation(sample_id: str, n: int, seed: int) -> list[int]:
    """A permutation of range(n) fixed by (seed, sample id): Fisher-Yates driven by sha256.

    Independent of Python's ``random`` implementation, so a stored permutation can always be
    recomputed.
    """
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = _unit(seed, sample_id, i) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def shuffle_choices(sample: Sample, seed: int) -> tuple[Sample, str]:
    """A copy of ``sample`` with its options permuted and its target remapped.

    Returns (shuffled sample, permutation) where permutation "CADB" means displayed A is
    original C, displayed B is original A, and so on.
    """
    orig = list(sample.choices)
    order = permutation(sample.id, len(orig), seed)
    perm = "".join(orig[i] for i in order)
    shown = LETTERS[: len(orig)]
    choices = {shown[k]: sample.choices[orig[i]] for k, i in enumerate(order)}
    target = "".join(sorted(shown[perm.index(ch)] for ch in str(sample.target)))
    meta = {**sample.metadata, "permutation": perm}
    return replace(sample, choices=choices, target=target, metadata=meta), perm


def to_original(letters: str | None, perm: str | None) -> str | None:
    """Map displayed letters back to the source's letters using a permutation string."""
    if letters is None or not perm:
        return letters
    return "".join(sorted(perm[LETTERS.index(ch)] for ch in letters))


def effective_mode(sample: Sample, mode: str) -> str:
    """The answer mode used for ``sample``: multiple-answer items are always generated."""
    return "generate" if sample.metadata.get("multi") else mode


def option_continuations(choices: Mapping[str, str], mode: str, language: str) -> dict[str, str]:
    """Option letter -> the continuation scored for it: the letter (``letter``) or the option text
    after a space (``loglik``; no space for Chinese, which is written without one)."""
    if mode == "letter":
        return {k: k for k in choices}
    sep = "" if language.startswith("zh") else " "
    return {k: f"{sep}{v}" for k, v in choices.items()}


def argmax_option(conts: Mapping[str, str], scores: Mapping[str, float], per_char: bool = False) -> str:
    """The letter whose continuation scores highest; ties go to the earlier letter (np.argmax).

    Options the provider returned no score for count as -inf.
    """

    def value(letter: str) -> float:
        c = conts[letter]
        v = scores.get(c, -math.inf)
        return v / max(len(c), 1) if per_char else v

    return max(conts, key=value)


@dataclass(frozen=True)
class MCQParams:
    answer_mode: str = "generate"
    shuffle_options: bool = False
    seed: int = 0
    language: str = "en"

    def __post_init__(self) -> None:
        if self.answer_mode not in MODES:
            raise ConfigError(f"answer mode {self.answer_mode!r} is not one of {', '.join(MODES)}")


class MCQGrader(Grader):
    """Scores a multiple-choice answer 1.0 / 0.0 against the (possibly shuffled) key.

    Chat replies go through :func:`extract_choice`; next-token and log-likelihood replies take
    the argmax of ``Response.scores``. An answer with no readable choice is wrong (0.0) and
    flagged ``details["unextracted"]``, as every official scorer counts it.
    """

    name = "mcq"
    Params = MCQParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        p: MCQParams = self.params
        shown, perm = shuffle_choices(sample, p.seed) if p.shuffle_options else (sample, None)
        mode = effective_mode(sample, p.answer_mode)
        details: dict[str, Any] = {"answer_mode": mode, "target": shown.target}
        if perm:
            details["permutation"] = perm
        if mode == "generate":
            picked = extract_choice(response.text, list(shown.choices), shown.choices, bool(shown.metadata.get("multi")))
        else:
            conts = option_continuations(shown.choices, mode, p.language)
            if not any(c in response.scores for c in conts.values()):
                return unscored(sample, "unreadable", f"no log-probabilities for the options in a {mode} response", **details)
            picked = argmax_option(conts, response.scores)
            if mode == "loglik":
                # lm-evaluation-harness acc_norm: argmax of loglikelihood / len(continuation) in characters
                norm = argmax_option(conts, response.scores, per_char=True)
                details["extracted_norm"] = norm
                details["acc_norm"] = 1.0 if norm == shown.target else 0.0
        if picked is None:
            details["unextracted"] = True
        details["extracted_original"] = to_original(picked, perm)
        return Grade(sample_id=sample.id, value=1.0 if picked == shown.target else 0.0, extracted=picked, details=details)
