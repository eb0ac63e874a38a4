"""Graders: every way an answer is turned into a grade, registered and rebuildable from a spec.

- :mod:`.base`: the Grader interface, GradeContext, :func:`build` (spec -> grader).
- :mod:`.judging`: the one judge engine (ask, re-ask unreadable replies, panels, resume).
- :mod:`.judge_json`, :mod:`.choice_extract`, :mod:`.medcalc_extract`, :mod:`.medec_extract`: the
  extraction of JSON, option letters, calculator values and MEDEC predictions, each in one place.
- one module per grader: multiple choice, MedCalc, MEDEC, MedBench, HealthBench, MedEQBench,
  GAPS, LLMEval-Med.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from grandrounds.core.registry import GRADERS, Spec
from grandrounds.graders.base import Grader, build, spec_from_json

__all__ = ["Grader", "build", "grader_from_fingerprint", "spec_from_json", "stored_spec"]


def grader_from_fingerprint(fingerprint: Mapping[str, Any]) -> Grader:
    """Rebuild the grader that produced a stored result (its fingerprint's ``grader`` spec)."""
    return build(stored_spec(fingerprint))


def stored_spec(fingerprint: Mapping[str, Any]) -> Spec:
    """The grader spec of a stored grading. Gradings stored before protocols existed were graded our
    way: where the grader takes a ``protocol`` and the spec names none, it is ``grandrounds``."""
    spec = spec_from_json(fingerprint.get("grader") or {})
    if "protocol" not in fingerprint and "protocol" not in spec.args:
        params = GRADERS.get(spec.name).Params
        if "protocol" in {f.name for f in dataclasses.fields(params)}:
            return Spec(spec.name, {**spec.args, "protocol": "grandrounds"})
    return spec
