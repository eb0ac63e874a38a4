"""Reading the chosen option out of a free-text answer. Pure; returns None rather than guess.

Order of evidence, strongest first:

1. an explicit answer cue ("The answer is (B)", "Answer: b", "答案：B", "正确选项为AC"), the last
   one in the reply that names valid options (models often revise an earlier answer);
2. a reply that is nothing but the choice ("**B**", "b)", "AC", "A、C") or starts with it
   ("B. Tell the attending…");
3. a reply (or the text after a cue) that is exactly one option's text ("yes", "原发性肺结核").

A cue naming several options on a single-answer item ("A or B", "答案：AB") is ambiguous and
yields None. The official CMB scorer instead keeps the first letter (CMB src/utils.py
match_choice); we prefer counting such replies as unextracted over guessing.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from grandrounds.textutil import normalize_width, strip_reasoning

# Between a cue and the letter: markdown, brackets, quotes, LaTeX \boxed{, "option"/"选项".
_PRE = r"(?:\\boxed\{|\\text\{|[\s(\[{*\"'`_]|(?i:option|choice)\s|选项)*"
# One uppercase letter, or several joined by nothing / a separator ("AC", "A, C", "A and C", "A或C").
_SEP = r"(?:\s*(?:,|、|/|&|\+|\band\b|\bor\b|和|及|与|或|以及)\s*)"
_UPPER = rf"([A-Z](?:{_SEP}?[A-Z])*)(?![A-Za-z0-9])"
# A lowercase letter only when clearly a label: "answer: b", "answer is c)". Not "answer is a bit".
_LOWER = r"([a-z])(?=\s*(?:[).\]},:;*]|$))"
_EN_CUE = (
    r"(?i:\banswers?\b|\bcorrect (?:option|choice)s?\b|\bbest (?:option|choice)\b)"
    r"\s*(?i:is|are|would be|should be|will be)?\s*(?:[:=\-]|\*\*:?)?\s*"
)
_ZH_CUE = r"(?:答案|正确选项|正确答案|最佳答案|最佳选项|应选|选择|选)\s*(?:应该是|应该为|应当是|应为|应是|是|为|选)?\s*:?\s*"
_CUE = re.compile(rf"(?:{_EN_CUE}|{_ZH_CUE}|\\boxed\{{){_PRE}")
_TOKEN = re.compile(rf"{_UPPER}|{_LOWER}")
_LEAD = re.compile(r"^\s*[(\[]?([A-Z])(?:[.):\]]|\s*[-—:])\s*\S")
_LEAD_LOWER = re.compile(r"^\s*\(?([a-z])\)\s*\S")
_MARKDOWN = re.compile(r"[*_#`>\"'“”‘’]")
_TRAIL = ".。,，;；:：!！?？)）]】 \t\n"
_ONLY_LETTERS = re.compile(rf"[A-Za-z]|{_UPPER}")


def _letters_in(token: str) -> list[str]:
    """The option letters in a matched token, dropping separator words ("A and C" -> A, C)."""
    token = re.sub(r"\b(?:and|or)\b", " ", token)
    return [ch.upper() for ch in token if ch.isascii() and ch.isalpha()]


def _finish(found: Sequence[str], letters: Sequence[str], multi: bool) -> str | None:
    """Validate letters named by one piece of evidence; None if out of range or ambiguous."""
    picked = sorted(set(found))
    if not picked or any(ch not in letters for ch in picked):
        return None
    if not multi and len(picked) != 1:
        return None
    return "".join(picked)


def _clean(text: str) -> str:
    return _MARKDOWN.sub("", text).strip().strip(_TRAIL).strip().casefold()


def _only_choice(text: str) -> str | None:
    """The letters if ``text`` is nothing but a choice ("B", "(b)", "A, C"), else None."""
    core = _MARKDOWN.sub("", text).strip().strip(_TRAIL + "(（[【").strip()
    if _ONLY_LETTERS.fullmatch(core) and (len(core) == 1 or core.upper() == core):
        return core
    return None


def _match_option_text(text: str, choices: Mapping[str, str]) -> str | None:
    """The one option whose text the reply is (case- and punctuation-insensitively), else None."""
    want = _clean(text)
    if not want:
        return None
    hits = [k for k, v in choices.items() if _clean(normalize_width(v)) == want]
    return hits[0] if len(hits) == 1 else None


def _option_after_cue(rest: str, choices: Mapping[str, str]) -> str | None:
    """An option quoted after a cue: the whole line, or its first sentence or clause."""
    line = rest.split("\n", 1)[0]
    for cand in (line, re.split(r"[.。;；!！?？](?:\s|$)|[。；！？]", line, maxsplit=1)[0], re.split(r"[,，]", line, 1)[0]):
        hit = _match_option_text(cand, choices)
        if hit:
            return hit
    return None


def extract_choice(
    text: str | None, letters: Sequence[str], choices: Mapping[str, str] | None = None, multi: bool = False
) -> str | None:
    """The option letter(s) a reply chooses (sorted, e.g. "B" or "ACD"), or None if it cannot tell.

    ``letters`` are the valid option letters; ``choices`` (letter -> text) lets a reply that
    quotes an option's text instead of its letter be read. ``multi`` allows several letters.
    """
    if not text:
        return None
    body = normalize_width(strip_reasoning(text))
    choices = choices or {}
    # 1. explicit cues, last valid one wins
    for m in reversed(list(_CUE.finditer(body))):
        rest = body[m.end() :]
        tok = _TOKEN.match(rest)
        got = _finish(_letters_in(tok.group(0)), letters, multi) if tok else None
        if got:
            return got
        if not multi and (hit := _option_after_cue(rest, choices)):
            return hit
    # 2. the reply is just the choice, starts with it, or its first line is the choice
    bare = _MARKDOWN.sub("", body).strip()
    lines = [ln for ln in bare.splitlines() if ln.strip()]
    if not lines:
        return None
    only = _only_choice(bare) or _only_choice(lines[0])
    if only:
        return _finish(_letters_in(only), letters, multi)
    leads = {m.group(1).upper() for ln in lines for m in [_LEAD.match(ln) or _LEAD_LOWER.match(ln)] if m}
    first = _LEAD.match(lines[0]) or _LEAD_LOWER.match(lines[0])
    if first and len(leads) == 1:
        return _finish([first.group(1).upper()], letters, multi)
    # 3. the reply (or its first line) is an option's text
    if multi:
        return None
    return _match_option_text(bare, choices) or _match_option_text(lines[0], choices)


# MedBench's answer forms: letters alone, "答案是 X", letters in <> (old sets), a short reply.
_LETTERS_ONLY = re.compile(r"^[<《(（\[]?\s*([A-J](?:\s*[,，、]?\s*[A-J])*)\s*[>》)）\]]?[.。]?$")
_STATED = re.compile(
    r"(?:答案|正确选项|(?i:answer))\s*(?:是|为|应为|(?i:is))?\s*[:：]?\s*<?\s*([A-J](?:\s*[,，、]?\s*[A-J])*)(?![A-Za-z])"
)
_ANGLE = re.compile(r"<\s*([A-J](?:\s*[,，、]?\s*[A-J])*)\s*>")
_BARE = re.compile(r"(?<![A-Za-z])([A-J])(?![A-Za-z])")


def mcq_letters(text: str | None) -> str | None:
    """Sorted option letters a text states (``"B"``, ``"ACD"``), or None if it states none.

    Tried in order: the whole text is letters; "答案是 X" / "Answer: X"; letters in ``<>`` (old
    MedBench sets); every standalone capital A-J in a short reply.
    """
    if not text:
        return None
    body = normalize_width(strip_reasoning(text)).strip()
    m = _LETTERS_ONLY.fullmatch(body) or _STATED.search(body)
    found = [m.group(1)] if m else _ANGLE.findall(body)  # old sets: "<A><C>"
    if found:
        return "".join(sorted(set(re.findall(r"[A-J]", "".join(found)))))
    if len(body) <= 20:
        found = sorted(set(_BARE.findall(body)))
        return "".join(found) or None
    return None
