"""What a grader is. Graders are pure apart from the judge they are handed.

A grader never imports providers or the store: the runner injects judges, each an async
callable that sends messages to a judge model through the same cached, retrying path as
answers. A judge call that fails comes back as a Response with ``error`` set; the grader
records it as an unknown vote, never as "not met".

Every grader is registered by name (:data:`grandrounds.core.registry.GRADERS`) and described by a
typed, frozen ``Params`` dataclass; ``spec()`` is (name, params) and :func:`build` turns a
stored spec back into the same grader, so re-grading rebuilds exactly what graded before.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import text_hash
from grandrounds.core.params import Param, coerce
from grandrounds.core.records import Grade, GradeStatus, Message, Response, Sample
from grandrounds.core.registry import GRADERS, Spec


class Judge(Protocol):
    """An injected judge model. ``attempt`` > 0 re-asks a prompt instead of hitting the cache."""

    name: str

    async def __call__(self, messages: Sequence[Message], *, attempt: int = 0) -> Response: ...


@dataclass(frozen=True, kw_only=True)
class GradeContext:
    """What a grader may use besides the sample and the answer.

    ``previous`` is the stored grade of this answer when re-grading with ``only_unknown``: known
    verdicts are kept and only unknown ones re-asked, with attempt numbers after those used.
    """

    judges: tuple[Judge, ...] = ()
    previous: Grade | None = None
    only_unknown: bool = False
    max_reask: int = 2
    #: An agent episode being graded: ``{status, final, steps, state, key}`` (None for other benchmarks).
    episode: Mapping[str, Any] | None = None
    #: The run's options (agent environments read them); None where a grader is used alone.
    options: Any = None


@dataclass(frozen=True)
class NoParams:
    """Parameters of a grader that has none."""


class Grader(ABC):
    """Turns (sample, response) into a Grade. Subclasses set ``name`` and ``Params``."""

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    #: True when the grader asks LLM judges (the runner must hand it at least one).
    judged: ClassVar[bool] = False
    #: Template files (name -> text) whose hashes go into the fingerprint.
    templates: Mapping[str, str] = {}

    def __init__(self, params: Any = None) -> None:
        self.params = params if params is not None else self.Params()

    def spec(self) -> Spec:
        return Spec(self.name, dataclasses.asdict(self.params))

    @property
    def min_judges(self) -> int:
        """Judges the grader needs; the runner refuses to start with fewer (before any call)."""
        return 1 if self.judged else 0

    def template_hashes(self) -> dict[str, str]:
        return {name: text_hash(text)[:16] for name, text in self.templates.items()}

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        """Judge calls grading one answer to ``sample`` makes with a panel of ``judges``: first asks
        only (re-asks of unreadable replies depend on the replies). 0 for graders without a judge;
        None when a judged grader cannot say (``run --dry-run`` then reports the count as unknown)."""
        return None if self.judged else 0

    @abstractmethod
    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        """Grade one answer. Only called with a successful response (the runner records failures)."""

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """The answer's value with criterion verdicts replaced by ``statuses`` (clinician reviews).

        Graders whose value is not plain arithmetic over criterion verdicts keep the judge's value.
        """
        return grade.value


def unscored(sample: Sample, status: GradeStatus, why: str, **details: Any) -> Grade:
    """A grade with no value, for answers that could not be obtained, read or judged."""
    return Grade(sample_id=sample.id, value=None, error=why, details=dict(details), status=status)


def build(spec: Spec) -> Grader:
    """The grader a spec names, with its parameters checked against the grader's ``Params``."""
    cls = GRADERS.get(spec.name)
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(spec.args) - fields)
    if unknown:
        raise ConfigError(
            f"grader {spec.name!r} has no parameter {', '.join(unknown)} (accepted: {', '.join(sorted(fields)) or 'none'})"
        )
    args = dict(spec.args)
    for f in dataclasses.fields(cls.Params):
        # numbers and flags are checked as the CLI checks them (an int where an int is due, never a
        # bool); text and optional values are checked by the Params themselves (choices, non-empty)
        if f.name in args and isinstance(f.default, (bool, int, float)):
            args[f.name] = coerce(
                Param(name=f.name, type=type(f.default), default=f.default),
                args[f.name],
                f"grader {spec.name!r}: {f.name}",
            )
    try:
        params = cls.Params(**args)
        return cls(params)
    except (TypeError, ValueError, OSError) as e:
        raise ConfigError(f"grader {spec.name!r}: {e}") from None


def spec_from_json(d: Mapping[str, Any]) -> Spec:
    """A grader spec as stored in a fingerprint (``{"name": ..., "args": {...}}``)."""
    if not isinstance(d, Mapping) or "name" not in d:
        raise ConfigError(f"not a grader spec: {d!r}")
    args = dict(d.get("args") or {})
    return Spec(
        str(d["name"]), {k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}
    )


def load_templates(*names: str) -> dict[str, str]:
    """Judge prompt templates shipped in ``grandrounds/templates`` (``<name>.txt``), by name."""
    from importlib.resources import files

    root = files("grandrounds") / "templates"
    return {n: (root / f"{n}.txt").read_text(encoding="utf-8") for n in names}
