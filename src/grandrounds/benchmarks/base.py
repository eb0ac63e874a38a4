"""What a benchmark is: where its data comes from, record -> Sample, prompt, grader, aggregate.

A benchmark is one small file with a subclass of :class:`Benchmark`. Variants (subsets,
languages, prompt styles) are constructor parameters recorded in its spec, not copies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

from grandrounds.errors import DataError
from grandrounds.hashing import file_sha256
from grandrounds.records import Grade, Message, RequestKind, Sample
from grandrounds.registry import Spec

ANSWER_MODES = ("generate", "letter", "loglik")


@dataclass(frozen=True)
class RemoteFile:
    """A public data file: where it lives, what it must hash to, and its name in the cache."""

    url: str
    filename: str
    sha256: str | None = None


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
    breakdown: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOptions:
    """Options that change prompts or grading; all of them go into the fingerprint."""

    answer_mode: str = "generate"
    shuffle_options: bool = False
    seed: int = 0
    judge_mode: str = "default"
    #: Judge runs per answer where a protocol averages runs; None = the benchmark's own default.
    judge_runs: int | None = None
    max_reask: int = 2
    extra: Mapping[str, Any] = field(default_factory=dict)


class Benchmark(ABC):
    """Base class. Subclasses set ``name``, ``remote_files`` and implement ``load``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    language: ClassVar[str] = "en"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = ()
    answer_modes: ClassVar[tuple[str, ...]] = ("generate",)
    #: True for benchmarks graded by an LLM judge (``--judge`` needed).
    needs_judge: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        self.params = dict(params)

    def spec(self) -> Spec:
        return Spec(self.name, dict(self.params))

    # ---- data -------------------------------------------------------------------------
    def data_files(self, root: Path) -> list[Path]:
        """The files ``load`` reads under ``root`` (a directory) or ``[root]`` for a file."""
        if root.is_file():
            return [root]
        return [root / rf.filename for rf in self.remote_files]

    @abstractmethod
    def load(self, root: Path) -> list[Sample]:
        """Parse the original-format data at ``root`` (file or directory) into samples.

        Raises :class:`DataError` naming the file and line/record for malformed input.
        """

    def dataset_hash(self, root: Path) -> str:
        files = self.data_files(root)
        if len(files) == 1:
            return file_sha256(files[0])
        from grandrounds.hashing import content_hash

        return content_hash({p.name: file_sha256(p) for p in files})

    # ---- prompting --------------------------------------------------------------------
    def prompt(self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()) -> Prompt:
        """Messages for ``sample``. ``history`` holds earlier turns of its group with the model's answers."""
        msgs: list[Message] = []
        for prev, answer in history:
            msgs.extend(prev.messages)
            msgs.append(Message("assistant", answer))
        msgs.extend(sample.messages)
        return Prompt(tuple(msgs))

    # ---- grading ----------------------------------------------------------------------
    @abstractmethod
    def grader(self, options: RunOptions) -> "Any":
        """The benchmark's default grader (a :class:`grandrounds.graders.base.Grader`)."""

    @abstractmethod
    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Headline score, CI and breakdown from per-sample grades, the authors' way."""


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


def require_file(path: Path) -> Path:
    if not path.exists():
        raise DataError(path, None, "file not found")
    if path.stat().st_size == 0:
        raise DataError(path, None, "file is empty")
    return path


ENCODINGS = ("utf-8", "utf-8-sig", "gb18030", "cp936")


def read_text(path: Path, encodings: Sequence[str] = ENCODINGS) -> str:
    """Read a text file trying UTF-8 (with or without BOM), then GB18030/CP936.

    Latin-1 is deliberately not tried: it decodes anything, so a wrong encoding would pass
    silently as mojibake. A file no encoding fits gets a DataError naming the first bad line.
    """
    require_file(path)
    raw = path.read_bytes()
    for enc in encodings:
        try:
            text = raw.decode(enc)
        except UnicodeDecodeError:
            continue
        return text[1:] if text.startswith("\ufeff") else text
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(path, line, f"cannot decode as {', '.join(encodings)} (bad byte at offset {e.start})") from None
    raise DataError(path, None, "cannot decode")  # pragma: no cover
