"""Run outputs: ``results.json`` and ``samples.jsonl`` in a directory, and a terminal table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from grandrounds.core.hashing import to_jsonable
from grandrounds.core.records import Grade, Response, Result, Sample


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


def sample_line(result: Result, sample: Sample, prompt: Any, response: Response | None, grade: Grade) -> dict[str, Any]:
    return {
        "benchmark": result.benchmark,
        "model": result.model,
        "sample_id": sample.id,
        "prompt": to_jsonable(prompt),
        "response": None if response is None else (response.text if response.text is not None else to_jsonable(response.scores) or None),
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


def write_outputs(out: Path, results: Iterable[Result], lines: Iterable[dict[str, Any]]) -> None:
    """Write both files atomically: each under a temporary name, renamed into place once both are
    complete, so a failure (also one raised while ``lines`` is read) leaves the earlier files as
    they were. ``lines`` is written as it is iterated, so a generator is never held whole."""
    out.mkdir(parents=True, exist_ok=True)
    results_tmp, samples_tmp = out / ".results.json.tmp", out / ".samples.jsonl.tmp"
    try:
        text = json.dumps({"results": [result_json(r) for r in results]}, ensure_ascii=False, indent=2)
        with open(samples_tmp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        results_tmp.write_text(text, encoding="utf-8")
    except BaseException:
        results_tmp.unlink(missing_ok=True)
        samples_tmp.unlink(missing_ok=True)
        raise
    samples_tmp.replace(out / "samples.jsonl")
    results_tmp.replace(out / "results.json")
