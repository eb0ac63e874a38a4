"""MEDEC (MEDIQA-CORR 2024, MS collection): find and correct the one medical error, if any.

Data: ``MEDEC-MS-{Test,Validation}Set-with-GroundTruth-and-ErrorType.csv`` from abachaa/MEDEC @
70268d2. The test file ends with 328 blank rows, which
are dropped; Error Flag / Error Sentence ID are cast to int. Headline metric: Error-Flag
accuracy; sentence-id accuracy and the composite ROUGE figures of corrections sit beside it.

**Prompt.** MEDEC publishes no prompt and no generation settings (the shared task took submission
files), so both protocols send our :data:`INSTRUCTIONS` with our generation settings.

**Protocols.** ``reference`` fixes the official metrics of the task's scorer, abachaa/MEDIQA-CORR-2024
@ 4b87cb0 ``evaluation/mediqa-corr-2024-eval-script-2-all-metrics.py`` (:data:`SCORER`):

- a reply stands for its submission line ``<text id> <flag> <sentence id> <corrected sentence>``
  (a JSON reply is written as that line, :func:`grandrounds.graders.medec_extract.submission_text`),
  read as the scorer's ``parse_run_submission_file`` reads it: its line regex, its whitespace
  handling, quote stripping, NA forced by flag ``"0"``, the last line of a text winning;
- flag and sentence id compared as strings with the reference, over every text: a failed call, an
  unreadable reply or an invalid line counts wrong on every metric (``compute_accuracy``);
- corrections by ``get_nlg_eval_data``'s rules (both NA -> 1, one NA -> 0) and the ``rouge``
  package for the other pairs, case-sensitive, against the reference correction as the scorer's
  ``parse_reference_file`` reads it (the cell as written, whitespace and all): R1FC, R2FC, RLFC
  and the per-pair means (``*_subset``);
- BERTScore, BLEURT and ``AggregateC`` are not computed (reported as None, never 0): they need the
  microsoft/deberta-xlarge-mnli and BLEURT-20 checkpoints, which grandrounds does not fetch.

``grandrounds`` keeps our refinements: tolerant reading (full-width folded, any-case NA, quotes
and line breaks dropped), ROUGE from ``rouge_score`` (lower-cased, punctuation dropped: a
correction is not penalised for case or a trailing full stop), failed calls excluded. Each result
carries the other protocol's figure in ``extra["other_protocol"]``.

**Where ``reference`` is not the official script's output** (each checked in tests/test_medec_reference.py):

1. The published test CSV has 328 empty rows, so pandas reads Error Flag / Error Sentence ID as
   floats and ``parse_reference_file`` keeps ``"1.0"`` / ``"10.0"`` (and one NaN text id): run on
   that file as published, the script counts every flag and sentence id wrong. We score as the
   script does on the file without those rows (the layout of the validation file): ``"1"``, ``"10"``.
2. A correction the ``rouge`` package refuses (made only of full stops or whitespace: "Hypothesis
   is empty.") stops the official script before it prints any correction figure; here that pair
   scores 0 on R1/R2/RL and is counted (``n_rouge_errors``).
3. A line with a bad backslash escape (a backslash before ``d`` or ``1``; see
   ``medec_extract._ONE_SPACE``) stops the official parser; here that text counts as missing and
   is counted (``n_official_errors``).
4. Each reply is read for its own text: a line in it naming another text is ignored, where in one
   concatenated submission file it would overwrite that text's prediction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring import medec as sc
from grandrounds.scoring.cells import accuracy_cell, group_cells, value_of
from grandrounds.scoring.stats import wilson_ci
from grandrounds.sources.protocols import Protocol, ours
from grandrounds.sources.upstream import UpstreamRepo

COMMIT = "70268d24e3ce0cd6d0e099ff7bfd4966f2bbcc28"
_BASE = f"https://raw.githubusercontent.com/abachaa/MEDEC/{COMMIT}/MEDEC-MS"
TEST = RemoteFile(
    f"{_BASE}/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
    "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
    "f35e2c3c1e4d98ca900394c4fcff14c2a84752e48ddc83698401da6a360c707e",
)
VALIDATION = RemoteFile(
    f"{_BASE}/MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv",
    "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv",
    "7571aec311e2fb88d9084082af2323aa579d102e1d5e1a06faf930fe4fd3977d",
)
SPLITS = {"test": (TEST,), "validation": (VALIDATION,), "both": (TEST, VALIDATION)}
COLUMNS = (
    "Text ID",
    "Sentences",
    "Error Flag",
    "Error Type",
    "Error Sentence ID",
    "Corrected Sentence",
)
INSTRUCTIONS = (
    "The following is a clinical text about a patient, one sentence per line, each line starting with its "
    "sentence ID. You are a skilled physician reviewing it. The text is either correct or contains exactly one "
    "medical error (in diagnosis, management, treatment, pharmacotherapy or causal organism).\n"
    'Reply with only a JSON object: {"error": true or false, "sentence_id": the ID of the sentence with the '
    'error or -1, "corrected": the corrected sentence or "NA"}.'
)

#: The shared task's scorer: the reference protocol's metrics are its metrics (not read at run time: it holds no prompt).
MEDIQA_CORR = UpstreamRepo(
    "medec", "abachaa/MEDIQA-CORR-2024", "4b87cb01c34d22bdef2423206305b2bedb1fe893"
)
SCORER = MEDIQA_CORR.file(
    "evaluation/mediqa-corr-2024-eval-script-2-all-metrics.py",
    "0fe35f884fdbf8347b4e7f412bb027069df19b6fa1a967f6d549349b72c7914b",
)
_REFERENCE = Protocol(
    name="reference",
    extraction="the reply as a submission line '<text id> <flag> <sentence id> <correction>' (JSON written as one), "
    "read as the official parse_run_submission_file reads it; fields compared as strings",
    aggregation="official: flag and sentence-id accuracy over all texts (missing = wrong); R1FC/R2FC/RLFC with the "
    "rouge package (case-sensitive); BERTScore, BLEURT and AggregateC not computed",
    source=SCORER.url,
    settings={
        "scorer": SCORER.describe(),
        "rouge": "rouge 1.0.1, Rouge().get_scores",
        "prompt": "ours: MEDEC publishes no prompt or generation settings",
    },
)
PROTOCOLS = {
    "reference": _REFERENCE,
    "grandrounds": ours(
        _REFERENCE,
        extraction="JSON or submission line, tolerant: full-width folded, any-case NA, quotes and line breaks dropped",
        aggregation="flag and sentence-id accuracy over answered texts (failed calls excluded); R1FC/R2FC/RLFC with "
        "rouge_score (lower-cased, punctuation dropped)",
    ),
}
#: One line on what the other protocol does differently, keyed by the protocol a result used.
_DIFFERS = {
    "reference": "grandrounds reads replies tolerantly, scores corrections with rouge_score (lower-cased) and "
    "excludes failed calls",
    "grandrounds": "reference reads the official submission line, scores corrections with the case-sensitive rouge "
    "package and counts failed calls wrong",
}


def _int(raw: str, path: Path, where: str, column: str) -> int:
    """ "1", "1.0" (as pandas writes it) -> 1; anything else is a DataError."""
    try:
        f = float(raw)
    except ValueError:
        raise DataError(path, where, f"{column} {raw!r} is not a number") from None
    if not f.is_integer():
        raise DataError(path, where, f"{column} {raw!r} is not an integer")
    return int(f)


class MEDEC(Benchmark):
    """MEDEC-MS. Param ``split``: test (default) | validation | both."""

    name = "medec"
    description = "MEDEC-MS: detect and correct one medical error in clinical notes (597 test, 574 validation)"
    remote_files = (TEST, VALIDATION)
    parameters = (
        Param(
            name="split",
            type=str,
            default="test",
            help="which MEDEC-MS file(s) a data directory is read from",
            choices=tuple(SPLITS),
        ),
    )
    protocols = PROTOCOLS

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [root / rf.filename for rf in SPLITS[self.param("split")]]

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        for path in self.data_files(root):
            yield from self._iter_file(path)

    def _iter_file(self, path: Path) -> Iterator[Sample]:
        """The file's texts one at a time; ``line`` in an error is the line the row starts on."""
        reader = iter_csv(path, COLUMNS)
        split = (
            "validation"
            if "Validation" in path.name
            else "test"
            if "Test" in path.name
            else "unknown"
        )
        for line, row in reader:
            if all(not (v or "").strip() for v in row.values()):
                continue  # the test file's trailing empty rows
            yield self._row(path, line, row, split)

    def _row(self, path: Path, line: int, row: dict[str, str], split: str) -> Sample:
        tid = row["Text ID"].strip()
        where = f"line {line} ({tid or 'no Text ID'})"
        if not tid or not row["Sentences"].strip():
            raise DataError(path, where, "Text ID and Sentences are required")
        flag = _int(row["Error Flag"], path, where, "Error Flag")
        sid = _int(row["Error Sentence ID"], path, where, "Error Sentence ID")
        raw = row["Corrected Sentence"] or ""
        corrected = " ".join(raw.split()) or sc.NA
        if flag not in (0, 1) or (flag == 1) != (sid >= 0) or (flag == 1 and corrected == sc.NA):
            raise DataError(
                path,
                where,
                f"inconsistent ground truth: flag {flag}, sentence {sid}, correction {corrected!r}",
            )
        sentences = "\n".join(ln.strip() for ln in row["Sentences"].splitlines() if ln.strip())
        return Sample(
            id=tid,
            benchmark=self.name,
            messages=(Message("user", f"{INSTRUCTIONS}\n\nText ID: {tid}\n\n{sentences}"),),
            # corrected_raw: the cell as the official parse_reference_file reads it (pandas' NA spellings -> "NA")
            target={
                "flag": flag,
                "sentence_id": sid,
                "corrected": corrected if flag else sc.NA,
                "corrected_raw": sc.NA if raw in sc.PANDAS_NA else raw,
            },
            metadata={
                "split": split,
                "error_type": (row["Error Type"] or "").strip() or "NA",
                "error_sentence": row.get("Error Sentence", ""),
            },
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medec", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Error-flag accuracy (Wilson CI) with sentence accuracy and R1FC/R2FC/RLFC beside it, overall and per cell.

        Under ``reference`` every text is in the denominator: ``n`` is every text and ``n_unscored``
        the texts without an answer inside it (wrong on every metric); under ``grandrounds`` ``n``
        is the answered texts and the others are unscored.
        Breakdown families ``error_type`` (``NA`` for texts without an error) and ``split``; a
        cell's score is its error-flag accuracy and its metrics are :data:`CELL_METRICS`.
        """
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        mine = options.protocol
        other = next(p for p in PROTOCOLS if p != mine)
        figs = _figures([g for _, g in rows], mine)
        assert figs is not None  # a grade's own figures are always in its details
        theirs = _figures([g for _, g in rows], other, own=False)
        extra = figs | {
            "error_sentence_ci95": wilson_ci(figs["n_sentence_correct"], figs["n"]),
            "rouge": "rouge 1.0.1 (the official scorer's)"
            if mine == "reference"
            else "rouge_score (lower-cased)",
            **dict.fromkeys(sc.NOT_COMPUTED),
            "not_computed": sc.NOT_COMPUTED_WHY,
            "other_protocol": {
                "protocol": other,
                "score": None if theirs is None else theirs["error_flag_accuracy"],
                "r1fc": None if theirs is None else theirs["r1fc"],
                "differs": _DIFFERS[mine],
            },
        }
        cells = {
            fam: group_cells(((s.metadata[fam], g) for s, g in rows), lambda gs: _cell(gs, mine))
            for fam in ("error_type", "split")
        }
        return Aggregate.of("error_flag_accuracy", _cell([g for _, g in rows], mine), cells, extra)


#: What each breakdown cell carries beside its error-flag accuracy.
CELL_METRICS = ("error_sentence_accuracy", "r1fc", "n_unparseable", "n_no_answer")


def _figures(
    grades: Sequence[Grade | None], protocol: str, own: bool = True
) -> dict[str, Any] | None:
    """``protocol``'s figures over these texts, from each grade's own details or its ``other`` ones.

    A grade without a value (failed call, grading error) or no grade is a text without an answer.
    None when an answered grade lacks the other protocol's figures (graded before they were kept).
    """
    items: list[dict[str, Any] | None] = []
    for g in grades:
        if g is None or g.value is None:
            items.append(None)
            continue
        d = g.details if own else g.details.get("other")
        if d is None:
            return None
        value = g.value if own else g.details.get("other_value")
        items.append({**d, "flag_correct": value == 1.0})  # the grade's value is its flag verdict
    return sc.figures(items, count_missing=protocol == "reference")


def _cell(grades: Sequence[Grade | None], protocol: str) -> Cell:
    """Error-flag accuracy of some texts with their sentence accuracy, R1FC and counts."""
    figs = _figures(grades, protocol)
    assert figs is not None
    values = [value_of(g) for g in grades]
    metrics = {k: figs[k] for k in CELL_METRICS}
    if protocol != "reference":
        return accuracy_cell(values, metrics)
    # a text without an answer is wrong (the official compute_accuracy): n is every text, and
    # n_unscored counts those without an answer inside it
    cell = accuracy_cell([0.0 if v is None else v for v in values], metrics)
    return replace(cell, n_unscored=figs["n_no_answer"])
