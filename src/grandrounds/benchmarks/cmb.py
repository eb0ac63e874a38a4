"""CMB-Exam test set (11,200 Chinese medical exam questions; FreedomIntelligence/CMB).

The repository ships the answer key ``CMB-test-choice-answer.json`` (JSON array of ``id, exam_type,
exam_class, exam_subject, question_type, answer``) separately from the questions, which are in
``data/CMB.zip`` as ``CMB-Exam/CMB-test/CMB-test-choice-question-merge.json`` (``id, exam_type,
exam_class, exam_subject, question, question_type, option {A: .., ...}``). The loader joins them
on ``id``; the questions may be given unzipped or as the zip.

Protocols:

- ``reference``: CMB's own zero-shot answer-only prompt (workers/base.py ``query_prompt_2``, read at
  run time; its option list keeps only options longer than one character, as the official
  ``get_single_query`` does), greedy decoding with 512 new tokens (the README's
  configs/model_config.yaml: do_sample False, max_new_tokens 512), CMB's reading (src/utils.py
  ``match_choice``: the letters A-G after "答案是/答案：/正确选项为…", else every A-G in the reply,
  and the first one only for a single-answer item, as ``extract_ans`` does) and score.py's exact
  comparison with the key string as written ("EB" is not "BE"). Aggregation as score.py: accuracy
  per ``exam_class`` with every question counted (no answer = wrong), then the unweighted mean of
  the classes per ``exam_type``; score.py stops there, and the headline is the unweighted mean of
  those per-type figures.
- ``grandrounds``: our prompt, our tolerant reading (an ambiguous single answer is unextracted rather
  than its first letter), multiple answers matched as a set of letters, micro accuracy over the
  answers obtained.

Reading: the questions are read one at a time (``--limit 10`` reads ten), and the answer key
alongside them: a key entry is read when its question comes, entries passed over wait until theirs
does, so when both files list the ids in the same order only a few entries are held. An id that
appears twice in the key is an error (a whole-file read would silently keep the last one).

The chain-of-thought prompt (``query_prompt_1``, the one the repository's generate_answers.sh passes
``--use_cot`` for) is not offered; CMB has no lm-evaluation-harness task, so no letter-loglik mode.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, RemoteFile, RunOptions
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, accuracy_by, cached, macro_average
from grandrounds.benchmarks.readers.json_docs import iter_json_array, stream_json
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import DataError
from grandrounds.core.records import AnswerMode, Cell, Grade, Sample
from grandrounds.graders.mcq_grader import CMB_UTILS
from grandrounds.sources import upstream
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import UpstreamFile, python_returned_string

REPO, COMMIT = upstream.CMB.repo, upstream.CMB.commit
KEY_FILE = "CMB-test-choice-answer.json"
QUESTION_FILE = "CMB-test-choice-question-merge.json"
ZIP_FILE = "CMB.zip"
MULTI = "多项选择题"
CMB_WORKER = upstream.CMB.file(
    "workers/base.py",
    "3da24a0dd4fb88045902abe656280f1ee5fd350f56c8dc30095449bb0d31100e",
)
CMB_SCORE = upstream.CMB.file(
    "score.py",
    "8ec5a4d998f1fce8f5dae93eff829387ad05d4a2d6e042c1869088cd404c91cf",
)

_REFERENCE = Protocol(
    name="reference",
    # README / configs/model_config.yaml: greedy decoding (do_sample False), max_new_tokens 512
    answer=Generation(temperature=0.0, max_tokens=512),
    extraction="src/utils.py match_choice (first letter kept for a single answer); exact match with the key string",
    aggregation="score.py: accuracy per exam_class (no answer = wrong), mean of classes per exam_type; headline: mean over exam_types",
    source=f"{REPO}@{COMMIT[:7]} workers/base.py, src/utils.py, score.py",
    settings={
        "prompt": {
            "generate": "CMB workers/base.py query_prompt_2 (answer-only, zero-shot)",
            "text-loglik": "ours",
            "next-token": "ours",
        }
    },
)
_OURS = replace(
    ours(
        _REFERENCE,
        extraction="our tolerant reading (choice_extract.py); multiple answers matched as a set",
        aggregation="micro accuracy over the answers obtained (failed calls excluded); official macro figures beside it",
    ),
    settings={"prompt": {"generate": "ours", "text-loglik": "ours", "next-token": "ours"}},
)


_NO_QUESTIONS = "expected a non-empty JSON array of questions"
_NO_ANSWERS = "expected a non-empty JSON array of answers"


def _questions_from(path: Path) -> tuple[Path, Iterator[tuple[int, Any]]]:
    """Where the questions are (the JSON file, or ``CMB.zip!member``) and (index, question) for each,
    read as they are asked for."""
    if path.suffix.lower() != ".zip":
        return path, iter_json_array(path, _NO_QUESTIONS)
    try:
        with zipfile.ZipFile(path) as zf:
            names = [
                n
                for n in zf.namelist()
                if n.endswith(f"CMB-test/{QUESTION_FILE}") or n == QUESTION_FILE
            ]
    except zipfile.BadZipFile as e:
        raise DataError(path, None, f"not a readable zip ({e})") from None
    if not names:
        raise DataError(path, None, f"no {QUESTION_FILE} inside the zip")
    inner = Path(f"{path}!{names[0]}")
    return inner, _zipped_questions(path, names[0], inner)


def _zipped_questions(path: Path, name: str, inner: Path) -> Iterator[tuple[int, Any]]:
    """The question array inside the zip, parsed as it is decompressed (UTF-8, a BOM allowed)."""
    try:
        with zipfile.ZipFile(path) as zf:

            def whole() -> Any:
                try:
                    return json.loads(zf.read(name).decode("utf-8-sig"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise DataError(
                        inner, getattr(e, "lineno", None), f"invalid JSON ({e})"
                    ) from None

            yield from stream_json(lambda: zf.open(name), whole, inner, list, _NO_QUESTIONS)
    except zipfile.BadZipFile as e:
        raise DataError(path, None, f"not a readable zip ({e})") from None


class _AnswerKey:
    """The answer key's entries by id, read from the key file as questions ask for them.

    An entry is read when its question comes; entries read past wait in ``pending`` until theirs
    does, so files listing ids in the same order hold a few entries at a time, and files in
    different orders hold what a whole-file read would. ``matched`` is the set of question ids
    already answered (the caller's), which makes an id found twice in the key an error.
    """

    def __init__(self, path: Path, matched: IdSet) -> None:
        self.path = path
        self.entries = iter_json_array(path, _NO_ANSWERS)
        self.pending: dict[str, dict[str, Any]] = {}
        self.matched = matched
        self.read_any = False

    def get(self, sid: str | None) -> dict[str, Any] | None:
        """The entry for question ``sid``, or None when the key has none (``sid`` None: check the
        entries not read yet, as a whole-file read would have)."""
        if sid is not None and sid in self.pending:
            return self.pending.pop(sid)
        for i, rec in self.entries:
            self.read_any = True
            if not isinstance(rec, dict) or "id" not in rec:
                raise DataError(self.path, f"record #{i}", "not an object with an 'id'")
            require_fields(
                self.path,
                f"id {rec['id']}",
                rec,
                ("answer", "question_type", "exam_type", "exam_class"),
            )
            kid = str(rec["id"])
            if kid == sid:
                return rec
            if kid in self.pending or kid in self.matched:
                raise DataError(self.path, f"id {kid}", "appears twice in the answer key")
            self.pending[kid] = rec
        if not self.read_any:
            raise DataError(self.path, None, _NO_ANSWERS)
        return None


class CMB(MultipleChoiceBenchmark):
    """CMB-Exam test questions joined with the public answer key."""

    name: ClassVar[str] = "cmb"
    description: ClassVar[str] = (
        "CMB-Exam test, 11,200 Chinese medical exam questions; accuracy (official macro in extra)"
    )
    language: ClassVar[str] = "zh"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            upstream.CMB.url(f"data/{KEY_FILE}"),
            KEY_FILE,
            "42130b20f7660a83dd92f3c005eb6a8ef1221c98d9b27d3351204143944b532f",
        ),
        RemoteFile(f"https://github.com/{REPO}/raw/{COMMIT}/data/{ZIP_FILE}", ZIP_FILE, None),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("exam_type", "exam_class", "question_type")
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    reference_reading = "cmb"
    protocols = {"reference": _REFERENCE, "grandrounds": _OURS}
    protocol_differences = {
        "generate": (
            "reference: CMB's prompt, greedy with 512 tokens, match_choice, exact key string, failed calls wrong, "
            "mean over exam types; grandrounds: our prompt, temperature 0, tolerant reading, set match, failed calls "
            "excluded, micro accuracy (the other figure re-reads these same replies)"
        ),
        "logprob": "same prompt and argmax; reference: failed answers wrong, mean over exam types; grandrounds: excluded, micro",
    }

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (CMB_WORKER, CMB_UTILS, CMB_SCORE)

    def reference_prompt(self, sample: Sample) -> str:
        """workers/base.py ``query_prompt_2`` (read from the file) filled as ``get_single_query`` fills it:
        ``option_str`` lists "K. text" for the options whose text is longer than one character."""
        template = cached(python_returned_string, CMB_WORKER, "query_prompt_2").text
        option_str = "\n".join(f"{k}. {v}" for k, v in sample.choices.items() if len(v) > 1)
        return template.format_map({**sample.metadata, "option_str": option_str})

    def data_files(self, root: Path) -> list[Path]:
        """[answer key, questions]: a directory holding both, or the question file (key beside it)."""
        folder = root if root.is_dir() else root.parent
        key = folder / KEY_FILE
        if root.is_file():
            return [key, root]
        for name in (QUESTION_FILE, ZIP_FILE):
            if (root / name).exists():
                return [key, root / name]
        raise DataError(
            root, None, f"no questions: expected {QUESTION_FILE} or {ZIP_FILE} beside {KEY_FILE}"
        )

    def records(self, root: Path) -> Iterator[Sample]:
        key_path, q_file = self.data_files(root)
        seen = IdSet(q_file)
        answers = _AnswerKey(key_path, seen)  # the key file is checked before the questions
        q_path, questions = _questions_from(q_file)
        seen.path = q_path  # a repeated question id is named in the questions' file (or zip member)
        for i, q in questions:
            if not isinstance(q, dict) or "id" not in q:
                raise DataError(q_path, f"record #{i}", "not an object with an 'id'")
            sid = seen.add(str(q["id"]))
            require_fields(q_path, f"id {sid}", q, ("question", "option"))
            yield self._sample(q_path, key_path, sid, q, answers.get(sid))
        if not seen:
            raise DataError(q_path, None, _NO_QUESTIONS)
        answers.get(None)  # every question read: the rest of the key is checked too

    def _sample(
        self, q_path: Path, key_path: Path, sid: str, q: dict[str, Any], key: dict[str, Any] | None
    ) -> Sample:
        if key is None:
            raise DataError(
                key_path, f"id {sid}", f"question has no entry in the answer key {key_path.name}"
            )
        options = q["option"]
        if not isinstance(options, dict):
            raise DataError(q_path, f"id {sid}", "field 'option' must map letters to texts")
        letters = sorted(k for k, v in options.items() if isinstance(v, str) and v.strip())
        letters = (
            list(LETTERS[: LETTERS.index(letters[-1]) + 1]) if letters else []
        )  # keep inner blanks, drop trailing
        if len(letters) < 2 or any(k not in options for k in letters):
            raise DataError(
                q_path,
                f"id {sid}",
                f"options must be lettered A.. consecutively, got {sorted(options)}",
            )
        target = "".join(sorted(set(str(key["answer"]).strip())))
        if not target or any(ch not in letters for ch in target):
            raise DataError(
                key_path,
                f"id {sid}",
                f"answer {key['answer']!r} is not among options {''.join(letters)}",
            )
        meta: dict[str, Any] = {
            k: key[k]
            for k in ("exam_type", "exam_class", "exam_subject", "question_type")
            if k in key
        }
        meta["key"] = str(key["answer"])  # as written: score.py compares this string exactly
        choices = {k: str(options[k] or "") for k in letters}
        return self.make_sample(
            sid, q["question"], choices, target, multi=key["question_type"] == MULTI, **meta
        )

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """The protocol's headline; each exam_type in the breakdown also carries score.py's class macro."""
        agg = super().aggregate(samples, grades, options)
        macro = agg.extra.get("accuracy_per_category", {})
        types = {
            t: replace(c, metrics={**c.metrics, "official_macro": macro.get(t)})
            for t, c in agg.breakdown.get("exam_type", {}).items()
        }
        return replace(agg, breakdown={**agg.breakdown, "exam_type": types})

    def headline_cell(
        self, pairs: Sequence[tuple[Sample, Grade]], values: Sequence[Any], options: RunOptions
    ) -> Cell:
        """Micro accuracy (grandrounds), or the mean over exam types of score.py's per-type figures
        (reference; no CI is given for that mean of means)."""
        cell = super().headline_cell(pairs, values, options)
        if options.protocol != "reference":
            return cell
        return replace(cell, score=_official(pairs, values)["macro_over_exam_types"], ci95=None)

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        """Official score.py figures: per-class accuracy and its per-exam-type macro average."""
        headline = (
            "mean over exam types of accuracy_per_category"
            if options.protocol == "reference"
            else "micro accuracy"
        )
        return _official(pairs, values) | {
            "headline": f"{headline}; accuracy_per_category is score.py's per-exam_type mean of class accuracies"
        }


def _official(
    pairs: Sequence[tuple[Sample, Grade]], values: Sequence[float | None]
) -> dict[str, Any]:
    """score.py's accuracy_per_subcategory (exam_type -> exam_class -> accuracy) and
    accuracy_per_category (exam_type -> mean over its classes), and the mean over exam types."""
    per_class: dict[str, dict[str, float | None]] = {}
    per_type: dict[str, float | None] = {}
    for etype in dict.fromkeys(s.metadata.get("exam_type") for s, _ in pairs):
        rows = [(p, v) for p, v in zip(pairs, values) if p[0].metadata.get("exam_type") == etype]
        classes = accuracy_by([p for p, _ in rows], "exam_class", [v for _, v in rows])
        per_class[str(etype)] = {c: v.score for c, v in classes.items()}
        per_type[str(etype)] = macro_average(classes)
    vals = [v for v in per_type.values() if v is not None]
    return {
        "accuracy_per_category": per_type,
        "accuracy_per_subcategory": per_class,
        "macro_over_exam_types": sum(vals) / len(vals) if vals else None,
    }
