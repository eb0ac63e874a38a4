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
    gpt-oss ``analysis…assistantfinal`` and hunyuan ``<answer>…</answer>`` wrappers
    (PROTOCOLS.md, format quirk 13).
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


def normalize_width(text: str) -> str:
    """Fold full-width ASCII (``：`` ``（`` ``４`` ``Ａ``) to half-width with NFKC."""
    return unicodedata.normalize("NFKC", text)
