"""The multiple-choice exam layer shared by MedQA, MedMCQA, PubMedQA, MMLU-medical, CMB and the demo.

A multiple-choice :class:`Sample` keeps the stem in ``metadata["question"]``, the options in
``choices`` (letter -> text, source order), the key in ``target`` ("B", or sorted letters "ACD"
for multiple-answer items with ``metadata["multi"]``). Prompts are rebuilt from those fields for
each answer mode, so the same sample serves chat, next-token and log-likelihood scoring, and a
deterministic option shuffle can be applied identically in the prompt and in the grader.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from typing import Any, ClassVar, Mapping, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RunOptions, resolve_file
from grandrounds.benchmarks.mcq_extract import extract_choice
from grandrounds.benchmarks.mcq_io import read_json, read_jsonl, require_fields
from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.records import Grade, Message, Response, Sample
from grandrounds.registry import Spec
from grandrounds.stats import wilson_ci

__all__ = [
    "LETTERS",
    "MultipleChoiceBenchmark",
    "MCQGrader",
    "TEMPLATES",
    "accuracy_by",
    "argmax_option",
    "extract_choice",
    "macro_average",
    "permutation",
    "shuffle_choices",
    "to_original",
    "read_json",
    "read_jsonl",
    "require_fields",
    "resolve_file",
]

LETTERS = "ABCDEFGHIJ"

#: Prompt wording per (mode, language). Hashed into the fingerprint through the grader's templates.
TEMPLATES: dict[str, str] = {
    "generate_en": (
        "Answer the following multiple-choice question by choosing the single best option. "
        'End your reply with a line of the form "Answer: X", where X is the letter of your choice ({letters}).'
        "\n\n{question}\n\n{options}"
    ),
    "generate_multi_en": (
        "Answer the following multiple-choice question. More than one option may be correct; choose all "
        'that are. End your reply with a line of the form "Answer: XY" listing every correct letter ({letters}).'
        "\n\n{question}\n\n{options}"
    ),
    "generate_zh": (
        "请回答下面的单项选择题，选出唯一正确的选项。最后一行请写成“答案：X”，X 为所选选项的字母（{letters}）。"
        "\n\n{question}\n\n{options}"
    ),
    "generate_multi_zh": (
        "请回答下面的多项选择题，选出所有正确的选项。最后一行请写成“答案：XY”，列出全部正确选项的字母（{letters}）。"
        "\n\n{question}\n\n{options}"
    ),
    "letter_en": "{question}\n\n{options}\n\nAnswer with the letter only.\nAnswer:",
    "letter_zh": "{question}\n\n{options}\n\n只需回答选项字母。\n答案：",
    # lm-evaluation-harness style multiple_choice: context, then each option's text as continuation.
    "loglik_en": "Question: {question}\nAnswer:",
    "loglik_zh": "问题：{question}\n答案：",
}


def render_options(choices: Mapping[str, str]) -> str:
    return "\n".join(f"{k}. {v}" for k, v in choices.items())


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


class MultipleChoiceBenchmark(Benchmark):
    """Base for exam benchmarks: prompts for three answer modes, shuffling, grading, accuracy."""

    answer_modes: ClassVar[tuple[str, ...]] = ("generate", "letter", "loglik")
    #: metadata keys to break accuracy down by, e.g. ("subject",).
    category_fields: ClassVar[tuple[str, ...]] = ()
    #: wording overrides (same keys as TEMPLATES) for benchmarks with an official prompt.
    template_overrides: ClassVar[Mapping[str, str]] = {}

    # ---- samples ---------------------------------------------------------------------
    def make_sample(
        self, sid: str, question: str, choices: Mapping[str, str], target: str, multi: bool = False, **meta: Any
    ) -> Sample:
        """Build a multiple-choice sample; ``messages`` hold the default (generate-mode) prompt."""
        choices = dict(choices)
        metadata = {"question": question, "multi": multi, "language": self.language, **meta}
        return Sample(
            id=sid,
            benchmark=self.name,
            messages=(Message("user", self._render(metadata, choices, "generate")),),
            target=target,
            choices=choices,
            metadata=metadata,
        )

    @property
    def templates(self) -> dict[str, str]:
        return {**TEMPLATES, **self.template_overrides}

    def render(self, sample: Sample, mode: str) -> str:
        """The prompt text for ``mode`` (generate / letter / loglik) in the benchmark's language."""
        return self._render(sample.metadata, sample.choices, mode)

    def _render(self, metadata: Mapping[str, Any], choices: Mapping[str, str], mode: str) -> str:
        lang = "zh" if self.language.startswith("zh") else "en"
        multi = "_multi" if mode == "generate" and metadata.get("multi") else ""
        fields = {
            **metadata,
            "question": metadata["question"],
            "options": render_options(choices),
            "letters": "/".join(choices),
        }
        return self.templates[f"{mode}{multi}_{lang}"].format(**fields)

    # ---- prompting -------------------------------------------------------------------
    def effective_mode(self, sample: Sample, options: RunOptions) -> str:
        """The answer mode used for ``sample``: multiple-answer items are always generated."""
        mode = options.answer_mode
        if mode not in self.answer_modes:
            raise ConfigError(f"{self.name}: answer mode {mode!r} not supported (use {', '.join(self.answer_modes)})")
        return "generate" if sample.metadata.get("multi") else mode

    def prepare(self, sample: Sample, options: RunOptions) -> tuple[Sample, str | None]:
        """The sample as shown to the model (shuffled when asked) and its permutation or None."""
        if not options.shuffle_options:
            return sample, None
        shown, perm = shuffle_choices(sample, options.seed)
        return replace(shown, messages=(Message("user", self.render(shown, "generate")),)), perm

    def continuations(self, sample: Sample, mode: str) -> dict[str, str]:
        """Option letter -> the continuation scored for it in ``mode`` (letter or loglik)."""
        if mode == "letter":
            return {k: k for k in sample.choices}
        sep = "" if self.language.startswith("zh") else " "
        return {k: f"{sep}{v}" for k, v in sample.choices.items()}

    def prompt(self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()) -> Prompt:
        shown, _ = self.prepare(sample, options)
        mode = self.effective_mode(sample, options)
        if mode == "generate":  # the shown sample's messages are its generate prompt, already rendered
            return Prompt(shown.messages)
        msgs = (Message("user", self.render(shown, mode)),)
        conts = tuple(dict.fromkeys(self.continuations(shown, mode).values()))  # duplicates scored once
        return Prompt(msgs, kind="next_token" if mode == "letter" else "loglikelihood", continuations=conts)

    def grader(self, options: RunOptions) -> MCQGrader:
        return MCQGrader(self, options)

    # ---- aggregation -----------------------------------------------------------------
    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Micro accuracy with a Wilson 95% CI, per-category accuracy, unextracted answers counted.

        ``n`` is the number of scored answers (the denominator); unscored ones (failed calls)
        are excluded and counted in ``n_unscored``.
        """
        pairs = pair_grades(samples, grades)
        scored = [(s, g) for s, g in pairs if g.value is not None]
        k = sum(1 for _, g in scored if g.value == 1.0)
        extra: dict[str, Any] = {
            "average": "micro (accuracy over all scored items)",
            "answer_mode": options.answer_mode,
            "n_unextracted": sum(1 for _, g in scored if g.details.get("unextracted")),
            "n_correct": k,
        }
        if options.shuffle_options:
            extra["shuffle_seed"] = options.seed
        norm = [g.details["acc_norm"] for _, g in scored if "acc_norm" in g.details]
        if norm:
            extra["acc_norm"] = sum(norm) / len(norm)
        forced = sum(1 for _, g in scored if g.details.get("answer_mode", options.answer_mode) != options.answer_mode)
        if forced:
            extra["n_generated_multi_answer"] = forced
        extra.update(self.extra_metrics(scored, options))
        breakdown = {f: accuracy_by(pairs, f) for f in self.category_fields}
        return Aggregate(
            metric="accuracy",
            score=k / len(scored) if scored else None,
            ci95=wilson_ci(k, len(scored)),
            n=len(scored),
            n_unscored=len(pairs) - len(scored),
            breakdown=breakdown,
            extra=extra,
        )

    def extra_metrics(self, scored: Sequence[tuple[Sample, Grade]], options: RunOptions) -> dict[str, Any]:
        """Benchmark-specific figures beside accuracy (macro averages, F1). None by default."""
        return {}


class MCQGrader(Grader):
    """Scores a multiple-choice answer 1.0 / 0.0 against the (possibly shuffled) key.

    Chat replies go through :func:`extract_choice`; next-token and log-likelihood replies take
    the argmax of ``Response.scores``. An answer with no readable choice is wrong (0.0) and
    flagged ``details["unextracted"]``; a failed call is unscored (None), never wrong.
    """

    def __init__(self, bench: "MultipleChoiceBenchmark", options: RunOptions) -> None:
        self.bench = bench
        self.options = options
        self.templates = bench.templates

    def spec(self) -> Spec:
        o = self.options
        return Spec("mcq", {"answer_mode": o.answer_mode, "shuffle_options": o.shuffle_options, "seed": o.seed})

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if not response.ok:
            return unscored(sample, f"answer call failed: {response.error}")
        shown, perm = self.bench.prepare(sample, self.options)
        mode = self.bench.effective_mode(sample, self.options)
        details: dict[str, Any] = {"answer_mode": mode, "target": shown.target}
        if perm:
            details["permutation"] = perm
        if mode == "generate":
            picked = extract_choice(response.text, list(shown.choices), shown.choices, bool(shown.metadata.get("multi")))
        else:
            conts = self.bench.continuations(shown, mode)
            if not any(c in response.scores for c in conts.values()):
                return unscored(sample, f"no log-probabilities for the options in a {mode} response", **details)
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


def argmax_option(conts: Mapping[str, str], scores: Mapping[str, float], per_char: bool = False) -> str:
    """The letter whose continuation scores highest; ties go to the earlier letter (np.argmax).

    Options the provider returned no score for count as -inf.
    """
    def value(letter: str) -> float:
        c = conts[letter]
        v = scores.get(c, -math.inf)
        return v / max(len(c), 1) if per_char else v

    return max(conts, key=value)


def pair_grades(samples: Sequence[Sample], grades: Sequence[Grade]) -> list[tuple[Sample, Grade]]:
    """(sample, grade) pairs in grade order; a grade for an unknown sample id is an error."""
    by_id = {s.id: s for s in samples}
    missing = [g.sample_id for g in grades if g.sample_id not in by_id]
    if missing:
        raise ValueError(f"grades for samples not in the benchmark: {missing[:5]}")
    return [(by_id[g.sample_id], g) for g in grades]


def accuracy_by(pairs: Sequence[tuple[Sample, Grade]], field: str) -> dict[str, dict[str, Any]]:
    """{category: {score, n, ci95, n_unscored}} for one metadata field, in first-seen order."""
    groups: dict[str, list[Grade]] = {}
    for s, g in pairs:
        groups.setdefault(str(s.metadata.get(field)), []).append(g)
    out: dict[str, dict[str, Any]] = {}
    for cat, gs in groups.items():
        vals = [g.value for g in gs if g.value is not None]
        k = sum(1 for v in vals if v == 1.0)
        out[cat] = {
            "score": k / len(vals) if vals else None,
            "n": len(vals),
            "ci95": wilson_ci(k, len(vals)),
            "n_unscored": len(gs) - len(vals),
        }
    return out


def macro_average(groups: Mapping[str, Mapping[str, Any]]) -> float | None:
    """Unweighted mean of the groups' scores (groups with no scored item are left out)."""
    scores = [g["score"] for g in groups.values() if g.get("score") is not None]
    return sum(scores) / len(scores) if scores else None
