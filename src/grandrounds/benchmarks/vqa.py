"""Medical visual question answering with short answers: VQA-RAD and SLAKE.

Every question is asked with its image (image first, then the text, in one user message) and
graded by normalised exact match (:mod:`grandrounds.scoring.vqa`). What a number means is fixed
and named:

- **closed / open** by the dataset's own ``answer_type`` label (the headline's split: VQA-RAD test
  272 closed / 179 open, SLAKE English 416 / 645), with the split by the yes/no rule beside it
  (VQA-RAD 251 / 200; SLAKE English 355 / 706);
- **accuracy** over every question asked: a failed call is unscored (counted, retried on the
  next run), a reply with no answer in it is wrong and counted as unreadable;
- **open questions** also by token recall of the reference, reported apart, never mixed in.

Reference protocol: neither dataset's authors published a protocol for language models. The
named peer is lmms-eval's SLAKE task (EvolvingLMMs-Lab/lmms-eval @ 75571cf,
``lmms_eval/tasks/slake/``): the question, stripped, followed by its ``post_prompt`` (read from
``_default_template_yaml`` at run time), greedy decoding with 32 new tokens, the whole reply
normalised and compared. VQA-RAD is asked and read the same way (lmms-eval has no VQA-RAD task
at that commit; the same short-answer protocol is what the peers run). None of the metric bugs
of the harness behind the most-cited medical VLM table (MedEvalKit) is reproduced: a hit is
counted once, open accuracy is divided once, "no" is not matched inside "nodule" (whole
normalised answers are compared), a wrong closed answer stays in the denominator, and no judge
is mixed into exact match.

An LLM judge is optional (``takes_judge``): with ``--judge PROVIDER/MODEL`` (repeat for a panel)
each OPEN question's answer (by the dataset's label) is also asked of the judge, "does it mean the
same as the reference?", with MedEvalKit's compare prompt under ``reference`` (read from the pinned
``utils/utils.py`` at run time) or ours under ``grandrounds``, which puts the answer between markers
as data (:mod:`grandrounds.sources.vqa`). The verdicts are reported apart, never mixed into exact
match: ``extra["open_judged_accuracy"]`` over the open questions with a known verdict, its
``open_judged_coverage``, ``n_open_judged`` and ``n_open_judge_unknown`` (unreadable replies after
``--max-reask`` re-asks and failed judge calls: unknown, never wrong), and the breakdown family
``open_judged``. Every other figure is what the same answers give without a judge; the judges enter
the grader's spec and fingerprint, so judged and unjudged gradings are never ranked together, and a
run without ``--judge`` has the run id and fingerprint it had before judges were offered.

Images are sent as the files hold them (``image_format=keep``; all are 3-channel JPEGs), each
read and encoded once per run (:mod:`grandrounds.benchmarks.images`). Samples carry the sha256
of the bytes sent; the run's dataset key covers the question file and every image it names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.images import ImageLoader, ImagePrep, image_params, images_dataset_hash
from grandrounds.benchmarks.readers.decoding import read_text
from grandrounds.core.errors import DataError
from grandrounds.core.files import inside
from grandrounds.core.hashing import file_sha256
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, Message, Sample, TextPart
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import accuracy_cell, group_cells, mean_cell
from grandrounds.scoring.vqa import closed_by_label, closed_by_yes_no
from grandrounds.sources.downloads import cache_dir, fetch
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import UpstreamRepo, yaml_value

LMMS_EVAL = UpstreamRepo(
    "lmms-eval", "EvolvingLMMs-Lab/lmms-eval", "75571cfe0fa36ca5ec2e6aa2bb268f9d38295af3"
)
LMMS_SLAKE_TEMPLATE = LMMS_EVAL.file(
    "lmms_eval/tasks/slake/_default_template_yaml",
    "d32b7b0ef7aab997efd11748cfa91134389b4dd161fbabb97b802600448fd9ba",
)
LMMS_SLAKE_UTILS = LMMS_EVAL.file(
    "lmms_eval/tasks/slake/utils.py",
    "0dd8976d5befb15c23ee9bd6957df0095a384288677e464685289ed9bca8afa2",
)

REFERENCE = Protocol(
    name="reference",
    # _default_template_yaml generation_kwargs: max_new_tokens 32, temperature 0, do_sample false
    answer=Generation(temperature=0.0, max_tokens=32),
    extraction="lmms-eval slake_process_results: the whole reply normalised (lower-case, parentheses and punctuation "
    "dropped, x ray -> xray, yes/no synonyms in English and Chinese) and compared with the normalised answer",
    aggregation="accuracy over every question (mean of exact matches); closed/open by the dataset's answer_type; "
    "failed calls unscored and counted",
    source=LMMS_SLAKE_TEMPLATE.url,
    settings={
        "prompt": "question.strip() + post_prompt (lmms_eval_specific_kwargs.default)",
        "image": "before the text",
        "files": [f.describe() for f in (LMMS_SLAKE_TEMPLATE, LMMS_SLAKE_UTILS)],
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    answer=Generation(temperature=0.0, max_tokens=256),
    extraction="reasoning trace dropped, the last 'Answer:' line (else the first line) normalised as the reference does",
    aggregation="as the reference",
)
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
_DIFFERS = "grandrounds reads an 'Answer:' line or the first line after any reasoning trace, with 256 tokens to answer"


@functools.lru_cache(maxsize=1)
def post_prompt() -> str:
    """lmms-eval's SLAKE ``post_prompt``, read from the pinned task file."""
    kwargs = yaml_value(LMMS_SLAKE_TEMPLATE, "lmms_eval_specific_kwargs")
    return str(kwargs["default"]["post_prompt"])


#: ``--param probe`` of image benchmarks (``grandrounds robustness --probe blind|blank``): does the answer need the image?
IMAGE_PROBES = ("blind", "blank")
PROBE = Param(
    name="probe",
    type=str,
    default="",
    help="blind (each question without its image) | blank (with a blank white image of the same size): "
    "robustness probes, see `grandrounds robustness`",
    choices=("", *IMAGE_PROBES),
)


class VQABenchmark(Benchmark):
    """A short-answer VQA set: records -> samples with their image, graded by exact match."""

    has_images: ClassVar[bool] = True
    #: ``--judge`` accepted: open answers also judged, reported apart (module docstring).
    takes_judge: ClassVar[bool] = True
    answer_modes = ("generate",)
    protocols = PROTOCOLS
    #: every set takes the image preparation and the image probes; a set adds its own before them
    parameters: ClassVar[tuple[Param, ...]] = (*image_params(), PROBE)
    #: the question file's name in the cache / the dataset folder
    question_file: ClassVar[str]
    #: breakdown families: (family name, metadata key)
    families: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.prep = ImagePrep.from_params({p.name: self.param(p.name) for p in image_params()})
        self.images = ImageLoader(self.prep)

    # ---- data ----------------------------------------------------------------------------
    def rows(self, path: Path) -> list[Any]:
        try:
            rows = json.loads(read_text(path))
        except json.JSONDecodeError as e:
            raise DataError(path, e.lineno, f"not JSON: {e.msg}") from None
        except RecursionError:
            raise DataError(path, None, "not JSON this program can read: nested too deep") from None
        if not isinstance(rows, list):
            raise DataError(path, None, "expected a JSON array of question records")
        return rows

    def ask(
        self,
        sid: str,
        question: str,
        image: Path,
        answer: str,
        record: str | int | None,
        **meta: Any,
    ) -> Sample:
        """The sample: one user message, the image then the question and the protocol's instruction.
        Under a probe, the same question with no image (``blind``) or a blank one (``blank``)."""
        part = self.images.part(image, record)
        text = question.strip() + post_prompt()
        meta |= {
            "question": question,
            "image": image.name
            if image.name != "source.jpg"
            else f"{image.parent.name}/{image.name}",
            "image_sha256": part.sha256,
        }
        probe = self.param("probe")
        if probe == "blind":
            return Sample(
                id=sid,
                benchmark=self.name,
                messages=(Message("user", text),),
                target=answer,
                metadata=meta | {"probe": probe},
            )
        if probe == "blank":
            part = self.images.blank(part.width, part.height)
            meta |= {"probe": probe}
        return Sample(
            id=sid,
            benchmark=self.name,
            messages=(Message("user", (part, TextPart(text))),),
            target=answer,
            metadata=meta,
        )

    def data_files(self, root: Path) -> list[Path]:
        return [resolve_file(root, self.question_file)]

    def dataset_hash(self, root: Path) -> str:
        """The question file's hash with that of every image it names (an image changed is another
        dataset), and the probe where one is set (without one, the key is what it always was)."""
        probe = self.param("probe")  # a probe's items are another item set: stored and shown apart
        return images_dataset_hash(
            file_sha256(self.data_files(root)[0]),
            self.load(root),
            self.prep,
            **({"probe": probe} if probe else {}),
        )

    # ---- prompting and grading -----------------------------------------------------------
    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        return {"post_prompt": LMMS_SLAKE_TEMPLATE.describe()}

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("vqa", {"protocol": options.protocol})

    def judged_grader_spec(self, options: RunOptions) -> Spec:
        return Spec("vqa", {"protocol": options.protocol, "judge_open": True})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        other = "grandrounds" if options.protocol == "reference" else "reference"

        def cell(items: Sequence[Grade | None]) -> Cell:
            return _cell(items, mine=True)

        overall = cell([g for _, g in rows])
        label = {
            "closed": [g for s, g in rows if s.metadata["closed"]],
            "open": [g for s, g in rows if s.metadata["closed"] is False],
        }
        yes_no = {
            "closed": [g for s, g in rows if s.metadata["closed_yes_no"]],
            "open": [g for s, g in rows if not s.metadata["closed_yes_no"]],
        }
        open_recall = mean_cell([_recall(g) for g in label["open"]])
        breakdown = {
            "answer_type": {k: cell(v) for k, v in label.items()},
            "yes_no_rule": {k: cell(v) for k, v in yes_no.items()},
            **{
                fam: group_cells(
                    ((str(s.metadata.get(key) or "unknown"), g) for s, g in rows), cell
                )
                for fam, key in self.families
            },
        }
        other_cell = _cell([g for _, g in rows], mine=False)
        judged_cell, judged = (
            open_judged(label["open"])
            if any(g is not None and "open_judge" in g.details for _, g in rows)
            else (None, {})
        )
        if (
            judged_cell is not None
        ):  # a judge was given: its figures apart, every other one unchanged
            breakdown["open_judged"] = {"open": judged_cell}
        return Aggregate.of(
            "accuracy (normalised exact match)",
            overall,
            breakdown,
            {
                "closed_accuracy": breakdown["answer_type"]["closed"].score,
                "open_accuracy": breakdown["answer_type"]["open"].score,
                "n_closed": len(label["closed"]),
                "n_open": len(label["open"]),
                "closed_accuracy_yes_no_rule": breakdown["yes_no_rule"]["closed"].score,
                "open_accuracy_yes_no_rule": breakdown["yes_no_rule"]["open"].score,
                "n_closed_yes_no_rule": len(yes_no["closed"]),
                "n_open_yes_no_rule": len(yes_no["open"]),
                "open_token_recall": open_recall.score,
                "n_unextracted": overall.metrics["n_unextracted"],
                "split": "closed/open by the dataset's answer_type label (yes/no rule beside it)",
                "other_protocol": {
                    "protocol": other,
                    "score": other_cell.score,
                    "differs": _DIFFERS,
                },
                **judged,
            },
        )


def open_judged(grades: Sequence[Grade | None]) -> tuple[Cell | None, dict[str, Any]]:
    """The judge's figures over the open questions: accuracy over known verdicts (unknown ones
    unscored and counted; answers not obtained are not judged), coverage, counts."""
    asked = [
        g for g in grades if g is not None and g.value is not None and "open_judge" in g.details
    ]
    verdicts = [{"same": 1.0, "different": 0.0}.get(g.details["open_judge"]) for g in asked]
    unknown = sum(v is None for v in verdicts)
    cell = accuracy_cell(verdicts, {"n_unknown": unknown})
    return cell, {
        "open_judged_accuracy": cell.score,
        "open_judged_coverage": (len(asked) - unknown) / len(asked) if asked else None,
        "n_open_judged": len(asked),
        "n_open_judge_unknown": unknown,
        "open_judged": "the judge's verdict (same meaning as the reference) on each open answer, by the dataset's label; "
        "majority of known votes; unknown verdicts excluded and counted; never mixed into exact match",
    }


def _recall(grade: Grade | None) -> float | None:
    if grade is None or grade.value is None:
        return None
    return float(grade.details.get("token_recall", 0.0))


def _cell(items: Sequence[Grade | None], mine: bool) -> Cell:
    """Accuracy of some answers (the run's reading, or the other protocol's), with the unreadable counted."""
    values: list[float | None] = []
    unread = 0
    for g in items:
        if g is None or g.value is None:
            values.append(None)
            continue
        values.append(g.value if mine else g.details.get("other_value"))
        unread += bool(g.details.get("unreadable" if mine else "other_unreadable"))
    return accuracy_cell(values, {"n_unextracted": unread})


def _public_image(
    root: Path, folder: str, name: str, url: str, where: str | int | None, source: Path
) -> Path:
    """``root/folder/name``, kept inside ``root/folder`` (:func:`~grandrounds.core.files.inside`: a name
    that leads out, through ``..``, an absolute path or a link, is refused naming ``source`` and the
    record); where ``root`` is the download cache and the image is not there yet, fetched from its
    public copy (checksum recorded at the first download)."""
    path = inside(root / folder, name, source, where)
    if path.exists() or not root.resolve().is_relative_to(cache_dir().resolve()):
        return path
    try:
        return fetch(RemoteFile(url, path.name, None), path.parent)
    except Exception as e:  # noqa: BLE001  (any download failure names the image)
        raise DataError(
            path, where, f"image not found locally and not downloadable ({e})"
        ) from None


VQA_RAD_REPO = "https://raw.githubusercontent.com/Saranga99/vqa-radiology/726ef8d1f9da5220fccf5ae272ef5fa81ab33db1/data/osfstorage"


class VQARAD(VQABenchmark):
    """VQA-RAD (Lau et al. 2018): radiology questions on MedPix images; test split 451 on 203 images."""

    name = "vqa-rad"
    description = "VQA-RAD radiology VQA (images), test split 451 questions; normalised exact match, closed/open"
    remote_files = (
        RemoteFile(
            f"{VQA_RAD_REPO}/VQA_RAD%20Dataset%20Public.json",
            "VQA_RAD Dataset Public.json",
            "948b7156059b864cf72344fb10669233526b175c243e5a046d20d4201d297a95",
        ),
    )
    question_file = "VQA_RAD Dataset Public.json"
    parameters = (
        Param(
            name="split",
            type=str,
            default="test",
            help="test (test_freeform + test_para) | train (freeform + para) | all",
            choices=("test", "train", "all"),
        ),
        *image_params(),
        PROBE,
    )
    families = (
        ("organ", "image_organ"),
        ("question_type", "question_type"),
        ("phrase_type", "phrase_type"),
    )
    SPLITS: ClassVar[dict[str, tuple[str, ...]]] = {
        "test": ("test_freeform", "test_para"),
        "train": ("freeform", "para"),
        "all": ("test_freeform", "test_para", "freeform", "para"),
    }

    def load(self, root: Path) -> list[Sample]:
        path = self.data_files(root)[0]
        folder = path.parent
        keep = self.SPLITS[self.param("split")]
        out = []
        for i, r in enumerate(self.rows(path)):
            if not isinstance(r, dict) or r.get("phrase_type") not in keep:
                continue
            where = f"record {i} (qid {r.get('qid')})"
            for field in ("qid", "image_name", "question", "answer", "answer_type"):
                if field not in r:
                    raise DataError(path, where, f"missing field {field!r}")
            name = str(r["image_name"])
            image = _public_image(
                folder,
                "VQA_RAD Image Folder",
                name,
                f"{VQA_RAD_REPO}/VQA_RAD%20Image%20Folder/{name}",
                where,
                path,
            )
            answer = str(r["answer"]).strip()
            out.append(
                self.ask(
                    str(r["qid"]),
                    str(r["question"]),
                    image,
                    answer,
                    where,
                    closed=closed_by_label(r["answer_type"]),
                    closed_yes_no=closed_by_yes_no(answer),
                    answer_type=str(r["answer_type"]).strip(),
                    image_organ=r.get("image_organ"),
                    question_type=str(r.get("question_type") or "").strip(),
                    phrase_type=r["phrase_type"],
                )
            )
        return out


SLAKE_QUESTIONS = "https://raw.githubusercontent.com/xiaoman-zhang/PMC-VQA/1678ec2c97f0b2bf84591ddccd2e84932630e450/Slake1.0/test.json"
SLAKE_IMAGES = "https://raw.githubusercontent.com/Jana-SG/MedVQA-Datasets/cb522af02547c6400fe9189c52fc1d65ab2ba0a4/Slake/imgs"


class SLAKE(VQABenchmark):
    """SLAKE 1.0 (Liu et al. 2021): bilingual radiology VQA; test split, English half by default."""

    name = "slake"
    description = "SLAKE radiology VQA (images), test split; --param lang=en (1,061, default) | zh (1,033) | all; exact match"
    remote_files = (
        RemoteFile(
            SLAKE_QUESTIONS,
            "test.json",
            "6be8f7b4c5a46cdbc713a5210a25b6ed5aa1fd1574c83cefb4f998131f17c2c3",
        ),
    )
    question_file = "test.json"

    def judged_grader_spec(self, options: RunOptions) -> Spec:
        # MedEvalKit's SLAKE scorer puts the answers in its judge prompt as they are
        return Spec(
            "vqa", {"protocol": options.protocol, "judge_open": True, "judge_lowercase": False}
        )

    parameters = (
        Param(
            name="lang",
            type=str,
            default="en",
            help="en | zh | all: which half of the bilingual test file",
            choices=("en", "zh", "all"),
        ),
        *image_params(),
        PROBE,
    )
    families = (
        ("modality", "modality"),
        ("content_type", "content_type"),
        ("location", "location"),
        ("language", "lang"),
    )

    def load(self, root: Path) -> list[Sample]:
        path = self.data_files(root)[0]
        lang = self.param("lang")
        out = []
        for i, r in enumerate(self.rows(path)):
            where = f"record {i} (qid {r.get('qid') if isinstance(r, dict) else '?'})"
            if not isinstance(r, dict):
                raise DataError(path, where, "not a JSON object")
            for field in ("qid", "img_name", "question", "answer", "answer_type", "q_lang"):
                if field not in r:
                    raise DataError(path, where, f"missing field {field!r}")
            if lang != "all" and r["q_lang"] != lang:
                continue
            name = str(r["img_name"])
            image = _public_image(path.parent, "imgs", name, f"{SLAKE_IMAGES}/{name}", where, path)
            answer = str(r["answer"]).strip()
            out.append(
                self.ask(
                    str(r["qid"]),
                    str(r["question"]),
                    image,
                    answer,
                    where,
                    closed=closed_by_label(r["answer_type"]),
                    closed_yes_no=closed_by_yes_no(answer),
                    answer_type=str(r["answer_type"]).strip(),
                    lang=r["q_lang"],
                    modality=r.get("modality"),
                    content_type=r.get("content_type"),
                    location=r.get("location"),
                    base_type=r.get("base_type"),
                )
            )
        return out
