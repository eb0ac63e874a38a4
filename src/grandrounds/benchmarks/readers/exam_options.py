"""Checks on a multiple-choice record's options, shared by the exams that read them: options lettered
A.. (2 to 10 of them, each a non-empty text) and a key that is one of them, given as a letter or by
the option's number. Each failure is a one-line DataError naming the file, the record and what was
wrong."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grandrounds.core.choices import LETTERS, lettered, lettered_in_order
from grandrounds.core.errors import DataError


def check_options(
    path: Path, where: str | int | None, options: Mapping[str, str], key: object, field: str = "key"
) -> None:
    """Options lettered A.. in order, at least two, each non-empty, and the key (the record's
    ``field``) one of them."""
    if len(options) < 2 or not lettered_in_order(options):
        raise DataError(
            path,
            where,
            f"options must be two or more, lettered A.. in order (got {''.join(map(str, options))!r})",
        )
    if not all(isinstance(v, str) and v.strip() for v in options.values()):
        raise DataError(path, where, "an option text is empty")
    if not isinstance(key, str) or key not in options:
        raise DataError(
            path, where, f"{field} {key!r} is not one of the options {''.join(options)}"
        )


def options_from_list(
    path: Path, where: str | int | None, texts: Any, field: str = "options"
) -> dict[str, str]:
    """A list of 2 to 10 non-empty option texts, lettered A.. in order."""
    if not isinstance(texts, list) or not 2 <= len(texts) <= len(LETTERS):
        raise DataError(path, where, f"field {field!r} must be a list of 2 to 10 option texts")
    if not all(isinstance(t, str) and t.strip() for t in texts):
        raise DataError(path, where, "an option text is empty or not text")
    return lettered(texts)


def numbered_key(path: Path, where: str | int | None, field: str, value: Any, n: int) -> str:
    """The letter of the option a record's ``field`` names by its number, 1 to ``n`` (an integer, or
    its digits in a string)."""
    text = value.strip() if isinstance(value, str) else None
    number = int(text) if text is not None and text.isdecimal() else value
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= n:
        raise DataError(
            path, where, f"{field!r} must name an option by its number 1 to {n}, got {value!r}"
        )
    return LETTERS[number - 1]


def medqa_format_options(
    path: Path, where: str | int, record: Mapping[str, Any]
) -> tuple[dict[str, str], str]:
    """The options and key of a record in MedQA's JSON Lines format (also MedAgentsBench's and its
    MMLU-Pro copy): ``options`` maps 2 to 10 letters A.. (in any order) to non-empty texts,
    ``answer_idx`` is one of them, and ``answer``, where given, is that option's text. Returns the
    options in letter order and the key."""
    options = record["options"]
    if not isinstance(options, dict) or not 2 <= len(options) <= len(LETTERS):
        raise DataError(path, where, "field 'options' must map 2 to 10 letters to option texts")
    letters = "".join(sorted(map(str, options)))
    if letters != LETTERS[: len(options)] or not all(
        isinstance(v, str) and v.strip() for v in options.values()
    ):
        raise DataError(
            path, where, f"options must be non-empty texts under letters A.. (got {letters!r})"
        )
    key = str(record["answer_idx"]).strip()
    if key not in options:
        raise DataError(path, where, f"answer_idx {key!r} is not one of the options {letters}")
    if "answer" in record and record["answer"] != options[key]:
        raise DataError(path, where, f"answer text disagrees with answer_idx {key!r}")
    return {k: options[k] for k in letters}, key
