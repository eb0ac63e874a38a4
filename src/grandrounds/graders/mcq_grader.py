"""Multiple-choice grading: option shuffling, the answer modes, and the 1/0 score.

A multiple-choice :class:`Sample` keeps its options in ``choices`` (letter -> text, source
order) and its key in ``target`` ("B", or sorted letters "ACD" for multiple-answer items with
``metadata["multi"]``). The option shuffle is deterministic in (seed, sample id), so the prompt
(built by the benchmark) and the grader (here) apply the same permutation without sharing state.

Answer modes (``--answer-mode``):

- ``generate``: a chat reply, read by the protocol's rule (below);
- ``letter-loglik``: lm-evaluation-harness ``multiple_choice``: the options are shown in the
  context and each choice of the task file (the option letters, or PubMedQA's yes/no/maybe) is
  scored as a continuation after lm-eval's target delimiter " "; argmax of summed log-likelihood
  (``acc``) and of log-likelihood / len(choice) (``acc_norm``);
- ``text-loglik``: each option's text as the continuation of a context that does not show them;
- ``next-token``: log-probability of each option letter as the next token.

``letter`` and ``loglik``, the earlier names of ``next-token`` and ``text-loglik``, are accepted
wherever a mode is read (options, stored grader specs) and mapped to the new names.

Generated replies are read two ways, so a result can carry both protocols' figures: our tolerant
reading (:func:`~grandrounds.graders.choice_extract.extract_choice`) and the benchmark's official
one (``reference_reading``: simple-evals' for the English exams, CMB's own, or ours where the
benchmark publishes none). The protocol run decides which is the grade's value; the other is kept
in ``details["other_value"]``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import text_hash
from grandrounds.core.records import AnswerMode, Grade, Response, Sample
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.choice_extract import cmb_letters, extract_choice, simple_evals_letter
from grandrounds.graders.exam_readings import EXAM_READINGS
from grandrounds.graders.readings_cn import numbered_choice
from grandrounds.sources.upstream import CMB, SIMPLE_EVALS, python_value

MODES: tuple[AnswerMode, ...] = ("generate", "letter-loglik", "text-loglik", "next-token")
#: Earlier names of the answer modes, still accepted (stored runs, scripts, the CLI demo).
MODE_ALIASES = {"letter": "next-token", "loglik": "text-loglik"}
#: How a benchmark's official code reads a generated reply under the reference protocol.
REFERENCE_READINGS = (
    "simple-evals",
    "cmb",
    "ours",
    *EXAM_READINGS,
)  # EXAM_READINGS: graders/exam_readings.py
#: lm-evaluation-harness puts this between context and choice (TaskConfig's default
#: ``target_delimiter``; none of the pinned task files sets another).
LM_EVAL_TARGET_DELIMITER = " "

#: openai/simple-evals common.py: the multiple-choice prompt and the answer regexes (read at run time).
SIMPLE_EVALS_COMMON = SIMPLE_EVALS.file(
    "common.py", "84616c52821a30ae3f55f153a763153fd833cb41b547b09f547b46e6337f8f35"
)
#: The CMB files whose reading cmb_letters reimplements (recorded in the fingerprint).
CMB_UTILS = CMB.file(
    "src/utils.py", "72a5bae70502ae930e022759b5b7aa1348f6c93df0aef53977434cc5e5ac68b6"
)


def canonical_mode(mode: str) -> str:
    """The current name of an answer mode (``letter`` -> ``next-token``, ``loglik`` -> ``text-loglik``)."""
    return MODE_ALIASES.get(mode, mode)


@functools.lru_cache(maxsize=1)
def simple_evals_patterns() -> tuple[re.Pattern[str], ...]:
    """simple-evals' answer regexes (mmlu_eval.py): MULTILINGUAL_ANSWER_PATTERN_TEMPLATE filled with each
    of MULTILINGUAL_ANSWER_REGEXES, in list order, read out of common.py at the pinned commit."""
    template = python_value(SIMPLE_EVALS_COMMON, "MULTILINGUAL_ANSWER_PATTERN_TEMPLATE")
    cues = python_value(SIMPLE_EVALS_COMMON, "MULTILINGUAL_ANSWER_REGEXES")
    if (
        not isinstance(template, str)
        or not isinstance(cues, list)
        or not all(isinstance(c, str) for c in cues)
    ):
        raise DataError(
            SIMPLE_EVALS_COMMON.url,
            None,
            "the answer regexes are not a template string and a list of strings",
        )
    return tuple(re.compile(template.format(cue)) for cue in cues)


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
    order = permutation(
        sample.group or sample.id, len(orig), seed
    )  # the turns of one dialogue show one order
    perm = "".join(orig[i] for i in order)
    shown = LETTERS[: len(orig)]
    choices = {shown[k]: sample.choices[orig[i]] for k, i in enumerate(order)}
    target = "".join(sorted(shown[perm.index(ch)] for ch in str(sample.target)))
    meta = {**sample.metadata, "permutation": perm}
    return replace(sample, choices=choices, target=target, metadata=meta), perm


def to_original(letters: str | None, perm: str | None, keep_order: bool = False) -> str | None:
    """Map displayed letters back to the source's letters using a permutation string (sorted, unless
    ``keep_order``; a letter beyond the options is kept as it is)."""
    if letters is None or not perm:
        return letters
    mapped = [perm[LETTERS.index(ch)] if ch in LETTERS[: len(perm)] else ch for ch in letters]
    return "".join(mapped if keep_order else sorted(mapped))


def effective_mode(sample: Sample, mode: str) -> str:
    """The answer mode used for ``sample``: multiple-answer items are always generated."""
    return "generate" if sample.metadata.get("multi") else canonical_mode(mode)


def choice_labels(choices: Mapping[str, str], mode: str, labels: str = "letters") -> dict[str, str]:
    """Option letter -> the choice string lm-eval's ``doc_to_choice`` gives for it: the letter, or the
    option's text (``labels="texts"``, PubMedQA's yes/no/maybe; always for ``text-loglik``)."""
    if mode == "text-loglik" or labels == "texts":
        return dict(choices)
    return {k: k for k in choices}


def option_continuations(
    choices: Mapping[str, str], mode: str, language: str, labels: str = "letters"
) -> dict[str, str]:
    """Option letter -> the continuation scored for it: the bare letter (``next-token``); the choice
    after lm-eval's target delimiter (``letter-loglik``); the option text after a space
    (``text-loglik``; no space for Chinese, which is written without one)."""
    mode = canonical_mode(mode)
    if mode == "next-token":
        return {k: k for k in choices}
    if mode == "letter-loglik":
        return {
            k: LM_EVAL_TARGET_DELIMITER + v for k, v in choice_labels(choices, mode, labels).items()
        }
    sep = "" if language.startswith("zh") else " "
    return {k: f"{sep}{v}" for k, v in choices.items()}


def argmax_option(
    conts: Mapping[str, str], scores: Mapping[str, float], lengths: Mapping[str, int] | None = None
) -> str:
    """The letter whose continuation scores highest; ties go to the earlier letter (np.argmax).

    With ``lengths`` (letter -> length in characters) the score is divided by it first (lm-eval's
    acc_norm). Options the provider returned no score for count as -inf.
    """

    def value(letter: str) -> float:
        v = scores.get(conts[letter], -math.inf)
        return v / max(lengths[letter], 1) if lengths is not None else v

    return max(conts, key=value)


@dataclass(frozen=True, kw_only=True)
class MCQParams:
    answer_mode: str = "generate"
    shuffle_options: bool = False
    seed: int = 0
    language: str = "en"
    #: The protocol whose reading is the grade's value (the other one goes to details["other_value"]).
    protocol: str = "reference"
    #: The official reading of generated replies: simple-evals', CMB's, or ours (no official one).
    reference_reading: str = "simple-evals"
    #: letter-loglik choices: the option letters, or the option texts (PubMedQA's yes/no/maybe).
    loglik_labels: str = "letters"

    def __post_init__(self) -> None:
        object.__setattr__(self, "answer_mode", canonical_mode(self.answer_mode))
        if self.answer_mode not in MODES:
            raise ConfigError(f"answer mode {self.answer_mode!r} is not one of {', '.join(MODES)}")
        if self.protocol not in ("reference", "grandrounds"):
            raise ConfigError(f"protocol {self.protocol!r} is not reference or grandrounds")
        if self.reference_reading not in REFERENCE_READINGS:
            raise ConfigError(
                f"reference_reading {self.reference_reading!r} is not one of {', '.join(REFERENCE_READINGS)}"
            )
        if self.loglik_labels not in ("letters", "texts"):
            raise ConfigError(f"loglik_labels {self.loglik_labels!r} is not letters or texts")


class MCQGrader(Grader):
    """Scores a multiple-choice answer 1.0 / 0.0 against the (possibly shuffled) key.

    Chat replies are read by both protocols' rules; next-token and log-likelihood replies take the
    argmax of ``Response.scores`` (the same under both). An answer with no readable choice is
    wrong (0.0) and flagged ``details["unextracted"]``, as every official scorer counts it.
    """

    name = "mcq"
    Params = MCQParams

    def _simple_evals_patterns(self) -> Any:
        """simple-evals' answer patterns; None where they cannot be read and this grade is ours
        (under ``reference`` a missing upstream file is the run's error)."""
        try:
            return simple_evals_patterns()
        except DataError:
            if self.params.protocol == "reference":
                raise
            return None

    def template_hashes(self) -> dict[str, str]:
        """The official extraction rules this grader applies: simple-evals' regexes (read from the
        pinned file) or the pinned CMB file whose rule is reimplemented."""
        p: MCQParams = self.params
        if p.answer_mode != "generate" and p.reference_reading != "cmb":
            return {}
        if p.reference_reading == "simple-evals":
            pats = self._simple_evals_patterns()
            if pats is None:
                return {}  # the reference reading is unavailable offline; grandrounds grades without it
            return {
                "simple-evals/common.py#MULTILINGUAL_ANSWER_REGEXES": text_hash(
                    "\n".join(x.pattern for x in pats)
                )[:16]
            }
        if p.reference_reading == "cmb":
            return {"cmb/src/utils.py#match_choice": (CMB_UTILS.sha256 or "")[:16]}
        if p.reference_reading in EXAM_READINGS:
            return {
                f"exam_readings#{p.reference_reading}": EXAM_READINGS[p.reference_reading].source
            }
        return {}

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        p: MCQParams = self.params
        shown, perm = shuffle_choices(sample, p.seed) if p.shuffle_options else (sample, None)
        mode = effective_mode(sample, p.answer_mode)
        details: dict[str, Any] = {
            "answer_mode": mode,
            "target": shown.target,
            "protocol": p.protocol,
        }
        if perm:
            details["permutation"] = perm
        if mode == "generate":
            (picked, value), other = self._read_both(shown, perm, response.text)
            details["other_extracted"], details["other_value"] = other
            fallback = self._fallback(
                shown, (picked, value) if p.protocol == "reference" else other
            )
            if fallback:
                details["reference_fallback"] = fallback
        else:
            conts = option_continuations(shown.choices, mode, p.language, p.loglik_labels)
            if not any(c in response.scores for c in conts.values()):
                return unscored(
                    sample,
                    "unreadable",
                    f"no log-probabilities for the options in a {mode} response",
                    **details,
                )
            picked = argmax_option(conts, response.scores)
            value = 1.0 if picked == shown.target else 0.0
            details["other_value"] = value  # read the same way under both protocols
            if mode != "next-token":
                # lm-eval acc_norm: argmax of loglikelihood / len(choice), the choice without its delimiter
                lengths = {
                    k: len(v)
                    for k, v in choice_labels(shown.choices, mode, p.loglik_labels).items()
                }
                norm = argmax_option(conts, response.scores, lengths)
                details["extracted_norm"] = norm
                details["acc_norm"] = 1.0 if norm == shown.target else 0.0
        if not picked:
            details["unextracted"] = True
        details["extracted_original"] = to_original(picked or None, perm)
        return Grade(sample_id=sample.id, value=value, extracted=picked or None, details=details)

    def _fallback(
        self, shown: Sample, official: tuple[str | None, float | None]
    ) -> dict[str, Any] | None:
        """Where the reference scorer read no letter and draws an option at random instead: the
        option drawn and whether it was right (M-ARC's and MMLU-Pro's seeded draw), or, for an
        unseeded draw the reference leaves to chance (CMMLU's ``extract_choice``:
        ``random.randint(0, 3)`` over A-D), the chance it is right; None where it read a letter."""
        p: MCQParams = self.params
        reading = EXAM_READINGS.get(p.reference_reading)
        if reading is None or official[0] is not None or shown.target is None:
            return None
        if reading.guess is not None:
            drawn = list(shown.choices)[reading.guess(len(shown.choices))]
            chance = 1 / len(shown.choices)
            return {"option": drawn, "right": drawn == shown.target, "chance": chance}
        if p.reference_reading == "cmmlu":
            return {"option": None, "chance": 0.25 if str(shown.target) in "ABCD" else 0.0}
        return None

    def _read_both(
        self, shown: Sample, perm: str | None, text: str | None
    ) -> tuple[tuple[str | None, float | None], tuple[str | None, float | None]]:
        """((choice, value) under this grader's protocol, (choice, value) under the other one); the
        reference value is None where simple-evals' patterns cannot be read (offline)."""
        p: MCQParams = self.params
        multi = bool(shown.metadata.get("multi"))
        mine = extract_choice(text, list(shown.choices), shown.choices, multi)
        ours = (mine, 1.0 if mine == shown.target else 0.0)
        official: tuple[str | None, float | None]
        if p.reference_reading == "simple-evals":
            # None offline: the reference figure is left unknown, not guessed
            pats = self._simple_evals_patterns()
            got = simple_evals_letter(text, pats) if pats is not None else None
            official = (
                (got, 1.0 if got == shown.target else 0.0) if pats is not None else (None, None)
            )
        elif p.reference_reading == "cmb":
            # score.py compares the answer key string as written ("EB") with model_answer, letters in
            # the order the reply wrote them
            got = cmb_letters(text, multi)
            key = str(shown.metadata.get("key") or to_original(shown.target, perm))
            official = (got, 1.0 if to_original(got, perm, keep_order=True) == key else 0.0)
        elif p.reference_reading in EXAM_READINGS:
            reading = EXAM_READINGS[p.reference_reading]
            got = reading.read(text, shown.choices)
            official = (got, 1.0 if got == shown.target else 0.0)
            if reading.correct is not None:  # the reference grades the reply against the key
                official = (got, 1.0 if reading.correct(text, shown.choices, shown.target) else 0.0)
            if (
                got is None and reading.guess is not None
            ):  # the official scorer draws an option for it
                official = (
                    None,
                    1.0
                    if list(shown.choices)[reading.guess(len(shown.choices))] == shown.target
                    else 0.0,
                )
            if (
                reading.numbered
            ):  # options shown by number under both protocols: ours reads the number
                mine = numbered_choice(text, shown.choices)
                ours = (mine, 1.0 if mine == shown.target else 0.0)
        else:
            official = ours
        return (official, ours) if p.protocol == "reference" else (ours, official)
