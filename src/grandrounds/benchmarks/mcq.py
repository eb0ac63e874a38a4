"""The multiple-choice exam layer shared by MedQA, MedMCQA, PubMedQA, MMLU-medical, CMB and the demo.

A multiple-choice :class:`Sample` keeps the stem in ``metadata["question"]``, the options in
``choices`` (letter -> text, source order), the key in ``target`` ("B", or sorted letters "ACD"
for multiple-answer items with ``metadata["multi"]``). Prompts are rebuilt from those fields for
each answer mode, so the same sample serves chat, next-token and log-likelihood scoring, and a
deterministic option shuffle can be applied identically in the prompt and in the grader.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Mapping, Sequence, get_args

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RunOptions
from grandrounds.errors import ConfigError
from grandrounds.hashing import text_hash
from grandrounds.graders.mcq_grader import effective_mode, option_continuations, shuffle_choices
from grandrounds.records import AnswerMode, Cell, Grade, Message, Sample
from grandrounds.registry import Spec
from grandrounds.scoring.cells import accuracy_cell, group_cells

__all__ = ["MultipleChoiceBenchmark", "TEMPLATES", "accuracy_by", "macro_average", "render_options"]

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


class MultipleChoiceBenchmark(Benchmark):
    """Base for exam benchmarks: prompts for three answer modes, shuffling, grading, accuracy."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = get_args(AnswerMode)
    shuffles_options: ClassVar[bool] = True
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

    def template_hashes(self) -> dict[str, str]:
        return {name: text_hash(text)[:16] for name, text in self.templates.items()}

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
        return effective_mode(sample, mode)

    def prepare(self, sample: Sample, options: RunOptions) -> tuple[Sample, str | None]:
        """The sample as shown to the model (shuffled when asked) and its permutation or None."""
        if not options.shuffle_options:
            return sample, None
        shown, perm = shuffle_choices(sample, options.seed)
        return replace(shown, messages=(Message("user", self.render(shown, "generate")),)), perm

    def continuations(self, sample: Sample, mode: str) -> dict[str, str]:
        """Option letter -> the continuation scored for it in ``mode`` (letter or loglik)."""
        return option_continuations(sample.choices, mode, self.language)

    def prompt(self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()) -> Prompt:
        shown, _ = self.prepare(sample, options)
        mode = self.effective_mode(sample, options)
        if mode == "generate":  # the shown sample's messages are its generate prompt, already rendered
            return Prompt(shown.messages)
        msgs = (Message("user", self.render(shown, mode)),)
        conts = tuple(dict.fromkeys(self.continuations(shown, mode).values()))  # duplicates scored once
        return Prompt(msgs, kind="next_token" if mode == "letter" else "loglikelihood", continuations=conts)

    def grader_spec(self, options: RunOptions) -> Spec:
        args = {"answer_mode": options.answer_mode, "shuffle_options": options.shuffle_options,
                "seed": options.seed, "language": self.language}
        return Spec("mcq", args)

    # ---- aggregation -----------------------------------------------------------------
    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Micro accuracy with a Wilson 95% CI, per-category accuracy, unextracted answers counted.

        ``n`` is the number of scored answers (the denominator); unscored ones (failed calls)
        are excluded and counted in ``n_unscored``.
        """
        pairs = pair_grades(samples, grades)
        scored = [(s, g) for s, g in pairs if g.value is not None]
        overall = accuracy_cell([g.value for _, g in pairs])
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
        return Aggregate.of(
            "accuracy",
            overall,
            breakdown,
            extra,
        )

    def extra_metrics(self, scored: Sequence[tuple[Sample, Grade]], options: RunOptions) -> dict[str, Any]:
        """Benchmark-specific figures beside accuracy (macro averages, F1). None by default."""
        return {}


def pair_grades(samples: Sequence[Sample], grades: Sequence[Grade]) -> list[tuple[Sample, Grade]]:
    """(sample, grade) pairs in grade order; a grade for an unknown sample id is an error."""
    by_id = {s.id: s for s in samples}
    missing = [g.sample_id for g in grades if g.sample_id not in by_id]
    if missing:
        raise ValueError(f"grades for samples not in the benchmark: {missing[:5]}")
    return [(by_id[g.sample_id], g) for g in grades]


def accuracy_by(pairs: Sequence[tuple[Sample, Grade]], field: str) -> dict[str, Cell]:
    """One breakdown family: an accuracy cell per value of a metadata field, in first-seen order."""
    return group_cells(((str(s.metadata.get(field)), g.value) for s, g in pairs), accuracy_cell, sort=False)


def macro_average(groups: Mapping[str, Cell]) -> float | None:
    """Unweighted mean of the groups' scores (groups with no scored item are left out)."""
    scores = [c.score for c in groups.values() if c.score is not None]
    return sum(scores) / len(scores) if scores else None
