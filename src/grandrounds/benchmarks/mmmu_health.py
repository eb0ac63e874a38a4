"""MMMU's Health & Medicine subjects (Yue et al., CVPR 2024, arXiv 2311.16502), validation split: college
exam questions with up to seven images each, interleaved with the text.

Layout (the Hugging Face dataset MMMU/MMMU, as lmms-eval's and VLMEvalKit's MMMU tasks load it): one
folder per subject, ``<Subject>/validation-00000-of-00001.parquet``, columns ``id, question, options``
(a Python list literal, e.g. ``"['a', 'b']"``), ``answer`` (a letter), ``image_1 .. image_7`` (a
struct ``{bytes, path}`` or null), ``img_type, topic_difficulty, question_type, subfield``. The health
subjects: Basic_Medical_Science, Clinical_Medicine, Diagnostics_and_Laboratory_Medicine, Pharmacy,
Public_Health (30 validation questions each). ``--data`` takes the folder holding the subject folders.
Reading parquet needs pyarrow (``pip install 'grandrounds[reports]'``).

Images are interleaved: the question and option texts name them with ``<image N>`` markers; the user
message holds each image at its marker, in text order (an image no marker names goes before the
text). Only ``question_type == "multiple-choice"`` items are asked (the exam layer reads letters);
MMMU's few open questions are left out and their count given in ``extra`` of every result.
The test split's answers are withheld by MMMU's authors (scored on EvalAI), so it is not offered.
Protocol: ours under both presets (:mod:`grandrounds.benchmarks.image_exams`); named peer lmms-eval's
``mmmu_val`` task; accuracy with breakdowns by subject, subfield, image type and difficulty.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, RunOptions
from grandrounds.benchmarks.image_exams import ImageExam, image_exam_protocols
from grandrounds.benchmarks.readers.exam_options import check_options
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.choices import LETTERS, lettered
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.records import Grade, ImagePart, Message, Sample, TextPart

SUBJECTS = (
    "Basic_Medical_Science",
    "Clinical_Medicine",
    "Diagnostics_and_Laboratory_Medicine",
    "Pharmacy",
    "Public_Health",
)
MARKER = re.compile(r"<image (\d+)>")
MAX_IMAGES = 7


def read_parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "reading MMMU's parquet files needs pyarrow: pip install 'grandrounds[reports]'"
        ) from None
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, ValueError) as e:
        raise DataError(
            path, None, f"not a readable parquet file ({type(e).__name__}: {e})"
        ) from None


class MMMUHealth(ImageExam):
    """MMMU validation, Health & Medicine: 150 multiple-choice questions, images at their ``<image N>`` markers."""

    name = "mmmu-health"
    description = "MMMU Health & Medicine subjects (images, interleaved), validation split, multiple-choice items (--data); accuracy by subject"
    protocols = image_exam_protocols("lmms-eval mmmu_val")
    category_fields = ("subject", "subfield", "img_type", "topic_difficulty")
    split: ClassVar[str] = "validation"

    def data_files(self, root: Path) -> list[Path]:
        files = [root / s / f"{self.split}-00000-of-00001.parquet" for s in SUBJECTS]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise DataError(
                missing[0],
                None,
                f"file not found (expected <Subject>/{self.split}-00000-of-00001.parquet for each of {', '.join(SUBJECTS)})",
            )
        return files

    def records(self, root: Path) -> Iterator[Sample]:
        seen = IdSet(root)
        self.n_open_left_out = 0
        for subject, path in zip(SUBJECTS, self.data_files(root)):
            for i, row in enumerate(read_parquet_rows(path)):
                if row.get("question_type") == "open":
                    self.n_open_left_out += 1
                    continue
                yield self._item(path, subject, i, row, seen)
        if not len(seen):
            raise DataError(root, None, "no questions")

    def _item(self, path: Path, subject: str, i: int, row: dict[str, Any], seen: IdSet) -> Sample:
        where = f"row {i} ({row.get('id')})"
        for field in ("id", "question", "options", "answer"):
            if row.get(field) in (None, ""):
                raise DataError(path, where, f"missing field {field!r}")
        try:
            texts = ast.literal_eval(str(row["options"]))
        except (ValueError, SyntaxError):
            raise DataError(path, where, "options is not a list literal") from None
        if not isinstance(texts, list) or len(texts) > len(LETTERS):
            raise DataError(path, where, "options is not a list of at most ten texts")
        options = lettered([str(t) for t in texts])
        key = str(row["answer"]).strip()
        check_options(path, where, options, key)
        images = self._images(path, where, row)
        named = {
            int(n)
            for text in (str(row["question"]), *options.values())
            for n in MARKER.findall(text)
        }
        if not named <= set(range(1, len(images) + 1)):
            raise DataError(
                path,
                where,
                f"a marker names an image the row lacks (markers {sorted(named)}, images 1..{len(images)})",
            )
        sid = seen.add(str(row["id"]), where)
        meta = {k: row.get(k) for k in ("subfield", "img_type", "topic_difficulty")}
        return self.exam_sample(
            sid, str(row["question"]), options, key, images, subject=subject, **meta
        )

    def _images(self, path: Path, where: str, row: dict[str, Any]) -> list[ImagePart]:
        """image_1 .. image_k, numbered without gaps."""
        out: list[ImagePart] = []
        for n in range(1, MAX_IMAGES + 1):
            cell = row.get(f"image_{n}")
            if cell is None:
                continue
            raw = cell.get("bytes") if isinstance(cell, dict) else None
            if not isinstance(raw, bytes) or len(out) != n - 1:
                raise DataError(path, where, f"image_{n} holds no bytes or follows a missing image")
            out.append(self.image_from_bytes(raw, path, where))
        return out

    # ---- interleaving ------------------------------------------------------------------------
    def image_parts(
        self, text: str, images: tuple[ImagePart, ...]
    ) -> tuple[ImagePart | TextPart, ...]:
        """Each ``<image N>`` marker replaced by image N, in text order; images no marker names go first."""
        pieces = MARKER.split(text)
        named = {int(n) for n in pieces[1::2]}
        parts: list[ImagePart | TextPart] = [
            img for n, img in enumerate(images, 1) if n not in named
        ]
        for k, piece in enumerate(pieces):
            if k % 2:
                n = int(piece)
                parts.append(images[n - 1] if n <= len(images) else TextPart(f"<image {n}>"))
            elif piece:
                parts.append(TextPart(piece))
        return tuple(parts)

    def user_message(self, sample: Sample, text: str) -> Message:
        """Images in their numbered order (as the message holds them in text order, by their hashes)."""
        held = {i.sha256: i for m in sample.messages for i in m.images}
        order = sample.metadata.get("shown_sha256") or ()
        return self._user(text, tuple(held[h] for h in order if h in held))

    def exam_sample(
        self,
        sid: str,
        question: str,
        choices: Any,
        target: str,
        images: Sequence[ImagePart],
        **meta: Any,
    ) -> Sample:
        shown = self.shown_images(images)
        return super().exam_sample(
            sid, question, choices, target, images, shown_sha256=[i.sha256 for i in shown], **meta
        )

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        agg = super().aggregate(samples, grades, options)
        extra = {
            **agg.extra,
            "asked": "multiple-choice items only; open questions left out",
            "n_open_left_out": getattr(self, "n_open_left_out", None),
        }
        return Aggregate(
            agg.metric, agg.score, agg.ci95, agg.n, agg.n_unscored, agg.breakdown, extra
        )
