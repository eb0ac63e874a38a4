"""HEAD-QA v1.0 test split: 2,742 questions of the 2016 and 2017 Spanish healthcare specialisation
exams (biology, nursing, pharmacology, medicine, psychology, chemistry; 12 exams), in the Spanish
original or Google's English translation, four numbered answers each.

Data: the authors' released archives (HEAD.zip, HEAD_EN.zip, "HEAD v1.0") as committed in the
student project ``claudiaqw/head-qa-afi`` at 08b4074 (``data/HEAD/test_HEAD.json``,
``data/HEAD_EN/test_HEAD_EN.json``; sha256-pinned): the official repository aghie/head-qa has code
only and serves the data from Google Drive. Format: ``{version, language, exams: {Cuaderno_YEAR_1_X:
{name, category, year, data: [{qid, qtext, ra, answers: [{aid, atext}], image}]}}}``; ``ra`` is a
string, ``aid`` an integer. Licence: the Spanish Ministry of Health allows redistribution without
distortion, with the source and the date of last update (14 Jan 2019) cited; the code is MIT.
67 medicine questions refer to an image the files do not hold; ``--param images=skip`` leaves them
out (as MedHELM does), by default they are asked as text.

Score: accuracy, and the exam's own score (POINTS, +3 right, -1 wrong, 0 blank; Vilares &
Gómez-Rodríguez 2019, :mod:`grandrounds.scoring.headqa`) per exam and in total, a failed call or an
unreadable reply counting as a blank; broken down by category, year, exam and image.

Protocols. The authors published no prompt for language models (their eval.py scores predicted
answer ids). ``reference`` therefore takes the peers': for generated answers Medmarks' head_qa
environment (tmabraham/med-lm-envs ``zero_shot_prompt``, read at run time: its instruction, the
question and the options numbered by ``aid``), sent with the environment's default answer format:
Medmarks' ``XML_SYSTEM_PROMPT`` as the system message, the reply read as Medmarks reads it (the first
``<answer>`` tag, then ``multiple_choice_accuracy`` against the key's number and text;
:mod:`grandrounds.graders.readings_medmarks`; a reply without the tag is wrong; Medmarks itself runs
the English text of the HF copy); for ``letter-loglik``
lm-evaluation-harness's headqa_en / headqa_es (``Question: {qtext}\\nAnswer:`` read from
headqa_en.yaml, which headqa_es includes, and the four answer texts as continuations, acc and
acc_norm). ``grandrounds``: our prompt in the benchmark's language with the same numbered options,
our reading of the number, failed calls excluded from accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, RemoteFile, RunOptions
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    cached,
    jinja_doc_to_text,
)
from grandrounds.benchmarks.medmarks import FORMATS, MEDMARKS_PROMPTS, medmarks_fidelity
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.choices import LETTERS, lettered
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Sample
from grandrounds.graders.mcq_grader import canonical_mode, option_continuations
from grandrounds.scoring.headqa import exam_points
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import (
    LM_EVAL,
    MEDMARKS,
    UpstreamFile,
    python_fstring,
    python_string,
    yaml_value,
)

REPO = "claudiaqw/head-qa-afi"
COMMIT = "08b40747bf96ac40724210f9a2bae21b1332bc3a"
_BASE = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/data"
#: The published file of each language, and the folder it sits in (the archives' layout).
FILES: dict[str, RemoteFile] = {
    "es": RemoteFile(
        f"{_BASE}/HEAD/test_HEAD.json",
        "test_HEAD.json",
        "5d6e0779bf7456b9c686d5830947bd17cdad9476ee8c7d555ce2a31f38ca51ea",
    ),
    "en": RemoteFile(
        f"{_BASE}/HEAD_EN/test_HEAD_EN.json",
        "test_HEAD_EN.json",
        "41f9f178b5d363ecd665f56ecca42deff7834c66f491617cc2687bbcfccd03b7",
    ),
}
FOLDERS = {"es": "HEAD", "en": "HEAD_EN"}

MEDMARKS_HEADQA = MEDMARKS.file(
    "environments/head_qa/head_qa.py",
    "53235d55da33ed069cd7c064d207a71d664ec1a32fa78a566236b288e670c34f",
)
HEADQA_EN = LmEvalTask(
    "headqa_en",
    LM_EVAL.file(
        "lm_eval/tasks/headqa/headqa_en.yaml",
        "abad869bf4a9c32fa00e300dd1bd8f3517af4363e8e8582f131315397be23cde",
    ),
)
HEADQA_ES = LmEvalTask(
    "headqa_es",
    LM_EVAL.file(
        "lm_eval/tasks/headqa/headqa_es.yaml",
        "48a2057a9450fea5fd7ae1c05a193483cb26dce6037da7a2dae414a467cf5aef",
    ),
)

#: Our generate prompt (numbered options, as the exam numbers them), per language.
NUMBERED: dict[str, str] = {
    "en": (
        "Answer the following multiple-choice question by choosing the single best option. "
        'End your reply with a line of the form "Answer: N", where N is the number of your choice ({numbers}).'
        "\n\n{question}\n\n{options}"
    ),
    "es": (
        "Responde a la siguiente pregunta de opción múltiple eligiendo la única opción correcta. "
        'Termina tu respuesta con una línea de la forma "Respuesta: N", donde N es el número de la opción elegida ({numbers}).'
        "\n\n{question}\n\n{options}"
    ),
}
#: Our next-token and text-loglik wording in Spanish (English: the exam layer's).
_SPANISH = {
    "letter_en": "{question}\n\n{options}\n\nResponde solo con la letra.\nRespuesta:",
    "loglik_en": "Pregunta: {question}\nRespuesta:",
}

_PROMPTS = {
    "generate": "Medmarks head_qa zero_shot_prompt (options numbered by aid); system: Medmarks "
    "REDACTED_verifiers/prompts.py XML_SYSTEM_PROMPT",
    "letter-loglik": "lm-eval headqa_en / headqa_es doc_to_text, the answer texts as choices",
    "text-loglik": "ours",
    "next-token": "ours",
}
REFERENCE = Protocol(
    name="reference",
    # Medmarks' environment fixes no sampling settings: greedy, 1,024 tokens (ours); its XML answer format
    answer=Generation(temperature=0.0, max_tokens=1024, system=FORMATS["xml"][0]),
    extraction="generate: Medmarks' reading: the first <answer>...</answer> (verifiers XMLParser.parse_answer; "
    "none: wrong), then multiple_choice_accuracy against the key's number and text; log-prob modes: argmax",
    aggregation="accuracy over every question (failed or unreadable = wrong); exam POINTS (+3/-1/0, blank = 0) beside it",
    source=(
        f"{MEDMARKS_HEADQA.repo}@{MEDMARKS_HEADQA.commit[:7]} {MEDMARKS_HEADQA.path} (peer prompt); "
        f"EleutherAI/lm-evaluation-harness@{HEADQA_EN.yaml.commit[:7]} headqa_en/headqa_es; points: Vilares & Gómez-Rodríguez 2019"
    ),
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="generate: the option's number (our reading); log-prob modes: argmax",
    aggregation="accuracy over answered questions: failed calls excluded and counted; exam POINTS beside it",
    settings={"prompt": {**_PROMPTS, "generate": "ours (numbered options)"}},
)


class HeadQA(MultipleChoiceBenchmark):
    """HEAD-QA v1.0 test split in Spanish or English; accuracy and exam points."""

    name: ClassVar[str] = "head-qa"
    description: ClassVar[str] = (
        "HEAD-QA v1.0 test (Spanish healthcare exams 2016-17), 2,742 questions, Spanish or English (machine-translated); "
        "accuracy and exam points (+3/-1)"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(FILES.values())
    category_fields: ClassVar[tuple[str, ...]] = ("category", "year", "exam", "image")
    reference_reading = "medmarks-xml-numbered"
    reference_fidelity = medmarks_fidelity(
        MEDMARKS_HEADQA.path,
        "zero_shot_prompt",
        "xml",
        reference="generate: Medmarks (tmabraham/med-lm-envs) `environments/head_qa/head_qa.py`, the "
        "named peer; letter-loglik: lm-evaluation-harness headqa_en / headqa_es; the exam's points: "
        "Vilares & Gómez-Rodríguez 2019",
        differs="Medmarks runs the English text only; the Spanish file is asked with the same "
        "prompt. grandrounds: our prompt in the question's language and our number reading (a "
        'stated answer outranks a later mention of an option, "La respuesta correcta es la 3" reads '
        '3, "1 or 2" reads nothing; 0 of 212 written shapes misread)',
    )
    loglik_labels = "texts"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "reference: Medmarks' system and user prompts and its reading (first <answer> tag, "
        "multiple_choice_accuracy); grandrounds: ours in the question's language, our reading of the number; both "
        "greedy; reference counts a failed call wrong, grandrounds leaves it out",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="language",
            type=str,
            default="en",
            help="en: the English machine translation (test_HEAD_EN.json); es: the Spanish original",
            choices=("en", "es"),
        ),
        Param(
            name="images",
            type=str,
            default="keep",
            help="keep: ask the 67 questions that refer to an image as text; skip: leave them out",
            choices=("keep", "skip"),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.lang: str = self.param("language")
        self.language = self.lang  # type: ignore[misc]  # a class attribute, set by --param language
        self.skip_images = self.param("images") == "skip"
        self.file = FILES[self.lang]
        self.remote_files = (self.file,)  # type: ignore[misc]  # a class's files, narrowed to those the parameters choose
        self.lm_eval = HEADQA_EN if self.lang == "en" else HEADQA_ES  # type: ignore[misc]  # as language
        self.template_overrides = {
            "generate_numbered": NUMBERED[self.lang],
            **(_SPANISH if self.lang == "es" else {}),
        }

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (MEDMARKS_HEADQA, MEDMARKS_PROMPTS, HEADQA_EN.yaml) + (
            (HEADQA_ES.yaml,) if self.lang == "es" else ()
        )

    # ---- data --------------------------------------------------------------------------
    def data_files(self, root: Path) -> list[Path]:
        """The language's file: ``root`` itself, ``root/<file>`` (download cache) or ``root/HEAD[_EN]/<file>``."""
        if not root.is_dir():
            return [root]
        flat = root / self.file.filename
        return [flat if flat.exists() else root / FOLDERS[self.lang] / self.file.filename]

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        path = self.data_files(root)[0]
        if not path.exists():
            raise DataError(
                path,
                None,
                f"file not found (expected {self.file.filename} in {root} or {root / FOLDERS[self.lang]})",
            )
        doc = read_json(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("exams"), dict) or not doc["exams"]:
            raise DataError(path, None, "expected a JSON object with a non-empty 'exams' object")
        seen = IdSet(path)
        for key, exam in doc["exams"].items():
            if not isinstance(exam, dict):
                raise DataError(path, f"exam {key}", "not an object")
            require_fields(path, f"exam {key}", exam, ("category", "year", "data"))
            if not isinstance(exam["data"], list):
                raise DataError(path, f"exam {key}", "field 'data' is not a list of questions")
            for i, q in enumerate(exam["data"]):
                sample = self._sample(path, key, exam, i, q)
                seen.add(sample.id)
                if not (self.skip_images and sample.metadata["image"] == "yes"):
                    yield sample

    def _sample(self, path: Path, exam_key: str, exam: Mapping[str, Any], i: int, q: Any) -> Sample:
        where = f"exam {exam_key} question #{i}"
        if not isinstance(q, dict):
            raise DataError(path, where, "not an object")
        require_fields(path, where, q, ("qid", "qtext", "ra", "answers"))
        answers = q["answers"]
        if not isinstance(answers, list) or not 2 <= len(answers) <= len(LETTERS):
            raise DataError(path, where, "field 'answers' must be a list of 2 to 10 answers")
        aids = [a.get("aid") if isinstance(a, dict) else None for a in answers]
        if aids != list(range(1, len(answers) + 1)):
            raise DataError(
                path, where, f"answer ids must be 1..{len(answers)} in order, got {aids}"
            )
        if not all(isinstance(a.get("atext"), str) and a["atext"].strip() for a in answers):
            raise DataError(path, where, "an answer has an empty 'atext'")
        ra = str(q["ra"]).strip()
        if not ra.isdigit() or not 1 <= int(ra) <= len(
            answers
        ):  # ra is a string, aid an int (as the file has them)
            raise DataError(
                path,
                where,
                f"right answer 'ra' {q['ra']!r} is not one of the answer ids 1..{len(answers)}",
            )
        choices = lettered([a["atext"] for a in answers])
        image = q.get("image") or ""
        return self.make_sample(
            f"{exam_key}-{q['qid']}",
            q["qtext"],
            choices,
            LETTERS[int(ra) - 1],
            exam=exam_key,
            category=str(exam["category"]),
            year=str(exam["year"]),
            qid=str(q["qid"]),
            image="yes" if str(image).strip() else "no",
            image_path=str(image),
        )

    # ---- prompts -----------------------------------------------------------------------
    def _render(self, metadata: Mapping[str, Any], choices: Mapping[str, str], mode: str) -> str:
        """Our prompts; the generate one shows the options by number, as the exam does."""
        if canonical_mode(mode) != "generate":
            return super()._render(metadata, choices, mode)
        options = "\n".join(f"{i}. {text}" for i, text in enumerate(choices.values(), 1))
        numbers = "/".join(str(i) for i in range(1, len(choices) + 1))
        return self.templates["generate_numbered"].format(
            question=metadata["question"], options=options, numbers=numbers
        )

    def reference_prompt(self, sample: Sample) -> str:
        """Medmarks' ``zero_shot_prompt`` (read from head_qa.py): the question stripped, then one line per
        option, ``{aid}. {atext.strip()}`` (the line's f-string read from the file), joined by newlines."""
        template = cached(python_string, MEDMARKS_HEADQA, "prompt", within="zero_shot_prompt")
        line = cached(
            python_fstring,
            MEDMARKS_HEADQA,
            within="zero_shot_prompt",
            fields=("a['aid']", "a['atext'].strip()"),
        )
        options = "\n".join(
            line.render({"a['aid']": i, "a['atext'].strip()": text.strip()})
            for i, text in enumerate(sample.choices.values(), 1)
        )
        return template.render(
            question_text=sample.metadata["question"].strip(), options_text=options
        )

    def lm_eval_context(self, sample: Sample) -> str:
        """lm-eval headqa's ``doc_to_text`` (headqa_en.yaml; headqa_es.yaml includes it) over ``qtext``."""
        if self.lang == "es" and cached(yaml_value, HEADQA_ES.yaml, "include") != "headqa_en.yaml":
            raise DataError(
                HEADQA_ES.yaml.url, None, "headqa_es.yaml no longer includes headqa_en.yaml"
            )
        return jinja_doc_to_text(
            str(cached(yaml_value, HEADQA_EN.yaml, "doc_to_text")),
            {"qtext": sample.metadata["question"]},
        )

    def letter_loglik_request(self, sample: Sample) -> tuple[str, tuple[str, ...]]:
        """lm-eval headqa's request: the context, then each answer text (``doc_to_choice``: the
        ``atext`` of every answer, in order) after the target delimiter."""
        conts = option_continuations(
            sample.choices, "letter-loglik", self.language, self.loglik_labels
        )
        return self.lm_eval_context(sample), tuple(conts.values())

    # ---- aggregation -------------------------------------------------------------------
    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Accuracy (the exam layer's), and each exam's POINTS in its breakdown cell."""
        agg = super().aggregate(samples, grades, options)
        per_exam = agg.extra["points_per_exam"]
        exams = {
            k: replace(
                c,
                metrics={
                    **c.metrics,
                    "points": per_exam.get(k),
                    "max_points": 3 * (c.n + c.n_unscored),
                },
            )
            for k, c in agg.breakdown.get("exam", {}).items()
        }
        return replace(agg, breakdown={**agg.breakdown, "exam": exams})

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        return _points(pairs, values)

    def other_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        return {"points": _points(pairs, values)["points"]}


def _outcome(grade: Grade, value: float | None) -> bool | None:
    """Right, wrong, or blank (no answer obtained or none read) for the exam's points."""
    if grade.value is None or value is None or grade.details.get("unextracted"):
        return None
    return value == 1.0


def _points(
    pairs: Sequence[tuple[Sample, Grade]], values: Sequence[float | None]
) -> dict[str, Any]:
    """Exam POINTS: per exam, their total and mean, and how many questions were left blank."""
    by_exam: dict[str, list[bool | None]] = {}
    for (s, g), v in zip(pairs, values):
        by_exam.setdefault(str(s.metadata.get("exam")), []).append(_outcome(g, v))
    per_exam = {k: exam_points(v) for k, v in by_exam.items()}
    return {
        "points": sum(per_exam.values()),
        "points_per_exam": per_exam,
        "mean_points_per_exam": sum(per_exam.values()) / len(per_exam) if per_exam else None,
        "n_blank": sum(o is None for v in by_exam.values() for o in v),
    }
