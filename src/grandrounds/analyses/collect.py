"""Read the store into the plain rows the analysis and the reports use (the only I/O here), and
the images beside it as the viewer and the HTML report show them (:func:`shown_image`)."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from grandrounds.analyses.leaderboard import ResultRow, result_coverage
from grandrounds.analyses.readings import answer_words
from grandrounds.core.records import Grade, Sample, breakdown_from_json
from grandrounds.store import RunRecord, Store
from grandrounds.store.images import ImageStore

#: The image types shown (viewer and report), each with the bytes its files begin with; any other
#: type (SVG above all: it can hold script) is never served or embedded.
SHOWN_IMAGE_TYPES: dict[str, tuple[bytes, ...]] = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at bytes 8-12, checked in _looks_like
}
#: Largest image shown, in bytes (the images a run sends are a few hundred kB at most).
MAX_IMAGE_BYTES = 20 * 1024 * 1024
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def result_rows(
    store: Store, benchmark: str | None = None, run_ids: Collection[str] | None = None
) -> list[ResultRow]:
    """Every stored Result (of the runs ``run_ids`` only, when given: full ids), newest last, with
    the coverage of its verdicts."""
    runs = {r.id: r for r in store.runs()}
    out = []
    for run_id, fp, rj in store.results():
        if benchmark and rj.get("benchmark") != benchmark:
            continue
        if str(rj.get("benchmark", "")).startswith("contamination:"):
            continue  # contamination probes (analyses.contamination) are shown apart, never among scores
        if run_ids is not None and run_id not in run_ids:
            continue
        run = runs.get(run_id)
        ci = rj.get("ci95")
        out.append(
            ResultRow(
                run_id=run_id,
                grader_fp=fp,
                benchmark=rj.get("benchmark") or (run.benchmark if run else "?"),
                model=rj.get("model") or (run.model if run else "?"),
                metric=rj.get("metric", ""),
                score=_finite(rj.get("score")),
                ci95=_finite_pair(ci),
                n=int(rj.get("n", 0)),
                n_unscored=int(rj.get("n_unscored", 0)),
                # the result's own coverage where it records one, so the run's summary, results.json
                # and the leaderboard agree
                coverage=_or(
                    result_coverage(rj.get("extra") or {}),
                    lambda run_id=run_id, fp=fp: coverage(store, run_id, fp),
                ),
                judge=rj.get("judge"),
                breakdown=breakdown_from_json(rj.get("breakdown")),
                fingerprint=with_limit(rj.get("fingerprint") or {}, run),
                extra=rj.get("extra") or {},
                status=store.run_state(run_id, fp).describe(),
            )
        )
    return out


def _finite(value: Any) -> float | None:
    """A stored score as a number, or None (unknown) where it is not a finite number: a NaN or an
    infinity an older version wrote is shown as unknown, never as a number or a crash."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _finite_pair(ci: Any) -> tuple[float, float] | None:
    """A stored confidence interval, or None unless both ends are finite numbers."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = _finite(ci[0]), _finite(ci[1])
    return (lo, hi) if lo is not None and hi is not None else None


def _or(value: float | None, fallback: Any) -> float | None:
    return value if value is not None else fallback()


def with_limit(fingerprint: dict[str, Any], run: RunRecord | None) -> dict[str, Any]:
    """The fingerprint with the run's ``--limit`` (results stored before it was recorded lack it)."""
    if "limit" in fingerprint or run is None:
        return fingerprint
    return fingerprint | {"limit": run.options.get("limit")}


def coverage(store: Store, run_id: str, grader_fp: str) -> float | None:
    """Share of known verdicts; for benchmarks without verdicts, the share of scored answers."""
    c = store.verdict_counts(run_id, grader_fp)
    if c.n_verdicts:
        return (c.n_verdicts - c.n_unknown) / c.n_verdicts
    return (c.n_grades - c.n_unscored) / c.n_grades if c.n_grades else None


def values(
    store: Store, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, float | None]]:
    """(run, grader) -> sample id -> per-answer value (None = unscored)."""
    return {(run_id, fp): store.grade_values(run_id, fp) for run_id, fp in keys}


@dataclass(kw_only=True)
class Answer:
    row: ResultRow
    text: str | None
    error: str | None
    grade: Grade | None
    #: An agent benchmark's episodes of this sample (``{epoch, status, steps}``), read only for those.
    episodes: list[dict[str, Any]] = field(default_factory=list)
    #: What was read from an answer whose text does not show it (a log-probability answer's choice), in words.
    read: str | None = None


@dataclass
class Item:
    sample: Sample
    answers: list[Answer] = field(default_factory=list)


@dataclass
class Section:
    """One benchmark dataset: its samples in source order with every model's answer and grade."""

    benchmark: str
    dataset: str
    items: list[Item]


def drilldown(
    store: Store, rows: Sequence[ResultRow], max_items: int | None = None
) -> list[Section]:
    """Samples with each result's answer and grade side by side, per (benchmark, dataset)."""
    runs: dict[str, RunRecord] = {r.id: r for r in store.runs()}
    sections: dict[tuple[str, str], Section] = {}
    for row in rows:
        run = runs.get(row.run_id)
        if run is None:
            continue
        key = (run.benchmark, run.dataset_sha256)
        if key not in sections:
            samples = store.samples(*key)[:max_items] if max_items else store.samples(*key)
            sections[key] = Section(run.benchmark, run.dataset_sha256, [Item(s) for s in samples])
        answers = store.answers(row.run_id)
        grades = store.grades(row.run_id, row.grader_fp)
        spec = store.grader_spec(row.grader_fp)
        for item in sections[key].items:
            _, resp = answers.get(item.sample.id, ("", None))
            grade = grades.get(item.sample.id)
            episodes = (
                store.episodes(row.run_id, item.sample.id)
                if grade is not None and "epochs" in grade.details
                else []
            )
            read = (
                answer_words(spec, item.sample, grade, resp)
                if resp is not None and resp.scores
                else None
            )
            item.answers.append(
                Answer(
                    row=row,
                    text=resp.text if resp else None,
                    error=resp.error if resp else "not answered",
                    grade=grade,
                    episodes=episodes,
                    read=read,
                )
            )
    return list(sections.values())


def question_text(sample: Sample) -> str:
    """The sample's question, as the viewer names it (:func:`grandrounds.analyses.labels.question_of`):
    its own question field where it has one, else the last user message."""
    from grandrounds.analyses.labels import question_of

    return question_of(sample)[0]


def sample_rows(sections: Sequence[Section]) -> list[dict[str, Any]]:
    """Flat per-answer rows for tables (csv, xlsx, parquet, json)."""
    out = []
    for sec in sections:
        for item in sec.items:
            for a in item.answers:
                g = a.grade
                out.append(
                    {
                        "benchmark": sec.benchmark,
                        "sample_id": item.sample.id,
                        "model": a.row.model,
                        "run_id": a.row.run_id,
                        "judge": a.row.judge or "",
                        "value": g.value if g else None,
                        "extracted": g.extracted if g else None,
                        "n_met": sum(1 for v in g.verdicts if v.status == "met") if g else 0,
                        "n_unmet": sum(1 for v in g.verdicts if v.status == "unmet") if g else 0,
                        "n_unknown": sum(1 for v in g.verdicts if v.status == "unknown")
                        if g
                        else 0,
                        "error": (g.error if g else None) or a.error,
                        "question": question_text(item.sample),
                        "answer": a.text,
                    }
                )
    return out


class ImageRefused(Exception):
    """A stored image that is not shown: too large, outside the image folder, not of its type, or
    not matching its hash."""


def _looks_like(data: bytes, media_type: str) -> bool:
    """True when ``data`` begins as files of ``media_type`` (one of :data:`SHOWN_IMAGE_TYPES`) do."""
    magic = SHOWN_IMAGE_TYPES.get(media_type, ())
    if not any(data.startswith(m) for m in magic):
        return False
    return media_type != "image/webp" or data[8:12] == b"WEBP"


def shown_image(images: Any, sha256: str, max_bytes: int | None = None) -> tuple[bytes, str] | None:
    """(bytes, media type) of the stored image named ``sha256``, checked: a name of 64 lower-case
    hex digits (ValueError otherwise), a regular file inside the image folder, at most ``max_bytes``
    (default :data:`MAX_IMAGE_BYTES`), of a shown type (:data:`SHOWN_IMAGE_TYPES`, from its file
    name, its bytes beginning as that type's do) and hashing to its name. None when the store holds
    no such image; ImageRefused when it holds one that is not shown."""
    if not SHA256_HEX.fullmatch(sha256):
        raise ValueError("an image is named by its sha256: 64 lower-case hex digits")
    max_bytes = MAX_IMAGE_BYTES if max_bytes is None else max_bytes
    if not isinstance(images, ImageStore):  # a team store's images table
        got = images.read(sha256, max_bytes)
        if got is None:
            return None
        stored, media_type, size = got
        if media_type not in SHOWN_IMAGE_TYPES:
            raise ImageRefused(f"{media_type} is not shown")
        if stored is None:
            raise ImageRefused(f"larger than {max_bytes:,} bytes ({size:,})")
        return _checked(stored, media_type, sha256, max_bytes)
    found = images.find(sha256)  # builds the path from the checked name only
    if found is None:
        return None
    path, media_type = found
    if media_type not in SHOWN_IMAGE_TYPES:
        raise ImageRefused(f"{media_type} is not shown")
    try:
        real = path.resolve(strict=True)  # a link out of the folder is followed here, and refused
        if not real.is_relative_to(images.root.resolve(strict=True)) or not real.is_file():
            raise ImageRefused("not a file inside the store's image folder")
        with real.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError:
        return None
    return _checked(data, media_type, sha256, max_bytes)


def _checked(data: bytes, media_type: str, sha256: str, max_bytes: int) -> tuple[bytes, str]:
    """``(data, media_type)`` once the bytes pass: within the size, of their type, matching their hash."""
    if len(data) > max_bytes:
        raise ImageRefused(f"larger than {max_bytes:,} bytes")
    if not _looks_like(data, media_type):
        raise ImageRefused(f"the file is not {media_type}")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ImageRefused("the file does not match its hash (changed on disk)")
    return data, media_type
