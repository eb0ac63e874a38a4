"""SCT-Public grading: read the rating, score it against the expert panel (aggregate scoring).

Both readings are made of every reply; the grade's value is the chosen protocol's, ``other_value``
the other's.

- ``reference``: Medmarks' ``SCTParser.parse_answer`` (tmabraham/med-lm-envs, sctpublic.py), applied
  to what it is given: a chat completion is a list of messages, which has no ``content`` attribute,
  so the parser reads ``str(completion)``, the list's printed form, in which the reply is quoted
  with its escapes ("Rating: \\n\\n+1" shows a backslash and "n" where the newlines were, and reads
  nothing). In that text: the five characters after the first "Rating: ", every ``+2``, ``+1``, ``0``,
  ``-1``, ``-2`` in them joined and read as a whole number, which must be -2..+2 (so "Rating: 1",
  without its sign, or "Rating: +1 (0)" are unreadable). An unreadable reply scores 0, as there.
- ``grandrounds``: the last "Rating:" line (any case, markdown emphasis, a Unicode minus, a sign or
  none); an unreadable reply is left unscored and counted, never a zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.scoring.sct import panel_score
from grandrounds.sources.protocols import check_protocol

_OFFICIAL = re.compile(r"\+2|\+1|0|-1|-2")
_OURS = re.compile(r"rating[\s*_]*[:：][\s*_]*([+\-−–]?)\s*([0-2])(?![0-9.])", re.IGNORECASE)


@dataclass(frozen=True)
class SCTParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def reference_rating(text: str) -> int | None:
    """Medmarks' SCTParser reading of a reply (None where it fails), made on the printed form of the
    one-message completion it receives (``str([{"role": "assistant", "content": text}])``)."""
    printed = str([{"role": "assistant", "content": text}])
    parts = printed.split("Rating: ")
    if len(parts) < 2:
        return None
    digits = "".join(_OFFICIAL.findall(parts[1][:5]))
    try:
        label = int(digits)
    except ValueError:
        return None
    return label if label in (-2, -1, 0, 1, 2) else None


def our_rating(text: str) -> int | None:
    """The rating on the reply's last "Rating:" line; a bare 1 or 2 is positive."""
    found = _OURS.findall(strip_reasoning(text))
    if not found:
        return None
    sign, digit = found[-1]
    return -int(digit) if sign in ("-", "−", "–") else int(digit)


class SCTGrader(Grader):
    """Value: the panel credit of the model's rating (modal answer 1.0)."""

    name = "sct"
    Params = SCTParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        text = response.text or ""
        panel = sample.target["panel"]
        ratings = {"reference": reference_rating(text), "grandrounds": our_rating(text)}
        values = {
            "reference": 0.0
            if ratings["reference"] is None
            else panel_score(panel, ratings["reference"]),
            "grandrounds": None
            if ratings["grandrounds"] is None
            else panel_score(panel, ratings["grandrounds"]),
        }
        mine, other = (
            self.params.protocol,
            "grandrounds" if self.params.protocol == "reference" else "reference",
        )
        rating = ratings[mine]
        details = {
            "protocol": mine,
            "rating": rating,
            "unextracted": rating is None,
            "other_value": values[other],
            "other_rating": ratings[other],
            "modal": sample.target["modal"],
        }
        if values[mine] is None:
            return Grade(
                sample_id=sample.id,
                value=None,
                details=details,
                error="no 'Rating:' with -2..+2 in the reply",
                status="unreadable",
            )
        return Grade(
            sample_id=sample.id,
            value=values[mine],
            extracted=None if rating is None else f"{rating:+d}" if rating else "0",
            details=details,
        )
