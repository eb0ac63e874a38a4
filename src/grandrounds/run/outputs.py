"""Run outputs: ``results.json`` and ``samples.jsonl`` in a directory, and a terminal table."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from grandrounds.core.files import output_dir, staged
from grandrounds.core.hashing import to_jsonable
from grandrounds.core.records import Grade, Response, Result, Sample, grade_from_json
from grandrounds.store import Store


def result_json(result: Result) -> dict[str, Any]:
    d = to_jsonable(result)
    return {
        "benchmark": d["benchmark"],
        "model": d["model"],
        "judge": d["judge"],
        "metric": d["metric"],
        "score": d["score"],
        "ci95": d["ci95"],
        "n": d["n"],
        "n_unscored": d["n_unscored"],
        "breakdown": d["breakdown"],
        "fingerprint": d["fingerprint"],
        "extra": d["extra"],
    }


def sample_line(
    result: Result, sample: Sample, prompt: Any, response: Response | None, grade: Grade
) -> dict[str, Any]:
    return {
        "benchmark": result.benchmark,
        "model": result.model,
        "sample_id": sample.id,
        "prompt": to_jsonable(prompt),
        "response": None
        if response is None
        else (response.text if response.text is not None else to_jsonable(response.scores) or None),
        "error": None if response is None else response.error,
        "extracted": grade.extracted,
        "target": to_jsonable(sample.target),
        "score": grade.value,
        "grade_status": grade.status,
        "grade_error": grade.error,
        "verdicts": [to_jsonable(v) | {"raw": v.raw} for v in grade.verdicts],
        "votes": [to_jsonable(v) for v in grade.votes],
        "details": to_jsonable(grade.details),
    }


def verdict_raw(verdict: Mapping[str, Any]) -> str:
    """:attr:`Verdict.raw <grandrounds.core.records.Verdict.raw>` of a verdict as stored (a JSON object)."""
    votes = [v for v in verdict.get("votes") or () if isinstance(v, Mapping)]
    chosen = [v for v in votes if v.get("status") == verdict.get("status") and v.get("raw")]
    if chosen and verdict.get("status") != "unknown":
        return str(chosen[0]["raw"])
    return "\n---\n".join(str(v["raw"]) for v in votes if v.get("raw"))


def graded_line(
    result: Result, sample: Sample, response: Response, grade: Mapping[str, Any]
) -> dict[str, Any]:
    """:func:`sample_line` of a grade as stored (its JSON object, which is the grade's
    ``to_jsonable``): the same line without making the grade into records and back, which is most
    of what writing the outputs of a judged run costs."""
    return _graded_line(result, sample.id, to_jsonable(sample.target), response, grade)


def _graded_line(
    result: Result, sample_id: str, target: Any, response: Response, grade: Mapping[str, Any]
) -> dict[str, Any]:
    """:func:`graded_line` of a sample known by its id and its target as JSON values."""
    value = grade.get("value")
    if isinstance(value, float) and not math.isfinite(
        value
    ):  # an older version stored one: no score
        value = None
    return {
        "benchmark": result.benchmark,
        "model": result.model,
        "sample_id": sample_id,
        "prompt": None,
        "response": response.text
        if response.text is not None
        else to_jsonable(response.scores) or None,
        "error": response.error,
        "extracted": grade.get("extracted"),
        "target": target,
        "score": value,
        "grade_status": grade["status"],
        "grade_error": grade.get("error"),
        "verdicts": [dict(v) | {"raw": verdict_raw(v)} for v in grade.get("verdicts") or ()],
        "votes": list(grade.get("votes") or ()),
        "details": grade.get("details") or {},
    }


def chunk_lines(
    store: Store, result: Result, run_id: str, grader_fp: str, part: list[tuple[str, Any]]
) -> Iterator[dict[str, Any]]:
    """The ``samples.jsonl`` lines of one chunk of a run's samples, each given as (sample id, its
    target as JSON values), in that order: their grades under ``grader_fp``, answers and prompts
    fetched by id in a few queries."""
    ids = [sid for sid, _ in part]
    grades = store.grade_docs_for(run_id, grader_fp, ids)
    answers = store.answers_for(run_id, ids)
    prompts = store.answer_prompts_for(run_id, ids)
    for sid, target in part:
        doc = grades[sid]
        key, resp = answers.get(sid) or ("", None)
        if resp is None:  # never answered: its grade says why (as RunOutcome.read_back)
            resp = Response(
                key="" if doc.get("status") == "not_asked" else key,
                error=doc.get("error") or "not answered",
            )
        if "status" in doc:
            line = _graded_line(result, sid, target, resp, doc)
        else:  # a grade an older version stored: read as records, which fill in its status
            line = sample_line(
                result,
                Sample(id=sid, benchmark=result.benchmark, messages=(), target=target),
                None,
                resp,
                grade_from_json(doc),
            )
        prompt = prompts.get(sid)
        line["prompt"] = None if prompt is None else prompt.get("messages")
        yield line


def stored_lines(outcome: Any, store: Store) -> Iterator[dict[str, Any]]:
    """The ``samples.jsonl`` lines of a run (a ``outcome.RunOutcome``) in its order, read back from
    ``store`` ``outcome.READ_CHUNK`` samples at a time: each sample's id and target from the
    store's copy of the run's dataset (the rest of the sample left unread), its grade, answer and
    prompt fetched by id; nothing of a chunk is kept once written, and the data file is not read.

    Where the stored copy cannot give the same lines (:func:`_stored_targets` says when), the
    samples are read again from the data as the run read them."""
    s = outcome.setup
    if not _stored_targets(store, s.bench.name, s.dataset, s.n):
        yield from _data_lines(outcome, store)
        return
    rows = store.iter_sample_targets(s.bench.name, s.dataset, s.n)
    while part := list(islice(rows, outcome.READ_CHUNK)):
        yield from chunk_lines(
            store,
            outcome.result,
            outcome.run.id,
            outcome.fp_key,
            [(sid, _json_value(text)) for _, sid, text, _ in part],
        )


def _stored_targets(store: Store, benchmark: str, dataset: str, n: int) -> bool:
    """Whether the store holds the run's ``n`` samples at positions 0 to n - 1, one each, with
    targets that read back as the data gives them. A target holding a JSON object does not: the
    store wrote its keys sorted, and the data's order is not known."""
    at = 0
    for idx, _, text, whole in store.iter_sample_targets(benchmark, dataset, n):
        if idx != at or whole is not None or (text is not None and "{" in text):
            return False
        at += 1
    return at == n


def _json_value(text: str | None) -> Any:
    """A stored target's JSON text as values (None: no target); orjson, or ``json`` where orjson
    refuses the text (an integer over 64 bits)."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _data_lines(outcome: Any, store: Store) -> Iterator[dict[str, Any]]:
    """:func:`stored_lines` with the samples read again from the data as the run read them."""
    samples = outcome.setup.samples()
    while part := list(islice(samples, outcome.READ_CHUNK)):
        targets = [(smp.id, to_jsonable(smp.target)) for smp in part]
        yield from chunk_lines(store, outcome.result, outcome.run.id, outcome.fp_key, targets)


def regraded_lines(outcome: Any, store: Store) -> Iterator[dict[str, Any]]:
    """:func:`stored_lines` of a re-grade (a ``regrade.RegradeOutcome``): its samples as the store
    holds them (the run's, in source order), ``regrade.READ_CHUNK`` at a time, with their new
    grades; the lines are those ``run --out`` writes."""
    from grandrounds.run import regrade

    chunk = regrade.READ_CHUNK
    run = outcome.run
    ids = store.run_sample_ids(run.id, run.benchmark, run.dataset_sha256, outcome.members_fp)
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        samples = store.samples_by_id(run.benchmark, run.dataset_sha256, part)
        targets = [(sid, to_jsonable(samples[sid].target)) for sid in part]
        yield from chunk_lines(store, outcome.result, run.id, outcome.grader_fp, targets)


def json_line(line: dict[str, Any]) -> str:
    """One line of ``samples.jsonl``: orjson (several times faster than ``json.dumps`` on these
    nested lines, and the same JSON: UTF-8 text, non-ASCII unescaped), or ``json.dumps`` for what
    orjson refuses (a lone surrogate in a model's text, a key that is not a string), with every
    non-ASCII character escaped there: a lone surrogate has no UTF-8 form, and written unescaped
    it would stop the whole file."""
    try:
        return orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8")
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(line) + "\n"


def write_outputs(out: Path, results: Iterable[Result], lines: Iterable[dict[str, Any]]) -> None:
    """Write both files atomically: each under a temporary name created exclusively in ``out``,
    renamed into place once both are complete, so a failure (also one raised while ``lines`` is
    read) leaves the earlier files as they were, and a link planted at either name is never
    written through (:mod:`grandrounds.core.files`; an ``out`` of another user is refused).
    ``lines`` is written as it is iterated, so a generator is never held whole."""
    output_dir(out)
    with staged() as files:
        text = json.dumps(
            {"results": [result_json(r) for r in results]}, ensure_ascii=False, indent=2
        )
        with files.open(out / "samples.jsonl") as f:
            for line in lines:
                f.write(json_line(line))
        with files.open(out / "results.json") as f:
            f.write(text)
