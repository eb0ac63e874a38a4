"""CMB-Exam test set (11,200 Chinese medical exam questions; FreedomIntelligence/CMB).

The repository ships the answer key ``CMB-test-choice-answer.json`` (JSON array of ``id, exam_type,
exam_class, exam_subject, question_type, answer``) separately from the questions, which are in
``data/CMB.zip`` as ``CMB-Exam/CMB-test/CMB-test-choice-question-merge.json`` (``id, exam_type,
exam_class, exam_subject, question, question_type, option {A: .., ...}``). The loader joins them
on ``id``; the questions may be given unzipped or as the zip.

Scoring per the official ``score.py``: accuracy per ``exam_class``, then the unweighted mean of
class accuracies per ``exam_type``. Those macro figures are in ``extra`` and ``breakdown``; the
headline is the micro accuracy over all scored questions. Multiple-answer keys (多项选择题) match
as a set of letters (the key "EB" equals an answer "BE"; the official script compares strings).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Sequence

from grandrounds.benchmarks.base import Aggregate, RemoteFile, RunOptions
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, accuracy_by, macro_average
from grandrounds.graders.mcq_grader import LETTERS
from grandrounds.benchmarks.readers import check_unique_ids, read_json, require_fields
from grandrounds.errors import DataError
from grandrounds.records import Grade, Sample

REPO = "FreedomIntelligence/CMB"
COMMIT = "6c8ece46097dae736c6805dd3b831e1a38c08971"
KEY_FILE = "CMB-test-choice-answer.json"
QUESTION_FILE = "CMB-test-choice-question-merge.json"
ZIP_FILE = "CMB.zip"
MULTI = "多项选择题"
# The official answer-only prompt (CMB README, "Answer-only Prompt"), zero-shot.
_OFFICIAL = "以下是中国{exam_type}中{exam_class}考试的一道{question_type}，不需要做任何分析和解释，直接输出答案选项。\n{question}\n{options}"


def _questions_from(path: Path) -> tuple[Path, Any]:
    """The parsed question array from a JSON file or from inside CMB.zip."""
    if path.suffix.lower() != ".zip":
        return path, read_json(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith(f"CMB-test/{QUESTION_FILE}") or n == QUESTION_FILE]
            if not names:
                raise DataError(path, None, f"no {QUESTION_FILE} inside the zip")
            raw = zf.read(names[0])
    except zipfile.BadZipFile as e:
        raise DataError(path, None, f"not a readable zip ({e})") from None
    inner = Path(f"{path}!{names[0]}")
    try:
        return inner, json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(inner, getattr(e, "lineno", None), f"invalid JSON ({e})") from None


class CMB(MultipleChoiceBenchmark):
    """CMB-Exam test questions joined with the public answer key."""

    name: ClassVar[str] = "cmb"
    description: ClassVar[str] = "CMB-Exam test, 11,200 Chinese medical exam questions; accuracy (official macro in extra)"
    language: ClassVar[str] = "zh"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/data/{KEY_FILE}",
            KEY_FILE,
            "42130b20f7660a83dd92f3c005eb6a8ef1221c98d9b27d3351204143944b532f",
        ),
        RemoteFile(f"https://github.com/{REPO}/raw/{COMMIT}/data/{ZIP_FILE}", ZIP_FILE, None),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("exam_type", "exam_class", "question_type")
    template_overrides = {"generate_zh": _OFFICIAL, "generate_multi_zh": _OFFICIAL}

    def data_files(self, root: Path) -> list[Path]:
        """[answer key, questions]: a directory holding both, or the question file (key beside it)."""
        folder = root if root.is_dir() else root.parent
        key = folder / KEY_FILE
        if root.is_file():
            return [key, root]
        for name in (QUESTION_FILE, ZIP_FILE):
            if (root / name).exists():
                return [key, root / name]
        raise DataError(root, None, f"no questions: expected {QUESTION_FILE} or {ZIP_FILE} beside {KEY_FILE}")

    def load(self, root: Path) -> list[Sample]:
        key_path, q_file = self.data_files(root)
        keys = read_json(key_path)
        if not isinstance(keys, list) or not keys:
            raise DataError(key_path, None, "expected a non-empty JSON array of answers")
        answers: dict[str, dict[str, Any]] = {}
        for i, rec in enumerate(keys):
            if not isinstance(rec, dict) or "id" not in rec:
                raise DataError(key_path, f"record #{i}", "not an object with an 'id'")
            require_fields(key_path, f"id {rec['id']}", rec, ("answer", "question_type", "exam_type", "exam_class"))
            answers[str(rec["id"])] = rec
        q_path, questions = _questions_from(q_file)
        if not isinstance(questions, list) or not questions:
            raise DataError(q_path, None, "expected a non-empty JSON array of questions")
        samples = [self._sample(q_path, key_path, i, q, answers) for i, q in enumerate(questions)]
        check_unique_ids(q_path, (s.id for s in samples))
        return samples

    def _sample(self, q_path: Path, key_path: Path, i: int, q: Any, answers: dict[str, dict[str, Any]]) -> Sample:
        if not isinstance(q, dict) or "id" not in q:
            raise DataError(q_path, f"record #{i}", "not an object with an 'id'")
        sid = str(q["id"])
        require_fields(q_path, f"id {sid}", q, ("question", "option"))
        if sid not in answers:
            raise DataError(key_path, f"id {sid}", f"question has no entry in the answer key {key_path.name}")
        key = answers[sid]
        options = q["option"]
        if not isinstance(options, dict):
            raise DataError(q_path, f"id {sid}", "field 'option' must map letters to texts")
        letters = sorted(k for k, v in options.items() if isinstance(v, str) and v.strip())
        letters = list(LETTERS[: LETTERS.index(letters[-1]) + 1]) if letters else []  # keep inner blanks, drop trailing
        if len(letters) < 2 or any(k not in options for k in letters):
            raise DataError(q_path, f"id {sid}", f"options must be lettered A.. consecutively, got {sorted(options)}")
        target = "".join(sorted(set(str(key["answer"]).strip())))
        if not target or any(ch not in letters for ch in target):
            raise DataError(key_path, f"id {sid}", f"answer {key['answer']!r} is not among options {''.join(letters)}")
        meta = {k: key[k] for k in ("exam_type", "exam_class", "exam_subject", "question_type") if k in key}
        choices = {k: str(options[k] or "") for k in letters}
        return self.make_sample(sid, q["question"], choices, target, multi=key["question_type"] == MULTI, **meta)

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Micro headline; each exam_type in the breakdown also carries the official class macro."""
        agg = super().aggregate(samples, grades, options)
        macro = agg.extra.get("accuracy_per_category", {})
        types = {t: replace(c, metrics={**c.metrics, "official_macro": macro.get(t)}) for t, c in agg.breakdown.get("exam_type", {}).items()}
        return replace(agg, breakdown={**agg.breakdown, "exam_type": types})

    def extra_metrics(self, scored: Sequence[tuple[Sample, Grade]], options: RunOptions) -> dict[str, Any]:
        """Official score.py figures: per-class accuracy and its per-exam-type macro average."""
        per_class: dict[str, dict[str, float | None]] = {}
        per_type: dict[str, float | None] = {}
        for etype in dict.fromkeys(s.metadata.get("exam_type") for s, _ in scored):
            classes = accuracy_by([(s, g) for s, g in scored if s.metadata.get("exam_type") == etype], "exam_class")
            per_class[str(etype)] = {c: v.score for c, v in classes.items()}
            per_type[str(etype)] = macro_average(classes)
        vals = [v for v in per_type.values() if v is not None]
        return {
            "accuracy_per_category": per_type,
            "accuracy_per_subcategory": per_class,
            "macro_over_exam_types": sum(vals) / len(vals) if vals else None,
            "headline": "micro accuracy; accuracy_per_category is the official per-exam_type macro of class accuracies",
        }
