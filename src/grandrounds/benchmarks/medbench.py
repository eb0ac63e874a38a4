"""MedBench (Shanghai AI Lab platform): questions as handed out, answers withheld, submission out.

Format: JSON Lines ``{"question", "answer": "", "other":
{"id", "source"}}`` (+ ``img_path`` for VLM, ``options`` in old sets). Multiple-choice sets repeat
each ``other.id`` five times with shuffled options, so every row is kept: sample id is
``<source>/<id>/<row index>``. Scoring is server-side; :func:`write_submission` writes the same
lines with ``answer`` filled. When a file does carry answers, MCQ letters are scored locally.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.base import Aggregate, Benchmark, RunOptions
from grandrounds.benchmarks.images import ImageLoader, ImagePrep, image_params
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.core.errors import DataError
from grandrounds.core.files import inside
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, ImagePart, Message, Sample, TextPart
from grandrounds.core.registry import Spec
from grandrounds.core.textutil import strip_reasoning
from grandrounds.scoring.cells import accuracy_cell, group_cells, value_of

SYSTEM = "you are a helpful assistant."  # the system message of yy-hh/LlmMedEval's MedBench runner

#: MedBench v4's Agent track: its 14 task sets (``other.source`` without the ``_V4`` suffix), as the
#: platform hands them out in ``Agent_test_data/`` (the copy in yy-hh/LlmMedEval @ 7e76269). They are
#: prompts that describe a tool, a plan or a conversation; the answer is text, scored by the platform.
AGENT_TASKS = frozenset(
    {
        "MedCOT",
        "MedCallAPI",
        "MedCollab",
        "MedDBOps",
        "MedDecomp",
        "MedDefend",
        "MedIntentID",
        "MedLongConv",
        "MedLongQA",
        "MedPathPlan",
        "MedReflect",
        "MedRetAPI",
        "MedRoleAdapt",
        "MedShield",
    }
)
TRACKS = ("all", "llm", "agent", "vlm")


def track_of(source: str, has_images: bool) -> str:
    """The v4 track a row belongs to: ``vlm`` where it has images, ``agent`` for the Agent task sets, else ``llm``."""
    if has_images:
        return "vlm"
    return "agent" if source.removesuffix("_V4") in AGENT_TASKS else "llm"


class MedBench(Benchmark):
    """MedBench question files (a file or a directory of ``*.jsonl``)."""

    name = "medbench"
    description = "MedBench (OpenCompass platform): Chinese medical tasks (LLM, VLM with every image of img_path); answers withheld, submission file written"
    language = "zh"
    images_in_data = True
    parameters = (
        *image_params(),
        # the MedBench runner (yy-hh/LlmMedEval main.py pdf_to_images): max_pages=5, zoom 2.0
        Param(
            name="pdf_pages",
            type=int,
            default=5,
            help="pages of a PDF named in img_path that are rendered and sent",
            minimum=1,
        ),
        Param(
            name="pdf_scale",
            type=float,
            default=2.0,
            help="PDF pages rendered at this many times 72 dpi",
            minimum=0.1,
        ),
        Param(
            name="track",
            type=str,
            default="all",
            help="MedBench v4 track to run: llm, agent (the 14 Agent task sets, 420 rows), vlm (rows with images), or all",
            choices=TRACKS,
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.images = ImageLoader(
            ImagePrep.from_params({p.name: self.param(p.name) for p in image_params()})
        )

    def _images(self, path: Path, lineno: int, img_path: Any) -> list[ImagePart]:
        """Every image ``img_path`` names (a path, or a list of paths or of lists), relative to the
        question file's folder, in order; a PDF's first ``pdf_pages`` pages as PNG images. The
        platform's runner sends only ``img_path[0]``; every image is sent here."""
        names: list[str] = []
        stack = [img_path]
        while stack:
            item = stack.pop(0)
            if isinstance(item, str) and item.strip():
                names.append(item)
            elif isinstance(item, list):
                stack[:0] = item
            elif item not in (None, "", []):
                raise DataError(
                    path,
                    lineno,
                    f"img_path holds a {type(item).__name__}; expected paths (strings) or lists of them",
                )
        out: list[ImagePart] = []
        for name in names:
            file = inside(path.parent, name, path, f"line {lineno}")
            if not file.is_file():
                raise DataError(path, lineno, f"image {name!r} not found (looked for {file})")
            if file.suffix.lower() == ".pdf":
                out.extend(
                    self.images.pdf_pages(
                        file, f"line {lineno}", self.param("pdf_pages"), self.param("pdf_scale")
                    )
                )
            else:
                out.append(self.images.part(file, f"line {lineno}"))
        return out

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        files = sorted(root.glob("*.jsonl"))
        if not files:
            raise DataError(root, None, "no *.jsonl question files in this directory")
        return files

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        track = self.param("track")
        for path in self.data_files(root):
            for smp in self._iter_file(path):
                if track == "all" or smp.metadata["track"] == track:
                    yield smp

    def _iter_file(self, path: Path) -> Iterator[Sample]:
        """The file's lines as samples, one at a time (a row index counts the file's records)."""
        for row, (lineno, rec) in enumerate(iter_jsonl(path)):
            other = rec.get("other")
            if not isinstance(rec.get("question"), str) or not rec["question"].strip():
                raise DataError(path, lineno, "each line needs a non-empty string 'question'")
            if not isinstance(other, dict) or "id" not in other or not other.get("source"):
                raise DataError(path, lineno, "each line needs 'other': {'id', 'source'}")
            answer = rec.get("answer", "")
            if not isinstance(answer, str):
                raise DataError(
                    path, lineno, f"'answer' must be a string, got {type(answer).__name__}"
                )
            question = rec["question"]
            if isinstance(rec.get("options"), (list, dict)) and rec["options"]:
                question += "\n" + _options_text(rec["options"])
            images = self._images(path, lineno, rec.get("img_path"))
            content: Any = (
                (TextPart(question), *images) if images else question
            )  # the runner's order: text, then images
            yield Sample(
                id=f"{other['source']}/{other['id']}/{row}",
                benchmark=self.name,
                messages=(Message("system", SYSTEM), Message("user", content)),
                target=answer.strip() or None,
                metadata={
                    "source": str(other["source"]),
                    "question_id": other["id"],
                    "file": path.name,
                    "row": row,
                    "record": rec,
                    "language": "zh",
                    "has_images": bool(images),
                    "n_images": len(images),
                    "track": track_of(str(other["source"]), bool(images)),
                },
            )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medbench", {})

    def write_submission(
        self, samples: Sequence[Sample], answers: Mapping[str, str], path: Path
    ) -> dict[str, Any]:
        return write_submission(samples, answers, path)

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Local accuracy where answers exist; withheld rows are unscored and counted.

        Breakdown family ``source`` (the task set, e.g. MedExam_V4); each cell counts its withheld rows.
        """
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        overall = _cell(rows)
        return Aggregate.of(
            "accuracy",
            overall,
            {
                "source": group_cells(((s.metadata["source"], (s, g)) for s, g in rows), _cell),
                "track": group_cells(
                    ((s.metadata.get("track", "llm"), (s, g)) for s, g in rows), _cell
                ),
            },
            {
                "n_withheld": overall.metrics["n_withheld"],
                "note": "official MedBench scores are computed by the platform from the submission file",
            },
        )


def _cell(rows: Sequence[tuple[Sample, Grade | None]]) -> Cell:
    """Accuracy of some rows, with how many of them had their answer withheld (those are unscored)."""
    return accuracy_cell(
        [value_of(g) for _, g in rows], {"n_withheld": sum(1 for s, _ in rows if s.target is None)}
    )


def _options_text(options: Any) -> str:
    """Old-format ``options`` (dict letter->text or list) as "A. ..." lines."""
    if isinstance(options, dict):
        return "\n".join(f"{k}. {v}" for k, v in options.items())
    return "\n".join(f"{chr(65 + i)}. {v}" for i, v in enumerate(options))


def write_submission(
    samples: Sequence[Sample], answers: Mapping[str, str], path: Path
) -> dict[str, Any]:
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
    return {
        "files": sorted(str(p) for p in by_file),
        "n_written": len(samples) - len(missing),
        "missing": missing,
    }
