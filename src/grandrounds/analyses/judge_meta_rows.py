"""The HealthBench meta-evaluation file (simple-evals ``healthbench_meta_eval.py``'s ``INPUT_PATH``)
and its rows, read for :mod:`grandrounds.analyses.judge_validation`: each row a conversation, a
completion, one rubric criterion with its category, and one met/unmet label per physician who
graded it; a malformed record is a one-line error naming the file and the line.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.healthbench import BASE_URL, prompt_messages
from grandrounds.benchmarks.readers.lines import read_jsonl
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.records import Message
from grandrounds.sources.downloads import RemoteFile, cache_dir, fetch

SUITE = "healthbench-meta"
#: The public meta-eval file (simple-evals ``INPUT_PATH``); size 136,224,466 bytes.
META_FILE = RemoteFile(
    url=BASE_URL + "2025-05-07-06-14-12_oss_meta_eval.jsonl",
    filename="2025-05-07-06-14-12_oss_meta_eval.jsonl",
    sha256="6a343ed3fcb6f28353c2c6c157ae30ddf2db874c947b27ba474ad54da9c5dbac",
)


@dataclass(frozen=True, kw_only=True)
class MetaRow:
    """One meta-eval row: a judged item with the physicians' labels of it."""

    line: int
    messages: tuple[Message, ...]
    completion: str
    rubric: str
    category: str
    labels: tuple[bool, ...]
    physicians: tuple[str, ...]


def parse_row(rec: Mapping[str, Any], path: Path, line: int) -> MetaRow:
    """One JSONL record -> MetaRow; DataError naming the line for anything malformed."""
    messages = prompt_messages(rec.get("prompt"), path, line)
    for name in ("completion", "rubric", "category"):
        if not isinstance(rec.get(name), str):
            raise DataError(path, line, f"{name} must be a string")
    if not rec["rubric"].strip():
        raise DataError(path, line, "rubric is empty")
    labels = rec.get("binary_labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, bool) for x in labels):
        raise DataError(path, line, "binary_labels must be a non-empty list of true/false")
    ids = rec.get("anonymized_physician_ids")
    if not isinstance(ids, list) or not all(
        isinstance(x, (str, int)) and not isinstance(x, bool) for x in ids
    ):
        raise DataError(path, line, "anonymized_physician_ids must be a list of ids")
    if len(ids) != len(labels):
        raise DataError(
            path, line, f"{len(labels)} binary_labels but {len(ids)} anonymized_physician_ids"
        )
    return MetaRow(
        line=line,
        messages=tuple(messages),
        completion=rec["completion"],
        rubric=rec["rubric"],
        category=rec["category"],
        labels=tuple(labels),
        physicians=tuple(str(x) for x in ids),
    )


def load_rows(path: Path) -> list[MetaRow]:
    """Every row of a meta-eval file in the original format, in file order."""
    return [parse_row(rec, path, n) for n, rec in read_jsonl(path)]


def select_rows(rows: Sequence[MetaRow], limit: int | None) -> list[MetaRow]:
    """The rows simple-evals evaluates with ``num_examples=limit``: all, or ``random.Random(0).sample``."""
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {limit}")
    if limit is not None and len(rows) > limit:
        return random.Random(0).sample(list(rows), limit)
    return list(rows)


def data_path(data: Path | None) -> Path:
    """``data`` if given (it must exist), else the public file through the checksummed cache."""
    if data is not None:
        if not data.exists():
            raise DataError(data, None, "file not found")
        if data.is_dir():
            data = data / META_FILE.filename
            if not data.exists():
                raise DataError(
                    data, None, f"file not found (expected {META_FILE.filename} in the directory)"
                )
        return data
    return fetch(META_FILE, cache_dir() / SUITE)
