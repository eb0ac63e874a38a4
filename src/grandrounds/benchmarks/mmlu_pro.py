"""MMLU-Pro's health category (818 questions, 3-10 options) and M-ARC (100 questions, 5-7 options),
which its authors evaluate with MMLU-Pro's own script.

MMLU-Pro health. Data: gersteinlab/medagents-benchmark @ f5e50b6 ``data/mmlu-pro/test.jsonl``
(the MedAgentsBench authors' copy of TIGER-Lab's test split, health only; the official data is on
Hugging Face only): ``realidx`` (= MMLU-Pro's question_id), ``question``, ``options {A..}`` ("N/A"
padding already dropped), ``answer_idx``, ``answer`` (the key's text, checked), ``category``,
``src`` (the MMLU subject it came from: the breakdown). Against TIGER-Lab's July 2024 dump, 816 of
818 items are identical; realidx 6047 and 6392 carry other questions there (a later revision of the
dataset).

M-ARC (MedARC-QA v1). Data: dbernardo05/medARC-QA @ 4e64daa ``data_medARCv1/test_medARCv1.csv``
in MMLU-Pro's layout: ``question_id, question, options`` (a JSON list written as a string, read as
the authors read it: curly quotes made straight, then ``json.loads``), ``answer`` (letter),
``answer_index`` (checked against it), ``cot_content``, ``category`` ("health"), ``src``
(emergency, general_medicine, neuro_icu: the breakdown). Licence Apache-2.0 (the repository's).

Reference protocol (the default), as evaluate_from_api.py at the pinned commits (TIGER-AI-Lab/MMLU-Pro
@ f418b11; dbernardo05/medARC-QA @ 4e64daa, which copies it): one user message, no system message:
the header naming the category, then the category's chain-of-thought examples of MMLU-Pro's
validation split, then the question, each written by ``format_example`` (the text of the header and of
``format_example``'s pieces is read from the pinned file at run time). Temperature 0, top-p 1, 4,000
tokens (MMLU-Pro) or 8,000 (M-ARC). The reply has ``**`` removed and is read by the script's
``extract_answer`` (graders/readings_aj.py); a reply with no letter read is scored by a random option,
as ``update_result`` does. M-ARC's script also jitters every age in the stem ("54-year-old" ->
"54.013 year-old", +0 to 0.04 years); here the draw is seeded by the run's ``--seed`` and the
question id, so a prompt is the same on every run of the same seed.

The five health examples of MMLU-Pro's validation split are on Hugging Face only (TIGER-Lab/MMLU-Pro,
``data/validation-00000-of-00001.parquet``): the reference protocol downloads that file like every
other source (:data:`MMLU_PRO_VALIDATION`; ``fetch`` and ``bundle`` include it, ``HF_ENDPOINT`` and the
mirror settings apply). ``--param fewshot=PATH`` reads a local copy instead (the parquet file, or JSON
Lines or a JSON array with MMLU-Pro's fields: question, options, cot_content, category);
``--param shots=0`` asks the same prompt without examples, recorded as such in the spec. The ``grandrounds`` protocol asks zero-shot with our prompt and reading, temperature 0,
and leaves failed calls out. lm-eval's ``mmlu_pro`` task generates (no log-likelihood task), so
``letter-loglik`` is not offered; ``text-loglik`` and ``next-token`` are ours.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Prompt, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, cached
from grandrounds.benchmarks.readers.decoding import read_text
from grandrounds.benchmarks.readers.exam_options import medqa_format_options, options_from_list
from grandrounds.benchmarks.readers.lines import iter_jsonl, read_rows
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, Sample
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import (
    M_ARC,
    MEDAGENTSBENCH,
    MMLU_PRO,
    UpstreamFile,
    UpstreamRepo,
    local_path,
    python_appended_strings,
    python_string,
)

#: MMLU-Pro's dataset on the Hugging Face hub, at its moving ``main`` revision (see below).
MMLU_PRO_HF = UpstreamRepo("mmlu-pro-hf", "TIGER-Lab/MMLU-Pro", "main", hub="huggingface")
MMLU_PRO_API = MMLU_PRO.file(
    "evaluate_from_api.py",
    "6e00c0d57ed307b9e707b712ea796fbd2286c6d21889cd63bb58090fa72c5a99",
)
M_ARC_API = M_ARC.file(
    "evaluate_from_api.py",
    "c2849456729e8fc4872b20d73a45f6952d446928888087185d5bfaded58d6d70",
)
#: MMLU-Pro's validation split (the five chain-of-thought examples per category the reference
#: prompt shows), as its authors publish it on the Hugging Face hub. Downloaded like every other
#: source (cache, HF_ENDPOINT and the mirror settings, bundles). Its sha256 could not be pinned
#: ahead of a first download: that download's sha256 is recorded beside it and every later use is
#: compared with it (a changed file warns, and the prompts it gives are other requests).
MMLU_PRO_VALIDATION = MMLU_PRO_HF.file("data/validation-00000-of-00001.parquet", None)
_PROMPTS = {
    "generate": "evaluate_from_api.py single_request: header + validation CoT examples + format_example",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (lm-eval's mmlu_pro generates)",
}
_OURS_PROMPTS = {**_PROMPTS, "generate": "ours (zero-shot)"}


def _protocols(
    source: UpstreamFile, max_tokens: int, reading: str, jitter: bool
) -> dict[str, Protocol]:
    reference = Protocol(
        name="reference",
        answer=Generation(temperature=0.0, max_tokens=max_tokens, top_p=1.0),
        extraction=f"evaluate_from_api.py extract_answer on the reply without '**' ({reading}); no letter: a random option is scored",
        aggregation="accuracy over every question (a failed call counts wrong)",
        source=f"{source.repo}@{source.commit[:7]} {source.path}",
        settings={"prompt": _PROMPTS, "age_jitter": jitter},
    )
    grandrounds = ours(
        reference,
        extraction="our tolerant reading (choice_extract.py); no letter: wrong, counted",
        aggregation="accuracy over answered questions: failed calls excluded and counted",
        settings={"prompt": _OURS_PROMPTS, "age_jitter": False},
    )
    return {"reference": reference, "grandrounds": grandrounds}


# medARC-QA process_age_strings: an age with its descriptor ("54-year-old", "54 year old", "54yo"),
# rewritten as the age plus uniform(0, 0.04) with three decimals and " year-old".
_AGE = re.compile(r"\b(\d+)(?:\s*[-\s]?)(year-old|year old|yo)\b", re.IGNORECASE)


def jitter_ages(text: str, rng: random.Random) -> str:
    """Every age in ``text`` moved by a random 0-0.04 years, as M-ARC's evaluation does before asking."""
    return _AGE.sub(lambda m: f"{int(m.group(1)) + rng.uniform(0, 0.04):.3f} year-old", text)


def _parquet_rows(path: Path) -> list[Any]:
    """The rows of a parquet file as dicts (the split as Hugging Face publishes it)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            path, None, "reading a parquet file needs pyarrow: pip install pyarrow"
        ) from None
    try:
        return list(pq.read_table(path).to_pylist())
    except Exception as e:  # pyarrow's errors are of many kinds; each is one line naming the file
        raise DataError(
            path, None, f"not a readable parquet file ({type(e).__name__}: {e})"
        ) from None


def read_fewshot(path: Path, category: str) -> list[dict[str, Any]]:
    """The validation examples of ``category`` in file order (MMLU-Pro's fields; "N/A" options dropped,
    as ``preprocess`` does), from the published parquet file, JSON Lines or a JSON array."""
    if path.suffix == ".parquet":
        rows = _parquet_rows(path)
    else:
        text = read_text(path)
        try:
            rows = (
                json.loads(text)
                if text.lstrip().startswith("[")
                else [rec for _, rec in iter_jsonl(path)]
            )
        except json.JSONDecodeError as e:
            raise DataError(path, e.lineno, f"invalid JSON ({e.msg})") from None
    out = []
    for no, rec in enumerate(rows, 1):
        if not isinstance(rec, dict):
            raise DataError(path, no, "expected an object per example")
        require_fields(path, no, rec, ("question", "options", "cot_content", "category"))
        if rec["category"] == category:
            opts = rec["options"]
            if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
                raise DataError(path, no, "field 'options' must be a list of strings")
            out.append({**rec, "options": [o for o in opts if o != "N/A"]})
    if not out:
        raise DataError(path, None, f"no validation example of category {category!r}")
    return out


class _MMLUProFormat(MultipleChoiceBenchmark):
    """What MMLU-Pro health and M-ARC share: the prompt, few-shot examples, reading and breakdown by source."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    category_fields: ClassVar[tuple[str, ...]] = ("src",)
    official: ClassVar[UpstreamFile]
    jitter: ClassVar[bool] = False
    protocol_differences = {
        "generate": "reference: the script's few-shot prompt, temperature 0, its reading (a random option scored when "
        "none is read), failed calls wrong; grandrounds: our zero-shot prompt, tolerant reading, failed calls excluded",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="shots",
            type=int,
            default=5,
            help="validation examples in the reference prompt (MMLU-Pro's script: all 5 of the category; 0: none)",
            choices=(0, 1, 2, 3, 4, 5),
        ),
        Param(
            name="fewshot",
            type=str,
            default="",
            help="a local copy of MMLU-Pro's validation split (parquet, JSON Lines or a JSON array); "
            "default: downloaded from Hugging Face (TIGER-Lab/MMLU-Pro)",
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.shots: int = self.param("shots")
        self.fewshot: str = self.param("fewshot")

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        """The scoring script, and the validation split where the examples are downloaded (a run
        given ``fewshot`` or ``shots=0`` keeps the fingerprint it had before)."""
        return (self.official,) + (
            (MMLU_PRO_VALIDATION,) if self.shots and not self.fewshot else ()
        )

    def examples(self) -> list[dict[str, Any]]:
        """The validation examples the reference prompt shows: from ``fewshot``, else MMLU-Pro's
        validation split downloaded from Hugging Face (read as the first prompt is built, before
        any call; a failed download is one error saying the ways round it)."""
        if not self.shots:
            return []
        path = Path(self.fewshot) if self.fewshot else local_path(MMLU_PRO_VALIDATION)
        return cached(read_fewshot, path, "health")[: self.shots]

    def format_example(self, question: str, options: Sequence[str], cot_content: str = "") -> str:
        """evaluate_from_api.py format_example, its text pieces read from the pinned file."""
        first = cached(python_string, self.official, "example", within="format_example")
        line, _, answer = cached(
            python_appended_strings, self.official, "example", within="format_example"
        )
        if cot_content == "":
            cot_content = cached(
                python_string, self.official, "cot_content", within="format_example"
            ).text
        if cot_content.startswith("A: "):
            cot_content = cot_content[3:]
        text = first.render(question=question)
        text += "".join(
            line.render({"choice_map[i]": LETTERS[i], "opt": opt}) for i, opt in enumerate(options)
        )
        return text + answer.render(cot_content=cot_content)

    def reference_prompt(self, sample: Sample) -> str:
        header = cached(python_string, self.official, "prompt", within="single_request").render(
            category=sample.metadata["category"]
        )
        shots = "".join(
            self.format_example(e["question"], e["options"], e["cot_content"])
            for e in self.examples()
        )
        return (
            header
            + shots
            + self.format_example(sample.metadata["question"], list(sample.choices.values()))
        )

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        if self.jitter and options.protocol == "reference" and options.answer_mode == "generate":
            rng = random.Random(f"{options.seed}:{sample.id}")
            sample = replace(
                sample,
                metadata={
                    **sample.metadata,
                    "question": jitter_ages(sample.metadata["question"], rng),
                },
            )
        return super().prompt(sample, options, history)


_MAB = MEDAGENTSBENCH.url("data")


class MMLUProHealth(_MMLUProFormat):
    """MMLU-Pro, health category, test split (818 questions)."""

    name: ClassVar[str] = "mmlu-pro-health"
    description: ClassVar[str] = (
        "MMLU-Pro health category, 818 questions, 3-10 options (MedAgentsBench's copy of the test split); "
        "TIGER-Lab's 5-shot CoT prompt and reading; accuracy by source subject"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{_MAB}/mmlu-pro/test.jsonl",
            "test.jsonl",
            "e19a1083726cc7d0026e4b0350d5af28c1798020885770b957f38a8fb268193d",
        ),
    )
    reference_reading = "mmlu-pro"
    official = MMLU_PRO_API
    published_figures: ClassVar[str] = (
        "The paper's and leaderboard's numbers for the first models (gpt-4o, deepseek) were read by the authors' "
        "2024 scripts (run_gpt4o.py, run_deepseek.py at TIGER-AI-Lab/MMLU-Pro@ff991b5), which read only "
        "'answer is (X)' in the raw reply and scored every other reply by a random option; the pinned "
        f"evaluate_from_api.py ({MMLU_PRO.commit[:7]}) removes '**' first and falls back to 'Answer: X' and the last letter. "
        "On the authors' own published health replies: gpt-4o, 62 of 818 replies read as nothing in 2024 (583 "
        "right before the random draws, 0.713; published 0.721), 0 under the pinned code (619 right, 0.757); "
        "deepseek, 83 of 812 read as nothing in 2024 (466 right, 0.574), 0 under the pinned code (509 right, "
        "0.627). grandrounds reads as the pinned code. Where a reply still reads no letter, the result's "
        "reference_fallback says how many were scored by the random option and how many of those came out "
        "right."
    )
    protocols = _protocols(
        MMLU_PRO_API, 4000, "answer is (X), else Answer: X, else the last standalone letter", False
    )

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, self.remote_files[0].filename)
        seen = IdSet(path)
        for no, rec in iter_jsonl(path):
            require_fields(
                path, no, rec, ("realidx", "question", "options", "answer_idx", "category", "src")
            )
            options, key = medqa_format_options(path, no, rec)
            if "N/A" in options.values():
                raise DataError(path, no, "an option text is N/A (MMLU-Pro's padding)")
            sid = seen.add(str(rec["realidx"]), no)
            yield self.make_sample(
                sid, rec["question"], options, key, category=rec["category"], src=rec["src"]
            )
        if not len(seen):
            raise DataError(path, None, "no questions in the file")


_MARC = M_ARC.url("data_medARCv1")
# evaluate_from_api.py fix_options_column: curly quotes made straight before the list is parsed.
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2019": "'", "\u2018": "'"})


def parse_options(path: Path, no: int, text: str) -> list[str]:
    """An M-ARC options cell: a JSON list of strings, read after curly quotes are made straight; "N/A" dropped."""
    try:
        opts = json.loads(text.translate(_QUOTES))
    except json.JSONDecodeError as e:
        raise DataError(path, no, f"options are not a JSON list ({e.msg})") from None
    if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
        raise DataError(path, no, "options must be a JSON list of strings")
    return [o for o in opts if o != "N/A"]


class MARC(_MMLUProFormat):
    """M-ARC (MedARC-QA v1): 100 adversarial clinical questions in MMLU-Pro's layout."""

    name: ClassVar[str] = "m-arc"
    description: ClassVar[str] = (
        "M-ARC (MedARC-QA v1), 100 Einstellung-trap clinical questions, 5-7 options; the authors' MMLU-Pro-based "
        "5-shot CoT with age jitter; accuracy by source"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{_MARC}/test_medARCv1.csv",
            "test_medARCv1.csv",
            "73885009ac6709bbc3596ca2968826ee1c92e5f799fbe9bb0d59f6cf59ca4867",
        ),
    )
    reference_reading = "m-arc"
    official = M_ARC_API
    published_figures: ClassVar[str] = (
        "M-ARC's script scores a reply it reads no letter in by the option drawn right after "
        "random.seed(12345), the same draw for every item of the same option count; that option is the key "
        "of 33 of the 100 items, so a model whose replies are never readable scores 0.33. The result's "
        "reference_fallback counts the replies scored by that draw and how many came out right (with the "
        "number chance alone would give); read the headline beside it. The paper's figures were read by the "
        f"authors' code of that time; grandrounds reads as the pinned evaluate_from_api.py ({M_ARC.commit[:7]})."
    )
    jitter = True
    protocols = _protocols(M_ARC_API, 8000, "its five patterns in order", True)

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, self.remote_files[0].filename)
        columns = (
            "question_id",
            "question",
            "options",
            "answer",
            "answer_index",
            "category",
            "src",
        )
        seen = IdSet(path)
        for no, row in read_rows(path, columns):
            opts = parse_options(path, no, row["options"])
            choices = options_from_list(path, no, opts)
            key = row["answer"].strip()
            if key not in choices or row["answer_index"].strip() != str(LETTERS.index(key)):
                raise DataError(
                    path,
                    no,
                    f"answer {row['answer']!r} and answer_index {row['answer_index']!r} disagree or name no option",
                )
            if not row["question"].strip():
                raise DataError(path, no, "empty question")
            sid = seen.add(row["question_id"].strip(), no)
            yield self.make_sample(
                sid, row["question"], choices, key, category=row["category"], src=row["src"]
            )
        if not len(seen):
            raise DataError(path, None, "no questions in the file")
