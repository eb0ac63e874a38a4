"""What a benchmark is: where its data comes from, record -> Sample, prompt, grader, aggregate.

A benchmark is one small file with a subclass of :class:`Benchmark`. Variants (subsets,
languages, prompt styles) are constructor parameters recorded in its spec, not copies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, get_args

from grandrounds.benchmarks.readers.decoding import read_text, require_file  # noqa: F401  (re-exported: benchmarks import them from here)
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import file_sha256
from grandrounds.core.params import (
    Param,
    check_values,
    declared_value,
    did_you_mean,
    without_defaults,
)
from grandrounds.core.records import (
    AnswerMode,
    Breakdown,
    Cell,
    Grade,
    Message,
    RequestKind,
    Sample,
)
from grandrounds.core.registry import Spec
from grandrounds.sources.downloads import RemoteFile
from grandrounds.sources.protocols import DEFAULT_PROTOCOL, Protocol, same_as_ours
from grandrounds.sources.upstream import UpstreamFile

#: The request kind each answer mode sends: what a provider must serve for it.
ANSWER_KINDS: Mapping[AnswerMode, RequestKind] = {
    "generate": "chat",
    "letter-loglik": "loglikelihood",
    "text-loglik": "loglikelihood",
    "next-token": "next_token",
    "letter": "next_token",  # earlier name of next-token
    "loglik": "loglikelihood",  # earlier name of text-loglik
}
#: Re-asks of an unreadable judge reply when the user sets none (RunOptions.max_reask's default).
DEFAULT_MAX_REASK = 2


@dataclass(frozen=True)
class Prompt:
    """What to send for one sample: messages, and for log-prob modes the options to score."""

    messages: tuple[Message, ...]
    kind: RequestKind = "chat"
    continuations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Aggregate:
    """A benchmark's headline metric and everything shown beside it."""

    metric: str
    score: float | None
    ci95: tuple[float, float] | None
    n: int
    n_unscored: int
    #: family (subject, category, error_type, ...) -> key -> Cell, built with grandrounds.scoring.cells.
    breakdown: Breakdown = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Nothing scored is an unknown, never a zero: a formula over no items (an F1 of nothing, a
        # mean of an empty list) gives no headline and no interval, so nothing ranks it.
        if self.n == 0:
            object.__setattr__(self, "score", None)
            object.__setattr__(self, "ci95", None)

    @classmethod
    def of(
        cls, metric: str, overall: Cell, breakdown: Breakdown, extra: Mapping[str, Any]
    ) -> Aggregate:
        """The headline from the overall cell (score, CI, n, unscored), with its breakdown and extras."""
        return cls(
            metric, overall.score, overall.ci95, overall.n, overall.n_unscored, breakdown, extra
        )


@dataclass(frozen=True)
class RunOptions:
    """Options that change prompts or grading; all of them go into the fingerprint."""

    answer_mode: AnswerMode = "generate"
    #: The protocol preset (``--protocol``): ``reference`` reproduces the official setup, ``grandrounds`` ours.
    protocol: str = DEFAULT_PROTOCOL
    shuffle_options: bool = False
    seed: int = 0
    judge_mode: str = "default"
    #: Judge runs per answer where a protocol averages runs; None = the benchmark's own default.
    judge_runs: int | None = None
    max_reask: int = DEFAULT_MAX_REASK
    #: Scoring options (``--scoring``), as the benchmark declares them in ``scoring_options``.
    extra: Mapping[str, Any] = field(default_factory=dict)


class Benchmark(ABC):
    """Base class. Subclasses set ``name``, ``remote_files`` and implement ``load``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    language: ClassVar[str] = "en"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = ()
    # ---- what the benchmark accepts (checked before a run loads or calls anything) ----
    #: Constructor parameters (``--param``); those set to a non-default value are its spec.
    parameters: ClassVar[tuple[Param, ...]] = ()
    #: Scoring options (``--scoring``, ``RunOptions.extra``), recorded in the grader fingerprint.
    scoring_options: ClassVar[tuple[Param, ...]] = ()
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate",)
    #: What a reader comparing results with the paper's published numbers should know (where those
    #: numbers came from other reading code, and by how much it moves the authors' own replies):
    #: shown on the benchmark's page.
    published_figures: ClassVar[str] = ""
    #: True where ``--shuffle-options`` means something (multiple-choice exams).
    shuffles_options: ClassVar[bool] = False
    #: Judge modes (``--judge-mode``) the grader offers, the first being its default; () = none.
    judge_modes: ClassVar[tuple[str, ...]] = ()
    #: True where the protocol averages several judge runs per answer (``--judge-runs``).
    takes_judge_runs: ClassVar[bool] = False
    #: True for benchmarks graded by an LLM judge (``--judge`` needed, ``--max-reask`` used).
    needs_judge: ClassVar[bool] = False
    #: True where an LLM judge is optional (``--judge`` accepted, never needed, ``--max-reask`` used):
    #: given one, the grader is :meth:`judged_grader_spec`'s and reports the judge's verdicts apart;
    #: without one, spec, run id and fingerprint are those of a run that never heard of judges.
    takes_judge: ClassVar[bool] = False
    #: True where questions are asked with images (a provider that cannot send images is refused).
    has_images: ClassVar[bool] = False
    #: True where some questions may carry images, as their file says (MedBench's VLM rows): a run
    #: checks and stores the images it finds, and refuses a provider that cannot send them then.
    images_in_data: ClassVar[bool] = False
    #: True where samples are episodes an agent plays (:class:`~grandrounds.benchmarks.agents.AgentBenchmark`).
    episodic: ClassVar[bool] = False
    #: True where the environment asks a simulator model (``--simulator``): AgentClinic's patient.
    needs_simulator: ClassVar[bool] = False
    #: How the ``reference`` protocol stands against its reference, for the docs page: ``reference``
    #: (whose code), ``reader`` (its reading of a reply), ``prompt`` (where the prompt comes from),
    #: ``equal`` (what is checked equal) and ``differs`` (what differs, and why); empty: not stated.
    reference_fidelity: ClassVar[Mapping[str, str]] = {}
    #: The protocol presets (``--protocol``), keyed by name: ``reference`` and ``grandrounds``.
    protocols: ClassVar[Mapping[str, Protocol]] = same_as_ours(
        "benchmark-specific", "benchmark-specific"
    )

    def __init__(self, **params: Any) -> None:
        """Check ``params`` against :attr:`parameters` and keep those not at their default."""
        checked = check_values(self.parameters, params, self.name, "--param")
        self.params: dict[str, Any] = without_defaults(self.parameters, checked)

    def param(self, name: str) -> Any:
        """The value of declared parameter ``name``: as given, else its default."""
        return declared_value(self.parameters, self.params, name, f"{self.name} parameter")

    def scoring(self, options: RunOptions, name: str) -> Any:
        """The value of declared scoring option ``name`` in ``options``: as given, else its default."""
        return declared_value(
            self.scoring_options, options.extra, name, f"{self.name} scoring option"
        )

    def spec(self) -> Spec:
        return Spec(self.name, dict(self.params))

    @classmethod
    def default_path(cls) -> Path | None:
        """Data packaged with grandrounds (read when no ``--data`` is given), None where there is none."""
        return None

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        """Upstream files the benchmark reads besides those its presets and module name."""
        return ()

    def simulator_templates(self) -> dict[str, Any]:
        """Hashes of the simulators' prompts, where :attr:`needs_simulator` (in the run's identity)."""
        return {}

    # ---- run options ------------------------------------------------------------------
    def check_options(self, options: RunOptions) -> RunOptions:
        """``options`` checked for this benchmark and normalised, or a one-line ConfigError.

        An option the benchmark does not use is refused when set to anything but its default, and
        reset to the neutral default otherwise, so it never enters a fingerprint or run id.
        Scoring options are coerced to their declared types; those at their default are dropped.
        """
        self._check_answer_mode(options.answer_mode)
        if options.protocol not in self.protocols:
            hint = did_you_mean(options.protocol, tuple(self.protocols))
            raise ConfigError(
                f"{self.name}: unknown --protocol {options.protocol!r}{hint} (protocols: {', '.join(self.protocols)})"
            )
        scoring = check_values(self.scoring_options, options.extra, self.name, "--scoring")
        return replace(
            options,
            shuffle_options=self._unused_off(
                "--shuffle-options", options.shuffle_options, False, self.shuffles_options
            ),
            judge_mode=self._judge_mode(options.judge_mode),
            judge_runs=self._judge_runs(options.judge_runs),
            max_reask=self._unused_off(
                "--max-reask",
                options.max_reask,
                DEFAULT_MAX_REASK,
                self.needs_judge or self.takes_judge,
            ),
            extra=without_defaults(self.scoring_options, scoring),
        )

    def _check_answer_mode(self, mode: str) -> None:
        if mode not in get_args(AnswerMode):
            known = get_args(AnswerMode)
            raise ConfigError(
                f"unknown --answer-mode {mode!r}{did_you_mean(mode, known)} (answer modes: {', '.join(known)})"
            )
        if mode not in self.answer_modes:
            raise ConfigError(
                f"{self.name} supports --answer-mode {', '.join(self.answer_modes)}, not {mode!r}"
            )

    def _unused_off(self, flag: str, value: Any, neutral: Any, used: bool) -> Any:
        """``value`` when the benchmark uses ``flag``; else ``neutral``, refusing any other value."""
        if used:
            return value
        if value != neutral:
            raise ConfigError(f"{self.name} does not use {flag}")
        return neutral

    def _judge_mode(self, mode: str) -> str:
        """The declared mode (``default`` -> the first one), or ``default`` where modes mean nothing."""
        if not self.judge_modes:
            return self._unused_off("--judge-mode", mode, "default", False)
        if mode == "default":
            return self.judge_modes[0]
        if mode not in self.judge_modes:
            hint = did_you_mean(mode, self.judge_modes)
            raise ConfigError(
                f"{self.name}: unknown --judge-mode {mode!r}{hint} (judge modes: {', '.join(self.judge_modes)})"
            )
        return mode

    def _judge_runs(self, runs: int | None) -> int | None:
        if not self.takes_judge_runs:
            return self._unused_off("--judge-runs", runs, None, False)
        if runs is not None and (not isinstance(runs, int) or isinstance(runs, bool) or runs < 1):
            raise ConfigError(
                f"{self.name}: --judge-runs must be a whole number of at least 1, not {runs!r}"
            )
        return runs

    def protocol(self, options: RunOptions) -> Protocol:
        """The preset ``options`` name (checked by :meth:`check_options`)."""
        return self.protocols[options.protocol]

    def request_kind(self, options: RunOptions) -> RequestKind:
        """The kind of answer request ``options`` make the benchmark send (a provider must serve it)."""
        return ANSWER_KINDS[options.answer_mode]

    def preflight(self) -> dict[str, str]:
        """What must hold on this machine before the first call (a tool's sandbox, say), and what
        holds; a one-line ConfigError where it does not. Most benchmarks need nothing."""
        return {}

    # ---- data -------------------------------------------------------------------------
    def data_files(self, root: Path) -> list[Path]:
        """The files ``load`` reads under ``root`` (a directory) or ``[root]`` for a file."""
        if not root.is_dir():
            return [root]
        return [root / rf.filename for rf in self.remote_files]

    @abstractmethod
    def load(self, root: Path) -> list[Sample]:
        """Parse the original-format data at ``root`` (file or directory) into samples.

        Raises :class:`DataError` naming the file and line/record for malformed input.
        """

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        """The samples of ``root`` one at a time, in :meth:`load`'s order.

        Benchmarks whose files can be read record by record override it (and build ``load`` on
        it), so a run holds one record at a time and ``--limit N`` reads only N of them; the
        default reads the whole file with :meth:`load`.
        """
        yield from self.load(root)

    def dataset_hash(self, root: Path) -> str:
        """The dataset's key: the sha256 of its file (of its files' hashes when it has several),
        combined with ``--encoding`` when one is given, since the same bytes read with another
        codec are other text (their samples are stored apart and their runs ranked apart)."""
        import codecs

        from grandrounds.benchmarks.readers.decoding import DATA_ENCODING
        from grandrounds.core.hashing import content_hash

        files = [require_file(f) for f in self.data_files(root)]
        digest = (
            file_sha256(files[0])
            if len(files) == 1
            else content_hash({p.name: file_sha256(p) for p in files})
        )
        encoding = DATA_ENCODING.get()
        if encoding:
            return content_hash({"dataset": digest, "encoding": codecs.lookup(encoding).name})
        return digest

    # ---- prompting --------------------------------------------------------------------
    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        """Messages for ``sample``. ``history`` holds earlier turns of its group with the model's answers."""
        msgs: list[Message] = []
        for prev, answer in history:
            msgs.extend(prev.messages)
            msgs.append(Message("assistant", answer))
        msgs.extend(sample.messages)
        return Prompt(tuple(msgs))

    # ---- grading ----------------------------------------------------------------------
    @abstractmethod
    def grader_spec(self, options: RunOptions) -> Spec:
        """The spec of the benchmark's grader for these options (a name in ``registry.GRADERS``)."""

    def grader(self, options: RunOptions, judged: bool = False) -> Any:
        """The benchmark's grader, built from :meth:`grader_spec`; with ``judged`` (judges given) on a
        benchmark that takes an optional judge, from :meth:`judged_grader_spec`."""
        from grandrounds.graders.base import build

        return build(
            self.judged_grader_spec(options)
            if judged and self.takes_judge
            else self.grader_spec(options)
        )

    def judged_grader_spec(self, options: RunOptions) -> Spec:
        """The grader's spec when the optional judge is given (benchmarks with ``takes_judge`` override it)."""
        return self.grader_spec(options)

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        """Hashes of the prompt templates a run with ``options`` sends (its fingerprint's
        ``prompt_templates``); official ones as their upstream file's fingerprint."""
        return {}

    def write_submission(
        self, samples: Sequence[Sample], answers: Mapping[str, str], path: Path
    ) -> dict[str, Any]:
        """Write the answers in the benchmark's own submission format, for platforms that score
        server-side. Benchmarks without one refuse."""
        raise ConfigError(f"{self.name} has no submission format (its scores are computed here)")

    @abstractmethod
    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Headline score, CI and breakdown from per-sample grades, the authors' way."""

    def summarize(self, sample: Sample, grade: Grade, options: RunOptions) -> Any:
        """What :meth:`aggregate_summaries` needs of one graded sample, kept while a run goes on.

        A run keeps this, not the sample and its grade, for every sample until it aggregates; so it
        should be small. The default keeps the sample without its prompt messages and the grade
        without the judges' reply texts (no aggregate reads them); benchmarks with large items
        reduce it further to the numbers their aggregate uses.
        """
        return slim_sample(sample), slim_grade(grade)

    def aggregate_summaries(self, summaries: Sequence[Any], options: RunOptions) -> Aggregate:
        """:meth:`aggregate` over :meth:`summarize`'s summaries, in sample order."""
        return self.aggregate([s for s, _ in summaries], [g for _, g in summaries], options)


def slim_sample(sample: Sample) -> Sample:
    """``sample`` without its prompt messages (kept in the store and in the data file)."""
    return replace(sample, messages=())


def slim_grade(grade: Grade) -> Grade:
    """``grade`` without the judges' reply texts and explanations (kept in the store)."""
    if not grade.verdicts and not grade.votes:
        return grade
    return replace(
        grade,
        verdicts=tuple(
            replace(v, explanation="", votes=tuple(_slim_vote(x) for x in v.votes))
            for v in grade.verdicts
        ),
        votes=tuple(_slim_vote(x) for x in grade.votes),
    )


def _slim_vote(vote: Any) -> Any:
    return replace(vote, explanation="", raw="") if vote.explanation or vote.raw else vote


def resolve_file(root: Path, filename: str) -> Path:
    """``root`` itself if it is a file, else ``root/filename`` (the download cache layout)."""
    if root.is_dir():
        path = root / filename
        if not path.exists():
            raise DataError(path, None, f"file not found in directory {root} (expected {filename})")
        return path
    if not root.exists():
        raise DataError(root, None, "file not found")
    return root


def chosen_subjects(bench: Any, all_subjects: Sequence[str], name: str = "subjects") -> list[str]:
    """The subjects (``--param name``) asked, in the benchmark's order; only a strict subset stays in the spec."""
    chosen = [s for s in all_subjects if s in bench.param(name)]
    if not chosen:
        raise ConfigError(
            f"{bench.name}: --param {name} is empty; choose from {', '.join(all_subjects)}"
        )
    bench.params.pop(name, None)
    if chosen != list(all_subjects):
        bench.params[name] = chosen
    return chosen
