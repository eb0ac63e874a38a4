"""What a grader is. Graders are pure apart from the judge they are handed.

A grader never imports providers or the store: the runner injects judges, each an async
callable that sends messages to a judge model through the same cached, retrying path as
answers. A judge call that fails comes back as a Response with ``error`` set; the grader
records it as an unknown verdict, never as "not met".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from grandrounds.hashing import text_hash
from grandrounds.records import Grade, Message, Response, Sample
from grandrounds.registry import Spec


class Judge(Protocol):
    """An injected judge model. ``attempt`` > 0 re-asks a prompt instead of hitting the cache."""

    name: str

    async def __call__(self, messages: Sequence[Message], *, attempt: int = 0) -> Response: ...


@dataclass(frozen=True)
class GradeContext:
    """What a grader may use besides the sample and the answer.

    ``previous`` is the stored grade of this answer when re-grading with ``only_unknown``: known
    verdicts are kept and only unknown ones re-asked, with attempt numbers after those used.
    """

    judges: tuple[Judge, ...] = ()
    previous: Grade | None = None
    only_unknown: bool = False
    max_reask: int = 2


class Grader(ABC):
    """Turns (sample, response) into a Grade."""

    #: Template files (name -> text) whose hashes go into the fingerprint.
    templates: Mapping[str, str] = {}

    def spec(self) -> Spec:
        return Spec(type(self).__name__, {})

    def template_hashes(self) -> dict[str, str]:
        return {name: text_hash(text)[:16] for name, text in self.templates.items()}

    @abstractmethod
    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade: ...


def unscored(sample: Sample, why: str, **details: Any) -> Grade:
    """A grade with no value, for answers that could not be obtained or judged."""
    return Grade(sample_id=sample.id, value=None, error=why, details=dict(details))
