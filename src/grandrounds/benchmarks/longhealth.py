"""LongHealth (Adams et al. 2024): 20 fictional patients, each with several long clinical documents
(5,090-6,754 words per patient) and 20 five-option questions about them: 400 questions.

Data layout: the authors' file ``benchmark_v5.json`` (kbressem/LongHealth, ``data/``; Apache-2.0), one
JSON object: patient id -> {``texts``: {text id -> document}, ``questions``: [{``No``, ``question``,
``answer_a``..``answer_e``, ``correct`` (the correct option's text), ``answer_location`` (text id ->
spans: which documents hold the answer)}, ...], and the patient's name, birthday, diagnosis}. The
RemoteFile is the copy Medmarks ships beside its environment (tmabraham/med-lm-envs @ 7ee0452,
environments/longhealth/benchmark_v5.json; sha256 not published, so not pinned); ``--data`` takes the
authors' file. A ``correct`` that equals no option, a missing field or a document id that is not a
string are one-line DataErrors naming the file and the patient's question.

Protocols. The named peer is Medmarks' ``longhealth`` environment, which ``reference`` follows: its
system prompt and its prompt (``_build_longhealth_prompt``: the documents between BEGIN/END markers
joined by its separator, the question, "A: ..." option lines and its answer-format instructions),
read at run time from the pinned file; greedy; the reply read our way (Medmarks'
``multiple_choice_accuracy`` is not in the pinned file); accuracy over every item. Which documents
are shown, and in what order, follow that file's selection, reimplemented here (the formulas carry
over: :func:`select_documents`, :func:`task1_items`, :func:`task2_items`) and declared as parameters
that enter the run's fingerprint: ``task`` (task1 information extraction, 5 options; task2 negation
and identification, 6 options with F "cannot be answered"; all), ``max_context_tokens`` (16,000,
``load_environment``'s default; characters = tokens / 0.25), ``shuffle_docs`` (true) and ``doc_seed``
(2718, Medmarks' configs/envs/longhealth.yaml): each patient's generator is seeded with
``f"{doc_seed}::{patient}"`` and drawn in Medmarks' order, so the same seed shows the same documents
in the same order as Medmarks does (Medmarks' unseeded default, -1, is not offered: it is not
repeatable). Medmarks' answer shuffling (its ``randomize_multiple_choice`` is not in the pinned file)
is not reproduced; ``--shuffle-options`` is the exam layer's own. ``grandrounds``: our prompt (the
same documents, our wording), no system prompt. Breakdowns: task and patient. Task2's sixth option
text (``cannot_answer_text``) is read from the pinned file under both protocols.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, cached
from grandrounds.benchmarks.medmarks import DIFFERENCES, MEDMARKS
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, Sample
from grandrounds.sources.protocols import OUR_ANSWER, Generation, Protocol, ours
from grandrounds.sources.upstream import (
    TextRef,
    UpstreamFile,
    python_fstring,
    python_string,
    read_text,
)

ENV = MEDMARKS.file(
    "environments/longhealth/longhealth.py",
    "50e5dd1d1d63bb9e2a55ef50600c8543b7fab50228326477a83dc85890b18187",
)
FILE = RemoteFile(
    f"https://raw.githubusercontent.com/{MEDMARKS.repo}/{MEDMARKS.commit}/environments/longhealth/benchmark_v5.json",
    "benchmark_v5.json",
    None,
)
#: The file's five answer fields, answer_a..answer_e.
ANSWER_LETTERS = LETTERS[:5]
#: Medmarks' rough characters-per-token rule (_simple_truncate_documents: tokens_per_char=0.25) and its
#: "only cut a document if more than 500 characters remain" threshold.
TOKENS_PER_CHAR, MIN_CUT = 0.25, 500
#: _prepare_task2_data: documents of other patients drawn per question (n=10), and the share of the
#: context a negation item fills, one document per 1,000 tokens (max_context_tokens * 0.25 / 1000).
DISTRACTORS, NEGATION_SHARE = 10, 0.25

_PROMPTS = {
    "generate": f"Medmarks {ENV.path} _build_longhealth_prompt (read at run time)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (no lm-eval task)",
}
REFERENCE = Protocol(
    name="reference",
    answer=Generation(
        temperature=0.0, max_tokens=1024, system=TextRef(ENV, "LONGHEALTH_SYSTEM_PROMPT")
    ),
    extraction="generate: ours (Medmarks' multiple_choice_accuracy is not in the pinned file); log-prob modes: argmax",
    aggregation="accuracy over every item: a failed or unreadable answer counts wrong (Medmarks' mean reward)",
    source=f"{MEDMARKS.repo}@{MEDMARKS.commit[:7]} {ENV.path}",
    settings={"prompt": _PROMPTS, "system": "LONGHEALTH_SYSTEM_PROMPT"},
)
GRANDROUNDS = ours(
    REFERENCE,
    answer=OUR_ANSWER,
    extraction="generate: our tolerant reading (choice_extract.py); log-prob modes: argmax",
    aggregation="accuracy over scored items: failed calls excluded and counted",
    settings={"prompt": {**_PROMPTS, "generate": "ours"}, "system": "none"},
)

#: Our prompt's wording (grandrounds): the documents, then the question the exam layer renders.
OUR_DOCUMENTS = "The following are clinical documents of one or more patients.\n\n{documents}\n\nQuestion: {question}"


def select_documents(
    answer_docs: Sequence[str], other_docs: Sequence[str], max_tokens: int
) -> list[str]:
    """Medmarks' ``_simple_truncate_documents``: answer documents first (the one that overflows is cut to
    the room left when more than 500 characters remain, and nothing follows it), then whole other
    documents while they fit (the first that does not stops the list), within max_tokens / 0.25 characters."""
    room = int(max_tokens / TOKENS_PER_CHAR)
    chosen: list[str] = []
    used = 0
    for doc in answer_docs:
        if used + len(doc) <= room:
            chosen.append(doc)
            used += len(doc)
        else:
            if room - used > MIN_CUT:
                chosen.append(doc[: room - used])
            break
    for doc in other_docs:
        if used + len(doc) > room:
            break
        chosen.append(doc)
        used += len(doc)
    return chosen


def _options(q: Mapping[str, Any]) -> dict[str, str]:
    return {L: str(q[f"answer_{L.lower()}"]) for L in ANSWER_LETTERS}


def _answer_ids(q: Mapping[str, Any]) -> list[str]:
    return list((q.get("answer_location") or {}).keys())


def task1_items(
    pid: str, patient: Mapping[str, Any], rng: random.Random | None, max_tokens: int
) -> Iterator[dict]:
    """Medmarks' ``_prepare_task1_data`` for one patient: the answer documents and the patient's other
    documents (shuffled), selected, then shuffled together; items whose selection is empty are skipped."""
    texts = patient["texts"]
    for q in patient["questions"]:
        ids = _answer_ids(q)
        answer_docs = [texts[i] for i in ids if i in texts]
        others = [t for i, t in texts.items() if i not in ids]
        if rng is not None and len(others) > 1:
            rng.shuffle(others)
        docs = select_documents(answer_docs, others, max_tokens)
        if not docs:
            continue
        if rng is not None and len(docs) > 1:
            rng.shuffle(docs)
        yield {"question": q, "docs": docs, "task": "task1", "target": None}


def task2_items(
    pid: str, bench: Mapping[str, Any], rng: random.Random, max_tokens: int, shuffle: bool = True
) -> Iterator[dict]:
    """Medmarks' ``_prepare_task2_data`` for one patient: per question a negation item (only other
    patients' documents; the answer is F) and an identification item (answer documents + others)."""
    others = [t for p, data in bench.items() if p != pid for t in data["texts"].values()]
    texts = bench[pid]["texts"]
    for q in bench[pid]["questions"]:
        answer_docs = [texts[i] for i in _answer_ids(q) if i in texts]
        distract = rng.sample(others, min(DISTRACTORS, len(others)))
        if shuffle and len(distract) > 1:
            rng.shuffle(distract)
        neg = distract[: max(1, min(len(distract), int(max_tokens * NEGATION_SHARE / 1000)))]
        if not neg:
            continue
        yield {"question": q, "docs": neg, "task": "task2_negation", "target": "F"}
        ident = select_documents(
            answer_docs, rng.sample(others, min(DISTRACTORS, len(others))), max_tokens
        )
        if not ident:
            continue
        if shuffle and len(ident) > 1:
            rng.shuffle(ident)
        yield {"question": q, "docs": ident, "task": "task2_identification", "target": None}


def function_default(f: UpstreamFile, within: str, arg: str) -> Any:
    """The literal default of parameter ``arg`` of function ``within`` in ``f`` (e.g. the document separator)."""
    for node in ast.walk(ast.parse(read_text(f), filename=f.path)):
        if isinstance(node, ast.FunctionDef) and node.name == within:
            args = node.args.args[len(node.args.args) - len(node.args.defaults) :]
            for a, d in zip(args, node.args.defaults):
                if a.arg == arg:
                    return ast.literal_eval(d)
    raise DataError(f.url, None, f"no default for {arg!r} of {within!r} in the upstream file")


def check_patient(path: Path, pid: str, patient: Any) -> None:
    if (
        not isinstance(patient, dict)
        or not isinstance(patient.get("texts"), dict)
        or not isinstance(patient.get("questions"), list)
    ):
        raise DataError(
            path,
            f"patient {pid}",
            "expected an object with 'texts' (an object) and 'questions' (a list)",
        )
    for n, q in enumerate(patient["questions"], 1):
        where = f"patient {pid} question {q.get('No', n) if isinstance(q, dict) else n}"
        if not isinstance(q, dict):
            raise DataError(path, where, "not a JSON object")
        missing = [
            k
            for k in ("question", "correct", *(f"answer_{L.lower()}" for L in ANSWER_LETTERS))
            if q.get(k) is None
        ]
        if missing:
            raise DataError(path, where, f"missing {', '.join(missing)}")
        if str(q["correct"]) not in _options(q).values():
            raise DataError(
                path, where, f"'correct' {str(q['correct'])[:60]!r} is none of the options"
            )
        if not isinstance(q.get("answer_location") or {}, dict):
            raise DataError(path, where, "'answer_location' is not an object")


class LongHealth(MultipleChoiceBenchmark):
    """LongHealth: questions about long clinical documents; five options (six with task2's F)."""

    name: ClassVar[str] = "longhealth"
    description: ClassVar[str] = (
        "LongHealth (Adams et al. 2024), 20 fictional patients' long clinical records, 400 five-option questions "
        "(task2: negation/identification with a sixth 'cannot be answered' option); Medmarks' document selection, "
        "seeded; accuracy by task and patient. Licence Apache-2.0"
    )
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="task",
            type=str,
            default="task1",
            help="task1 (extraction), task2 (negation + identification) or all",
            choices=("task1", "task2", "all"),
        ),
        Param(
            name="max_context_tokens",
            type=int,
            default=16000,
            help="document budget in tokens (characters = tokens / 0.25, Medmarks' rule)",
            minimum=1,
        ),
        Param(
            name="shuffle_docs",
            type=bool,
            default=True,
            help="shuffle the documents' order (Medmarks' default)",
        ),
        Param(
            name="doc_seed",
            type=int,
            default=2718,
            help="seed of each patient's document draws (Medmarks' configs: 2718)",
            minimum=0,
        ),
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (FILE,)
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    category_fields: ClassVar[tuple[str, ...]] = ("task", "patient")
    reference_reading = "ours"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = DIFFERENCES

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (ENV,)

    def load(self, root: Path) -> list[Sample]:
        path = resolve_file(root, FILE.filename)
        bench = read_json(path)
        if not isinstance(bench, dict) or not bench:
            raise DataError(path, None, "expected a JSON object of patients")
        for pid, patient in bench.items():
            check_patient(path, pid, patient)
        task, budget, seed = (
            self.param("task"),
            self.param("max_context_tokens"),
            self.param("doc_seed"),
        )
        items: list[tuple[str, dict]] = []
        if task in ("task1", "all"):
            for pid, patient in bench.items():
                rng = random.Random(f"{seed}::{pid}") if self.param("shuffle_docs") else None
                items.extend((pid, it) for it in task1_items(pid, patient, rng, budget))
        if task in ("task2", "all"):
            for pid in bench:
                rng = random.Random(
                    f"{seed}::{pid}"
                )  # task2 draws its distractors at random even unshuffled
                items.extend(
                    (pid, it)
                    for it in task2_items(pid, bench, rng, budget, self.param("shuffle_docs"))
                )
        return [self._sample(pid, it) for pid, it in items]

    def _sample(self, pid: str, item: dict) -> Sample:
        q = item["question"]
        options = _options(q)
        if item["task"] != "task1":
            options["F"] = cached(
                python_string, ENV, "cannot_answer_text", within="_maybe_shuffle_options"
            ).text
        target = item["target"] or next(L for L, t in options.items() if t == str(q["correct"]))
        sid = f"{pid}-{q.get('No', '')}-{item['task']}"
        documents = "\n\n".join(item["docs"])
        return self.make_sample(
            sid,
            OUR_DOCUMENTS.format(documents=documents, question=q["question"]),
            options,
            target,
            question_text=str(q["question"]),
            documents=item["docs"],
            task=item["task"],
            patient=pid,
        )

    def reference_prompt(self, sample: Sample) -> str:
        """Medmarks' ``_build_longhealth_prompt``: its f-strings and separator, read from the pinned file."""
        within = "_build_longhealth_prompt"
        template = cached(
            python_fstring,
            ENV,
            within=within,
            fields=("documents_joined", "question_text", "options_text"),
        )
        joiner = cached(python_fstring, ENV, within=within, fields=("separator",))
        line = cached(python_fstring, ENV, within=within, fields=("k.upper()", "v"))
        separator = cached(function_default, ENV, within, "separator")
        options = "\n".join(
            line.render({"k.upper()": k.upper(), "v": v}) for k, v in sample.choices.items()
        )
        return template.render(
            documents_joined=joiner.render(separator=separator).join(sample.metadata["documents"]),
            question_text=sample.metadata["question_text"],
            options_text=options,
        )
