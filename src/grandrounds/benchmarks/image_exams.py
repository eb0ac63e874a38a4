"""Multiple-choice exams asked with images, on the shared exam layer (:mod:`grandrounds.benchmarks.mcq`):
PMC-VQA, OmniMedVQA and GMAI-MMBench here; MMMU's health subjects in :mod:`~grandrounds.benchmarks.mmmu_health`,
MedXpertQA MM in :mod:`~grandrounds.benchmarks.medxpertqa_mm`.

None of these sets is redistributed: each is read from the folder or file ``--data`` names, in the
layout its publishers ship (each class says which, and where that layout was read). An item is a
multiple-choice sample whose user message holds its images (before the text unless the class says
otherwise) and our prompt, read by the exam layer's letter reading (``choice_extract.py``).

Protocols: none of these sets' authors published a prompt for chat models that we can read from a
pinned file, so both presets send our prompt (:data:`~grandrounds.benchmarks.mcq.TEMPLATES`) and read
replies our way; ``reference`` counts a failed or unreadable answer wrong over every item, as the
peers' accuracy does, ``grandrounds`` leaves failed calls out and counts them. Each class names its
peer harness. Images are prepared as their declared ``image_*`` parameters say
(:mod:`grandrounds.benchmarks.images`), part of the run id; ``--param probe=blind|blank`` asks every
item without its images or with blank ones (``grandrounds robustness --probe blind``).
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import json
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.images import (
    ImageLoader,
    ImagePrep,
    image_params,
    images_dataset_hash,
    prepare,
    read_member,
)
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.benchmarks.readers.decoding import read_text
from grandrounds.benchmarks.readers.exam_options import check_options
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.benchmarks.vqa import IMAGE_PROBES
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import DataError
from grandrounds.core.files import inside
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, ImagePart, Sample
from grandrounds.sources.protocols import OUR_ANSWER, Protocol


def image_exam_protocols(peer: str) -> dict[str, Protocol]:
    """Both presets send our prompt and read our way; they differ in what a failed call counts."""
    prompt = {
        "generate": "ours (images, then the question and lettered options; no official prompt to read)"
    }
    ref = Protocol(
        name="reference",
        answer=OUR_ANSWER,
        extraction="our reading of the option letter (choice_extract.py); no official reading published",
        aggregation="accuracy over every item: a failed or unreadable answer counts wrong",
        source=f"ours (no official prompt for chat models; named peer: {peer})",
        settings={"prompt": prompt},
    )
    ours = replace(
        ref,
        name="grandrounds",
        aggregation="accuracy over answered items: failed calls excluded and counted",
        source="ours",
    )
    return {"reference": ref, "grandrounds": ours}


class ImageExam(MultipleChoiceBenchmark):
    """An exam whose items carry images: generated answers only, declared image settings, blind/blank probes."""

    has_images: ClassVar[bool] = True
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate",)
    reference_reading = "ours"
    protocol_differences = {
        "generate": "same prompt and reading; reference counts failed calls wrong, grandrounds leaves them out",
        "logprob": "not offered",
    }
    parameters: ClassVar[tuple[Param, ...]] = image_params()

    def __init__(self, **params: Any) -> None:
        probe = params.get("probe")
        image_probe = probe if isinstance(probe, str) and probe in IMAGE_PROBES else ""
        if image_probe:
            params = {k: v for k, v in params.items() if k != "probe"}
        super().__init__(**params)
        self.image_probe: str = image_probe
        if image_probe:
            self.params["probe"] = image_probe
        self.prep = ImagePrep.from_params({p.name: self.param(p.name) for p in image_params()})
        self.images = ImageLoader(self.prep)
        self._from_bytes: dict[str, ImagePart] = {}

    # ---- images -------------------------------------------------------------------------
    def image_from_bytes(self, raw: bytes, where: Path, record: str | int | None) -> ImagePart:
        """An image held inside a data file (base64 in a TSV, bytes in a parquet cell), prepared once per content."""
        key = hashlib.sha256(raw).hexdigest()
        hit = self._from_bytes.get(key)
        if hit is None:
            self.images.bytes_read += len(raw)
            data, media, w, h = prepare(raw, self.prep, where, record)
            hit = self._from_bytes[key] = ImagePart(
                sha256=hashlib.sha256(data).hexdigest(),
                media_type=media,
                detail=self.prep.image_detail,
                data=data,
                width=w,
                height=h,
            )
        return hit

    def shown_images(self, images: Sequence[ImagePart]) -> tuple[ImagePart, ...]:
        """The images as the probe shows them: all (no probe), none (``blind``), blank ones of their sizes (``blank``)."""
        if self.image_probe == "blind":
            return ()
        if self.image_probe == "blank":
            return tuple(self.images.blank(i.width or 1, i.height or 1) for i in images)
        return tuple(images)

    def exam_sample(
        self,
        sid: str,
        question: str,
        choices: Mapping[str, str],
        target: str,
        images: Sequence[ImagePart],
        **meta: Any,
    ) -> Sample:
        """A multiple-choice item with its images (as the probe shows them); their hashes kept in metadata."""
        shown = self.shown_images(images)
        meta = {
            **meta,
            "image_sha256": [i.sha256 for i in images],
            **({"probe": self.image_probe} if self.image_probe else {}),
        }
        return self.make_sample(sid, question, choices, target, images=shown, **meta)

    def reference_prompt(self, sample: Sample) -> str:
        """No official prompt is read for these sets: ours under both protocols."""
        return self.render(sample, "generate")

    def dataset_hash(self, root: Path) -> str:
        """The data files' hash with that of every image the items show (an image changed is another dataset)."""
        return images_dataset_hash(
            super().dataset_hash(root), self.load(root), self.prep, probe=self.image_probe
        )


# ---- PMC-VQA -------------------------------------------------------------------------------------

_PMC_PREFIX = re.compile(r"^\s*([A-D])\s*:")


class PMCVQA(ImageExam):
    """PMC-VQA (Zhang et al. 2023, arXiv 2305.10415): questions on figures of PubMed Central papers,
    four options; the authors' cleaned test split (2,000 questions) by default.

    Layout (the dataset repository xmcmic/PMC-VQA, as evalscope's ``pmc_vqa`` adapter reads it at
    modelscope/evalscope @ fde259d): ``test_clean.csv`` (or ``test.csv``, ``--param split=test``) with
    columns ``Figure_path, Question, Answer, Choice A .. Choice D, Answer_label``, and the figures in
    ``images/<Figure_path>``, either extracted or inside ``images.zip``. Each option cell starts with
    its letter ("`` B:Magnetic resonance imaging``"); the prefix is dropped, as the peer drops it.
    Named peer: evalscope's adapter (image first, then the question and options; accuracy)."""

    name = "pmc-vqa"
    description = "PMC-VQA (images), 4-option questions on PubMed Central figures; test_clean split 2,000 (--data); accuracy"
    protocols = image_exam_protocols("evalscope pmc_vqa adapter @ fde259d")
    parameters = (
        Param(
            name="split",
            type=str,
            default="test_clean",
            help="test_clean (2,000, the authors' cleaned set) | test",
            choices=("test_clean", "test"),
        ),
        *image_params(),
    )
    COLUMNS = (
        "Figure_path",
        "Question",
        "Choice A",
        "Choice B",
        "Choice C",
        "Choice D",
        "Answer_label",
    )

    def data_files(self, root: Path) -> list[Path]:
        path = root if root.is_file() else root / f"{self.param('split')}.csv"
        if not path.is_file():
            raise DataError(path, None, f"file not found (expected {path.name} under {root})")
        return [path]

    def records(self, root: Path) -> Iterator[Sample]:
        path = self.data_files(root)[0]
        with self._figures(path.parent, path) as figure:
            seen = IdSet(path)
            for line, row in iter_csv(path, self.COLUMNS):
                where = f"line {line} ({row['Figure_path']})"
                options = {
                    k: _PMC_PREFIX.sub("", str(row[f"Choice {k}"] or ""), count=1).strip()
                    for k in "ABCD"
                }
                key = str(row["Answer_label"] or "").strip()
                check_options(path, where, options, key)
                name = str(row["Figure_path"] or "").strip()
                sid = seen.add(f"{self.param('split')}-{line}", where)
                yield self.exam_sample(
                    sid,
                    str(row["Question"]).strip(),
                    options,
                    key,
                    [figure(name, where)],
                    figure_path=name,
                )
        if not len(seen):
            raise DataError(path, None, "no questions")

    @contextmanager
    def _figures(self, folder: Path, source: Path) -> Iterator[Any]:
        """name -> the prepared figure: ``images/<name>`` extracted, else the member ``images/<name>`` of ``images.zip``."""
        zipped = folder / "images.zip"
        if (folder / "images").is_dir() or not zipped.is_file():
            yield lambda name, where: self.images.part(
                inside(folder / "images", name, source, where), where
            )
            return
        try:
            opened = zipfile.ZipFile(zipped)
        except (zipfile.BadZipFile, OSError) as e:
            raise DataError(zipped, None, f"not a readable zip archive ({e})") from None
        with opened as archive:

            def figure(name: str, where: str | int | None) -> ImagePart:
                raw = read_member(archive, f"images/{name}", zipped, where)
                return self.image_from_bytes(raw, zipped, where)

            yield figure


# ---- OmniMedVQA ----------------------------------------------------------------------------------


class OmniMedVQA(ImageExam):
    """OmniMedVQA (Hu et al., CVPR 2024, arXiv 2402.09181): questions on images of 73 medical datasets in
    12 modalities, two to four options.

    Layout (the release on Hugging Face, foreverbeliever/OmniMedVQA, as the peers' loaders read it):
    the ``OmniMedVQA`` folder holds ``QA_information/Open-access/<dataset>.json`` (and
    ``Restricted-access/``, ``--param access=all``), each a JSON array of records ``question_id,
    question, gt_answer, image_path, option_A .. option_D, question_type, modality_type, dataset``, with
    ``image_path`` relative to that folder (``Images/<dataset>/...``). The key is the option whose text
    equals ``gt_answer``. Breakdowns by modality, question type and source dataset. Named peer:
    MedEvalKit's OmniMedVQA loader (alibaba-damo-academy/MedEvalKit), whose prompt is its own."""

    name = "omnimedvqa"
    description = "OmniMedVQA (images), 2-4 option questions over 12 modalities, open-access part (--data); accuracy by modality"
    protocols = image_exam_protocols("MedEvalKit OmniMedVQA")
    parameters = (
        Param(
            name="access",
            type=str,
            default="open",
            help="open (Open-access, public) | all (with Restricted-access)",
            choices=("open", "all"),
        ),
        *image_params(),
    )
    category_fields = ("modality", "question_type", "dataset")

    def data_files(self, root: Path) -> list[Path]:
        base = root / "OmniMedVQA" if (root / "OmniMedVQA" / "QA_information").is_dir() else root
        parts = (
            ("Open-access",)
            if self.param("access") == "open"
            else ("Open-access", "Restricted-access")
        )
        files = sorted(f for part in parts for f in (base / "QA_information" / part).glob("*.json"))
        if not files:
            raise DataError(
                base / "QA_information" / parts[0],
                None,
                "no question files (<dataset>.json) under it",
            )
        return files

    def records(self, root: Path) -> Iterator[Sample]:
        seen = IdSet(root)
        for path in self.data_files(root):
            try:
                rows = json.loads(read_text(path))
            except json.JSONDecodeError as e:
                raise DataError(path, e.lineno, f"not JSON: {e.msg}") from None
            except RecursionError:
                raise DataError(
                    path, None, "not JSON this program can read: nested too deep"
                ) from None
            if not isinstance(rows, list):
                raise DataError(path, None, "expected a JSON array of question records")
            for i, rec in enumerate(rows):
                yield self._item(path, i, rec, seen)
        if not len(seen):
            raise DataError(root, None, "no questions")

    def _item(self, path: Path, i: int, rec: Any, seen: IdSet) -> Sample:
        where = (
            f"record {i} (question_id {rec.get('question_id') if isinstance(rec, dict) else '?'})"
        )
        if not isinstance(rec, dict):
            raise DataError(path, where, "not a JSON object")
        for field in ("question_id", "question", "gt_answer", "image_path", "option_A", "option_B"):
            if rec.get(field) in (None, ""):
                raise DataError(path, where, f"missing field {field!r}")
        options = {
            k: str(rec[f"option_{k}"]) for k in "ABCD" if rec.get(f"option_{k}") not in (None, "")
        }
        key = next(
            (k for k, v in options.items() if v.strip() == str(rec["gt_answer"]).strip()), ""
        )
        if not key:
            raise DataError(path, where, f"gt_answer {rec['gt_answer']!r} is none of the options")
        check_options(path, where, options, key)
        sid = seen.add(f"{path.stem}/{rec['question_id']}", where)
        image = self.images.part(
            inside(path.parents[2], str(rec["image_path"]), path, where), where
        )
        return self.exam_sample(
            sid,
            str(rec["question"]).strip(),
            options,
            key,
            [image],
            modality=rec.get("modality_type") or rec.get("modality"),
            question_type=rec.get("question_type"),
            dataset=rec.get("dataset") or path.stem,
        )


# ---- GMAI-MMBench --------------------------------------------------------------------------------

#: A VLMEvalKit TSV cell shorter than this names another row's index whose image it shares.
_REF_CELL = 64


class GMAIMMBench(ImageExam):
    """GMAI-MMBench (Chen et al., NeurIPS 2024 Datasets and Benchmarks, arXiv 2408.03361): clinical VQA
    over 38 modalities and 18 clinical tasks, options A-E; the validation split.

    Only the validation split can be scored: the test split's answers are withheld by the authors
    (scored on their server), and a file without an ``answer`` column is refused.

    Layout (``GMAI-MMBench_VAL.tsv`` of OpenGVLab/GMAI-MMBench, the file VLMEvalKit's
    ``GMAIMMBenchDataset`` downloads): a tab-separated file, columns ``index, question, A .. E,
    answer, image`` (the image base64-encoded; a short cell names the row whose image it shares, as
    VLMEvalKit writes repeated images), and the labels VLMEvalKit breaks accuracy down by:
    ``clinical vqa task``, ``department``, ``perceptual granularity`` (and ``modality`` where
    present). Named peer: VLMEvalKit (open-compass/VLMEvalKit), exact-matching mode."""

    name = "gmai-mmbench"
    description = "GMAI-MMBench (images), validation split, options A-E, by clinical task / department / granularity (--data); accuracy"
    protocols = image_exam_protocols("VLMEvalKit GMAIMMBenchDataset (exact matching)")
    category_fields = ("clinical_vqa_task", "department", "perceptual_granularity", "modality")
    LABELS = {
        "clinical vqa task": "clinical_vqa_task",
        "department": "department",
        "perceptual granularity": "perceptual_granularity",
        "modality": "modality",
    }

    def data_files(self, root: Path) -> list[Path]:
        path = root if root.is_file() else root / "GMAI-MMBench_VAL.tsv"
        if not path.is_file():
            raise DataError(
                path, None, f"file not found (expected GMAI-MMBench_VAL.tsv under {root})"
            )
        return [path]

    def records(self, root: Path) -> Iterator[Sample]:
        path = self.data_files(root)[0]
        shared: dict[str, ImagePart] = {}
        seen = IdSet(path)
        for line, row in _tsv_rows(path):
            where = f"line {line} (index {row.get('index')})"
            options = {
                k: str(row[k]).strip()
                for k in LETTERS[:10]
                if str(row.get(k) or "").strip() not in ("", "nan")
            }
            key = str(row.get("answer") or "").strip()
            check_options(path, where, options, key)
            cell = str(row.get("image") or "").strip()
            if len(cell) < _REF_CELL:
                if cell not in shared:
                    raise DataError(
                        path, where, f"image cell {cell!r} names no earlier row's image"
                    )
                image = shared[cell]
            else:
                try:
                    raw = base64.b64decode(cell, validate=True)
                except (binascii.Error, ValueError):
                    raise DataError(path, where, "image cell is not base64") from None
                image = shared[str(row["index"]).strip()] = self.image_from_bytes(raw, path, where)
            sid = seen.add(str(row["index"]).strip(), where)
            labels = {
                ours: row[theirs]
                for theirs, ours in self.LABELS.items()
                if row.get(theirs) not in (None, "")
            }
            yield self.exam_sample(
                sid, str(row["question"]).strip(), options, key, [image], **labels
            )
        if not len(seen):
            raise DataError(path, None, "no questions")


def _tsv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row by column) of a tab-separated file with a header (quoted cells may span lines; cells of any size)."""
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t")
            header = next(reader, None) or []
            missing = [c for c in ("index", "question", "A", "B", "image") if c not in header]
            if "answer" not in header:
                raise DataError(
                    path,
                    1,
                    "no 'answer' column: the test split's answers are withheld by GMAI-MMBench's authors; "
                    "use GMAI-MMBench_VAL.tsv",
                )
            if missing:
                raise DataError(path, 1, f"missing columns: {', '.join(missing)}")
            while True:
                start = reader.line_num + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    return
                except csv.Error as e:
                    raise DataError(path, start, f"malformed TSV ({e})") from None
                if cells:
                    yield start, dict(zip(header, cells))
    except UnicodeDecodeError as e:
        raise DataError(path, None, f"not UTF-8 ({e.reason})") from None
    finally:
        csv.field_size_limit(limit)
