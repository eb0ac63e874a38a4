"""What ``grandrounds demo``'s numbers mean, printed after its results, and what to run next.

Every figure in these lines is read from the demo's results and its data (the options per
question, the protocol and what deviated from it), so the text stays true if either changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The model the demo runs (``grandrounds demo``).
DEMO_MODEL = "llamacpp/smollm2"
#: What each answer mode the demo runs does, in a few words.
MODE_MEANING = {
    "next-token": "the log-probability of each option letter as the model's very next token, highest chosen",
    "generate": "the model writes a reply and the option letter is read from it ('unread': no letter could be read)",
}
#: What each protocol preset is, in a few words.
PROTOCOL_MEANING = {
    "grandrounds": "our protocol: temperature 0, tolerant reading of the answer, failed calls left out and counted",
    "reference": "the official setup of the benchmark's authors",
}
#: The three commands to try after the demo, each with what it shows.
NEXT_COMMANDS = (
    (
        "grandrounds view",
        "every question, the answer read from each reply and why it scored so (a page on 127.0.0.1)",
    ),
    (
        "grandrounds run medqa --model openai/MODEL --base-url http://127.0.0.1:8080/v1 --limit 20",
        "a real benchmark against your own OpenAI-compatible server",
    ),
    ("grandrounds list", "every benchmark, its language and the options it takes"),
)


def chance_level(option_counts: Sequence[int]) -> float:
    """The accuracy of guessing uniformly among each question's options: the mean of 1/k."""
    return sum(1 / k for k in option_counts) / len(option_counts)


def _options_phrase(option_counts: Sequence[int]) -> str:
    low, high = min(option_counts), max(option_counts)
    return f"{low} options" if low == high else f"{low} to {high} options"


def _against_chance(
    score: float | None, ci95: Sequence[float] | None, chance: float, n: int
) -> str:
    if score is None:
        return "no score (nothing could be scored)"
    if not ci95:
        return f"{score:.3f} (no interval: compare it with chance, {chance:.2f}, with care)"
    low, high = ci95
    if low > chance:
        verdict = "above chance"
    elif high < chance:
        verdict = "below chance"
    else:
        verdict = f"not distinguishable from guessing: the interval holds {chance:.2f}, and {n} questions only tell large differences apart"
    return f"{score:.3f}, 95% CI [{low:.3f}, {high:.3f}]: {verdict}"


def _changes(fields: Any) -> list[str]:
    """``field preset -> used`` for each deviating generation field."""
    if not isinstance(fields, Mapping):
        return []
    return [
        f"{k} {v.get('preset')} -> {v.get('used')}"
        for k, v in sorted(fields.items())
        if isinstance(v, Mapping)
    ]


def _deviations(fingerprint: Mapping[str, Any]) -> str:
    """What the ``*`` after the protocol stands for: the settings flags changed from the preset
    (``run.config.protocol_record``: the candidate's under ``answer``, each judge's under ``judges``)."""
    proto = fingerprint.get("protocol")
    changed = proto.get("deviations") if isinstance(proto, Mapping) else None
    if not isinstance(changed, Mapping) or not changed:
        return ""
    parts = [f"candidate {c}" for c in _changes(changed.get("answer"))]
    judges = changed.get("judges")
    for judge, fields in sorted(judges.items()) if isinstance(judges, Mapping) else ():
        parts += [f"judge {judge} {c}" for c in _changes(fields)]
    return (
        "; the * marks a setting changed from the preset by a flag (recorded in the fingerprint): "
        + ", ".join(parts)
    )


def demo_notes(results: Sequence[Any], option_counts: Sequence[int]) -> list[str]:
    """The closing lines of the demo: each result against chance, the protocol it ran under and
    what its ``*`` means, what each answer mode did, and the next three commands."""
    from grandrounds.analyses.leaderboard import protocol_label

    chance = chance_level(option_counts)
    lines = [
        "What these numbers mean",
        f"  {results[0].metric if results else 'accuracy'}: the share of the {len(option_counts)} questions answered right. "
        f"Each question has {_options_phrase(option_counts)}, so guessing scores {chance:.2f} on average (chance level).",
    ]
    for r in results:
        mode = str(r.fingerprint.get("answer_mode") or "")
        lines.append(f"  {mode}: {_against_chance(r.score, r.ci95, chance, r.n)}.")
        if mode in MODE_MEANING:
            lines.append(f"    what it does: {MODE_MEANING[mode]}.")
    protocols = {protocol_label(r.fingerprint): r.fingerprint for r in results}
    for label, fingerprint in protocols.items():
        name = label.rstrip("*")
        lines.append(
            f"  protocol {label}: {PROTOCOL_MEANING.get(name, name)}{_deviations(fingerprint)}."
        )
    if results and all(r.model == DEMO_MODEL for r in results):
        lines.append(
            f"  {DEMO_MODEL} (SmolLM2-135M-Instruct) is tiny: scores near chance are expected; the demo shows the machinery."
        )
    lines.append("Next, try")
    width = max(len(cmd) for cmd, _ in NEXT_COMMANDS)
    lines += [f"  {cmd:<{width}}  # {why}" for cmd, why in NEXT_COMMANDS]
    return lines
