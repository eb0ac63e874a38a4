"""PubMedQA PQA-L: yes/no/maybe questions on PubMed abstracts (500-item official test split).

Format (PROTOCOLS.md section 6): ``ori_pqal.json`` maps PMID -> ``{QUESTION, CONTEXTS[], LABELS[],
MESHES, YEAR, final_decision, LONG_ANSWER, ...}`` (1,000 items); ``test_ground_truth.json`` maps the
500 test PMIDs -> "yes"/"no"/"maybe". The prompt gives the abstract's CONTEXTS (without its
conclusion) and the question; options A=yes, B=no, C=maybe. Score: accuracy, plus macro-F1 over
the three labels, as the official ``evaluation.py`` reports (sklearn accuracy_score, f1_score
average="macro").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Sequence

from grandrounds.benchmarks.base import RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.benchmarks.readers import read_json, require_fields
from grandrounds.errors import DataError
from grandrounds.params import Param
from grandrounds.records import Grade, Sample

REPO = "https://raw.githubusercontent.com/pubmedqa/pubmedqa/1cbae8e92f72f20c8d3747cbb3bf5bc53554d997/data"
LABELS = ("yes", "no", "maybe")
CHOICES = {"A": "yes", "B": "no", "C": "maybe"}


def macro_f1_fixed(truth: Sequence[str], pred: Sequence[str | None], labels: Sequence[str] = LABELS) -> float | None:
    """Mean over ``labels`` of per-label F1 (2tp / (2tp + fp + fn), 0 when undefined).

    Like sklearn ``f1_score(average="macro", labels=labels)``: an unreadable prediction (None)
    is a miss for its true label but adds no extra class that would dilute the mean.
    """
    if not truth:
        return None
    f1s = []
    for lab in labels:
        tp = sum(1 for t, p in zip(truth, pred) if t == lab and p == lab)
        fp = sum(1 for t, p in zip(truth, pred) if t != lab and p == lab)
        fn = sum(1 for t, p in zip(truth, pred) if t == lab and p != lab)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return sum(f1s) / len(f1s)


class PubMedQA(MultipleChoiceBenchmark):
    """PubMedQA labelled set; ``split="test"`` (500, default) or ``"all"`` (1,000); ``contexts=False``
    drops the abstract (MIRAGE's PubMedQA* setting)."""

    name: ClassVar[str] = "pubmedqa"
    description: ClassVar[str] = "PubMedQA PQA-L yes/no/maybe, 500-item test split; accuracy and macro-F1"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{REPO}/ori_pqal.json", "ori_pqal.json", "8b3276be8942ebbd77f3ddcda12c1749bf0e490045a736fd8438ee40cf37a41d"
        ),
        RemoteFile(
            f"{REPO}/test_ground_truth.json",
            "test_ground_truth.json",
            "939fe566f09017d13b1ca64d2ddfee0bc2374b366048152997669cccedc44d51",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("label",)
    # the stem already ends with "Question: ..." (lm-eval's pubmedqa context: abstract, question, "Answer:")
    template_overrides = {"loglik_en": "{question}\nAnswer:"}

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("split", str, "test", "test: the 500 official test PMIDs; all: the 1,000 labelled ones", ("test", "all")),
        Param("contexts", bool, True, "give the abstract's contexts (false: MIRAGE's PubMedQA* setting)"),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.split: str = self.param("split")
        self.contexts: bool = self.param("contexts")

    def data_files(self, root: Path) -> list[Path]:
        """ori_pqal.json, plus test_ground_truth.json beside it for the test split."""
        ori = resolve_file(root, "ori_pqal.json")
        return [ori] if self.split == "all" else [ori, ori.parent / "test_ground_truth.json"]

    def load(self, root: Path) -> list[Sample]:
        files = self.data_files(root)
        ori_path = files[0]
        data = read_json(ori_path)
        if not isinstance(data, dict) or not data:
            raise DataError(ori_path, None, "expected a JSON object mapping PMID -> record")
        if self.split == "all":
            wanted = {pmid: rec.get("final_decision") if isinstance(rec, dict) else None for pmid, rec in data.items()}
            key_path = ori_path
        else:
            key_path = resolve_file(files[1], files[1].name)
            wanted = read_json(key_path)
            if not isinstance(wanted, dict) or not wanted:
                raise DataError(key_path, None, "expected a JSON object mapping PMID -> yes/no/maybe")
        return [self._sample(ori_path, key_path, pmid, label, data) for pmid, label in wanted.items()]

    def _sample(self, ori: Path, key: Path, pmid: str, label: Any, data: dict[str, Any]) -> Sample:
        if pmid not in data:
            raise DataError(key, f"PMID {pmid}", f"not found in {ori.name}")
        rec = data[pmid]
        if not isinstance(rec, dict):
            raise DataError(ori, f"PMID {pmid}", "record is not a JSON object")
        require_fields(ori, f"PMID {pmid}", rec, ("QUESTION", "CONTEXTS", "final_decision"))
        if label not in LABELS:
            raise DataError(key, f"PMID {pmid}", f"label must be yes/no/maybe, got {label!r}")
        contexts = rec["CONTEXTS"]
        if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
            raise DataError(ori, f"PMID {pmid}", "CONTEXTS must be a list of strings")
        question = rec["QUESTION"]
        if self.contexts:
            question = "Context: " + "\n".join(contexts) + "\n\nQuestion: " + question
        target = next(k for k, v in CHOICES.items() if v == label)
        return self.make_sample(pmid, question, CHOICES, target, label=label, year=rec.get("YEAR"))

    def extra_metrics(self, scored: Sequence[tuple[Sample, Grade]], options: RunOptions) -> dict[str, Any]:
        """Macro-F1 over yes/no/maybe (official evaluation.py), from the chosen option's label."""
        truth = [s.metadata["label"] for s, _ in scored]
        pred = [s.choices.get(g.details.get("extracted_original") or "") for s, g in scored]
        out: dict[str, Any] = {"macro_f1": macro_f1_fixed(truth, pred)}
        if self.split == "test" and len(scored) != 500:
            out["note"] = f"official evaluation needs all 500 test PMIDs; {len(scored)} scored"
        return out
