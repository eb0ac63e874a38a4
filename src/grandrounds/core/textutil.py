"""Small pure text helpers shared by extraction and judge parsing."""

from __future__ import annotations

import re
import unicodedata

_THINK_PATTERNS = (
    re.compile(r"<think>.*?</think>", re.S | re.I),
    re.compile(r"<seed:think>.*?</seed:think>", re.S | re.I),
)


def strip_reasoning(text: str) -> str:
    """Remove reasoning traces before extraction or judging.

    Handles ``<think>…</think>`` (also an unopened ``…</think>`` prefix, and a block never closed
    because the reply was cut off while reasoning), ``<seed:think>``,
    gpt-oss ``analysis…assistantfinal`` and hunyuan ``<answer>…</answer>`` wrappers.
    """
    if "<" not in text and "assistantfinal" not in text:
        return text.strip()  # no tag and no gpt-oss marker: nothing below would change it
    out = text
    for pat in _THINK_PATTERNS:
        out = pat.sub("", out)
    if "</think>" in out:
        out = out.rsplit("</think>", 1)[1]
    elif re.search(r"<think>", out, re.I):  # cut off while reasoning: nothing after it is an answer
        out = re.split(r"<think>", out, maxsplit=1, flags=re.I)[0]
    if "assistantfinal" in out:
        out = out.rsplit("assistantfinal", 1)[1]
    m = re.search(r"<answer>(.*?)</answer>", out, re.S)
    if m:
        out = m.group(1)
    return out.strip()


_LEADING_BLOCK = re.compile(r"<(seed:)?think>", re.I)


def strip_leading_reasoning(text: str) -> str:
    """A judge's reply without the reasoning that LEADS it, and nothing else removed.

    A judge quotes the answer it grades, so a reasoning tag anywhere else may be the candidate's
    text: cutting there would let an answer hide the judge's verdict. Only these are removed:
    ``<think>…</think>`` (or ``<seed:think>``) blocks at the very start (an unclosed one is all
    reasoning: nothing is left); reasoning whose opening tag the chat template swallowed, up to the
    FIRST ``</think>``, unless the reply opens with JSON or a fence (``{`` ``[`` `````), which no
    reasoning precedes; gpt-oss ``analysis…assistantfinal`` at the start, up to the first marker;
    and a leading ``<answer>…</answer>`` wrapper.
    """
    s = text.strip()
    while (m := _LEADING_BLOCK.match(s)) is not None:
        close = re.search(r"</seed:think>" if m.group(1) else r"</think>", s, re.I)
        if close is None:
            return ""
        s = s[close.end() :].lstrip()
    if "</think>" in s.lower() and not s.startswith(("{", "[", "`")):
        s = s[s.lower().index("</think>") + len("</think>") :].lstrip()
    if s.startswith("analysis") and "assistantfinal" in s:
        s = s.split("assistantfinal", 1)[1].lstrip()
    if s.lower().startswith("<answer>") and (end := s.lower().find("</answer>")) >= 0:
        s = s[len("<answer>") : end]
    return s.strip()


def normalize_width(text: str) -> str:
    """Fold full-width ASCII (``：`` ``（`` ``４`` ``Ａ``) to half-width with NFKC."""
    return unicodedata.normalize("NFKC", text)
