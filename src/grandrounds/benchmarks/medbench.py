"""MedBench (Shanghai AI Lab platform): questions as handed out, answers withheld, submission out.

Format (PROTOCOLS.md section 5, quirk 12): JSON Lines ``{"question", "answer": "", "other":
{"id", "source"}}`` (+ ``img_path`` for VLM, ``options`` in old sets). Multiple-choice sets repeat
each ``other.id`` five times with shuffled options, so every row is kept: sample id is
``<source>/<id>/<row index>``. Scoring is server-side; :func:`write_submission` writes the same
lines with ``answer`` filled. When a file does carry answers, MCQ letters are scored locally.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, RunOptions
from grandrounds.benchmarks.mcq_io import read_jsonl
from grandrounds.errors import DataError
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.records import Grade, Message, Response, Sample
from grandrounds.registry import Spec
from grandrounds.stats import wilson_ci
from grandrounds.textutil import normalize_width, strip_reasoning

SYSTEM = "you are a helpful assistant."  # the system message of yy-hh/LlmMedEval's MedBench runner
WITHHELD = "answer withheld"
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


class MedBench(Benchmark):
    """MedBench question files (a file or a directory of ``*.jsonl``)."""

    name = "medbench"
    description = "MedBench (OpenCompass platform): Chinese medical tasks; answers withheld, submission file written"
    language = "zh"

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        files = sorted(root.glob("*.jsonl"))
        if not files:
            raise DataError(root, None, "no *.jsonl question files in this directory")
        return files

    def load(self, root: Path) -> list[Sample]:
        return [s for path in self.data_files(root) for s in self._load_file(path)]

    def _load_file(self, path: Path) -> list[Sample]:
        out: list[Sample] = []
        for lineno, rec in read_jsonl(path):
            other = rec.get("other")
            if not isinstance(rec.get("question"), str) or not rec["question"].strip():
                raise DataError(path, lineno, "each line needs a non-empty string 'question'")
            if not isinstance(other, dict) or "id" not in other or not other.get("source"):
                raise DataError(path, lineno, "each line needs 'other': {'id', 'source'}")
            answer = rec.get("answer", "")
            if not isinstance(answer, str):
                raise DataError(path, lineno, f"'answer' must be a string, got {type(answer).__name__}")
            row = len(out)
            question = rec["question"]
            if isinstance(rec.get("options"), (list, dict)) and rec["options"]:
                question += "\n" + _options_text(rec["options"])
            out.append(
                Sample(
                    id=f"{other['source']}/{other['id']}/{row}",
                    benchmark=self.name,
                    messages=(Message("system", SYSTEM), Message("user", question)),
                    target=answer.strip() or None,
                    metadata={"source": str(other["source"]), "question_id": other["id"], "file": path.name,
                              "row": row, "record": rec, "language": "zh", "has_images": bool(rec.get("img_path"))},
                )
            )
        return out

    def grader(self, options: RunOptions) -> "MedBenchGrader":
        return MedBenchGrader()

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Local accuracy where answers exist; withheld rows are unscored and counted."""
        by_id = {g.sample_id: g for g in grades}
        per: dict[str, list[Grade]] = defaultdict(list)
        scored: list[Grade] = []
        withheld = 0
        for s in samples:
            g = by_id.get(s.id)
            withheld += s.target is None
            if g is not None and g.value is not None:
                scored.append(g)
                per[s.metadata["source"]].append(g)
        k = sum(1 for g in scored if g.value == 1.0)
        return Aggregate(
            metric="accuracy",
            score=k / len(scored) if scored else None,
            ci95=wilson_ci(k, len(scored)),
            n=len(scored),
            n_unscored=len(samples) - len(scored),
            breakdown={src: {"accuracy": sum(g.value or 0 for g in gs) / len(gs), "n": len(gs)} for src, gs in sorted(per.items())},
            extra={"n_withheld": withheld, "note": "official MedBench scores are computed by the platform from the submission file"},
        )


def _options_text(options: Any) -> str:
    """Old-format ``options`` (dict letter->text or list) as "A. ..." lines."""
    if isinstance(options, dict):
        return "\n".join(f"{k}. {v}" for k, v in options.items())
    return "\n".join(f"{chr(65 + i)}. {v}" for i, v in enumerate(options))


class MedBenchGrader(Grader):
    """Exact match of MCQ letters (or of the stripped text for open tasks) when answers exist."""

    def spec(self) -> Spec:
        return Spec("medbench", {})

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if sample.target is None:
            return unscored(sample, WITHHELD)
        if not response.ok:
            return unscored(sample, f"answer call failed: {response.error}")
        gold = mcq_letters(sample.target)
        if gold is not None and len(sample.target.strip()) <= 20:
            pred = mcq_letters(response.text)
            return Grade(sample.id, float(pred == gold), extracted=pred, details={"kind": "mcq", "gold": gold})
        text = strip_reasoning(response.text or "").strip()
        return Grade(sample.id, float(text == sample.target.strip()), extracted=text[:200], details={"kind": "exact"})


def write_submission(samples: Sequence[Sample], answers: Mapping[str, str], path: Path) -> dict[str, Any]:
    """Write the platform's submission: each sample's original line with ``answer`` filled.

    ``answers`` maps sample id -> the model's reply (reasoning traces are stripped, as the
    platform grades the final text). ``path`` is a file (all lines) or a directory (one file
    per original question file, same name). Samples with no answer get "" and are listed.
    """
    by_file: dict[Path, list[str]] = defaultdict(list)
    missing: list[str] = []
    for s in samples:
        rec = dict(s.metadata["record"])
        if s.id in answers:
            rec["answer"] = strip_reasoning(answers[s.id] or "")
        else:
            rec["answer"] = ""
            missing.append(s.id)
        target = path / s.metadata["file"] if path.is_dir() else path
        by_file[target].append(json.dumps(rec, ensure_ascii=False))
    for target, lines in by_file.items():
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"files": sorted(str(p) for p in by_file), "n_written": len(samples) - len(missing), "missing": missing}
