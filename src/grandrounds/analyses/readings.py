"""What was read from an answer and what it was scored against, in plain words, for the report and the viewer.

- A log-probability answer (``letter-loglik``, ``text-loglik``, ``next-token``) has no text: what was
  read is the option with the highest log-probability. Each option's share is its probability
  renormalised over the options, ``exp(lp_i) / sum_j exp(lp_j)`` (the softmax of the options'
  log-probabilities, computed from the largest so no term overflows).
- A target that is a record (MedCalc-Bench's ``{kind, truth, lower, upper}``) is shown as its value
  and the range accepted, not as the record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from grandrounds.core.records import Grade, Response, Sample

LOGPROB_MODES = ("letter-loglik", "text-loglik", "next-token")


def option_scores(
    spec: Mapping[str, Any] | None,
    sample: Sample | None,
    grade: Grade | None,
    resp: Response | None,
) -> list[dict[str, Any]] | None:
    """For a multiple-choice answer in a log-prob mode: each option (source order) with the
    log-probability the model gave its continuation, its share of the options' probability,
    and marks for the option chosen (argmax, as the grader read it), lm-eval's length-normalised
    choice where there is one, and the key. None for any other answer."""
    from grandrounds.graders.mcq_grader import option_continuations, shuffle_choices

    if sample is None or grade is None or resp is None or not sample.choices or not resp.scores:
        return None
    mode = str(grade.details.get("answer_mode", ""))
    if mode not in LOGPROB_MODES:
        return None
    args = ((spec or {}).get("grader") or {}).get("args") or {}
    perm = grade.details.get("permutation")
    shown = shuffle_choices(sample, int(args.get("seed", 0)))[0] if perm else sample
    try:
        conts = option_continuations(
            shown.choices,
            mode,
            str(args.get("language", "en")),
            str(args.get("loglik_labels", "letters")),
        )
    except (KeyError, ValueError):
        return None
    lps = {k: resp.scores.get(c) for k, c in conts.items()}
    finite = [v for v in lps.values() if v is not None and math.isfinite(v)]
    top = max(finite) if finite else 0.0
    total = sum(math.exp(v - top) for v in finite)
    rows = []
    for i, (letter, lp) in enumerate(lps.items()):
        known = lp is not None and math.isfinite(lp)
        rows.append(
            {
                # the source's letter; the shown one beside it when shuffled
                "letter": perm[i] if perm else letter,
                "shown": letter,
                "text": shown.choices[letter],
                "continuation": conts[letter],
                "logprob": lp if known else None,
                "share": math.exp(lp - top) / total if lp is not None and known and total else None,
                "chosen": letter == grade.extracted,
                "chosen_norm": letter == grade.details.get("extracted_norm"),
                "target": letter == grade.details.get("target"),
            }
        )
    return sorted(rows, key=lambda r: r["letter"])


def _pct(share: float | None) -> str:
    return "unknown" if share is None else f"{100 * share:.1f}%"


def option_words(options: list[dict[str, Any]]) -> str:
    """The options of a log-probability answer in one sentence: the one chosen with its share, the
    runner-up, and the key where it is another option."""
    chosen = next((o for o in options if o["chosen"]), None)
    if chosen is None:
        return "no option could be read (no option has a log-probability)"
    ranked = sorted(
        (o for o in options if o["share"] is not None and not o["chosen"]),
        key=lambda o: -o["share"],
    )
    words = f"chose {chosen['letter']} ({_pct(chosen['share'])} of the options' probability)"
    if ranked:
        words += f"; next {ranked[0]['letter']} ({_pct(ranked[0]['share'])})"
    key = next((o for o in options if o["target"]), None)
    if key is not None:
        words += (
            "; the key" if key is chosen else f"; the key is {key['letter']} ({_pct(key['share'])})"
        )
    unscored = [o["letter"] for o in options if o["logprob"] is None]
    if unscored:
        words += f"; no log-probability for {', '.join(unscored)}"
    return words


def _value(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def target_words(target: Any) -> str:
    """A sample's target as a reader says it: a value (with the range accepted where there is one),
    a list joined, a record as ``name: value`` pairs; never a Python or JSON literal."""
    if isinstance(target, Mapping):
        if "truth" in target:
            truth = _value(target["truth"])
            lo = target.get("lower_text") or target.get("lower")
            hi = target.get("upper_text") or target.get("upper")
            said = []
            kind = target.get("kind")
            if kind:
                said.append(f"{'an' if str(kind)[:1] in 'aeiou' else 'a'} {kind}")
            if (
                lo not in (None, "")
                and hi not in (None, "")
                and not _value(lo) == _value(hi) == truth
            ):
                said.append(f"accepted from {_value(lo)} to {_value(hi)}")
            return f"{truth} ({'; '.join(said)})" if said else truth
        return "; ".join(f"{k}: {target_words(v)}" for k, v in target.items() if v is not None)
    if isinstance(target, (list, tuple)):
        return ", ".join(target_words(v) for v in target)
    return _value(target)


def answer_words(
    spec: Mapping[str, Any] | None,
    sample: Sample | None,
    grade: Grade | None,
    resp: Response | None,
) -> str | None:
    """What was read from an answer, in words, where its text does not show it: a log-probability
    answer's choice; None for an answer whose text is shown."""
    options = option_scores(spec, sample, grade, resp)
    return None if options is None else option_words(options)
