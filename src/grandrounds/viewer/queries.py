"""The viewer's queries: a filtered page of questions, one question in full, facets and runs.

``con`` is a connection to the viewer's own index (see :mod:`grandrounds.viewer.index`): the
filters, the search and the pages are SQL over it. Everything read from the store itself
(samples, answers, grades, results, reviews) comes through :class:`~grandrounds.store.Store`.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from grandrounds.hashing import to_jsonable
from grandrounds.records import Sample
from grandrounds.reviews import reviewed_value
from grandrounds.store import RunRecord, Store

PAGE_MAX = 200


@dataclass(frozen=True)
class Filters:
    benchmark: str = ""
    model: str = ""
    dimension: str = ""
    verdict: str = ""  # met | unmet | unknown: some answer has a criterion with this verdict
    disagree: bool = False
    unknown: bool = False
    queued: bool = False
    q: str = ""


def _fts_query(text: str) -> str:
    """User text as an FTS5 phrase per word (quotes doubled), so no FTS syntax is injected."""
    return " ".join('"' + w.replace('"', '""') + '"' for w in text.split())


def _where(f: Filters) -> tuple[str, list[Any]]:
    clauses, args = ["1=1"], []
    if f.benchmark:
        clauses.append("i.benchmark = ?")
        args.append(f.benchmark)
    if f.model:
        clauses.append("EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id AND a.model = ?)")
        args.append(f.model)
    if f.dimension:
        clauses.append("EXISTS (SELECT 1 FROM dims d WHERE d.item_id = i.id AND d.dim = ?)")
        args.append(f.dimension)
    if f.verdict in ("met", "unmet", "unknown"):
        cond = f"a.n_{f.verdict} > 0" + (" AND a.model = ?" if f.model else "")
        clauses.append(f"EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id AND {cond})")
        args += [f.model] if f.model else []
    if f.disagree:
        clauses.append("i.disagree = 1")
    if f.unknown:
        clauses.append("i.n_unknown > 0")
    if f.queued:
        clauses.append("EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id AND a.queued = 1)")
    words = f.q.split()
    if words and all(len(w) >= 3 for w in words):
        clauses.append("i.id IN (SELECT rowid FROM fts WHERE fts MATCH ?)")
        args.append(_fts_query(f.q))
    elif words:  # trigram FTS needs 3+ characters: short words (e.g. two Chinese characters) use LIKE
        for w in words:
            clauses.append("i.id IN (SELECT rowid FROM fts WHERE question LIKE ? ESCAPE '\\' OR answers LIKE ? ESCAPE '\\')")
            pat = "%" + re.sub(r"([%_\\])", r"\\\1", w) + "%"
            args += [pat, pat]
    return " AND ".join(clauses), args


def list_items(con: sqlite3.Connection, f: Filters, page: int = 1, per_page: int = 50) -> dict[str, Any]:
    """One page of questions matching ``f`` with each model's value; ``total`` for the pager."""
    per_page = max(1, min(PAGE_MAX, per_page))
    page = max(1, page)
    where, args = _where(f)
    total = con.execute(f"SELECT COUNT(*) FROM items i WHERE {where}", args).fetchone()[0]
    rows = con.execute(
        f"SELECT i.id, i.benchmark, i.sample_id, i.question, i.disagree, i.n_unknown FROM items i WHERE {where} ORDER BY i.id LIMIT ? OFFSET ?",
        args + [per_page, (page - 1) * per_page],
    ).fetchall()
    ids = [r[0] for r in rows]
    vals: dict[int, dict[str, Any]] = {}
    if ids:
        q = f"SELECT item_id, model, value, n_unknown FROM answers WHERE item_id IN ({','.join('?' * len(ids))})"
        for iid, model, value, nu in con.execute(q, ids):
            vals.setdefault(iid, {})[model] = {"value": value, "n_unknown": nu}
    items = [
        {"id": r[0], "benchmark": r[1], "sample_id": r[2], "question": r[3][:200], "disagree": bool(r[4]), "n_unknown": r[5], "values": vals.get(r[0], {})}
        for r in rows
    ]
    return {"total": total, "page": page, "per_page": per_page, "items": items}


def facets(con: sqlite3.Connection) -> dict[str, list[str]]:
    """The values each filter can take: benchmarks, models and dimensions present in the index."""
    return {
        "benchmarks": [r[0] for r in con.execute("SELECT DISTINCT benchmark FROM items ORDER BY 1")],
        "models": [r[0] for r in con.execute("SELECT DISTINCT model FROM answers ORDER BY 1")],
        "dimensions": [r[0] for r in con.execute("SELECT DISTINCT dim FROM dims ORDER BY 1")],
    }


REVIEW_FIELDS = ("id", "criterion_id", "reviewer", "verdict", "score", "reason", "created_at")


def item(con: sqlite3.Connection, store: Store, iid: int) -> dict[str, Any] | None:
    """One question in full: messages, rubric, every answer with verdicts, explanations, reviews."""
    row = con.execute("SELECT benchmark, dataset, sample_id FROM items WHERE id = ?", (iid,)).fetchone()
    if row is None:
        return None
    bench, ds, sid = row
    sample = store.sample(bench, ds, sid)
    graders: dict[str, Any] = {}  # rebuilt graders, shared by the answers' rescoring
    answers = [
        _answer(store, sample, sid, run_id, fp, model, graders)
        for run_id, fp, model in con.execute("SELECT run_id, grader_fp, model FROM answers WHERE item_id = ? ORDER BY model, run_id", (iid,)).fetchall()
    ]
    shown = to_jsonable(sample) if sample else {"id": sid, "messages": [], "rubric": []}
    return {"id": iid, "benchmark": bench, "dataset": ds, "sample": shown, "answers": answers}


def _answer(store: Store, sample: Sample | None, sid: str, run_id: str, fp: str, model: str, graders: dict[str, Any]) -> dict[str, Any]:
    """One model's answer to a question as the page shows it: text, judge, values, verdicts, reviews."""
    grade = store.grade(run_id, fp, sid)
    reviews = store.reviews(run_id=run_id, grader_fp=fp, sample_id=sid)
    answer = store.answer(run_id, sid)
    resp = answer[1] if answer else None
    result = store.result(run_id, fp)
    error = "not answered" if answer is None else (resp.error if resp else None)
    return {
        "run_id": run_id, "grader_fp": fp, "model": model, "judge": result.get("judge") if result else None,
        "text": resp.text if resp else None, "error": error,
        "value": grade.value if grade else None, "reviewed_value": reviewed_value(store, fp, sample, grade, reviews, graders),
        "extracted": grade.extracted if grade else None, "grade_error": grade.error if grade else None,
        "verdicts": [{"criterion_id": v.criterion_id, "status": v.status, "explanation": v.explanation, "votes": list(v.statuses)} for v in (grade.verdicts if grade else ())],
        "votes": [{"judge": v.judge, "run": v.run, "status": v.status, "score": v.score, "explanation": v.explanation} for v in (grade.votes if grade else ())],
        "reviews": [{k: v for k, v in r.items() if k in REVIEW_FIELDS} for r in reviews],
    }


def runs(store: Store) -> list[dict[str, Any]]:
    """Runs with their results (one row per run x grader; runs without results once) for the home page."""
    by_run: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for run_id, fp, res in store.results():
        by_run.setdefault(run_id, []).append((fp, res))
    n_reviews = store.review_counts()
    out = []
    for r in sorted(store.runs(), key=lambda r: (r.benchmark, r.model)):
        for fp, res in by_run.get(r.id) or [(None, {})]:
            out.append(_run_row(r, fp, res, n_reviews.get(r.id, 0)))
    return out


def _run_row(r: RunRecord, fp: str | None, res: dict[str, Any], n_reviews: int) -> dict[str, Any]:
    """One row of the runs table: the run, one of its results (or none) and its review count."""
    return {"run_id": r.id, "benchmark": r.benchmark, "model": r.model, "dataset": r.dataset_sha256[:12], "created_at": r.created_at, "grader_fp": fp,
            "judge": res.get("judge"), "metric": res.get("metric"), "score": res.get("score"), "ci95": res.get("ci95"),
            "n": res.get("n"), "n_unscored": res.get("n_unscored"), "n_reviews": n_reviews}
