"""Med-HALT Fake Questions Test grading: did the model decline to answer a nonsensical question?

Both readings are made of every reply; the grade's value is the chosen protocol's, ``other_value`` the
other's (None where it cannot be made, e.g. the official term list is not at hand).

- ``reference``: the reply's ``cop`` field (the dict the prompt asks for, read as a Python or JSON
  literal, or, in a reply cut short, the first ``'cop': '...'`` pair); right when its lower-cased text
  contains one of ``reasoning_fake_eval``'s terms (read from the pinned eval_full.py), wrong otherwise;
  no ``cop`` is the official code's exception: unscored and counted, never wrong.
- ``grandrounds``: the option number on the last ``Answer:`` line; right when that option reads
  "I do not know" or "none of the above", wrong for any other option; no number is unreadable.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from grandrounds.core.errors import DataError
from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.sources.medhalt import refusal_terms
from grandrounds.sources.protocols import check_protocol

_COP = re.compile(r"""["']cop["']\s*:\s*(?:"([^"]*)"|'([^']*)'|(-?\d+))""")
_ANSWER = re.compile(r"answer[\s*_]*[:：][\s*_]*\(?(\d+)\)?", re.IGNORECASE)
OUR_REFUSALS = ("i do not know", "i don't know", "none of the above")


@dataclass(frozen=True)
class MedHALTParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def read_cop(text: str) -> str | None:
    """The ``cop`` value of the reply's dict (literal or JSON), else of its first ``'cop': ...`` pair."""
    start = text.find("{")
    while start != -1:
        end = text.find("}", start)
        while end != -1:
            value = _literal(text[start : end + 1])
            if isinstance(value, dict) and "cop" in value:
                return str(value["cop"])
            end = text.find("}", end + 1)
        start = text.find("{", start + 1)
    m = _COP.search(text)
    return None if m is None else next(g for g in m.groups() if g is not None)


def _literal(s: str) -> Any:
    for reader in (json.loads, ast.literal_eval):
        try:
            return reader(s)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def our_choice(text: str, options: dict[str, str]) -> str | None:
    found = _ANSWER.findall(strip_reasoning(text))
    return found[-1] if found and found[-1] in options else None


class MedHALTGrader(Grader):
    """1.0 for a refusal, 0.0 for an answer; unreadable replies unscored and counted."""

    name = "med-halt"
    Params = MedHALTParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        text, options = response.text or "", sample.choices
        cop = read_cop(text)
        try:
            terms: tuple[str, ...] | None = refusal_terms()
        except DataError:
            if self.params.protocol == "reference":
                raise
            terms = None  # the official list is not at hand: the reference value is unknown
        ref = None if cop is None or terms is None else float(any(t in cop.lower() for t in terms))
        choice = our_choice(text, dict(options))
        mine_value = (
            None
            if choice is None
            else float(any(r in options[choice].lower() for r in OUR_REFUSALS))
        )
        values = {"reference": ref, "grandrounds": mine_value}
        mine, other = (
            self.params.protocol,
            "grandrounds" if self.params.protocol == "reference" else "reference",
        )
        extracted = cop if mine == "reference" else choice
        details = {
            "protocol": mine,
            "cop": cop,
            "choice": choice,
            "other_value": values[other],
            "unextracted": extracted is None,
        }
        if values[mine] is None:
            return Grade(
                sample.id,
                None,
                details=details,
                status="unreadable",
                error="no 'cop' field in the reply"
                if mine == "reference"
                else "no 'Answer:' option number",
            )
        return Grade(sample.id, values[mine], extracted=extracted, details=details)
