"""Reading the chosen option out of a free-text answer. Pure; returns None rather than guess.

Our reading (the ``grandrounds`` protocol), :func:`extract_choice`. Order of evidence, strongest first:

1. an answer cue ("The answer is (B)", "Answer: b", "答案：B", "正确选项为AC", "Final answer: D")
   that names valid options. When a reply has several, the DOCUMENTED PRECEDENCE is:

   a. a stated answer: the cue opens a sentence or a line (after markdown, a list marker, or a
      connective such as "So the", "Actually the", "My final") or follows "final" / "最终", and the
      choice ends that statement (nothing after it but punctuation, markdown or the option's own text);
   b. a cue that opens a sentence or follows "final", with more prose after the choice
      ("Answer: A ... Why not B?");
   c. a cue inside a sentence ("Because answer: B would cause bleeding", "本题选B").

   The strongest level present wins; within a level the last cue wins (models revise an earlier
   answer). So "Answer: A ... Why not B? Because answer: B would cause bleeding." reads A, and
   "Answer: A\n\nWait. Actually the answer is B." reads B;
2. a reply that is nothing but the choice ("**B**", "b)", "AC", "A、C") or starts with it
   ("B. Tell the attending…");
3. a reply (or the text after a cue) that is exactly one option's text ("yes", "原发性肺结核").

A cue naming several options on a single-answer item ("A or B", "答案：AB") is ambiguous and
yields None. The official CMB scorer instead keeps the first letter (CMB src/utils.py
match_choice); we prefer counting such replies as unextracted over guessing.

The official readings, for the ``reference`` protocol, are reimplemented here from their sources:
:func:`simple_evals_letter` (openai/simple-evals mmlu_eval.py with common.py's normalisation) and
:func:`cmb_letters` (FreedomIntelligence/CMB src/utils.py match_choice and extract_ans).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from grandrounds.core.textutil import normalize_width, strip_reasoning

# Between a cue and the letter: markdown, brackets, quotes, LaTeX ($, \(, \boxed{, \text{), "option"/"选项".
_PRE = r"(?:\\boxed\{|\\text\{|\\\(|[\s(\[{*\"'`_$]|(?i:option|choice)\s|选项)*"
# One uppercase letter, or several joined by nothing / a separator ("AC", "A, C", "A and C", "A或C").
_SEP = r"(?:\s*(?:,|、|/|&|\+|\band\b|\bor\b|和|及|与|或|以及|还是)\s*)"
_UPPER = rf"([A-Z](?:{_SEP}?[A-Z])*)(?![A-Za-z0-9])"
# A lowercase letter only when clearly a label: "answer: b", "answer is c)". Not "answer is a bit".
_LOWER = r"([a-z])(?=\s*(?:[).\]},:;*]|$))"
_EN_CUE = (
    r"(?i:\banswers?\b|\bcorrect (?:option|choice)s?\b|\bbest (?:option|choice)\b)"
    r"\s*(?i:is|are|would be|should be|will be)?\s*(?:[:=\-]|\*\*:?)?\s*"
)
_ZH_CUE = r"(?:答案|正确选项|正确答案|最佳答案|最佳选项|应选|选择|选)\s*(?:应该是|应该为|应当是|应为|应是|是|为|选)?\s*:?\s*"
# Korean (KorMedMCQA): "정답은 B", "정답: B".
_KO_CUE = r"정답\s*(?:은|는|이|:)?\s*:?\s*"
_CUE = re.compile(rf"(?:{_EN_CUE}|{_ZH_CUE}|{_KO_CUE}|\\boxed\{{){_PRE}")
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


def _option_after_cue(rest: str, choices: Mapping[str, str]) -> tuple[str, bool] | None:
    """An option quoted after a cue: (letter, True) for the whole line, (letter, False) for its first
    sentence or clause; None if no option's text is there."""
    line = rest.split("\n", 1)[0]
    clauses = (
        re.split(r"[.。;；!！?？](?:\s|$)|[。；！？]", line, maxsplit=1)[0],
        re.split(r"[,，]", line, maxsplit=1)[0],
    )
    for cand, whole in ((line, True), *((c, False) for c in clauses)):
        hit = _match_option_text(cand, choices)
        if hit:
            return hit, whole
    return None


# Words that revise an earlier answer ("Wait, actually the answer is B", "等等，其实答案是B",
# "잠깐, 사실 정답은 B"): a cue after them opens a statement, so the revision is the stated answer.
_REVISION = (
    r"(?:(?i:wait|hmm+|oh|oops|no|sorry|actually|correction|on second thought|on reflection|"
    r"let me reconsider|scratch that|i was wrong|i made a mistake)"
    r"|等等|等一下|不对|不|其实|实际上|更正|修正|再想想|重新考虑|抱歉"
    r"|잠깐|아니|사실|정정|다시 생각해 보면)"
)
# What may open a statement before its cue: markdown and list markers, a connective, "the"/"my",
# and an adjective ("So the final answer is", "Actually, the correct option is", "1. **Answer:**").
_OPENER = re.compile(
    r"[\s*_#>•·\-–—\d.)(\[]*"
    rf"(?:{_REVISION}[\s,，、:：;；!！.。…—\-]*)*"
    r"(?i:(?:so|thus|therefore|hence|actually|finally|ultimately|overall|in conclusion|in summary|then)\s*,?\s*)?"
    r"(?i:(?:the|my|our)\s+)?(?i:(?:final|correct|best|right|most likely)\s+)?"
    r"(?:最终|最后|故|所以|因此)?"
)
_FINAL = re.compile(r"(?i:\bfinal\s*)$|最终$")
_SENTENCE_END = re.compile(r"[.!?。！？](?:\s|$)|\.{2,}|[。！？…\n]")
_STATEMENT_END = re.compile(
    r"(?:번)?(?:입니다|이다|이에요|예요)?"  # a Korean sentence ending ("정답은 B입니다.")
    r"[\s*_#`\"'“”‘’.。,，;；:：!！?？()（）\[\]【】{}$\\\-–—]*"
)


def _opens_statement(body: str, start: int) -> bool:
    """True if the cue at ``start`` opens a sentence or line (see _OPENER) or follows "final"."""
    line_start = body.rfind("\n", 0, start) + 1
    ends = [m.end() for m in _SENTENCE_END.finditer(body, line_start, start)]
    prefix = body[ends[-1] if ends else line_start : start]
    return bool(_OPENER.fullmatch(prefix) or _FINAL.search(prefix))


def _ends_statement(after: str, letter: str, choices: Mapping[str, str]) -> bool:
    """True if nothing follows the choice in its sentence but punctuation or markdown, or the rest of
    its line is the option's own text ("Answer: B. Tell the attending…")."""
    tail = after.split("\n", 1)[0]
    end = _SENTENCE_END.search(tail)
    if _STATEMENT_END.fullmatch(tail[: end.start()] if end else tail):
        return True
    text = choices.get(letter)
    return text is not None and _clean(tail.lstrip(" .:(-–—")) == _clean(normalize_width(text))


def _cue_readings(
    body: str, letters: Sequence[str], choices: Mapping[str, str], multi: bool
) -> list[tuple[int, str]]:
    """(precedence level, choice) for every answer cue in ``body`` that names a valid choice, in order:
    2 a stated answer, 1 a cue opening a statement with prose after the choice, 0 a cue inside a sentence."""
    out = []
    for m in _CUE.finditer(body):
        rest = body[m.end() :]
        tok = _TOKEN.match(rest)
        got = _finish(_letters_in(tok.group(0)), letters, multi) if tok else None
        if got and tok:  # (a reading needs a token)
            ends = _ends_statement(rest[tok.end() :], got, choices)
        elif not multi and (hit := _option_after_cue(rest, choices)):
            got, ends = hit
        else:
            continue
        out.append(((1 + ends) if _opens_statement(body, m.start()) else 0, got))
    return out


def extract_choice(
    text: str | None,
    letters: Sequence[str],
    choices: Mapping[str, str] | None = None,
    multi: bool = False,
) -> str | None:
    """The option letter(s) a reply chooses (sorted, e.g. "B" or "ACD"), or None if it cannot tell.

    ``letters`` are the valid option letters; ``choices`` (letter -> text) lets a reply that
    quotes an option's text instead of its letter be read. ``multi`` allows several letters.
    """
    if not text:
        return None
    body = normalize_width(strip_reasoning(text))
    choices = choices or {}
    # 1. answer cues: the strongest precedence level present, the last cue of that level
    readings = _cue_readings(body, letters, choices, multi)
    if readings:
        return max(enumerate(readings), key=lambda r: (r[1][0], r[0]))[1][1]
    # 2. the reply is just the choice, starts with it, or its first line is the choice
    bare = _MARKDOWN.sub("", body).strip()
    lines = [ln for ln in bare.splitlines() if ln.strip()]
    if not lines:
        return None
    only = _only_choice(bare) or _only_choice(lines[0])
    if only:
        return _finish(_letters_in(only), letters, multi)
    leads = {
        m.group(1).upper() for ln in lines for m in [_LEAD.match(ln) or _LEAD_LOWER.match(ln)] if m
    }
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


# ---- the official readings (reference protocol) ----------------------------------------------------

# simple-evals common.normalize_response: markdown bold and LaTeX wrappers removed, in this order
# (each fragment replaced by nothing, one after the other, as the official chain of str.replace does).
_SIMPLE_EVALS_REMOVED = (
    "**",
    "$\\boxed{",
    "}$",
    "\\$",
    "$\\text{",
    "$",
    "\\mathrm{",
    "\\{",
    "\\text",
    "\\(",
    "\\mathbf{",
    "{",
    "\\boxed",
)
# simple-evals common.normalize_extracted_answer: option letters of other scripts -> A-D.
_SIMPLE_EVALS_LETTERS = dict(zip("أبجدঅবডঢＡＢＣＤ", "ABCD" * 3))


def simple_evals_normalize(text: str) -> str:
    """A reply as simple-evals reads it: :data:`_SIMPLE_EVALS_REMOVED` taken out in order."""
    for fragment in _SIMPLE_EVALS_REMOVED:
        text = text.replace(fragment, "")
    return text


def simple_evals_letter(text: str | None, patterns: Sequence[re.Pattern[str]]) -> str | None:
    """simple-evals' reading of a multiple-choice reply (mmlu_eval.py): the reply normalised, then the
    FIRST match of the first pattern that matches anywhere (``patterns`` are its answer regexes built from
    MULTILINGUAL_ANSWER_PATTERN_TEMPLATE, in list order), its letter mapped to A-D and stripped.

    The letter class is case-insensitive, so "Answer: b" reads "b", which the official score then
    compares with "B" (wrong); no reasoning trace is removed first.
    """
    if text is None:
        return None
    body = simple_evals_normalize(text)
    for pattern in patterns:
        m = pattern.search(body)
        if m:
            return "".join(
                " " + _SIMPLE_EVALS_LETTERS[c] if c in _SIMPLE_EVALS_LETTERS else c
                for c in m.group(1)
            ).strip()
    return None


# CMB src/utils.py match_choice: the text after the first "答案是/答案：/正确选项为…" up to the first
# "。", "." or the end (re.S: across lines), else the whole reply; every A-G in it, in order.
_CMB_STATED = re.compile(r"(?:答案|正确选项)(?:是|：|为|应该是|应该为)(.*?)(?:。|\.|$)", re.S)
_CMB_OPTION_LETTERS = frozenset("ABCDEFG")


def cmb_letters(text: str | None, multi: bool) -> str:
    """CMB's reading of one reply (src/utils.py match_choice, then extract_ans): the letters in the
    stated span (or in the whole reply) in the order written, repeats kept; a single-answer item keeps
    the first. "" when no letter is found (the official model_answer then is "")."""
    if not text:
        return ""
    m = _CMB_STATED.search(text)
    found = "".join(ch for ch in (m.group(1) if m else text) if ch in _CMB_OPTION_LETTERS)
    return found[0] if len(found) > 1 and not multi else found
