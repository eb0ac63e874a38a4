"""Short-answer medical VQA scoring: normalised exact match, token recall, closed/open splits.

Normalisation (:func:`normalize`) is the short-answer reading of lmms-eval's SLAKE task
(EvolvingLMMs-Lab/lmms-eval @ 75571cf, ``lmms_eval/tasks/slake/utils.py``), which evalscope's
SLAKE adapter also follows in substance, written here as rules:

1. lower-case, strip;
2. drop parenthesised text, ASCII ``( )`` and full-width ``（ ）``;
3. every ASCII punctuation character and the listed Chinese punctuation becomes a space;
4. runs of white space become one space, then strip;
5. ``x ray`` / ``xray`` -> ``xray``;
6. yes/no synonyms collapse to ``yes`` / ``no`` (English: yes yeah yep true / no nope false;
   Chinese: 是 是的 有 包含 可以 能 会 正常 / 否 不是 没有 无 不包含 不能 不会 不可以 不正常 异常).

A prediction is right when its normalised form equals the reference's (the whole reply: the
reference protocol asks for "a single word or phrase" and reads nothing out of a longer reply).

Token recall, for open questions, is the share of the reference's tokens found in the
prediction's (after normalisation; English split on spaces, Chinese by character), as LLaVA-Med
reports open-question "recall" (Li et al., 2023, "LLaVA-Med", section 5.1). It is reported beside
exact match, never mixed into it.

Closed/open: by the dataset's own label (``answer_type``, stripped, upper-cased), and by the rule
"the reference answer is yes or no" (after normalisation) used by some peers; both are reported,
and which one a figure uses is always named.
"""

from __future__ import annotations

import re
import string

#: Chinese punctuation made spaces by the normalisation (full-width forms and CJK marks).
ZH_PUNCTUATION = (
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～、，。；：《》？【】（）"
)
EN_YES = frozenset({"yes", "yeah", "yep", "true"})
EN_NO = frozenset({"no", "nope", "false"})
ZH_YES = frozenset({"是", "是的", "有", "包含", "可以", "能", "会", "正常"})
ZH_NO = frozenset(
    {"否", "不是", "没有", "无", "不包含", "不能", "不会", "不可以", "不正常", "异常"}
)
_PUNCT = str.maketrans(dict.fromkeys(string.punctuation + ZH_PUNCTUATION, " "))
_PAREN = re.compile(r"\([^)]*\)")
_ZH_PAREN = re.compile(r"（[^）]*）")
_SPACE = re.compile(r"\s+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def normalize(answer: object) -> str:
    """A short answer in the form exact match compares (the rules in the module docstring)."""
    text = "" if answer is None else str(answer)
    text = text.strip().lower()
    text = _ZH_PAREN.sub(" ", _PAREN.sub(" ", text))
    text = _SPACE.sub(" ", text.translate(_PUNCT)).strip()
    if text in ("x ray", "xray"):
        return "xray"
    if text in EN_YES or text in ZH_YES:
        return "yes"
    if text in EN_NO or text in ZH_NO:
        return "no"
    return text


def exact_match(prediction: object, reference: object) -> bool:
    return normalize(prediction) == normalize(reference)


def tokens(text: str) -> list[str]:
    """Tokens of a normalised text: Chinese characters one by one, other text split on spaces."""
    out: list[str] = []
    for word in text.split():
        out.extend(_split_cjk(word))
    return out


def _split_cjk(word: str) -> list[str]:
    parts: list[str] = []
    buf = ""
    for ch in word:
        if _CJK.match(ch):
            if buf:
                parts.append(buf)
                buf = ""
            parts.append(ch)
        else:
            buf += ch
    if buf:
        parts.append(buf)
    return parts


def token_recall(prediction: object, reference: object) -> float:
    """Share of the reference's tokens (with their counts) found among the prediction's; 0 for an empty reference."""
    ref, pred = tokens(normalize(reference)), tokens(normalize(prediction))
    if not ref:
        return 0.0
    left: dict[str, int] = {}
    for t in pred:
        left[t] = left.get(t, 0) + 1
    hit = 0
    for t in ref:
        if left.get(t, 0) > 0:
            left[t] -= 1
            hit += 1
    return hit / len(ref)


def closed_by_label(answer_type: object) -> bool | None:
    """The dataset's own label: CLOSED -> True, OPEN -> False, anything else None."""
    label = str(answer_type or "").strip().upper()
    return True if label == "CLOSED" else False if label == "OPEN" else None


def closed_by_yes_no(reference: object) -> bool:
    """The yes/no rule: a question is closed when its reference answer is yes or no."""
    return normalize(reference) in ("yes", "no")
