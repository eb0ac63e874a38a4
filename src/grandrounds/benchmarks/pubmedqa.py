"""PubMedQA PQA-L: yes/no/maybe questions on PubMed abstracts (500-item official test split).

Format: ``ori_pqal.json`` maps PMID -> ``{QUESTION, CONTEXTS[], LABELS[],
MESHES, YEAR, final_decision, LONG_ANSWER, ...}`` (1,000 items); ``test_ground_truth.json`` maps the
500 test PMIDs -> "yes"/"no"/"maybe". The prompt gives the abstract's CONTEXTS (without its
conclusion) and the question; options A=yes, B=no, C=maybe. Score: accuracy, plus macro-F1 over
the three labels, as the official ``evaluation.py`` reports (sklearn accuracy_score, f1_score
average="macro").

Protocols. PubMedQA's authors publish no prompt or generation settings for language models, so a
generated answer is asked and read our way under both protocols. They differ in aggregation:

- ``reference``: evaluation.py's figures, which need a prediction for every test PMID: an answer
  that failed or could not be read is submitted as the empty string, a wrong prediction that
  sklearn's macro-F1 treats as a fourth label (F1 0) in its mean, as it would for such a file;
- ``grandrounds``: accuracy over the answers obtained (failed calls excluded and counted) and
  macro-F1 over yes/no/maybe only (:func:`macro_f1_fixed`).

``letter-loglik`` follows lm-evaluation-harness's ``pubmedqa`` task: the context its
preprocess_pubmedqa.doc_to_text builds from CONTEXTS and QUESTION, and the choices yes/no/maybe as
continuations (the option texts, not letters). lm-eval reads the same 500 test items from
bigbio/pubmed_qa (pubmed_qa_labeled_fold0_source, test split).

Reading: ``split=all`` reads ``ori_pqal.json`` a record at a time (a PMID written twice is an
error there, where a whole-file read would keep its last record). The test split is asked in the
order of ``test_ground_truth.json``, which is not the order of ``ori_pqal.json`` (the published 500
test PMIDs are spread over it), so ``ori_pqal.json`` is read whole for it (1,000 records).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    cached,
    exam_protocols,
)
from grandrounds.benchmarks.readers.json_docs import iter_json_object, read_json
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Sample
from grandrounds.sources.protocols import OUR_ANSWER
from grandrounds.sources.upstream import LM_EVAL, python_returned_string

PUBMEDQA_COMMIT = "1cbae8e92f72f20c8d3747cbb3bf5bc53554d997"
REPO = f"https://raw.githubusercontent.com/pubmedqa/pubmedqa/{PUBMEDQA_COMMIT}/data"
LABELS = ("yes", "no", "maybe")
CHOICES = {"A": "yes", "B": "no", "C": "maybe"}

PUBMEDQA_TASK = LmEvalTask(
    "pubmedqa",
    LM_EVAL.file(
        "lm_eval/tasks/pubmedqa/pubmedqa.yaml",
        "a22eff48be7807a869ca9fa8739d1861c5f62b78f44b357d56cb017c6a83af6e",
    ),
    LM_EVAL.file(
        "lm_eval/tasks/pubmedqa/preprocess_pubmedqa.py",
        "43528eee61666d94ae9ac3d58bcd3a0c38182a8898f996f536be9de1d3655740",
    ),
)


def official_macro_f1(truth: Sequence[str], pred: Sequence[str]) -> float | None:
    """sklearn ``f1_score(truth, pred, average="macro")`` as evaluation.py calls it: the mean over every
    label found in either list (a non-label prediction such as "" is a label of its own) of
    2tp / (2tp + fp + fn)."""
    if not truth:
        return None
    labels = sorted(set(truth) | set(pred))
    f1s = []
    for lab in labels:
        tp = sum(1 for t, p in zip(truth, pred) if t == lab and p == lab)
        fp = sum(1 for t, p in zip(truth, pred) if t != lab and p == lab)
        fn = sum(1 for t, p in zip(truth, pred) if t == lab and p != lab)
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s)


def _protocols() -> dict:
    base = exam_protocols(PUBMEDQA_TASK)
    ref = replace(
        base["reference"],
        answer=OUR_ANSWER,
        extraction="generate: ours (PubMedQA publishes no prompt or reading for language models); log-prob modes: argmax",
        aggregation="evaluation.py: accuracy and sklearn macro-F1 over every test PMID; a failed or unread answer is the prediction ''",
        source=f"pubmedqa/pubmedqa@{PUBMEDQA_COMMIT[:7]} evaluation.py; {LM_EVAL.repo}@{LM_EVAL.commit[:7]} pubmedqa (letter-loglik)",
        settings={
            "prompt": {**base["reference"].settings["prompt"], "generate": "ours (none published)"}
        },
    )
    ours_ = replace(
        base["grandrounds"],
        extraction=ref.extraction,
        aggregation="accuracy over answers obtained (failed calls excluded); macro-F1 over yes/no/maybe only",
    )
    return {"reference": ref, "grandrounds": ours_}


def macro_f1_fixed(
    truth: Sequence[str], pred: Sequence[str | None], labels: Sequence[str] = LABELS
) -> float | None:
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
    description: ClassVar[str] = (
        "PubMedQA PQA-L yes/no/maybe, 500-item test split; accuracy and macro-F1"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{REPO}/ori_pqal.json",
            "ori_pqal.json",
            "8b3276be8942ebbd77f3ddcda12c1749bf0e490045a736fd8438ee40cf37a41d",
        ),
        RemoteFile(
            f"{REPO}/test_ground_truth.json",
            "test_ground_truth.json",
            "939fe566f09017d13b1ca64d2ddfee0bc2374b366048152997669cccedc44d51",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("label",)
    # text-loglik: the stem already ends with "Question: ...", so only "Answer:" follows it
    template_overrides = {"loglik_en": "{question}\nAnswer:"}
    lm_eval = PUBMEDQA_TASK
    reference_reading = "ours"
    loglik_labels = "texts"
    protocols = _protocols()
    protocol_differences = {
        "generate": (
            "same prompt and reading; reference: evaluation.py's accuracy and macro-F1 over every item (a failed or "
            "unread answer is a wrong prediction, its own class in F1); grandrounds: over the answers obtained, "
            "F1 over yes/no/maybe"
        ),
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }

    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="split",
            type=str,
            default="test",
            help="test: the 500 official test PMIDs; all: the 1,000 labelled ones",
            choices=("test", "all"),
        ),
        Param(
            name="contexts",
            type=bool,
            default=True,
            help="give the abstract's contexts (false: MIRAGE's PubMedQA* setting)",
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.split: str = self.param("split")
        self.contexts: bool = self.param("contexts")

    def data_files(self, root: Path) -> list[Path]:
        """ori_pqal.json, plus test_ground_truth.json beside it for the test split."""
        ori = resolve_file(root, "ori_pqal.json")
        labels = ori.parent / "test_ground_truth.json"
        if self.split == "test" and not labels.exists():
            raise DataError(
                labels,
                None,
                f"not found: the test split's labels must lie beside {ori.name} "
                f"(test_ground_truth.json, published with it in the PubMedQA repository: {REPO}/test_ground_truth.json); "
                f"put it there, or read all 1,000 labelled items with `grandrounds run pubmedqa --data {ori} --param split=all`",
            )
        return [ori] if self.split == "all" else [ori, labels]

    def records(self, root: Path) -> Iterator[Sample]:
        files = self.data_files(root)
        ori_path = files[0]
        no_records = "expected a JSON object mapping PMID -> record"
        if self.split == "all":  # every record, in the file's order: one at a time
            seen = IdSet(ori_path)
            for pmid, rec in iter_json_object(ori_path, no_records):
                seen.add(pmid, f"PMID {pmid}", "appears twice in the object")
                label = rec.get("final_decision") if isinstance(rec, dict) else None
                yield self._sample(ori_path, ori_path, pmid, label, rec)
            if not seen:
                raise DataError(ori_path, None, no_records)
            return
        data = read_json(ori_path)
        if not isinstance(data, dict) or not data:
            raise DataError(ori_path, None, no_records)
        key_path = resolve_file(files[1], files[1].name)
        wanted = read_json(key_path)
        if not isinstance(wanted, dict) or not wanted:
            raise DataError(key_path, None, "expected a JSON object mapping PMID -> yes/no/maybe")
        for pmid, label in wanted.items():
            if pmid not in data:
                raise DataError(key_path, f"PMID {pmid}", f"not found in {ori_path.name}")
            yield self._sample(ori_path, key_path, pmid, label, data[pmid])

    def _sample(self, ori: Path, key: Path, pmid: str, label: Any, rec: Any) -> Sample:
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
        return self.make_sample(
            pmid,
            question,
            CHOICES,
            target,
            label=label,
            year=rec.get("YEAR"),
            contexts=contexts,
            pubmed_question=rec["QUESTION"],
        )

    def check_options(self, options: RunOptions) -> RunOptions:
        checked = super().check_options(options)
        if checked.answer_mode == "letter-loglik" and not self.contexts:
            raise ConfigError(
                "pubmedqa: letter-loglik is lm-eval's pubmedqa task, which gives the abstract; drop contexts=false"
            )
        return checked

    def reference_prompt(self, sample: Sample) -> str:
        """PubMedQA publishes no prompt for language models: ours under both protocols."""
        return self.render(sample, "generate")

    def lm_eval_context(self, sample: Sample) -> str:
        """lm-eval pubmedqa's context (preprocess_pubmedqa.doc_to_text): the returned format string, read
        from the file, filled with the contexts joined by newlines (as the function joins them) and the question."""
        hooks = PUBMEDQA_TASK.hooks
        assert hooks is not None
        contexts = sample.metadata["contexts"]
        return cached(python_returned_string, hooks, "doc_to_text").render(
            {"ctxs": "\n".join(contexts), "doc['QUESTION']": sample.metadata["pubmed_question"]}
        )

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        """Macro-F1 over the labels (evaluation.py's under reference, over yes/no/maybe under grandrounds),
        from each answer's chosen option."""
        reference = options.protocol == "reference"
        truth, pred = [], []
        for (s, g), v in zip(pairs, values):
            if v is None:
                continue  # grandrounds: an answer not obtained is left out
            # both protocols read replies alike
            label = s.choices.get(g.details.get("extracted_original") or "")
            truth.append(s.metadata["label"])
            pred.append(label if label is not None else ("" if reference else None))
        out: dict[str, Any] = {
            "macro_f1": official_macro_f1(truth, [p if p is not None else "" for p in pred])
            if reference  # (where no prediction is None)
            else macro_f1_fixed(truth, pred)
        }
        if self.split == "test" and len(pairs) != 500:
            out["note"] = f"official evaluation needs all 500 test PMIDs; {len(pairs)} graded"
        return out

    def other_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        return {"macro_f1": self.extra_metrics(pairs, values, options)["macro_f1"]}
