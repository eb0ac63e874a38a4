"""Med-HALT Fake Questions Test grading: did the model decline to answer a nonsensical question?

Both readings are made of every reply; the grade's value is the chosen protocol's, ``other_value`` the
other's (None where it cannot be made, e.g. the official term list is not at hand).

- ``reference``: the reply's ``cop`` as the authors' ``clean_output`` (evaluate.py) actually reads
  it. Its first step, ``np.isnan(out_str)``, raises on a string, so its literal-dict branch never
  runs and every reply goes to its fallback ``recreate``: each ``'key': value`` pair its regex finds
  in the whole reply, the value cut at the first comma or "}", a later key replacing an earlier one
  (so the LAST ``cop`` wins, and "I do not know, but..." keeps "I do not know"). Right when that
  value, lower-cased, contains one of ``reasoning_fake_eval``'s terms (read from the pinned
  eval_full.py), wrong otherwise; no ``cop`` is the official code's exception: unscored and counted,
  never wrong. ``details["literal_cop"]`` / ``["literal_value"]`` keep what the literal branch would
  have read (the reply's dict, whole), reported beside the figure as the reference's intent.
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


# evaluate.py parse_key_values: a quoted key, ":", the value up to the first "," or "}" (quotes trimmed).
_KEY_VALUE = re.compile(r"""['"](.*?)['"]\s*:\s*['"]*(.*?)['"]*\s*[,}]""")


def official_cop(text: str) -> str | None:
    """``cop`` as evaluate.py's ``clean_output`` returns it: ``recreate`` of the whole reply (every
    key/value pair, backslashes dropped from keys, the last of a repeated key kept), else None."""
    pairs = {key.replace("\\", ""): value for key, value in _KEY_VALUE.findall(text)}
    return pairs.get("cop")


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
        cop, literal = official_cop(text), read_cop(text)
        try:
            terms: tuple[str, ...] | None = refusal_terms()
        except DataError:
            if self.params.protocol == "reference":
                raise
            terms = None  # the official list is not at hand: the reference value is unknown
        ref = None if cop is None or terms is None else float(any(t in cop.lower() for t in terms))
        literal_value = (
            None
            if literal is None or terms is None
            else float(any(t in literal.lower() for t in terms))
        )
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
            "literal_cop": literal,
            "literal_value": literal_value,
        }
        if values[mine] is None:
            return Grade(
                sample_id=sample.id,
                value=None,
                details=details,
                status="unreadable",
                error="no 'cop' field in the reply"
                if mine == "reference"
                else "no 'Answer:' option number",
            )
        return Grade(sample_id=sample.id, value=values[mine], extracted=extracted, details=details)
