"""MedMCQA dev split (4,183 questions), as vendored by MIRAGE.

Format (PROTOCOLS.md section 6): ``dev.json`` is JSON Lines despite its name, with ``question,
opa..opd, cop`` (1-based: 1 -> opa -> A), ``subject_name, topic_name, id`` (uuid, used as the
sample id), ``choice_type`` (single|multi; scored as single-answer either way), ``exp``.
Score: accuracy, broken down by subject and choice type.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.benchmarks.readers import check_unique_ids, read_jsonl, require_fields
from grandrounds.benchmarks.medqa import MIRAGE
from grandrounds.errors import DataError
from grandrounds.records import Sample

_OPTION_FIELDS = {"A": "opa", "B": "opb", "C": "opc", "D": "opd"}


class MedMCQA(MultipleChoiceBenchmark):
    """MedMCQA dev set (the test split's labels are hidden)."""

    name: ClassVar[str] = "medmcqa"
    description: ClassVar[str] = "MedMCQA dev split, 4,183 Indian medical entrance questions; accuracy"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{MIRAGE}/medmcqa/data/dev.json",
            "dev.json",
            "a2b5f53890f4e742b728378fb847bc5338088d48ea01218676379f587270af31",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("subject", "choice_type")

    def load(self, root: Path) -> list[Sample]:
        path = resolve_file(root, self.remote_files[0].filename)
        samples = []
        for no, rec in read_jsonl(path):
            require_fields(path, no, rec, ("id", "question", "cop", *_OPTION_FIELDS.values()))
            cop = rec["cop"]
            if isinstance(cop, str) and cop.strip().isdigit():
                cop = int(cop)
            if not isinstance(cop, int) or isinstance(cop, bool) or not 1 <= cop <= 4:
                raise DataError(path, no, f"cop must be 1..4 (1-based), got {rec['cop']!r}")
            choices = {k: str(rec[f]) for k, f in _OPTION_FIELDS.items()}
            meta = {
                "subject": rec.get("subject_name") or "",
                "topic": rec.get("topic_name"),
                "choice_type": rec.get("choice_type") or "",
            }
            samples.append(self.make_sample(str(rec["id"]), rec["question"], choices, "ABCD"[cop - 1], **meta))
        check_unique_ids(path, (s.id for s in samples))
        return samples
