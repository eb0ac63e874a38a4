"""MedDialog (English), as HELM/MedHELM and Medmarks run it: summarise a patient-doctor conversation in one
sentence; the summary is judged against the reference summary.

Data layout: the MedHELM preprocessing (following BioBART) of the English MedDialog conversations
(Zeng et al. 2020, UCSD-AI4H/Medical-Dialogue-System), published as a CodaLab bundle
(0x82f0c47f6d3e4462ae9ef8ea39eebe64, the ``BASE_URL`` of Medmarks' environment) with one file per
subset and split, ``<subset>/<split>.json`` (subsets ``healthcaremagic`` and ``icliniq``): a JSON object
whose ``data`` array holds records with ``src`` (the conversation), ``tgt`` (the reference
one-sentence summary) and ``id`` (else ``index``). The test split of both subsets is evaluated, as in
Medmarks. ``--data`` takes a folder in that layout (or the download cache's ``<subset>-test.json``
names) or one file (its subset then is its folder's name). The bundle is a repackaging: the dialogues
come from HealthCareMagic and iCliniq pages; no licence is stated for them. A missing ``data`` array,
a record without ``src`` or ``tgt`` are one-line DataErrors naming the file and record.

Protocols. lm-eval's ``meddialog_qsumm`` (the icliniq part, via lighteval/med_dialog) reports BLEU,
ROUGE, BLEURT and BERTScore, two of which need model weights; its ``meddialog_raw_dialogues`` reads
another copy (bigbio's loading script) whose files have no layout we can pin. The judged peer is
Medmarks' ``med_dialog``, which ``reference`` follows: its system prompt (``PROMPT``), the conversation
as the user message, its judge prompt (accuracy, completeness, clarity 1-5 against the reference
summary; read at run time) and its arithmetic (mean of score / 5), judge ``gpt-4o-mini``. An
unreadable judge reply is unknown, never 0 (Medmarks' unknown-as-0 figure beside it).
``grandrounds``: our judge prompt, no system prompt beyond the task's own instruction. Breakdown: subset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import (
    Aggregate,
    Benchmark,
    Prompt,
    RemoteFile,
    RunOptions,
    chosen_subjects,
)
from grandrounds.benchmarks.careqa_open import judged_aggregate
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.sources.meddialog import ENVIRONMENT, JUDGE_PROMPTS, OUR_JUDGE, PROTOCOLS

SUBSETS = ("healthcaremagic", "icliniq")
BUNDLE = (
    "https://worksheets.codalab.org/rest/bundles/0x82f0c47f6d3e4462ae9ef8ea39eebe64/contents/blob"
)
FILES = tuple(RemoteFile(f"{BUNDLE}/{s}/test.json", f"{s}-test.json", None) for s in SUBSETS)
#: Our task instruction (grandrounds): the conversation follows it in the user message.
OUR_TASK = "Summarise the patient's question in this patient-doctor conversation in one sentence.\n\n{conversation}"


def subset_files(root: Path, subsets: Sequence[str]) -> list[tuple[str, Path]]:
    """(subset, test file) for each subset asked: ``root/<subset>/test.json`` or ``root/<subset>-test.json``, or ``root`` itself."""
    if root.is_file():
        subset = root.parent.name
        if subset not in SUBSETS:
            raise DataError(
                root,
                None,
                f"cannot tell the subset: the file's folder must be one of {', '.join(SUBSETS)}",
            )
        return [(subset, root)]
    if not root.exists():
        raise DataError(root, None, "file or directory not found")
    out = []
    for s in subsets:
        found = [p for p in (root / s / "test.json", root / f"{s}-test.json") if p.exists()]
        if not found:
            raise DataError(
                root / s / "test.json", None, "file not found (the layout: <subset>/test.json)"
            )
        out.append((s, found[0]))
    return out


class MedDialog(Benchmark):
    """MedDialog (English) one-sentence summaries, judged against the reference summary (mean score / 5)."""

    name: ClassVar[str] = "meddialog"
    description: ClassVar[str] = (
        "MedDialog (English, MedHELM's healthcaremagic + icliniq test files): one-sentence summaries of patient-doctor "
        "conversations judged against the reference (accuracy, completeness, clarity 1-5, Medmarks' judge). "
        "A repackaging of web consultations; no licence stated"
    )
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="subsets",
            type=list[str],
            default=SUBSETS,
            help="subsets to ask (default both)",
            choices=SUBSETS,
        ),
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = FILES
    needs_judge: ClassVar[bool] = True
    protocols = PROTOCOLS
    reference_fidelity = {
        "reference": "Medmarks' `med_dialog` environment (MedHELM's one-sentence summaries)",
        "reader": "as MedicationQA: the judge's JSON object ending at the LAST \"}\" (Medmarks' "
        "`JSONParser`), `_compute_normalized_reward` (the same code in both environments)",
        "prompt": "Medmarks' `PROMPT` as system prompt and its `JUDGE_TEMPLATE` (read at run time)",
        "equal": "Medmarks' figure per answer from the judge's first reply, computed as for "
        "MedicationQA (checked there against the pinned functions, 0 of 249 differ)",
        "differs": "unknown judge replies are reported and re-asked, never 0; Medmarks' figure beside",
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subsets = chosen_subjects(self, SUBSETS, "subsets")

    def data_files(self, root: Path) -> list[Path]:
        return [p for _, p in subset_files(root, self.subsets)]

    def dataset_hash(self, root: Path) -> str:
        """The files' hashes keyed by subset (in the published layout both files are named test.json)."""
        from grandrounds.benchmarks.readers.decoding import DATA_ENCODING
        from grandrounds.core.hashing import content_hash, file_sha256

        files = {s: file_sha256(p) for s, p in subset_files(root, self.subsets)}
        return content_hash({"files": files, "encoding": DATA_ENCODING.get()})

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        for subset, path in subset_files(root, self.subsets):
            doc = read_json(path)
            data = doc.get("data") if isinstance(doc, dict) else None
            if not isinstance(data, list):
                raise DataError(path, None, "expected a JSON object with a 'data' array of records")
            seen = IdSet(path)
            for i, rec in enumerate(data):
                where = f"record {i}"
                if not isinstance(rec, dict):
                    raise DataError(path, where, "not a JSON object")
                for key in ("src", "tgt"):
                    if not isinstance(rec.get(key), str) or not rec[key].strip():
                        raise DataError(path, where, f"missing or empty {key!r}")
                raw_id = rec.get("id", rec.get("index", i))
                sid = seen.add(f"{subset}-{raw_id}", where)
                yield Sample(
                    id=sid,
                    benchmark=self.name,
                    messages=(Message("user", rec["src"]),),
                    target=rec["tgt"],
                    metadata={"conversation": rec["src"], "subset": subset},
                )
            if not len(seen):
                raise DataError(path, None, "no conversations in the file")

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        if (
            options.protocol == "reference"
        ):  # the system prompt (PROMPT) comes from the preset; the conversation as is
            return Prompt(sample.messages)
        return Prompt(
            (Message("user", OUR_TASK.format(conversation=sample.metadata["conversation"])),)
        )

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.core.hashing import text_hash

        ours_ = {"judge": text_hash(OUR_JUDGE)[:16], "task": text_hash(OUR_TASK)[:16]}
        return ours_ | {f"{f.folder}/{f.path}": f.sha256 for f in (ENVIRONMENT, JUDGE_PROMPTS)}

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("meddialog", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        return judged_aggregate(
            samples,
            grades,
            options,
            ("subset",),
            "mean of the three 1-5 scores / 5 (Medmarks reward)",
        )
