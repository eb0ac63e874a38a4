"""The viewer's queries: a filtered page of questions, one question in full, facets and runs.

``con`` is a connection to the viewer's own index (see :mod:`grandrounds.viewer.index`): the
filters, the search and the pages are SQL over it. Everything read from the store itself
(samples, answers, grades, results, reviews) comes through :class:`~grandrounds.store.Store`.

Columns are gradings of runs (``run_id/grader-fp``), never model names, so two runs of one
model (another answer mode, protocol, judge or limit) each keep their column, labelled by
:mod:`grandrounds.analyses.labels`. A search is capped (characters, words, word length) before
it reaches SQLite, which bounds its memory; :func:`time_bounded` bounds its time.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grandrounds.analyses.contamination import PREFIX as PROBE_PREFIX
from grandrounds.analyses.labels import RunFacts, column_labels, full_label, run_facts
from grandrounds.analyses.readings import option_scores, option_words, target_words
from grandrounds.analyses.reviews import reviewed_value
from grandrounds.core.hashing import to_jsonable
from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.choice_extract import extract_choice
from grandrounds.store import RunRecord, Store
from grandrounds.viewer.index import column_key

PAGE_MAX = 200
#: Search caps: characters in all, words, characters per word. A trigram phrase costs memory
#: in proportion to its length, and every word is one more sub-query.
MAX_QUERY_CHARS = 200
MAX_TERMS = 8
MAX_TERM_CHARS = 64
#: Wall-clock budget of one API query on the index, in seconds.
QUERY_SECONDS = 2.0


class QueryTooSlow(Exception):
    """A query ran past its time budget and was interrupted."""


@dataclass(frozen=True, kw_only=True)
class Filters:
    benchmark: str = ""
    model: str = ""
    run: str = ""  # a run id
    col: str = ""  # a column key (run id / grader fingerprint prefix)
    dimension: str = ""
    verdict: str = ""  # met | unmet | unknown: some answer has a criterion with this verdict
    disagree: bool = False
    unknown: bool = False
    queued: bool = False
    flagged: bool = False  # some answer (of the model / run / column filtered) addresses the grader
    q: str = ""


def search_terms(text: str) -> list[str]:
    """The words of a search, refused (ValueError, with the limit) when too long or too many."""
    if len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"search is limited to {MAX_QUERY_CHARS} characters ({len(text)} given)")
    words = text.split()
    if len(words) > MAX_TERMS:
        raise ValueError(f"search is limited to {MAX_TERMS} words ({len(words)} given)")
    long = [w for w in words if len(w) > MAX_TERM_CHARS]
    if long:
        raise ValueError(
            f"search words are limited to {MAX_TERM_CHARS} characters (one has {len(long[0])})"
        )
    return words


@contextlib.contextmanager
def time_bounded(con: sqlite3.Connection, seconds: float | None = None) -> Iterator[None]:
    """Interrupt any statement on ``con`` that runs past ``seconds`` (default :data:`QUERY_SECONDS`;
    raises QueryTooSlow). SQLite calls the check every 1,000 virtual-machine steps."""
    seconds = QUERY_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    con.set_progress_handler(lambda: int(time.monotonic() > deadline), 1_000)
    try:
        yield
    except sqlite3.OperationalError as e:
        if "interrupted" in str(e):
            raise QueryTooSlow(
                f"the query took longer than {seconds:g} s; narrow the search or the filters"
            ) from None
        raise
    finally:
        con.set_progress_handler(None, 0)


def _fts_query(words: list[str]) -> str:
    """User words as one FTS5 phrase each (quotes doubled), so no FTS syntax is injected."""
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def _answer_cond(f: Filters) -> tuple[str, list[Any]]:
    """Conditions on an answer row ``a`` from the model / run / column filters."""
    conds, args = [], []
    for column, value in (("a.model", f.model), ("a.run_id", f.run), ("a.col", f.col)):
        if value:
            conds.append(f"{column} = ?")
            args.append(value)
    return "".join(" AND " + c for c in conds), args


def _where(f: Filters) -> tuple[str, list[Any]]:
    clauses, args = ["1=1"], []
    if f.benchmark:
        clauses.append("i.benchmark = ?")
        args.append(f.benchmark)
    narrow, narrow_args = _answer_cond(f)
    if narrow:
        clauses.append(f"EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id{narrow})")
        args += narrow_args
    if f.dimension:
        clauses.append("EXISTS (SELECT 1 FROM dims d WHERE d.item_id = i.id AND d.dim = ?)")
        args.append(f.dimension)
    if f.verdict in ("met", "unmet", "unknown"):
        clauses.append(
            f"EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id AND a.n_{f.verdict} > 0{narrow})"
        )
        args += narrow_args
    if f.disagree:
        clauses.append("i.disagree = 1")
    if f.unknown:
        clauses.append("i.n_unknown > 0")
    if f.queued:
        clauses.append("EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id AND a.queued = 1)")
    if f.flagged:
        clauses.append(
            f"EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id AND a.flagged = 1{narrow})"
        )
        args += narrow_args
    words = search_terms(f.q)
    if words and all(len(w) >= 3 for w in words):
        clauses.append("i.id IN (SELECT rowid FROM fts WHERE fts MATCH ?)")
        args.append(_fts_query(words))
    elif (
        words
    ):  # trigram FTS needs 3+ characters: short words (e.g. two Chinese characters) use LIKE
        for w in words:
            clauses.append(
                "i.id IN (SELECT rowid FROM fts WHERE question LIKE ? ESCAPE '\\' OR answers LIKE ? ESCAPE '\\')"
            )
            pat = "%" + re.sub(r"([%_\\])", r"\\\1", w) + "%"
            args += [pat, pat]
    return " AND ".join(clauses), args


def list_items(
    con: sqlite3.Connection, f: Filters, page: int = 1, per_page: int = 50
) -> dict[str, Any]:
    """One page of questions matching ``f`` with each column's value; ``total`` for the pager."""
    per_page = max(1, min(PAGE_MAX, per_page))
    page = max(1, min(page, 10**6))
    where, args = _where(f)
    total = con.execute(f"SELECT COUNT(*) FROM items i WHERE {where}", args).fetchone()[0]
    rows = con.execute(
        f"SELECT i.id, i.benchmark, i.sample_id, i.question, i.disagree, i.n_unknown, i.dataset FROM items i WHERE {where} ORDER BY i.id LIMIT ? OFFSET ?",
        args + [per_page, (page - 1) * per_page],
    ).fetchall()
    ids = [r[0] for r in rows]
    vals: dict[int, dict[str, Any]] = {}
    if ids:
        q = f"SELECT item_id, col, value, n_unknown, flagged FROM answers WHERE item_id IN ({','.join('?' * len(ids))})"
        for iid, col, value, nu, flagged in con.execute(q, ids):
            vals.setdefault(iid, {})[col] = {
                "value": value,
                "n_unknown": nu,
                "flagged": bool(flagged),
            }
    items = [
        {
            "id": r[0],
            "benchmark": r[1],
            "sample_id": r[2],
            "dataset": (r[6] or "")[:12],
            "question": r[3][:200],
            "disagree": bool(r[4]),
            "n_unknown": r[5],
            "values": vals.get(r[0], {}),
        }
        for r in rows
    ]
    return {"total": total, "page": page, "per_page": per_page, "items": items}


def _facts(text: str) -> RunFacts:
    return RunFacts(**json.loads(text))


def columns(con: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every column (grading of a run) with its short label (what differs within its benchmark)
    and its full label, by benchmark, model and label."""
    rows = con.execute(
        "SELECT col, run_id, grader_fp, benchmark, model, facts FROM columns"
    ).fetchall()
    facts = [_facts(r[5]) for r in rows]
    short = column_labels(facts)
    out = [
        {
            "col": r[0],
            "run_id": r[1],
            "benchmark": r[3],
            "model": r[4],
            "label": s,
            "title": full_label(f),
        }
        for r, f, s in zip(rows, facts, short)
    ]
    return sorted(out, key=lambda c: (c["benchmark"], c["model"], c["label"]))


def facets(con: sqlite3.Connection) -> dict[str, Any]:
    """The values each filter can take: benchmarks, models, columns and dimensions in the index."""
    return {
        "benchmarks": [
            r[0] for r in con.execute("SELECT DISTINCT benchmark FROM items ORDER BY 1")
        ],
        "models": [r[0] for r in con.execute("SELECT DISTINCT model FROM answers ORDER BY 1")],
        "columns": columns(con),
        "dimensions": [r[0] for r in con.execute("SELECT DISTINCT dim FROM dims ORDER BY 1")],
    }


REVIEW_FIELDS = ("id", "criterion_id", "reviewer", "verdict", "score", "reason", "created_at")


def item_id(con: sqlite3.Connection, benchmark: str, dataset: str, sample_id: str) -> int | None:
    """The index's id of the question named by its benchmark, the start of its dataset key and its
    sample id (what a viewer link holds: stable however many runs are added), or None where that
    names no question or more than one."""
    if not 6 <= len(dataset) <= 64 or any(c not in "0123456789abcdef" for c in dataset):
        return None
    rows = con.execute(
        "SELECT id FROM items WHERE benchmark = ? AND sample_id = ? AND substr(dataset, 1, ?) = ?",
        (benchmark, sample_id, len(dataset), dataset),
    ).fetchall()
    return rows[0][0] if len(rows) == 1 else None


def item(con: sqlite3.Connection, store: Store, iid: int) -> dict[str, Any] | None:
    """One question in full: messages, rubric, every answer with verdicts, explanations, reviews."""
    row = con.execute(
        "SELECT benchmark, dataset, sample_id FROM items WHERE id = ?", (iid,)
    ).fetchone()
    if row is None:
        return None
    bench, ds, sid = row
    sample = store.sample(bench, ds, sid)
    labels = {c["col"]: c for c in columns(con)}
    graders: dict[str, Any] = {}  # rebuilt graders, shared by the answers' rescoring
    rows = con.execute(
        "SELECT run_id, grader_fp, model FROM answers WHERE item_id = ?", (iid,)
    ).fetchall()
    rows.sort(
        key=lambda r: (r[2], labels.get(column_key(r[0], r[1]), {}).get("label", ""), r[0])
    )  # as the list's columns
    answers = [
        _answer(
            store, sample, sid, run_id, fp, model, labels.get(column_key(run_id, fp), {}), graders
        )
        for run_id, fp, model in rows
    ]
    shown = to_jsonable(sample) if sample else {"id": sid, "messages": [], "rubric": []}
    if sample is not None and sample.target is not None:
        shown["target_text"] = target_words(sample.target)  # the target as a reader says it
    return {"id": iid, "benchmark": bench, "dataset": ds, "sample": shown, "answers": answers}


def _answer(
    store: Store,
    sample: Sample | None,
    sid: str,
    run_id: str,
    fp: str,
    model: str,
    column: dict[str, Any],
    graders: dict[str, Any],
) -> dict[str, Any]:
    """One run's answer to a question as the page shows it: text (or option log-probabilities),
    judge, values, verdicts, reviews."""
    grade = store.grade(run_id, fp, sid)
    reviews = store.reviews(run_id=run_id, grader_fp=fp, sample_id=sid)
    answer = store.answer(run_id, sid)
    resp = answer[1] if answer else None
    result = store.result(run_id, fp)
    error = "not answered" if answer is None else (resp.error if resp else None)
    return {
        "run_id": run_id,
        "grader_fp": fp,
        "model": model,
        "col": column_key(run_id, fp),
        "label": column.get("label", model),
        "title": column.get("title", model),
        "judge": result.get("judge") if result else None,
        "text": resp.text if resp else None,
        "sent": sent_view(store.request_sent(answer[0])) if answer else None,
        "error": error,
        "options": (options := option_scores(store.grader_spec(fp), sample, grade, resp)),
        "read": option_words(options) if options is not None else None,  # what was read, in words
        "value": grade.value if grade else None,
        "reviewed_value": reviewed_value(store, fp, sample, grade, reviews, graders),
        "extracted": grade.extracted if grade else None,
        "grade_error": grade.error if grade else None,
        "verdicts": [
            {
                "criterion_id": v.criterion_id,
                "status": v.status,
                "explanation": v.explanation,
                "votes": list(v.statuses),
            }
            for v in (grade.verdicts if grade else ())
        ],
        "votes": [
            {
                "judge": v.judge,
                "run": v.run,
                "status": v.status,
                "score": v.score,
                "explanation": v.explanation,
            }
            for v in (grade.votes if grade else ())
        ],
        "reviews": [{k: v for k, v in r.items() if k in REVIEW_FIELDS} for r in reviews],
        # an agent benchmark's episodes, step by step, with each epoch's outcome and the grader's checks
        "episodes": store.episodes(run_id, sid),
        "epochs": list(grade.details.get("epochs", ())) if grade else [],
    } | integrity(grade, sample, resp)


def sent_view(request: dict[str, Any] | None) -> dict[str, Any] | None:
    """What one run sent for a question, read from its stored request: the messages exactly as
    asked (its protocol's instruction, few-shot examples, answer markers included), the kind of
    call and, for log-probability calls, the continuations scored. None where it is not stored."""
    if not request:
        return None
    messages = [
        {"role": str(m.get("role", "?")), "content": m.get("content", "")}
        for m in request.get("messages") or ()
        if isinstance(m, dict)
    ]
    return {
        "kind": str(request.get("kind") or "chat"),
        "messages": messages,
        "continuations": [str(c) for c in request.get("continuations") or ()],
    }


def integrity(grade: Grade | None, sample: Sample | None, resp: Response | None) -> dict[str, Any]:
    """What the answer card says beside the value: the grade's status, the flags of an answer that
    addresses the grader (:mod:`grandrounds.graders.flags`), whether no answer could be read from
    the reply, and then what the other protocol's reading found in it (``other_reading``: its
    protocol, the option it read or None, its value), so a format failure shows apart from a
    wrong answer."""
    if grade is None:
        return {"status": None, "flags": [], "unread": False, "other_reading": None}
    d = grade.details
    unread = grade.status == "unreadable" or bool(d.get("unextracted"))
    other = None
    if (
        unread
        and d.get("answer_mode", "generate") == "generate"
        and d.get("protocol") in ("reference", "grandrounds")
    ):
        protocol = "grandrounds" if d["protocol"] == "reference" else "reference"
        if "other_extracted" in d:
            other = {
                "protocol": protocol,
                "extracted": d["other_extracted"],
                "value": d.get("other_value"),
            }
        elif (
            protocol == "grandrounds"
            and sample is not None
            and sample.choices
            and not d.get("permutation")
            and resp is not None
        ):
            # a grade stored before it kept the other reading: ours is rebuilt from the reply
            got = extract_choice(
                resp.text, list(sample.choices), sample.choices, bool(sample.metadata.get("multi"))
            )
            other = {
                "protocol": protocol,
                "extracted": got,
                "value": None if got is None else float(got == sample.target),
            }
    return {
        "status": grade.status,
        "flags": [str(x) for x in d.get("flags") or ()],
        "unread": unread,
        "other_reading": other,
    }


def runs(store: Store) -> list[dict[str, Any]]:
    """Runs with their results (one row per run x grader; runs without results once) for the
    home page, labelled like the question list's columns."""
    by_run: dict[str, list[tuple[str | None, dict[str, Any]]]] = {}
    for run_id, fp, res in store.results():
        by_run.setdefault(run_id, []).append((fp, res))
    rows = [(r, fp, res) for r in store.runs() for fp, res in by_run.get(r.id) or [(None, {})]]
    facts = [
        run_facts(
            r.id,
            fp or "",
            r,
            res.get("fingerprint") or (store.grader_spec(fp) if fp else None),
            res.get("judge"),
        )
        for r, fp, res in rows
    ]
    n_reviews = store.review_counts()
    out = [
        _run_row(r, fp, res, n_reviews.get(r.id, 0), f, label)
        for (r, fp, res), f, label in zip(rows, facts, column_labels(facts))
    ]
    return sorted(out, key=lambda row: (row["benchmark"], row["model"], row["label"]))


def _run_row(
    r: RunRecord, fp: str | None, res: dict[str, Any], n_reviews: int, facts: RunFacts, label: str
) -> dict[str, Any]:
    """One row of the runs table: the run, one of its results (or none), its labels and review count."""
    return {
        "run_id": r.id,
        "benchmark": r.benchmark,
        "model": r.model,
        "dataset": r.dataset_sha256[:12],
        "created_at": r.created_at,
        "grader_fp": fp,
        "col": column_key(r.id, fp) if fp else None,
        "label": label,
        "title": full_label(facts),
        "setting": " · ".join(facts.parts()),
        "judge": res.get("judge"),
        "metric": res.get("metric"),
        "score": res.get("score"),
        "ci95": res.get("ci95"),
        "n": res.get("n"),
        "n_unscored": res.get("n_unscored"),
        "n_reviews": n_reviews,
        "contamination": _probe(res) if r.benchmark.startswith(PROBE_PREFIX) else None,
    }


def _probe(res: dict[str, Any]) -> dict[str, Any] | None:
    """A contamination probe run's result (listed apart from scores): the probe, its unit, both
    figures and their paired difference (the result's score) with its CI; None before it has one."""
    if not res:
        return None
    x = res.get("extra") or {}
    return {
        "probe": x.get("probe"),
        "unit": x.get("unit"),
        "n_items": x.get("n_items"),
        "original": x.get("original"),
        "control": x.get("control"),
        "difference": res.get("score"),
        "ci95": res.get("ci95"),
    }
