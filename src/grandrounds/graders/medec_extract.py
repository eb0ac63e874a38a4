"""Reading a MEDEC prediction (error flag, sentence id, corrected sentence) out of a reply, pure.

Two readings, one per protocol:

- ``grandrounds`` (:func:`parse_prediction`): tolerant. A JSON object ``{"error", "sentence_id",
  "corrected"}`` or a submission line, full-width characters folded, any-case "NA" and empty
  corrections read as NA, quotes and line breaks removed.
- ``reference`` (:func:`submission_text` then :func:`read_submission`): the reply stands for the
  lines of a MEDIQA-CORR submission file, ``<text id> <flag> <sentence id> <corrected sentence>``,
  read exactly as the official scorer's ``parse_run_submission_file`` reads its file (abachaa/
  MEDIQA-CORR-2024 ``evaluation/mediqa-corr-2024-eval-script-2-all-metrics.py``). A JSON reply
  is first written as that line (:func:`submission_text`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from grandrounds.core.textutil import normalize_width, strip_reasoning
from grandrounds.graders.judge_json import as_bool, extract_json_object
from grandrounds.scoring.medec import NA

# Submission line: "<text_id> <flag> <sentence_id> <corrected sentence>" (tolerant form, ours).
_LINE = re.compile(r"^\s*([a-z0-9\-]+)\s+([01])\s+(-?\d+)\s+(.+?)\s*$", re.I | re.M)


@dataclass(frozen=True)
class Prediction:
    flag: int
    sentence_id: int | None
    corrected: str  # "NA" when no error is claimed or no correction was given


def parse_prediction(reply: str | None, text_id: str | None = None) -> Prediction | None:
    """A prediction from JSON ``{"error", "sentence_id", "corrected"}`` or a submission line.

    With ``text_id`` a submission line must start with it (so prose is not misread as one).
    None when neither form can be read (the official scorer counts that text as missed).
    """
    if not reply:
        return None
    body = normalize_width(strip_reasoning(reply))
    obj = extract_json_object(body)
    if obj is not None and "error" in obj:
        flag = as_bool(obj.get("error"))
        if flag is None:
            return None
        sid = _int(obj.get("sentence_id"))
        corrected = _clean(obj.get("corrected"))
        if not flag:
            return Prediction(0, -1 if sid is None else sid, NA)
        return Prediction(1, sid, corrected or NA)
    m = next((m for m in _LINE.finditer(body) if text_id is None or m.group(1) == text_id), None)
    if m is None:
        return None
    error, line = int(m.group(2)), int(m.group(3))
    return Prediction(error, line, NA if error == 0 else (_clean(m.group(4)) or NA))


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def _clean(v: Any) -> str:
    """The scorer strips surrounding quotes and joins lines; "NA"/null stay NA-like (empty)."""
    if v is None:
        return ""
    text = str(v).replace("\r", " ").replace("\n", " ").strip()
    while len(text) > 1 and text.startswith('"'):
        text = text[1:]
    while len(text) > 1 and text.endswith('"'):
        text = text[:-1]
    return "" if text.strip().upper() == NA else text.strip()


# ---- the reference reading: the official submission-file parser ---------------------------------

#: A valid line as the official parser checks it (``re.fullmatch`` on the stripped line): exactly
#: one whitespace character between the fields, a lower-case id, digits, and a non-empty rest.
_OFFICIAL_LINE = re.compile(r"[a-z0-9\-]+\s[0-9]+\s-?[0-9]+\s.+")
#: The official parser means to collapse whitespace but calls ``re.sub(pattern, line, " ")``: the
#: line becomes the *replacement template* of the one match in " ", so the result is the line with
#: its backslash escapes expanded (``\t`` -> tab, ``\\`` -> ``\``) and a bad escape (``\d``, ``\1``)
#: raises ``re.error``. ``Match.expand`` does that template expansion.
_ONE_SPACE = re.compile(r"\s+").match(" ")
#: The official parser reads its file with ``readlines()`` in text mode (universal newlines).
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SubmissionEntry:
    """What the official parser keeps of one line: strings, compared as strings."""

    text_id: str
    flag: str
    sentence_id: str
    #: Surrounding double quotes removed (one is kept if nothing else is left); "NA" where flag is "0".
    corrected: str


def read_submission_line(line: str) -> SubmissionEntry | None:
    """One line as ``parse_run_submission_file`` reads it; None for a blank or invalid line.

    Raises ``re.error`` where the official parser does (a bad backslash escape in the line).
    """
    line = line.strip()
    if not line or not _OFFICIAL_LINE.fullmatch(line):
        return None
    assert _ONE_SPACE is not None
    items = _ONE_SPACE.expand(line).split()
    corrected = " ".join(items[3:]).strip()
    while corrected.startswith('"') and len(corrected) > 1:
        corrected = corrected[1:]
    while corrected.endswith('"') and len(corrected) > 1:
        corrected = corrected[:-1]
    return SubmissionEntry(items[0], items[1], items[2], NA if items[1] == "0" else corrected)


def read_submission(text: str, text_id: str) -> SubmissionEntry | None:
    """The entry ``text`` (read as a submission file) gives ``text_id``: the last valid line for it wins."""
    found = None
    for line in _NEWLINE.split(text):
        entry = read_submission_line(line)
        if entry is not None and entry.text_id == text_id:
            found = entry
    return found


def submission_text(reply: str | None, text_id: str) -> str:
    """What a reply stands for in a submission file, under the reference protocol.

    A JSON object with ``error`` becomes the one line ``<text_id> <1|0> <sentence id> <correction>``:
    the sentence id as given (-1 when no error is claimed and none is given), the correction as
    given with its whitespace collapsed (a line cannot hold a line break), "NA" when none is given
    (null, absent, empty) or no error is claimed. A JSON reply that claims an error without a
    sentence id, or whose ``error`` is unreadable, cannot be written as a valid line and gives ""
    (the text is missing, as the official scorer counts it). Any other reply is read as it is
    (reasoning traces removed): its lines are the submission lines.
    """
    if not reply:
        return ""
    body = strip_reasoning(reply)
    obj = extract_json_object(body)
    if obj is None or "error" not in obj:
        return body
    flag, sid = as_bool(obj.get("error")), _int(obj.get("sentence_id"))
    if flag is None or (flag and sid is None):
        return ""
    value = obj.get("corrected")
    text = (
        value
        if isinstance(value, str)
        else ""
        if value is None
        else json.dumps(value, ensure_ascii=False)
    )
    corrected = " ".join(text.split()) if flag else NA
    return f"{text_id} {int(flag)} {-1 if sid is None else sid} {corrected or NA}"
