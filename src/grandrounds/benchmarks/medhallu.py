"""MedHallu (pqa_labeled): is this answer to a PubMedQA question hallucinated? 1,000 rows, 2,000 checks.

Data: the HF ``save_to_disk`` folder in askerlee/MedHallu @ d05d4ba (a fork of the official MedHallu
repository; its ``dataset_info.json`` records it was built from HF ``UTAustin-AIHealth/MedHallu`` at the
revision MedHELM pins), ``Detection/MedHallu_pqa_labeled/train/data-00000-of-00001.arrow``, an Arrow IPC
stream, sha256-pinned (reading it needs ``pyarrow``). MIT. Each row gives two items, as MedHELM and
Medmarks run it: its ground-truth answer (label "0") and its hallucinated answer (label "1"), ids
``ROW/truth`` and ``ROW/hallucinated``. ``--param knowledge=true`` adds the row's PubMed passages.

Protocols. The authors' detection script (MedHallu/MedHallu ``Detection/detection_vllm_notsurecase.py``)
could not be pinned; ``reference`` is the named peer that reproduces it, Medmarks' ``medhallu``
environment (tmabraham/med-lm-envs @ 7ee0452): its system prompt and user prompt
(``environments/medhallu/medhallu/prompts.py``, the paper's prompts with ``\\boxed{}`` added, read at
run time), its reading and the paper's metric as Medmarks' ``postprocess.py`` computes it: answers of
"not sure" (2) and unreadable answers dropped and counted, then F1 with "hallucinated" as the positive
class (:mod:`grandrounds.scoring.medhallu`), overall and per difficulty. ``grandrounds``: our prompt,
temperature 0 and a tolerant reading; the same metric. Failed calls are dropped and counted under both
(a missing completion is ``dropped_missing`` in ``postprocess.py``). Medmarks' own training reward
(1 right, 0.01 not sure, 0 otherwise) is in ``extra``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RemoteFile, RunOptions
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.medhallu import detection_metrics
from grandrounds.sources.protocols import OUR_ANSWER, Generation, Protocol, ours
from grandrounds.sources.upstream import MEDMARKS, TextRef, python_string

REPO = "askerlee/MedHallu"
COMMIT = "d05d4bafb2f54f17212be626da35bb0721565d55"
ARROW = RemoteFile(
    f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/Detection/MedHallu_pqa_labeled/train/data-00000-of-00001.arrow",
    "data-00000-of-00001.arrow",
    "f5725cf91f540abf5c4ec06f42cba165f90b6a57df2d3141c17f5d633fb526e6",
)
PROMPTS = MEDMARKS.file(
    "environments/medhallu/medhallu/prompts.py",
    "46a22312f1a3c7f77c183898ad9502585bf60d2bf39f3cec74cebe34591400f5",
)
POSTPROCESS = MEDMARKS.file(
    "environments/medhallu/postprocess.py",
    "4b7e7fcffa6b6f60a2594f695efdb3a5926b2996d7990a02c20d0adb2f4213e8",
)
COLUMNS = (
    "Question",
    "Knowledge",
    "Ground Truth",
    "Difficulty Level",
    "Hallucinated Answer",
    "Category of Hallucination",
)

#: Our prompt (the grandrounds protocol).
TEMPLATE = (
    "You are checking answers to biomedical research questions for hallucinations: statements that are not "
    "supported by, or contradict, established medical knowledge, misread the question, leave out what it "
    "asks, or invent methods, data or mechanisms.\n\n{knowledge}Question: {question}\nAnswer: {answer}\n\n"
    "Is this answer factual (0) or hallucinated (1)? If you are not sure, say 2 rather than guess. "
    'End your reply with one line "Judgement: X", where X is 0, 1 or 2.'
)

REFERENCE = Protocol(
    name="reference",
    # Medmarks leaves sampling to its runner's defaults (none pinned): ours; the system prompt is its own
    answer=Generation(temperature=0.0, max_tokens=1024, system=TextRef(PROMPTS, "system_prompt")),
    extraction="verifiers v0.1.7.post0 extract_boxed_answer (last \\boxed{}, else the whole reply), kept only when exactly 0, 1 or 2",
    aggregation="F1 (positive: hallucinated) over 0/1 verdicts; 'not sure' (2), unreadable and failed answers dropped and counted",
    source=f"{PROMPTS.repo}@{PROMPTS.commit[:7]} environments/medhallu (prompts.py, postprocess.py); paper arXiv 2502.14302",
    settings={
        "prompt": "prompts.py system_prompt + create_prompt_no_knowledge / create_prompt_with_knowledge"
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    answer=OUR_ANSWER,
    extraction="last \\boxed{0|1|2} or 'Judgement: X' line, tolerant",
    settings={"prompt": "ours"},
)


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, row) of the Arrow IPC stream, a record batch at a time."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError:
        raise ConfigError(
            "medhallu reads an Arrow file: install pyarrow (pip install 'grandrounds[reports]')"
        ) from None
    try:
        reader = ipc.open_stream(pa.OSFile(str(path), "rb"))
        missing = [c for c in COLUMNS if c not in reader.schema.names]
        if missing:
            raise DataError(path, None, f"missing columns: {', '.join(missing)}")
        no = 0
        for batch in reader:
            for row in batch.to_pylist():
                no += 1
                yield no, row
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(path, None, f"not a readable Arrow IPC stream ({e})") from None


class MedHallu(Benchmark):
    """MedHallu pqa_labeled: F1 of hallucination detection over both answers of each row."""

    name: ClassVar[str] = "medhallu"
    description: ClassVar[str] = (
        "MedHallu pqa_labeled, 1,000 PubMedQA-based rows x (ground truth, hallucinated answer): detect the "
        "hallucination; F1 (positive: hallucinated) by difficulty. MIT; from a fork holding the HF data"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (ARROW,)
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    reference_fidelity = {
        "reference": "Medmarks' `medhallu` environment and `postprocess.py` (the named peer; the "
        "authors publish no scoring script), with the verifiers release Medmarks runs (v0.1.7.post0)",
        "reader": "`extract_boxed_answer`: the LAST `\\boxed{}` (braces matched), else the whole "
        "reply; kept only when it is exactly 0, 1 or 2",
        "prompt": "Medmarks `prompts.py` (system prompt and user prompt, read at run time)",
        "equal": "each reply's verdict, checked against `extract_boxed_answer` executed from the pinned "
        "verifiers file through the CLI on 400 written shapes (0 differ); F1 as `postprocess.py`",
        "differs": "greedy here (Medmarks pins no sampling settings). Older verifiers releases took "
        "the first `\\boxed{}`; the release pinned is the newest Medmarks accepts",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="knowledge",
            type=bool,
            default=False,
            help="show the row's PubMed passages (Medmarks use_knowledge; off by default there)",
        ),
    )

    def data_files(self, root: Path) -> list[Path]:
        if not root.is_dir():
            return [root]
        for sub in ("", "train", "MedHallu_pqa_labeled/train"):
            if (root / sub / ARROW.filename).is_file():
                return [root / sub / ARROW.filename]
        raise DataError(
            root / ARROW.filename, None, f"file not found in directory {root} (nor in train/)"
        )

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path = self.data_files(root)[0]
        n = 0
        for no, row in read_rows(path):
            n += 1
            yield from self._samples(path, no, row)
        if not n:
            raise DataError(path, None, "no rows")

    def _samples(self, path: Path, no: int, row: dict[str, Any]) -> list[Sample]:
        for col in ("Question", "Ground Truth", "Hallucinated Answer", "Difficulty Level"):
            if not isinstance(row.get(col), str) or not row[col].strip():
                raise DataError(path, f"row {no}", f"empty {col!r}")
        knowledge = row.get("Knowledge")
        if not isinstance(knowledge, list) or not all(isinstance(k, str) for k in knowledge):
            raise DataError(path, f"row {no}", "'Knowledge' is not a list of strings")
        meta = {
            "question": row["Question"],
            "knowledge": knowledge,
            "difficulty": row["Difficulty Level"].strip(),
            "category": (row.get("Category of Hallucination") or "").strip(),
            "row": no,
        }
        return [
            Sample(
                id=f"{no}/{kind}",
                benchmark=self.name,
                target=label,
                metadata={**meta, "answer": row[col], "kind": kind},
                messages=(Message("user", self.our_prompt({**meta, "answer": row[col]})),),
            )
            for kind, col, label in (
                ("truth", "Ground Truth", "0"),
                ("hallucinated", "Hallucinated Answer", "1"),
            )
        ]

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        m, with_knowledge = sample.metadata, self.param("knowledge")
        if options.protocol == "reference":
            within = (
                "create_prompt_with_knowledge" if with_knowledge else "create_prompt_no_knowledge"
            )
            values = {
                "question": m["question"],
                "option1": m["answer"],
                "knowledge": str(m["knowledge"]),
            }
            text = python_string(PROMPTS, "prompt", within=within).render(
                values
            )  # Knowledge as the list's str(), as there
        else:
            text = self.our_prompt(m)
        return Prompt((Message("user", text),))

    def our_prompt(self, m: Any) -> str:
        passages = (
            "Knowledge:\n" + "\n".join(m["knowledge"]) + "\n\n" if self.param("knowledge") else ""
        )
        return TEMPLATE.format(knowledge=passages, question=m["question"], answer=m["answer"])

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.core.hashing import text_hash

        return {
            "ours": text_hash(TEMPLATE)[:16],
            f"{PROMPTS.folder}/{PROMPTS.path}": PROMPTS.sha256,
        }

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medhallu", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        pairs = [(s, by_id[s.id]) for s in samples if s.id in by_id]
        other_name = "grandrounds" if options.protocol == "reference" else "reference"
        mine = [(s.target, g.details.get("prediction")) for s, g in pairs]
        other = [(s.target, g.details.get("other_prediction")) for s, g in pairs]
        figures = detection_metrics([t for t, _ in mine], [p for _, p in mine])
        overall = Cell(
            score=figures["f1"],
            n=figures["kept"],
            n_unscored=figures["total"] - figures["kept"],
            ci95=f1_ci(mine),
            metrics={k: figures[k] for k in ("precision", "recall", "accuracy")},
        )
        breakdown = {
            "difficulty": {
                d: _cell([m for m, (s, _) in zip(mine, pairs) if s.metadata["difficulty"] == d])
                for d in ("easy", "medium", "hard")
                if any(s.metadata["difficulty"] == d for s, _ in pairs)
            },
            "answer": {
                k: _cell([m for m, (s, _) in zip(mine, pairs) if s.metadata["kind"] == k])
                for k in ("truth", "hallucinated")
            },
        }
        reward = [1.0 if p == t else 0.01 if p == "2" else 0.0 for t, p in mine]
        extra: dict[str, Any] = {
            **figures,
            "n_failed": sum(1 for _, g in pairs if g.status == "answer_failed"),
            "abstention_rate": figures["dropped_unsure"] / figures["total"]
            if figures["total"]
            else None,
            "medmarks_reward_mean": sum(reward) / len(reward) if reward else None,
            "other_protocol": {
                "protocol": other_name,
                # nothing read the other way is an unknown, not an F1 of 0
                "score": o["f1"]
                if (o := detection_metrics([t for t, _ in other], [p for _, p in other]))["kept"]
                else None,
                "differs": "reference: Medmarks' prompt and boxed reading; grandrounds: our prompt, "
                "temperature 0, tolerant reading (the other figure re-reads these same replies)",
            },
        }
        return Aggregate.of("f1", overall, breakdown, extra)


def _cell(items: Sequence[tuple[str, str | None]]) -> Cell:
    f = detection_metrics([t for t, _ in items], [p for _, p in items])
    return Cell(
        score=f["f1"],
        n=f["kept"],
        n_unscored=f["total"] - f["kept"],
        ci95=f1_ci(items),
        metrics={  # rates over no kept item are unknowns, not zeros
            "precision": f["precision"] if f["kept"] else None,
            "recall": f["recall"] if f["kept"] else None,
            "accuracy": f["accuracy"] if f["kept"] else None,
            "not_sure": f["dropped_unsure"],
        },
    )


def f1_ci(
    items: Sequence[tuple[str, str | None]], n_resamples: int = 1000, seed: int = 0
) -> tuple[float, float] | None:
    """95% percentile interval of F1 over items resampled with replacement (the kept items; seeded)."""
    import numpy as np

    kept = [(t, p) for t, p in items if p in ("0", "1")]
    if not kept:
        return None
    tp = np.array([t == "1" and p == "1" for t, p in kept], dtype=float)
    fp = np.array([t != "1" and p == "1" for t, p in kept], dtype=float)
    fn = np.array([t == "1" and p != "1" for t, p in kept], dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(kept), size=(n_resamples, len(kept)))
    a, b, c = tp[idx].sum(axis=1), fp[idx].sum(axis=1), fn[idx].sum(axis=1)
    f1 = np.where(a > 0, 2 * a / np.maximum(2 * a + b + c, 1), 0.0)
    lo, hi = np.percentile(f1, [2.5, 97.5])
    return float(lo), float(hi)
