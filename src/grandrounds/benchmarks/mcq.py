"""The multiple-choice exam layer shared by MedQA, MedMCQA, PubMedQA, MMLU-medical, CMB and the demo.

A multiple-choice :class:`Sample` keeps the stem in ``metadata["question"]``, the options in
``choices`` (letter -> text, source order), the key in ``target`` ("B", or sorted letters "ACD"
for multiple-answer items with ``metadata["multi"]``). Prompts are rebuilt from those fields for
each answer mode and protocol, so the same sample serves chat, next-token and log-likelihood
scoring, and a deterministic option shuffle can be applied identically in the prompt and in the grader.

Prompts per answer mode (``generate`` | ``letter-loglik`` | ``text-loglik`` | ``next-token``):

- ``generate`` under ``--protocol reference``: the official prompt, read at run time from the pinned
  upstream file (simple-evals' QUERY_TEMPLATE_MULTICHOICE for the English four-option exams, CMB's
  own for CMB; PubMedQA publishes none, so ours); under ``grandrounds`` our :data:`TEMPLATES`;
- ``letter-loglik`` (both protocols): lm-evaluation-harness's zero-shot request, the context its
  task file's ``doc_to_text`` builds (read from the task's YAML or its Python hook at run time)
  sent as raw text, and its ``doc_to_choice`` after the target delimiter as continuations
  (:meth:`MultipleChoiceBenchmark.letter_loglik_request`);
- ``text-loglik`` and ``next-token`` (both protocols): ours.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, cast

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RunOptions
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import text_hash
from grandrounds.core.params import Param, coerce
from grandrounds.core.records import AnswerMode, Cell, Grade, ImagePart, Message, Sample, TextPart
from grandrounds.core.registry import Spec
from grandrounds.graders.mcq_grader import (
    LM_EVAL_TARGET_DELIMITER,
    MODES,
    SIMPLE_EVALS_COMMON,
    canonical_mode,
    choice_labels,
    effective_mode,
    option_continuations,
    shuffle_choices,
)
from grandrounds.scoring.cells import accuracy_cell, group_cells
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import (
    LM_EVAL,
    SIMPLE_EVALS,
    UpstreamFile,
    python_string,
    yaml_value,
)

__all__ = [
    "LmEvalTask",
    "MultipleChoiceBenchmark",
    "TEMPLATES",
    "accuracy_by",
    "exam_protocols",
    "macro_average",
    "protocol_values",
    "render_options",
]

#: Our prompt wording per (mode, language), the ``grandrounds`` protocol's (and the reference one's
#: where a benchmark publishes none). Hashed into the fingerprint. Keys keep the modes' earlier
#: names (``letter`` = next-token, ``loglik`` = text-loglik).
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
    # text-loglik: the question as context, then each option's text as continuation (options not shown).
    "loglik_en": "Question: {question}\nAnswer:",
    "loglik_zh": "问题：{question}\n答案：",
}
_TEMPLATE_STEM = {"generate": "generate", "next-token": "letter", "text-loglik": "loglik"}


@dataclass(frozen=True)
class LmEvalTask:
    """An lm-evaluation-harness multiple_choice task: its YAML file, and the module of its
    ``doc_to_text`` hook where the prompt is built in Python (None: a Jinja ``doc_to_text`` in the YAML)."""

    name: str
    yaml: UpstreamFile
    hooks: UpstreamFile | None = None

    def choices(self) -> list[str]:
        """The task's ``doc_to_choice`` list (the strings scored after the target delimiter)."""
        value = cached(yaml_value, self.yaml, "doc_to_choice")
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise DataError(self.yaml.url, None, "doc_to_choice is not a list of strings")
        return value

    def files(self) -> tuple[UpstreamFile, ...]:
        return (self.yaml,) if self.hooks is None else (self.yaml, self.hooks)


@functools.lru_cache(maxsize=256)
def cached(reader: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """``reader(*args, **kw)`` once per process: an upstream file is pinned by its sha256, so what is
    read out of it never changes (a prompt is built per item; the file is parsed once). Callers must
    not mutate the result."""
    return reader(*args, **kw)


def render_options(choices: Mapping[str, str]) -> str:
    return "\n".join(f"{k}. {v}" for k, v in choices.items())


def simple_evals_prompt(question: str, choices: Mapping[str, str]) -> str:
    """simple-evals' format_multichoice_question: QUERY_TEMPLATE_MULTICHOICE (read from common.py at
    the pinned commit) formatted with the question and options A-D; it has room for exactly four."""
    if list(choices) != ["A", "B", "C", "D"]:
        raise ConfigError(
            f"the simple-evals prompt takes four options A-D, this item has {''.join(choices)}; use --protocol grandrounds"
        )
    template = cached(python_string, SIMPLE_EVALS_COMMON, "QUERY_TEMPLATE_MULTICHOICE")
    return template.text.format(Question=question, **choices)


def exam_protocols(task: LmEvalTask | None) -> dict[str, Protocol]:
    """Presets of an English four-option exam: simple-evals for generated answers, lm-eval for letter-loglik."""
    reference = Protocol(
        name="reference",
        # simple-evals sampler/chat_completion_sampler.py ChatCompletionSampler defaults:
        # temperature 0.5, max_tokens 1024, system_message None
        answer=Generation(temperature=0.5, max_tokens=1024),
        extraction=(
            "generate: simple-evals mmlu_eval.py (common.normalize_response, then the first match of "
            "MULTILINGUAL_ANSWER_REGEXES in list order, normalize_extracted_answer); log-prob modes: argmax"
        ),
        aggregation="accuracy over every item: a failed or unreadable answer counts wrong, as the official code scores every item",
        source=f"{SIMPLE_EVALS.repo}@{SIMPLE_EVALS.commit[:7]} mmlu_eval.py; {LM_EVAL.repo}@{LM_EVAL.commit[:7]} {task.name if task else '-'}",
        settings={
            "prompt": {
                "generate": "simple-evals common.py QUERY_TEMPLATE_MULTICHOICE",
                "letter-loglik": f"lm-eval {task.name} doc_to_text / doc_to_choice"
                if task
                else "not offered",
                "text-loglik": "ours",
                "next-token": "ours",
            }
        },
    )
    grandrounds = ours(
        reference,
        extraction="generate: our tolerant reading with its documented precedence (choice_extract.py); log-prob modes: argmax",
        aggregation="accuracy over scored items: failed calls and unreadable log-prob replies excluded and counted",
    )
    prompts = {**reference.settings["prompt"], "generate": "ours"}
    return {
        "reference": reference,
        "grandrounds": replace(grandrounds, settings={"prompt": prompts}),
    }


#: ``--param probe=...``, taken by every exam: a robustness probe applied to each item after loading
#: (:mod:`grandrounds.benchmarks.probes`), so it is part of the spec, run id and fingerprint, and the probed
#: items are stored under their own dataset key. Handled by the base class rather than declared in
#: each benchmark's ``parameters``.
PROBE = Param(
    name="probe",
    type=str,
    default="",
    help="robustness probe applied to every item after loading: permute:SEED, nota, distractors:N:SEED "
    "or rewrite:ATTACKER:ID (see `grandrounds robustness`)",
)


class MultipleChoiceBenchmark(Benchmark):
    """Base for exam benchmarks: prompts for four answer modes, shuffling, grading, accuracy."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = MODES
    shuffles_options: ClassVar[bool] = True
    #: metadata keys to break accuracy down by, e.g. ("subject",).
    category_fields: ClassVar[tuple[str, ...]] = ()
    #: wording overrides (same keys as TEMPLATES) for our prompts.
    template_overrides: Mapping[str, str] = {}
    #: The lm-evaluation-harness task letter-loglik follows (None: the mode is not offered).
    lm_eval: ClassVar[LmEvalTask | None] = None
    #: How the official code reads a generated reply: "simple-evals", "cmb", or "ours" (none published).
    reference_reading: ClassVar[str] = "simple-evals"
    #: letter-loglik choices: the option letters, or the option texts (PubMedQA's yes/no/maybe).
    loglik_labels: ClassVar[str] = "letters"
    protocols: ClassVar[Mapping[str, Protocol]] = exam_protocols(None)
    #: What differs between the protocols' figures, per kind of answer mode (shown beside the headline).
    protocol_differences: ClassVar[Mapping[str, str]] = {
        "generate": (
            "reference: simple-evals' prompt and temperature 0.5, its reading (first 'Answer:' match, case kept), "
            "failed calls counted wrong; grandrounds: our prompt, temperature 0, tolerant reading, failed calls excluded "
            "(the other figure re-reads these same replies)"
        ),
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }

    def __init__(self, **params: Any) -> None:
        """Declared parameters, and ``probe`` (:data:`PROBE`): with a probe, ``load`` returns the probed items."""
        text = coerce(PROBE, params.pop(PROBE.name, "") or "", f"{self.name}: --param {PROBE.name}")
        super().__init__(**params)
        self.probe: Any = None  # a grandrounds.benchmarks.probes.Probe
        if text:
            from grandrounds.benchmarks.probes import (
                Probe,
            )  # imported only when a probe is asked for

            self.probe = probe = Probe.parse(text)
            self.params[PROBE.name] = probe.text
            unprobed = self.load

            def load(root: Path) -> list[Sample]:
                return probe.apply(self, unprobed(root))

            self.load = load  # type: ignore[method-assign]  # this instance loads probed items

    def records(self, root: Path) -> Iterator[Sample]:
        """The exam's items one at a time, in file order, as the file holds them (no probe).

        An exam whose file can be read record by record defines this, and :meth:`load` and
        :meth:`iter_samples` follow from it; one that reads its file whole defines ``load`` instead.
        """
        raise NotImplementedError(f"{type(self).__name__} defines neither records nor load")

    def load(self, root: Path) -> list[Sample]:
        return list(self.records(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        if self.probe is not None or type(self).records is MultipleChoiceBenchmark.records:
            return iter(self.load(root))  # a probe transforms the whole item set
        return self.records(root)

    def dataset_hash(self, root: Path) -> str:
        """The data files' hash; with a probe, combined with it (the probed items are another item set)."""
        data = super().dataset_hash(root)
        if self.probe is None:
            return data
        from grandrounds.benchmarks.probes import probe_dataset_hash

        return probe_dataset_hash(data, self.probe.text)

    # ---- samples ---------------------------------------------------------------------
    def make_sample(
        self,
        sid: str,
        question: str,
        choices: Mapping[str, str],
        target: str,
        multi: bool = False,
        images: Sequence[ImagePart] = (),
        **meta: Any,
    ) -> Sample:
        """Build a multiple-choice sample; ``messages`` hold our generate-mode prompt, with the item's
        ``images`` as parts where it has any (placed by :meth:`image_parts`; text-only items keep a string)."""
        choices = dict(choices)
        metadata = {"question": question, "multi": multi, "language": self.language, **meta}
        return Sample(
            id=sid,
            benchmark=self.name,
            messages=(self._user(self._render(metadata, choices, "generate"), tuple(images)),),
            target=target,
            choices=choices,
            metadata=metadata,
        )

    @property
    def templates(self) -> dict[str, str]:
        return {**TEMPLATES, **self.template_overrides}

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        """The pinned upstream files this benchmark's reference prompts are read from."""
        files = (SIMPLE_EVALS_COMMON,) if self.reference_reading == "simple-evals" else ()
        return files + (self.lm_eval.files() if self.lm_eval else ())

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, str]:
        """Our templates' hashes, and each upstream file's pinned sha256 (the official text is read
        out of exactly that file; nothing is downloaded to fingerprint it). The same for every
        protocol: the answer mode and protocol beside them in the fingerprint say which was sent."""
        ours_ = {name: text_hash(text)[:16] for name, text in self.templates.items()}
        return ours_ | {f"{f.folder}/{f.path}": f.sha256 or f.url for f in self.upstream_files()}

    def image_parts(
        self, text: str, images: tuple[ImagePart, ...]
    ) -> tuple[ImagePart | TextPart, ...]:
        """The parts of a user message of ``text`` and an item's images (default: the images, then the text)."""
        return (*images, TextPart(text))

    def _user(self, text: str, images: tuple[ImagePart, ...]) -> Message:
        return Message("user", self.image_parts(text, images) if images else text)

    def user_message(self, sample: Sample, text: str) -> Message:
        """The user message of ``text`` with ``sample``'s images, as :meth:`make_sample` placed them
        (a text-only item: the plain string, as before images existed)."""
        return self._user(text, sample.messages[0].images if sample.messages else ())

    def render(self, sample: Sample, mode: str) -> str:
        """Our prompt text for ``mode`` (generate / next-token / text-loglik) in the benchmark's language."""
        return self._render(sample.metadata, sample.choices, mode)

    def _render(self, metadata: Mapping[str, Any], choices: Mapping[str, str], mode: str) -> str:
        lang = "zh" if self.language.startswith("zh") else "en"
        mode = canonical_mode(mode)
        multi = "_multi" if mode == "generate" and metadata.get("multi") else ""
        fields = {
            **metadata,
            "question": metadata["question"],
            "options": render_options(choices),
            "letters": "/".join(choices),
        }
        return self.templates[f"{_TEMPLATE_STEM[mode]}{multi}_{lang}"].format(**fields)

    def reference_prompt(self, sample: Sample) -> str:
        """The official generate-mode prompt (default: simple-evals'); benchmarks without one return ours."""
        return simple_evals_prompt(sample.metadata["question"], sample.choices)

    def generate_prompt(self, sample: Sample, protocol: str) -> str:
        if protocol == "reference":
            return self.reference_prompt(sample)
        return self._render(sample.metadata, sample.choices, "generate")

    # ---- letter-loglik: lm-evaluation-harness's request ---------------------------------
    def lm_eval_context(self, sample: Sample) -> str:
        """The context lm-eval's ``doc_to_text`` builds for ``sample`` (each benchmark with a task)."""
        raise ConfigError(
            f"{self.name} has no lm-evaluation-harness task, so no letter-loglik mode"
        )

    def letter_loglik_request(self, sample: Sample) -> tuple[str, tuple[str, ...]]:
        """(context, continuations) lm-evaluation-harness sends for ``sample``: zero-shot, no
        description, no chat template (the raw string a base or GGUF model is scored on), and each
        ``doc_to_choice`` entry after the target delimiter " ", in option order.

        For scripts comparing with lm-eval itself, e.g. ``MedQA().letter_loglik_request(sample)``.
        """
        if self.lm_eval is None:
            raise ConfigError(
                f"{self.name} has no lm-evaluation-harness task, so no letter-loglik mode"
            )
        labels = choice_labels(sample.choices, "letter-loglik", self.loglik_labels)
        wanted = self.lm_eval.choices()
        if sorted(labels.values()) != sorted(wanted):
            raise ConfigError(
                f"{self.name} item {sample.id}: options {sorted(labels.values())} differ from lm-eval {self.lm_eval.name}'s "
                f"doc_to_choice {wanted}"
            )
        conts = option_continuations(
            sample.choices, "letter-loglik", self.language, self.loglik_labels
        )
        assert all(c == LM_EVAL_TARGET_DELIMITER + labels[k] for k, c in conts.items())
        return self.lm_eval_context(sample), tuple(conts.values())

    # ---- prompting -------------------------------------------------------------------
    def check_options(self, options: RunOptions) -> RunOptions:
        """Options checked as every benchmark's, after mapping an earlier answer-mode name to its current one."""
        mode = cast(AnswerMode, canonical_mode(options.answer_mode))  # a name among AnswerMode's
        return super().check_options(replace(options, answer_mode=mode))

    def effective_mode(self, sample: Sample, options: RunOptions) -> str:
        """The answer mode used for ``sample``: multiple-answer items are always generated."""
        mode = canonical_mode(options.answer_mode)
        if mode not in self.answer_modes:
            raise ConfigError(
                f"{self.name}: answer mode {mode!r} not supported (use {', '.join(self.answer_modes)})"
            )
        return effective_mode(sample, mode)

    def prepare(self, sample: Sample, options: RunOptions) -> tuple[Sample, str | None]:
        """The sample as shown to the model (shuffled when asked) and its permutation or None."""
        if not options.shuffle_options:
            return sample, None
        shown, perm = shuffle_choices(sample, options.seed)
        return replace(
            shown, messages=(self.user_message(sample, self.render(shown, "generate")),)
        ), perm

    def continuations(self, sample: Sample, mode: str) -> dict[str, str]:
        """Option letter -> the continuation scored for it in ``mode`` (a log-prob mode)."""
        return option_continuations(sample.choices, mode, self.language, self.loglik_labels)

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        shown, _ = self.prepare(sample, options)
        mode = self.effective_mode(sample, options)
        if mode == "generate":
            return Prompt(
                (self.user_message(shown, self.generate_prompt(shown, options.protocol)),)
            )
        if mode == "letter-loglik":
            context, conts = self.letter_loglik_request(shown)
            return Prompt((Message("user", context),), kind="loglikelihood", continuations=conts)
        msgs = (self.user_message(shown, self.render(shown, mode)),)
        conts = tuple(
            dict.fromkeys(self.continuations(shown, mode).values())
        )  # duplicates scored once
        return Prompt(
            msgs,
            kind="next_token" if mode == "next-token" else "loglikelihood",
            continuations=conts,
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        args = {
            "answer_mode": canonical_mode(options.answer_mode),
            "shuffle_options": options.shuffle_options,
            "seed": options.seed,
            "language": self.language,
            "protocol": options.protocol,
            "reference_reading": self.reference_reading,
            "loglik_labels": self.loglik_labels,
        }
        return Spec("mcq", args)

    # ---- aggregation -----------------------------------------------------------------
    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Accuracy with a Wilson 95% CI, per-category accuracy, unextracted answers counted, and the
        other protocol's figure beside it.

        Under ``reference`` every item is in the denominator (``n``): a failed call or an unreadable
        log-prob reply counts wrong, as each official script scores every item; under
        ``grandrounds`` they are left out and counted in ``n_unscored``.
        """
        pairs = pair_grades(samples, grades)
        proto, other = options.protocol, _OTHER[options.protocol]
        mode = canonical_mode(options.answer_mode)
        values = protocol_values(pairs, proto)
        mine = [v if v is not _UNKNOWN else None for v in values]
        overall = self.headline_cell(pairs, mine, options)
        scored = [(s, g) for (s, g), v in zip(pairs, mine) if v is not None]
        extra: dict[str, Any] = {
            "average": "micro (accuracy over "
            + ("every item)" if proto == "reference" else "all scored items)"),
            "answer_mode": mode,
            "protocol": proto,
            "n_unextracted": sum(
                1
                for (_, g), v in zip(pairs, mine)
                if v is not None and g.details.get("unextracted")
            ),
            "n_correct": sum(1 for v in mine if v == 1.0),
        }
        if proto == "reference":
            extra["n_unscored_counted_wrong"] = sum(1 for _, g in pairs if g.value is None)
        if options.shuffle_options:
            extra["shuffle_seed"] = options.seed
        norm = [g.details["acc_norm"] for _, g in scored if "acc_norm" in g.details]
        if norm:
            extra["acc_norm"] = sum(norm) / len(norm)
        forced = sum(
            1 for _, g in scored if canonical_mode(g.details.get("answer_mode", mode)) != mode
        )
        if forced:
            extra["n_generated_multi_answer"] = forced
        extra.update(self.extra_metrics(pairs, mine, options))
        fallback = fallback_counts(pairs)
        if fallback:
            extra["reference_fallback"] = fallback
        others = protocol_values(pairs, other)
        kind = "generate" if mode == "generate" else "logprob"
        other_options = replace(options, protocol=other)
        extra["other_protocol"] = {
            "protocol": other,
            "score": None
            if _UNKNOWN in others
            else self.headline_cell(pairs, others, other_options).score,
            "differs": self.protocol_differences[kind],
            **({} if _UNKNOWN in others else self.other_metrics(pairs, others, other_options)),
        }
        breakdown = {f: accuracy_by(pairs, f, mine) for f in self.category_fields}
        return Aggregate.of("accuracy", overall, breakdown, extra)

    def headline_cell(
        self, pairs: Sequence[tuple[Sample, Grade]], values: Sequence[Any], options: RunOptions
    ) -> Cell:
        """The headline under ``options.protocol`` from the items' values under it (default: accuracy)."""
        return accuracy_cell(values)

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        """Benchmark-specific figures beside accuracy (macro averages, F1). None by default."""
        return {}

    def other_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        """Figures shown with the other protocol's headline (``options`` name that protocol). None by default."""
        return {}


_OTHER = {"reference": "grandrounds", "grandrounds": "reference"}
_UNKNOWN: Any = object()


def protocol_values(pairs: Sequence[tuple[Sample, Grade]], protocol: str) -> list[Any]:
    """Each item's value under ``protocol``: the grade's own value when it was graded that way, else
    its ``other_value``; a grade with no value counts wrong (0.0) under ``reference`` and is left out
    (None) under ``grandrounds``. A value that cannot be known (a grade made before the other
    reading existed) is ``_UNKNOWN``. Grades without a recorded protocol were read our way."""
    out: list[Any] = []
    for _, g in pairs:
        if g.value is None:
            out.append(0.0 if protocol == "reference" else None)
        elif g.details.get("protocol", "grandrounds") == protocol:
            out.append(g.value)
        else:
            v = g.details.get("other_value")
            out.append(_UNKNOWN if v is None else v)
    return out


def pair_grades(samples: Sequence[Sample], grades: Sequence[Grade]) -> list[tuple[Sample, Grade]]:
    """(sample, grade) pairs in grade order; a grade for an unknown sample id is an error."""
    by_id = {s.id: s for s in samples}
    missing = [g.sample_id for g in grades if g.sample_id not in by_id]
    if missing:
        raise ValueError(f"grades for samples not in the benchmark: {missing[:5]}")
    return [(by_id[g.sample_id], g) for g in grades]


def accuracy_by(
    pairs: Sequence[tuple[Sample, Grade]], field: str, values: Sequence[float | None] | None = None
) -> dict[str, Cell]:
    """One breakdown family: an accuracy cell per value of a metadata field, in first-seen order
    (of ``values`` when given, aligned with ``pairs``; else the grades' own values)."""
    vals = values if values is not None else [g.value for _, g in pairs]
    return group_cells(
        ((str(s.metadata.get(field)), v) for (s, _), v in zip(pairs, vals)),
        accuracy_cell,
        sort=False,
    )


def macro_average(groups: Mapping[str, Cell]) -> float | None:
    """Unweighted mean of the groups' scores (groups with no scored item are left out)."""
    scores = [c.score for c in groups.values() if c.score is not None]
    return sum(scores) / len(scores) if scores else None


def jinja_doc_to_text(template: str, doc: Mapping[str, Any]) -> str:
    """An lm-eval Jinja ``doc_to_text`` rendered as lm_eval.utils.apply_template does (StrictUndefined,
    trailing newline kept), in a sandbox."""
    return _jinja(template).render(**doc)


@functools.lru_cache(maxsize=16)
def _jinja(template: str) -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, keep_trailing_newline=True
    ).from_string(template)


class OurPromptExam(MultipleChoiceBenchmark):
    """An exam for which no official or peer prompt is pinned: our prompt and reading under both
    protocols, which then differ in aggregation only (``reference`` counts a failed call wrong,
    ``grandrounds`` leaves it out and counts it); no lm-eval task, so no ``letter-loglik``."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    reference_reading: ClassVar[str] = "ours"
    protocol_differences: ClassVar[Mapping[str, str]] = {
        "generate": "same prompt, reading and temperature; reference counts a failed call wrong, grandrounds leaves it out and counts it",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }

    def reference_prompt(self, sample: Sample) -> str:
        """No official or peer prompt: ours under both protocols."""
        return self.render(sample, "generate")


def fallback_counts(pairs: Sequence[tuple[Sample, Grade]]) -> dict[str, Any]:
    """How many of the reference figure's items were scored by its random fallback (a reply it read
    no letter in): ``n``, ``right`` (right answers that came from the draw as made here; None
    where the reference's draw is unseeded and left undrawn, CMMLU's) and ``expected_right`` (the
    right answers chance alone gives those items: the draw's outcome is luck, whatever its seed).
    Empty where the reference read a letter in every reply."""
    drawn = [
        g.details["reference_fallback"] for _, g in pairs if g.details.get("reference_fallback")
    ]
    if not drawn:
        return {}
    seeded = [d for d in drawn if d.get("option") is not None]
    return {
        "n": len(drawn),
        "right": sum(1 for d in seeded if d.get("right")) if seeded else None,
        "expected_right": round(sum(float(d.get("chance") or 0.0) for d in drawn), 3),
    }
