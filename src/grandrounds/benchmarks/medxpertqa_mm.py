"""MedXpertQA MM: 2,000 expert-level multimodal questions with five options (A-E) and one or more
images each, in two kinds (Reasoning / Understanding); Tsinghua C3I, arXiv 2501.18362.

Layout, either of the authors' two publications (``--data`` names the folder or the ``.jsonl``):

- the evaluation repository's input file (TsinghuaC3I/MedXpertQA @ f21247d, ``eval/main.py`` reads
  ``data/medxpertqa/input/medxpertqa_mm_input.jsonl``; ``--param subset=sampled`` the
  ``medxpertqa_sampled`` one): records ``id, question, options [{letter, content}], label [letter],
  images [file names], medical_task, body_system, question_type``;
- the Hugging Face dataset TsinghuaC3I/MedXpertQA, ``MM/test.jsonl``: the same fields with
  ``options`` a dict letter -> text and ``label`` one letter.

Images are read from an ``images/`` folder beside the file (the dataset's ``images.zip`` extracted),
or beside the file itself. The question text holds the options ("Answer Choices: (A) ...").

Protocol: the authors' own, as for MedXpertQA Text (:mod:`grandrounds.benchmarks.medxpertqa`): the
two-turn zero-shot chain of thought of ``eval/main.py`` ``zero_shot_cot`` with the prompt text read
from the pinned ``eval/config/prompt_templates.py``; the first user message holds the prompt text
and then the images, in the record's order (``messages[-1]["content"].append(image_content(...))``
after the text part); the trigger is asked in the same conversation, so the images are sent again
with the history; the letter is read from the answer turn by ``answer_cleansing`` (``reference``)
or our reading (``grandrounds``). Accuracy by kind, task and body system, as for the Text set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.images import ImageLoader, ImagePrep, image_params, images_dataset_hash
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.benchmarks.medxpertqa import ANSWER, REASONING, MedXpertQA
from grandrounds.benchmarks.readers.exam_options import check_options
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import DataError
from grandrounds.core.files import inside
from grandrounds.core.params import Param
from grandrounds.core.records import ImagePart, Sample, TextPart

#: subset -> the file names it may have (the evaluation repository's, then the Hugging Face dataset's).
FILES = {
    "full": (
        "medxpertqa_mm_input.jsonl",
        "eval/data/medxpertqa/input/medxpertqa_mm_input.jsonl",
        "MM/test.jsonl",
        "test.jsonl",
    ),
    "sampled": (
        "medxpertqa_sampled_mm_input.jsonl",
        "eval/data/medxpertqa_sampled/input/medxpertqa_sampled_mm_input.jsonl",
    ),
}


class MedXpertQAMM(MedXpertQA):
    """MedXpertQA MM: the authors' two-turn prompts with the question's images after the first prompt's text."""

    name: ClassVar[str] = "medxpertqa-mm"
    description: ClassVar[str] = (
        "MedXpertQA MM (images), 2,000 expert questions, options A-E, Reasoning/Understanding (--data; "
        "--param subset=sampled); the authors' two-turn zero-shot CoT; accuracy"
    )
    has_images: ClassVar[bool] = True
    remote_files = ()
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="subset",
            type=str,
            default="full",
            help="full: the 2,000 MM questions; sampled: the authors' sample",
            choices=tuple(FILES),
        ),
        *image_params(),
    )

    def __init__(self, **params: Any) -> None:
        MultipleChoiceBenchmark.__init__(self, **params)
        self.subset = self.param("subset")
        self.prep = ImagePrep.from_params({p.name: self.param(p.name) for p in image_params()})
        self.images = ImageLoader(self.prep)

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        found = next((root / p for p in FILES[self.subset] if (root / p).is_file()), None)
        if found is None:
            raise DataError(
                root / FILES[self.subset][0],
                None,
                f"file not found (expected one of {', '.join(FILES[self.subset])} under {root})",
            )
        return [found]

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        path = self.data_files(root)[0]
        seen = IdSet(path)
        for no, rec in iter_jsonl(path):
            sid, options, key, meta = self._fields(path, no, rec)
            seen.add(sid, f"{path.name}:{no}")
            images = [self._image(path, no, name) for name in rec["images"]]
            for turn, stage in enumerate((REASONING, ANSWER)):
                sample = self.make_sample(
                    f"{sid}:{REASONING}" if stage == REASONING else sid,
                    rec["question"],
                    options,
                    key,
                    images=images,
                    stage=stage,
                    image_sha256=[i.sha256 for i in images],
                    **meta,
                )
                yield replace(sample, group=sid, turn=turn)
        if not len(seen):
            raise DataError(path, None, "no questions")

    def _fields(
        self, path: Path, no: int, rec: dict[str, Any]
    ) -> tuple[str, dict[str, str], str, dict[str, Any]]:
        require_fields(
            path, no, rec, ("id", "question", "options", "label", "images", "question_type")
        )
        opts, label = rec["options"], rec["label"]
        if isinstance(opts, list) and all(
            isinstance(o, dict) and {"letter", "content"} <= o.keys() for o in opts
        ):
            opts = {o["letter"]: o["content"] for o in opts}
        if isinstance(label, list) and len(label) == 1:
            label = label[0]
        if not isinstance(opts, dict):
            raise DataError(
                path, no, "field 'options' must be a {letter, content} list or map letters to texts"
            )
        check_options(path, no, opts, label, field="label")
        if rec["question_type"] not in ("Reasoning", "Understanding"):
            raise DataError(
                path,
                no,
                f"question type {rec['question_type']!r} is not Reasoning or Understanding",
            )
        if (
            not isinstance(rec["images"], list)
            or not rec["images"]
            or not all(isinstance(n, str) and n for n in rec["images"])
        ):
            raise DataError(path, no, "field 'images' must be a non-empty list of file names")
        meta = {
            "question_type": rec["question_type"],
            **{f: rec[f] for f in ("medical_task", "body_system") if rec.get(f)},
        }
        return str(rec["id"]), opts, label, meta

    def _image(self, path: Path, no: int, name: str) -> ImagePart:
        """``images/<name>`` beside the file (or one folder up, as in the evaluation repository), else beside the file."""
        where = f"record {no} ({name})"
        for folder in (path.parent / "images", path.parent.parent / "images", path.parent):
            if (folder / name).is_file():
                return self.images.part(inside(folder, name, path, where), where)
        return self.images.part(
            inside(path.parent / "images", name, path, where), where
        )  # the DataError naming both

    def image_parts(
        self, text: str, images: tuple[ImagePart, ...]
    ) -> tuple[ImagePart | TextPart, ...]:
        """eval/main.py: the text part first, then each image appended in the record's order."""
        return (TextPart(text), *images)

    def dataset_hash(self, root: Path) -> str:
        return images_dataset_hash(super().dataset_hash(root), self.load(root), self.prep)
