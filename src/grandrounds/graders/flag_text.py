"""The readings of an answer that the grader-address check searches, so rewording cannot hide words
to the grader from it.

A judge model reads through disguises a word list does not: a Cyrillic ``а`` for a Latin ``a``, a
zero-width space inside ``grader``, full-width letters, ``G r a d e r``, ``**Grader**:``, accents,
HTML entities, a base64 payload "to decode and follow". :func:`readings` gives the text as written
and normalised:

1. NFKC (full width, ligatures, compatibility forms), then every format character (Unicode
   category ``Cf``: zero-width spaces and joiners, word joiners, bidi controls, soft hyphens,
   tags) and variation selector dropped, and Hangul fillers;
2. look-alike characters folded to the ASCII letter, digit or sign they imitate, from Unicode's
   confusables data (TR39 ``confusables.txt``) as the ``confusable-homoglyphs`` package carries it;
   letters of the CJK, kana and Hangul scripts are never folded (their phrases are matched as they
   stand);
3. accents dropped (``prüfer`` -> ``prufer``), markdown emphasis (``*``, ``~``, `````) dropped, and
   single letters written apart (``G r a d e r``, ``g.r.a.d.e.r``) joined;
4. payloads: HTML entities and percent escapes decoded, base64 runs of 16 characters or more
   decoded where they decode to text, and the whole text ROT13-decoded where it names ROT13; each
   payload is read through steps 1 to 3 too.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import functools
import html
import re
import unicodedata
from urllib.parse import unquote

#: Characters dropped beside category ``Cf``: variation selectors, the combining grapheme joiner,
#: Mongolian free variation selectors and the Hangul fillers (letters that show nothing).
_INVISIBLE = frozenset(
    [0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x180B, 0x180C, 0x180D, 0x180F]
    + list(range(0xFE00, 0xFE10))
    + list(range(0xE0100, 0xE01F0))
)
#: Scripts whose letters are matched as they stand (never folded to ASCII look-alikes).
_KEEP = re.compile(
    r"[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
#: Single letters or digits written apart by spaces, dots, hyphens, underscores, pipes or stars.
_SPACED = re.compile(r"(?<![^\W_])(?:[^\W_][ \t.\-_*|·/]{1,3}){2,}[^\W_](?![^\W_])")
_SEPARATORS = re.compile(r"[ \t.\-_*|·/]")
_EMPHASIS = re.compile(r"[*~`]+")
_DIACRITICS = re.compile(r"[\u0300-\u036f]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


@functools.lru_cache(maxsize=1)
def confusable_map() -> dict[int, str]:
    """Code point -> the ASCII text it imitates, from Unicode's confusables data (non-ASCII code
    points whose confusables include ASCII text; CJK, kana and Hangul left out). A letter that
    imitates ``I`` (Greek iota, Cyrillic і) is folded to ``i``, not to the ``l`` the data pairs
    it with, so ``ΙGNORE`` reads ``ignore``."""
    from confusable_homoglyphs.confusables import confusables_data

    out: dict[int, str] = {}
    for char, alikes in confusables_data.items():
        if len(char) != 1 or ord(char) < 128 or _KEEP.match(char):
            continue
        ascii_ = [a["c"] for a in alikes if a["c"].isascii() and a["c"].strip()]
        if not ascii_:
            continue
        target = ascii_[0]
        name = unicodedata.name(char, "")
        if target == "l" and ("IOTA" in name or "LETTER I" in name or "LETTER DOTLESS I" in name):
            target = "i"
        out[ord(char)] = target
    return out


def visible(text: str) -> str:
    """NFKC, with format characters, variation selectors and fillers dropped."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if unicodedata.category(c) != "Cf" and ord(c) not in _INVISIBLE)


def fold_confusables(text: str) -> str:
    """Look-alike characters replaced by the ASCII they imitate (see :func:`confusable_map`)."""
    return text.translate(confusable_map())


def strip_accents(text: str) -> str:
    """Accents dropped after canonical decomposition (``é`` -> ``e``), then composed again. Only
    the combining diacritical marks (U+0300-U+036F) go: kana's voicing marks and Hangul stay."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", _DIACRITICS.sub("", decomposed))


def join_spaced(text: str) -> str:
    """Runs of single letters written apart joined (``G r a d e r`` -> ``Grader``)."""
    return _SPACED.sub(lambda m: _SEPARATORS.sub("", m.group(0)), text)


def normalise(text: str) -> str:
    """Steps 1 to 3 of the module's docstring, in order."""
    shown = visible(text) if not text.isascii() else text
    folded = strip_accents(fold_confusables(shown))
    return join_spaced(_EMPHASIS.sub("", folded))


def _payloads(text: str) -> list[str]:
    out = []
    unescaped = html.unescape(text)
    if unescaped != text:
        out.append(unescaped)
    if "%" in text and (unquoted := unquote(text)) != text:
        out.append(unquoted)
    for run in _BASE64.findall(text):
        try:
            raw = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if decoded.isprintable() or all(c.isprintable() or c.isspace() for c in decoded):
            out.append(decoded)
    if re.search(r"rot[\s\-_]?13", text, re.I):
        out.append(codecs.decode(text, "rot13"))
    return out


def readings(text: str) -> list[str]:
    """The text as written, normalised, and its decoded payloads normalised (no repeats, in that order)."""
    found = [text, normalise(text)]
    for payload in _payloads(visible(text)):
        found.extend([payload, normalise(payload)])
    return list(dict.fromkeys(found))
