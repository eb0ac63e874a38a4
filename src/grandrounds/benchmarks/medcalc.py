"""MedCalc-Bench: compute a clinical value from a patient note; three dataset versions.

Data (``--param version=...``; every version has the same columns, Python-literal ``Relevant
Entities`` included, and is scored by the same official code):

- ``v1.0`` (the default): ``dataset/test_data.csv`` from ncbi-nlp/MedCalc-Bench @ 5523b77, 1,047
  rows, sha256 pinned. It stays the default so that results stored as
  ``medcalc-bench`` keep meaning the data they were computed on.
- ``v1.2``: ``datasets/test_data.csv`` of the same repository, 1,100 rows (the file moved there on
  2025-11-18; also published as ncbi/MedCalc-Bench-v1.2 on Hugging Face). No commit with it is
  known here, so it is read from the ``main`` branch.
- ``verified``: ``datasets/test_data.csv`` from nikhilk7153/MedCalc-Bench-Verified @ 2df6974,
  1,100 rows, the physician-verified relabelling users of MedCalc-Bench are told to move to.

No checksum of v1.2 or Verified could be known when this was written (neither file is reachable
from where it was built), so the first download records the file's sha256 beside it in the cache
and every later use compares with that record and warns when it changed
(:mod:`grandrounds.sources.downloads`). The version is in the benchmark's spec and the file's sha256 in
``dataset_sha256``, both fingerprint fields the leaderboard splits settings on, so results of
different versions (or of a file that changed under a version's name) are never ranked together;
``extra["version"]`` names the version on every result. A local file passed with ``--data`` is read
as the version named; the v1.0 file under another version's name is refused.

Scoring code: ncbi-nlp/MedCalc-Bench @ 20b10f9 (``evaluation/run.py``, ``evaluate.py``,
``llm_inference.py``), the same for every version.

Protocols (``--protocol``):

- ``reference`` (default): the official zero-shot setup. The system message and the user message
  are run.py's ``zero_shot`` texts, read at run time out of the pinned run.py (never copied here);
  greedy decoding (temperature 0) with at most 4,096 new tokens, as llm_inference.py generates
  with open models (its OpenAI branch sends neither setting, so API defaults apply there). Answers
  are read as the official code reads them (:func:`~grandrounds.graders.medcalc_extract.official_reading`:
  whitespace collapsed, the last ``answer": ...}`` field, the calculator's special cases) and judged
  by check_correctness (:func:`~grandrounds.scoring.medcalc.official_correct`). Accuracy is over
  every answered row; a reply the official extraction reads no value from ("N/A", or the
  extraction raises) is wrong and counted (``n_unextractable``); a value check_correctness
  cannot evaluate ("007" is no Python literal) is wrong too, as it is there.
- ``grandrounds``: our prompt (a system message of ours, the official user layout with a format
  hint per answer kind), our generation settings, and our tolerant reading (precedence in
  :mod:`grandrounds.graders.medcalc_extract`: the official JSON shape even with a raw newline in
  the thinking string or unescaped quotes, unit numbers such as "1.73 m²" ignored, "%" read as
  the percent it states, a bare list read as nothing); same tolerance rules, unextracted answers
  wrong and counted.

A failed call (no reply after the executor's retries) is unscored under both protocols and
counted in ``n_unscored``: the official harness has no behaviour for it (run.py calls the model
outside its try, so the script stops and a re-run asks again), so it is an unknown, never a zero.
Each result carries the other protocol's accuracy in ``extra["other_protocol"]``, computed from
the per-answer ``details["other_value"]``.

Where the reference reading differs from the official code (the differential test,
tests/test_medcalc_reference.py, compares every test row in 24 reply shapes, 25,128 cases, and
finds no difference): a ``str(...)`` answer of a decimal calculator is evaluated by our restricted
evaluator, not by ``eval``. It agrees on numbers, arithmetic, comparisons and the functions the
official namespace offers; it reads as "N/A" what it does not evaluate (string arithmetic,
lambdas, comprehensions, numpy functions beyond the common ones, math.factorial/comb/perm,
integer powers too large to hold), which the official ``eval`` would compute, hang on or crash
with; and a string-valued result is read only when the string is a number literal (the official
code evaluates it again as code).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import (
    Aggregate,
    Benchmark,
    Prompt,
    RemoteFile,
    RunOptions,
    resolve_file,
)
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import file_sha256, text_hash
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.graders.medcalc_extract import parse_ground_truth
from grandrounds.scoring import medcalc as mc
from grandrounds.scoring.cells import accuracy_cell, group_cells
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import TextRef, UpstreamRepo, UpstreamText

COMMIT = "5523b7785c004912e76ca4db19efbd7367b23c40"
VERIFIED_REPO, VERIFIED_COMMIT = (
    "nikhilk7153/MedCalc-Bench-Verified",
    "2df697418a5c5b2ddf2e4dee548eebcc023487fb",
)


@dataclass(frozen=True)
class DatasetVersion:
    """One published version of the test set: where it is, its checksum if known, its row count."""

    name: str
    file: RemoteFile
    rows: int
    source: str

    def label(self) -> str:
        return f"{self.name} ({self.rows:,} rows, {self.source})"


#: The dataset versions, by ``--param version`` value. Cache file names differ, so versions never share a copy.
VERSIONS: dict[str, DatasetVersion] = {
    "v1.0": DatasetVersion(
        "v1.0",
        RemoteFile(
            f"https://raw.githubusercontent.com/ncbi-nlp/MedCalc-Bench/{COMMIT}/dataset/test_data.csv",
            "test_data.csv",
            "c2d23097f8bdb7ae4a77dbf4a5a767335df7303998d7c7664a73a29fd8e2b31a",
        ),
        1047,
        f"ncbi-nlp/MedCalc-Bench@{COMMIT[:7]}",
    ),
    "v1.2": DatasetVersion(
        "v1.2",
        RemoteFile(
            "https://raw.githubusercontent.com/ncbi-nlp/MedCalc-Bench/main/datasets/test_data.csv",
            "test_data-v1.2.csv",
            None,
        ),  # checksum recorded at the first download
        1100,
        "ncbi-nlp/MedCalc-Bench@main",
    ),
    "verified": DatasetVersion(
        "verified",
        RemoteFile(
            f"https://raw.githubusercontent.com/{VERIFIED_REPO}/{VERIFIED_COMMIT}/datasets/test_data.csv",
            "test_data-verified.csv",
            None,
        ),  # checksum recorded at the first download
        1100,
        f"{VERIFIED_REPO}@{VERIFIED_COMMIT[:7]}",
    ),
}
COLUMNS = (
    "Row Number",
    "Calculator ID",
    "Calculator Name",
    "Category",
    "Output Type",
    "Note ID",
    "Note Type",
    "Patient Note",
    "Question",
    "Relevant Entities",
    "Ground Truth Answer",
    "Lower Limit",
    "Upper Limit",
)
SYSTEM = (
    "You are a helpful assistant for calculating a score for a given patient note. Think step by step, "
    'then give the value asked for. Reply with only a JSON object {"step_by_step_thinking": "...", "answer": "..."}.'
)
FORMAT_HINT = {
    "date": "The answer must be a date in the format MM/DD/YYYY.",
    "gestational_age": "The answer must be a tuple of weeks and days, e.g. (4 weeks, 3 days).",
    "integer": "The answer must be a single whole number.",
    "decimal": "The answer must be a single number.",
}

# The official scoring code at a pinned commit (reference folder medcalc-bench).
MEDCALC_CODE = UpstreamRepo(
    "medcalc-bench", "ncbi-nlp/MedCalc-Bench", "20b10f9d66a8c3b0356ae3138533f5ec91666b6a"
)
_REPO, _CODE_COMMIT = MEDCALC_CODE.repo, MEDCALC_CODE.commit
RUN_PY = MEDCALC_CODE.file(
    "evaluation/run.py",
    "edc1725bceb993340a0ff7474173530e3988b356590d3fb8c97f04d83eedc9ac",
)
EVALUATE_PY = MEDCALC_CODE.file(
    "evaluation/evaluate.py",
    "e165e10cb1db77f7a1d97c6f386524547ce90d77ce56ae4d95f7544ad9320a1a",
)
LLM_INFERENCE_PY = MEDCALC_CODE.file(
    "evaluation/llm_inference.py",
    "a0f2c705218486664f3a15d47d24becb1323631896378432854726f0c018f271",
)
#: run.py zero_shot(note, question): the system message and the user message (an f-string of note and question).
OFFICIAL_SYSTEM = TextRef(RUN_PY, "system_msg", within="zero_shot")
OFFICIAL_USER = TextRef(RUN_PY, "user_temp", within="zero_shot")

REFERENCE = Protocol(
    name="reference",
    # llm_inference.py generate(): do_sample=False, temperature=0.0, max_length = prompt + 4096 (open models)
    answer=Generation(temperature=0.0, max_tokens=4096, system=OFFICIAL_SYSTEM),
    extraction="run.py extract_answer on the reply with whitespace collapsed (llm_inference.py answer): the last "
    "'answer\": ...}' field, the calculator's special cases; evaluate.py check_correctness",
    aggregation="accuracy over answered rows; unreadable answers wrong and counted; failed calls unscored",
    source=f"https://github.com/{_REPO}/tree/{_CODE_COMMIT}/evaluation",
    settings={
        "prompt": "zero_shot",
        "user_message": OFFICIAL_USER.describe(),
        "files": [f.describe() for f in (RUN_PY, EVALUATE_PY, LLM_INFERENCE_PY)],
        "openai_models": "llm_inference.py sends no temperature or max_tokens to OpenAI (API defaults)",
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="last JSON answer field read tolerantly (raw newlines, unescaped quotes), else an answer line; "
    "unit numbers ignored, '%' kept as percent, bare lists unreadable; same tolerance rules",
    aggregation="accuracy over answered rows; unreadable answers wrong and counted; failed calls unscored",
)
_DIFFERS = {
    "reference": "grandrounds reads JSON with raw newlines or unescaped quotes, ignores unit numbers, keeps '%' as percent, "
    "reads no bare list, and asks with its own prompt",
    "grandrounds": "the official reading: the last 'answer\":...}' match only, '%' divided by 100, a list counted, "
    "the last number even inside a unit",
}


class MedCalcBench(Benchmark):
    """MedCalc-Bench v1.0 (1,047 rows), v1.2 or Verified (1,100 rows); accuracy overall and per category."""

    name = "medcalc-bench"
    description = "MedCalc-Bench: patient notes, 55 calculators, official tolerance rules; versions v1.0 (1,047), v1.2, verified (1,100)"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    #: The default version's file; an instance keeps its own version's.
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (VERSIONS["v1.0"].file,)
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="version",
            type=str,
            default="v1.0",
            help="dataset version: v1.0 (1,047 rows, pinned), v1.2 or verified (1,100 rows; "
            "checksum recorded at first download)",
            choices=tuple(VERSIONS),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.version = VERSIONS[self.param("version")]
        self.remote_files = (self.version.file,)  # type: ignore[misc]  # the version's file only

    def data_file(self, root: Path) -> Path:
        """The file ``load`` reads: ``root`` itself, or in a directory the version's cache name, else
        the upstream name ``test_data.csv`` (a checkout of either repository)."""
        name = self.version.file.filename
        if root.is_dir() and not (root / name).exists() and (root / "test_data.csv").exists():
            name = "test_data.csv"
        return resolve_file(root, name)

    def data_files(self, root: Path) -> list[Path]:
        return [self.data_file(root)]

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        """The rows one at a time (a row's Patient Note spans lines; each row is read whole)."""
        path = self.data_file(root)
        v10 = VERSIONS["v1.0"].file.sha256
        if self.version.name != "v1.0" and file_sha256(path) == v10:
            raise DataError(
                path,
                None,
                f"this is the v1.0 file (sha256 {str(v10)[:12]}...), not {self.version.name}; "
                "drop --param version or pass that version's file",
            )
        for _, row in iter_csv(path, COLUMNS):
            yield self._row(path, row)

    def _row(self, path: Path, row: dict[str, str]) -> Sample:
        where = f"Row Number {row['Row Number']}"
        try:
            calc_id = int(row["Calculator ID"])
        except ValueError:
            raise DataError(
                path, where, f"Calculator ID {row['Calculator ID']!r} is not an integer"
            ) from None
        kind = mc.kind_of(calc_id, row["Output Type"].strip())
        if kind is None:
            raise DataError(path, where, f"unknown Output Type {row['Output Type']!r}")
        try:
            entities = ast.literal_eval(row["Relevant Entities"])  # a Python dict literal, not JSON
        except (ValueError, SyntaxError) as e:
            raise DataError(
                path, where, f"Relevant Entities is not a Python literal: {e}"
            ) from None
        truth = parse_ground_truth(row["Ground Truth Answer"], kind)
        lower = upper = None
        if kind == "decimal":
            try:
                lower, upper = float(row["Lower Limit"]), float(row["Upper Limit"])
            except ValueError:
                raise DataError(
                    path, where, "Lower/Upper Limit must be numbers for a decimal calculator"
                ) from None
        if truth is None:
            raise DataError(
                path, where, f"Ground Truth Answer {row['Ground Truth Answer']!r} is not a {kind}"
            )
        user = (
            f"Here is the patient note:\n{row['Patient Note']}\n\nHere is the task:\n{row['Question']}\n\n"
            f"{FORMAT_HINT[kind]}"
        )
        return Sample(
            id=row["Row Number"],
            benchmark=self.name,
            messages=(Message("system", SYSTEM), Message("user", user)),
            target={
                "kind": kind,
                "truth": row["Ground Truth Answer"],
                "lower": lower,
                "upper": upper,
                "lower_text": row["Lower Limit"],
                "upper_text": row["Upper Limit"],
            },
            metadata={
                "note": row["Patient Note"],
                "question": row["Question"],
                "calculator_id": calc_id,
                "calculator": row["Calculator Name"],
                "category": row["Category"],
                "output_type": row["Output Type"],
                "note_id": row["Note ID"],
                "note_type": row["Note Type"],
                "relevant_entities": entities,
                "explanation": row.get("Ground Truth Explanation", ""),
            },
        )

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        """Under ``reference`` the official user message (the runner puts the official system message
        before it, from the protocol); under ``grandrounds`` the sample's own messages."""
        if options.protocol != "reference":
            return super().prompt(sample, options, history)
        user = _loaded(OFFICIAL_USER).render(
            {"note": sample.metadata["note"], "question": sample.metadata["question"]}
        )
        return Prompt((Message("user", user),))

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        """The prompt a run sends: the official texts' fingerprints (file sha256 and text hash) under
        ``reference``, our prompt's hash under ``grandrounds`` (no upstream file is read then)."""
        if options is not None and options.protocol != "reference":
            ours_text = SYSTEM + "\n" + "\n".join(FORMAT_HINT[k] for k in sorted(FORMAT_HINT))
            return {"grandrounds": text_hash(ours_text)[:16]}
        return {
            "reference_system": _loaded(OFFICIAL_SYSTEM).fingerprint(),
            "reference_user": _loaded(OFFICIAL_USER).fingerprint(),
        }

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medcalc", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Accuracy (Wilson CI) overall and in two breakdown families; unextractable answers counted.

        Families: ``category`` (the file's Category: lab, risk, ...) and ``kind`` (the comparison
        rule: date, gestational_age, integer, decimal). A sample with no scored grade is unscored
        (a failed call under either protocol). ``extra["other_protocol"]`` holds the other
        protocol's accuracy over the same answers, from each grade's ``details["other_value"]``.
        """
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        mine, other = (
            options.protocol,
            "grandrounds" if options.protocol == "reference" else "reference",
        )

        def cell(items: Sequence[Grade | None], protocol: str = mine) -> Cell:
            return _cell([_item(g, protocol) for g in items])

        overall, other_cell = cell([g for _, g in rows]), cell([g for _, g in rows], other)
        return Aggregate.of(
            "accuracy",
            overall,
            {
                "category": group_cells(((s.metadata["category"], g) for s, g in rows), cell),
                "kind": group_cells(((s.target["kind"], g) for s, g in rows), cell),
            },
            {
                "n_unextractable": overall.metrics["n_unextractable"],
                "version": self.version.label(),
                "other_protocol": {
                    "protocol": other,
                    "score": other_cell.score,
                    "differs": _DIFFERS[mine],
                    "n_unextractable": other_cell.metrics["n_unextractable"],
                },
            },
        )


@functools.lru_cache(maxsize=4)
def _loaded(ref: TextRef) -> UpstreamText:
    """The official text, read once per process (the file is sha256-checked on the first read)."""
    return ref.load()


def _item(grade: Grade | None, protocol: str) -> tuple[float | None, bool]:
    """(value, unextractable) of one answer under ``protocol``: its own value where the grade was made
    under that protocol, else the other reading the grader stored (None where there is none)."""
    if grade is None or grade.value is None:
        return None, False
    d = grade.details
    if d.get("protocol", protocol) == protocol:
        return grade.value, bool(d.get("unextractable"))
    if "other_value" not in d:
        return None, False
    return d["other_value"], bool(d.get("other_unextractable"))


def _cell(items: Sequence[tuple[float | None, bool]]) -> Cell:
    """Accuracy of some answers, with how many had no readable value (those count as wrong)."""
    unextractable = sum(1 for value, unread in items if value is not None and unread)
    return accuracy_cell([value for value, _ in items], {"n_unextractable": unextractable})
