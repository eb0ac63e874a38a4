"""PathVQA (He et al. 2020, arXiv 2003.10286): pathology images with yes/no and open questions,
read from the authors' release (train / val / test; the test split by default).

Layout (the authors' ``pvqa.zip``, as the PathVQA README links it and as LLaVA-Med's and other
harnesses' loaders read it): ``pvqa/qas/<split>/<split>_qa.pkl``, a pickled list of records
``{"image": "test_0001", "question": ..., "answer": ...}``, and the images at
``pvqa/images/<split>/<image>.jpg``. ``--data`` takes the ``pvqa`` folder, its parent, or the
``.pkl`` file itself (images then at ``../../images/<split>/``). The pickle is read with an
unpickler that builds nothing but plain lists, dicts and strings: a file naming any class or
function is refused (a DataError), never executed. The data is not redistributed here.

Closed / open: the dataset has no answer-type label; a question is closed when its answer is yes
or no (the authors' definition: "yes/no" and "open-ended" questions), so both splits the
short-answer family reports are the yes/no rule.

Protocol: the authors published no prompt for language models; asked and read as VQA-RAD and
SLAKE are (:mod:`grandrounds.benchmarks.vqa`: lmms-eval's short-answer ``post_prompt``, greedy,
32 tokens, normalised exact match). Beside the headline, ``extra["authors_script"]`` holds the
figures of the authors' evaluation script (``Evaluation script/`` at UCSD-AI4H/PathVQA @ dd51804):
yes/no accuracy, and over open questions their exact match, F1 and BLEU-1..3
(:mod:`grandrounds.scoring.pathvqa`), computed on the same readings.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, RunOptions
from grandrounds.benchmarks.images import image_params
from grandrounds.benchmarks.vqa import PROBE, VQABenchmark
from grandrounds.core.errors import DataError
from grandrounds.core.files import inside
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import accuracy_cell
from grandrounds.scoring.pathvqa import mean_figures
from grandrounds.scoring.vqa import closed_by_yes_no

SPLITS = ("test", "val", "train")


class _PlainUnpickler(pickle.Unpickler):
    """Builds lists, dicts, strings and numbers only: any class or function named is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"the file names {module}.{name}; only plain lists, dicts and strings are read"
        )


def read_pickle(path: Path) -> Any:
    try:
        with path.open("rb") as f:
            return _PlainUnpickler(f).load()
    except OSError as e:
        raise DataError(path, None, f"not readable ({e.strerror or type(e).__name__})") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        RecursionError,
    ) as e:
        raise DataError(path, None, f"not a plain pickle of question records ({e})") from None


class PathVQA(VQABenchmark):
    """PathVQA: pathology VQA with images, yes/no and open questions; the authors' figures beside."""

    name = "pathvqa"
    description = (
        "PathVQA pathology VQA (images), test split of the authors' pvqa release (--data); "
        "normalised exact match, yes/no + open; the authors' script's BLEU / F1 / exact match beside"
    )
    question_file = "test_qa.pkl"
    #: its grader (the short-answer reading with the authors' script's figures) asks no judge
    takes_judge: ClassVar[bool] = False
    parameters = (
        Param(
            name="split",
            type=str,
            default="test",
            help="test | val | train: which file of qas/ is asked",
            choices=SPLITS,
        ),
        *image_params(),
        PROBE,
    )
    families: ClassVar[tuple[tuple[str, str], ...]] = ()

    def data_files(self, root: Path) -> list[Path]:
        split = self.param("split")
        if root.is_file():
            return [root]
        for base in (root, root / "pvqa"):
            path = base / "qas" / split / f"{split}_qa.pkl"
            if path.is_file():
                return [path]
        raise DataError(
            root, None, f"no qas/{split}/{split}_qa.pkl under it (the authors' pvqa layout)"
        )

    def load(self, root: Path) -> list[Sample]:
        path = self.data_files(root)[0]
        split = self.param("split")
        images = path.parent.parent.parent / "images" / split
        rows = read_pickle(path)
        if not isinstance(rows, list):
            raise DataError(path, None, "expected a list of question records")
        out = []
        for i, r in enumerate(rows):
            where = f"record {i}"
            if not isinstance(r, dict):
                raise DataError(path, where, "not a record (a dict)")
            for field in ("image", "question", "answer"):
                if not isinstance(r.get(field), str) or not r[field].strip():
                    raise DataError(
                        path, where, f"field {field!r} missing or not a non-empty string"
                    )
            where = f"record {i} (image {r['image']})"
            name = (
                r["image"]
                if r["image"].lower().endswith((".jpg", ".jpeg", ".png"))
                else f"{r['image']}.jpg"
            )
            answer = r["answer"].strip()
            closed = closed_by_yes_no(answer)
            out.append(
                self.ask(
                    f"{split}-{i:05d}",
                    r["question"],
                    inside(images, name, path, where),
                    answer,
                    where,
                    closed=closed,
                    closed_yes_no=closed,
                    answer_type="yes/no" if closed else "open",
                )
            )
        if not out:
            raise DataError(path, None, "no questions")
        return out

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("pathvqa", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """The short-answer family's figures, and the authors' script's: yes/no accuracy, and the
        open questions' mean exact match, F1 and BLEU-1..3 over the answers obtained."""
        agg = super().aggregate(samples, grades, options)
        by_id = {g.sample_id: g for g in grades}
        closed = [by_id.get(s.id) for s in samples if s.metadata["closed"]]
        opened = [by_id[s.id] for s in samples if not s.metadata["closed"] and s.id in by_id]
        figures = mean_figures(
            [
                g.details["authors_script"]
                for g in opened
                if g.value is not None and "authors_script" in g.details
            ]
        )
        authors = {
            "yes_no_accuracy": accuracy_cell(
                [g.value if g is not None else None for g in closed]
            ).score,
            "open": figures,
            "source": "UCSD-AI4H/PathVQA@dd51804 Evaluation script/ (BLEU-k: n=k, equal weights)",
        }
        return Aggregate(
            agg.metric,
            agg.score,
            agg.ci95,
            agg.n,
            agg.n_unscored,
            agg.breakdown,
            {**agg.extra, "authors_script": authors},
        )
