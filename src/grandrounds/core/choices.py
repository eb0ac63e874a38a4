"""The letters of an exam's options: A to J, the labels under which a multiple-choice item's options
are shown, keyed and stored (``Sample.choices``, ``Sample.target``). Exams, graders and analyses all
read them from here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: Option letters, in order; an item has at most ten options.
LETTERS = "ABCDEFGHIJ"


def lettered_in_order(keys: Iterable[object]) -> bool:
    """Whether ``keys`` are the first letters A.. in order, one letter each ("ABC" yes; "ACB", or "AB"
    then "C", no); a key that is not a string is never a letter."""
    keys = list(keys)
    return all(isinstance(k, str) for k in keys) and "".join(map(str, keys)) == LETTERS[: len(keys)]


def lettered(texts: Sequence[str]) -> dict[str, str]:
    """Option texts in order -> ``{"A": first, "B": second, ...}`` (at most ten are lettered)."""
    return dict(zip(LETTERS, texts))
