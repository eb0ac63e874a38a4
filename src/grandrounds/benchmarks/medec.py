"""MEDEC (MEDIQA-CORR 2024, MS collection): find and correct the one medical error, if any.

Data: ``MEDEC-MS-{Test,Validation}Set-with-GroundTruth-and-ErrorType.csv`` from abachaa/MEDEC @
70268d2 (PROTOCOLS.md section 6, format quirk 10). The test file ends with 328 blank rows, which
are dropped; Error Flag / Error Sentence ID are cast to int. Headline metric: Error-Flag
accuracy; sentence-id accuracy and the composite ROUGE-1 F of corrections sit beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions
from grandrounds.benchmarks.readers import read_csv
from grandrounds.errors import DataError
from grandrounds.params import Param
from grandrounds.records import Cell, Grade, Message, Sample
from grandrounds.registry import Spec
from grandrounds.scoring import medec as sc
from grandrounds.scoring.cells import accuracy_cell, group_cells, value_of
from grandrounds.stats import wilson_ci

COMMIT = "70268d24e3ce0cd6d0e099ff7bfd4966f2bbcc28"
_BASE = f"https://raw.githubusercontent.com/abachaa/MEDEC/{COMMIT}/MEDEC-MS"
TEST = RemoteFile(f"{_BASE}/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
                  "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
                  "f35e2c3c1e4d98ca900394c4fcff14c2a84752e48ddc83698401da6a360c707e")
VALIDATION = RemoteFile(f"{_BASE}/MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv",
                        "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv",
                        "7571aec311e2fb88d9084082af2323aa579d102e1d5e1a06faf930fe4fd3977d")
SPLITS = {"test": (TEST,), "validation": (VALIDATION,), "both": (TEST, VALIDATION)}
COLUMNS = ("Text ID", "Sentences", "Error Flag", "Error Type", "Error Sentence ID", "Corrected Sentence")
INSTRUCTIONS = (
    "The following is a clinical text about a patient, one sentence per line, each line starting with its "
    "sentence ID. You are a skilled physician reviewing it. The text is either correct or contains exactly one "
    "medical error (in diagnosis, management, treatment, pharmacotherapy or causal organism).\n"
    'Reply with only a JSON object: {"error": true or false, "sentence_id": the ID of the sentence with the '
    'error or -1, "corrected": the corrected sentence or "NA"}.'
)


def _int(raw: str, path: Path, where: str, column: str) -> int:
    """"1", "1.0" (as pandas writes it) -> 1; anything else is a DataError."""
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
    parameters = (Param("split", str, "test", "which MEDEC-MS file(s) a data directory is read from", tuple(SPLITS)),)

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [root / rf.filename for rf in SPLITS[self.param("split")]]

    def load(self, root: Path) -> list[Sample]:
        return [s for path in self.data_files(root) for s in self._load_file(path)]

    def _load_file(self, path: Path) -> list[Sample]:
        reader = read_csv(path, COLUMNS)
        split = "validation" if "Validation" in path.name else "test" if "Test" in path.name else "unknown"
        out = []
        for row in reader:
            if all(not (v or "").strip() for v in row.values()):
                continue  # the test file's trailing empty rows
            out.append(self._row(path, reader.line_num, row, split))
        return out

    def _row(self, path: Path, line: int, row: dict[str, str], split: str) -> Sample:
        tid = row["Text ID"].strip()
        where = f"line {line} ({tid or 'no Text ID'})"
        if not tid or not row["Sentences"].strip():
            raise DataError(path, where, "Text ID and Sentences are required")
        flag = _int(row["Error Flag"], path, where, "Error Flag")
        sid = _int(row["Error Sentence ID"], path, where, "Error Sentence ID")
        corrected = " ".join((row["Corrected Sentence"] or "").split()) or sc.NA
        if flag not in (0, 1) or (flag == 1) != (sid >= 0) or (flag == 1 and corrected == sc.NA):
            raise DataError(path, where, f"inconsistent ground truth: flag {flag}, sentence {sid}, correction {corrected!r}")
        sentences = "\n".join(ln.strip() for ln in row["Sentences"].splitlines() if ln.strip())
        return Sample(
            id=tid,
            benchmark=self.name,
            messages=(Message("user", f"{INSTRUCTIONS}\n\nText ID: {tid}\n\n{sentences}"),),
            target={"flag": flag, "sentence_id": sid, "corrected": corrected if flag else sc.NA},
            metadata={"split": split, "error_type": (row["Error Type"] or "").strip() or "NA",
                      "error_sentence": row.get("Error Sentence", "")},
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medec", {})

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Error-flag accuracy (Wilson CI); sentence accuracy and R1FC beside it, overall and per cell.

        Breakdown families ``error_type`` (``NA`` for texts without an error) and ``split``; a
        cell's score is its error-flag accuracy and its metrics are :data:`CELL_METRICS`.
        """
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        overall = accuracy_cell([value_of(g) for _, g in rows])
        return Aggregate.of(
            "error_flag_accuracy",
            overall,
            {fam: group_cells(((s.metadata[fam], g) for s, g in rows), _cell) for fam in ("error_type", "split")},
            _metrics([g for _, g in rows]) | {"rouge": "rouge_score rouge1 F (official scorer: python rouge package)"},
        )


#: What each breakdown cell carries beside its error-flag accuracy.
CELL_METRICS = ("error_sentence_accuracy", "r1fc", "reference_error_flag_accuracy",
                "reference_error_sentence_accuracy", "reference_r1fc", "n_unparseable")


def _cell(grades: Sequence[Grade | None]) -> Cell:
    """Error-flag accuracy of some texts with their sentence accuracy, R1FC and reference figures."""
    metrics = _metrics(grades)
    return accuracy_cell([value_of(g) for g in grades], {k: metrics[k] for k in CELL_METRICS})


def _metrics(grades: Sequence[Grade | None]) -> dict[str, Any]:
    """Sentence accuracy and R1FC over scored texts, plus the official figures counting unscored as wrong."""
    scored = [g for g in grades if g is not None and g.value is not None]
    n, total = len(scored), len(grades)
    flags = sum(1 for g in scored if g.value == 1.0)
    sents = sum(1 for g in scored if g.details.get("sentence_correct"))
    corr = sum(float(g.details.get("correction_score", 0.0)) for g in scored)
    return {
        "error_sentence_accuracy": sents / n if n else None,
        "error_sentence_ci95": wilson_ci(sents, n),
        "r1fc": corr / n if n else None,
        "reference_error_flag_accuracy": flags / total if total else None,
        "reference_error_sentence_accuracy": sents / total if total else None,
        "reference_r1fc": corr / total if total else None,
        "n": n,
        "n_texts": total,
        "n_unscored": total - n,
        "n_unparseable": sum(1 for g in scored if g.details.get("unparseable")),
    }
