"""Graders: every way an answer is turned into a grade, registered and rebuildable from a spec.

- :mod:`.base`: the Grader interface, GradeContext, :func:`build` (spec -> grader).
- :mod:`.judging`: the one judge engine (ask, re-ask unreadable replies, panels, resume).
- :mod:`.judge_json`, :mod:`.choice_extract`, :mod:`.medcalc_extract`, :mod:`.medec_extract`: the
  extraction of JSON, option letters, calculator values and MEDEC predictions, each in one place.
- one module per grader: multiple choice, MedCalc, MEDEC, MedBench, HealthBench, MedEQBench,
  GAPS, LLMEval-Med.
"""

from __future__ import annotations

from typing import Any, Mapping

from grandrounds.graders.base import Grader, build, spec_from_json

__all__ = ["Grader", "build", "grader_from_fingerprint", "spec_from_json"]


def grader_from_fingerprint(fingerprint: Mapping[str, Any]) -> Grader:
    """Rebuild the grader that produced a stored result (its fingerprint's ``grader`` spec)."""
    return build(spec_from_json(fingerprint.get("grader") or {}))
