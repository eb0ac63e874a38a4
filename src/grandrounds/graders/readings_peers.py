"""Official readings of generated exam replies for KorMedMCQA and CMExam, reimplemented from their
published sources; pure. Named in :data:`grandrounds.graders.exam_readings.EXAM_READINGS`.

- :func:`kormedmcqa_choice`: lm-evaluation-harness's kormedmcqa task (lm_eval/tasks/kormedmcqa,
  contributed by the KorMedMCQA authors; ``_template_yaml`` and ``utils.py`` at the pinned commit).
  The task generates until the first of its ``until`` strings, but lm-eval's chat-completions path
  (models/openai_completions.py ``LocalChatCompletion._create_payload``) sends only the first four
  (``stop[:4]``: "\\n\\n" is never sent) and does not cut the reply itself, so the reply is cut at
  the first of those four (the text a stop string ends is what lm-eval receives); then ``ExtractChoiceFilter``: the patterns of
  the paper's Appendix B tried in order, case-insensitive, the last match of the first pattern that
  matches, upper-cased; no match reads nothing. ``exact_match`` (ignoring case, punctuation, spaces
  and newlines) of that letter against the key letter is then plain equality.
- :func:`cmexam_choice`: the CMExam authors' ``parse_options`` (src/evaluation/evaluate_lora_result.py):
  the reply's first line when it contains "解释" (else the whole reply); every option whose letter
  or whose first whitespace-separated word occurs anywhere in it is chosen, in option order; no
  option chosen reads nothing ("无答案"). The accuracy compares that string with the key exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["KORMEDMCQA_CHAT_STOPS", "KORMEDMCQA_STOPS", "cmexam_choice", "kormedmcqa_choice"]

#: kormedmcqa _template_yaml generation_kwargs.until (a fact of the task's configuration).
KORMEDMCQA_STOPS = ("Q:", "</s>", "<|im_end|>", ".", "\n\n")
#: What lm-eval's chat path sends of them: ``stop[:4]`` (openai_completions.py).
KORMEDMCQA_CHAT_STOPS = KORMEDMCQA_STOPS[:4]

# kormedmcqa utils.py CHOICE_PATTERNS (the paper's Appendix B cascade), in order.
_KORMED_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"정답[:\s]*([ABCDE])",
        r"정답은\s*([ABCDE])\s*입니다",
        r"\b([ABCDE])\.",
        r"\b([ABCDE])\b",
    )
)


def cut_at_stops(text: str, stops: tuple[str, ...] = KORMEDMCQA_CHAT_STOPS) -> str:
    """``text`` up to the earliest occurrence of any stop string (lm-eval's ``until``)."""
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def kormedmcqa_choice(text: str | None) -> str | None:
    """The letter lm-eval's kormedmcqa task reads from a reply, or None."""
    if not text:
        return None
    body = cut_at_stops(text)
    for pattern in _KORMED_PATTERNS:
        found = pattern.findall(body)
        if found:
            return found[-1].upper()
    return None


def cmexam_choice(text: str | None, choices: Mapping[str, str]) -> str | None:
    """CMExam's ``parse_options``: the letters of every option named (by letter or first word), or None."""
    if not isinstance(text, str):
        return None
    result = text if "解释" not in text else text.split("\n")[0].strip()
    picked = []
    for letter, option in choices.items():
        words = option.split()
        first = (
            words[0] if words else option
        )  # the option line "X text" split on whitespace: its second word
        if letter in result or first in result:
            picked.append(letter)
    return "".join(picked) or None
