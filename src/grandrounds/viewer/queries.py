"""The viewer's queries: a filtered page of questions, one question in full, facets and runs.

``con`` is a connection to the index with the store attached as ``st`` (read-only), so one
query can join questions with reviews and the review queue.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from grandrounds.records import grade_from_json

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
        clauses.append("EXISTS (SELECT 1 FROM answers a JOIN st.review_queue rq ON rq.run_id = a.run_id AND rq.grader_fp = a.grader_fp "
                       "AND rq.sample_id = i.sample_id WHERE a.item_id = i.id)")
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
    return {
        "benchmarks": [r[0] for r in con.execute("SELECT DISTINCT benchmark FROM items ORDER BY 1")],
        "models": [r[0] for r in con.execute("SELECT DISTINCT model FROM answers ORDER BY 1")],
        "dimensions": [r[0] for r in con.execute("SELECT DISTINCT dim FROM dims ORDER BY 1")],
    }


def item(con: sqlite3.Connection, iid: int) -> dict[str, Any] | None:
    """One question in full: messages, rubric, every answer with verdicts, explanations, reviews."""
    row = con.execute("SELECT benchmark, dataset, sample_id FROM items WHERE id = ?", (iid,)).fetchone()
    if row is None:
        return None
    bench, ds, sid = row
    sj = con.execute("SELECT sample_json FROM st.samples WHERE benchmark = ? AND dataset_sha256 = ? AND sample_id = ?", (bench, ds, sid)).fetchone()
    sample = json.loads(sj[0]) if sj else {"id": sid, "messages": [], "rubric": []}
    answers = []
    for run_id, fp, model in con.execute("SELECT run_id, grader_fp, model FROM answers WHERE item_id = ? ORDER BY model, run_id", (iid,)).fetchall():
        g = con.execute("SELECT grade_json FROM st.grades WHERE run_id = ? AND grader_fp = ? AND sample_id = ?", (run_id, fp, sid)).fetchone()
        call = con.execute(
            "SELECT c.text, c.error FROM st.answers a LEFT JOIN st.calls c ON c.key = a.request_key WHERE a.run_id = ? AND a.sample_id = ?", (run_id, sid)
        ).fetchone()
        judge = con.execute("SELECT json_extract(result_json, '$.judge') FROM st.results WHERE run_id = ? AND grader_fp = ?", (run_id, fp)).fetchone()
        grade = grade_from_json(json.loads(g[0])) if g else None
        reviews = [dict(zip(("id", "criterion_id", "reviewer", "verdict", "score", "reason", "created_at"), r)) for r in con.execute(
            "SELECT id, criterion_id, reviewer, verdict, score, reason, created_at FROM st.reviews WHERE run_id = ? AND grader_fp = ? AND sample_id = ? ORDER BY id",
            (run_id, fp, sid))]
        answers.append({
            "run_id": run_id, "grader_fp": fp, "model": model, "judge": judge[0] if judge else None,
            "text": call[0] if call else None, "error": call[1] if call else "not answered",
            "value": grade.value if grade else None, "reviewed_value": _reviewed(bench, sample, grade, reviews),
            "extracted": grade.extracted if grade else None, "grade_error": grade.error if grade else None,
            "verdicts": [{"criterion_id": v.criterion_id, "status": v.status, "explanation": v.explanation, "votes": list(v.votes)} for v in (grade.verdicts if grade else ())],
            "reviews": reviews,
        })
    return {"id": iid, "benchmark": bench, "dataset": ds, "sample": sample, "answers": answers}


def _reviewed(bench: str, sample: dict[str, Any], grade: Any, reviews: list[dict[str, Any]]) -> float | None:
    """The value with the newest reviews applied (same rule as grandrounds.reviews.reviewed_values)."""
    if grade is None:
        return None
    newest = {r["criterion_id"]: r for r in reviews}
    if "" in newest:
        return float(newest[""]["score"])
    if not newest or not bench.startswith("healthbench"):
        return grade.value
    from grandrounds.scoring.healthbench import rubric_score

    status = {v.criterion_id: v.status for v in grade.verdicts} | {c: r["verdict"] for c, r in newest.items()}
    known = [c for c in sample.get("rubric", ()) if status.get(c["id"]) in ("met", "unmet")]
    return rubric_score([c["points"] for c in known], [status[c["id"]] == "met" for c in known])


def runs(con: sqlite3.Connection) -> list[dict[str, Any]]:
    """Runs with their results (one row per run x grader) for the home page."""
    out = []
    q = ("SELECT r.id, r.benchmark, r.model, r.dataset_sha256, r.created_at, res.grader_fp, res.result_json, "
         "(SELECT COUNT(*) FROM st.reviews v WHERE v.run_id = r.id) FROM st.runs r LEFT JOIN st.results res ON res.run_id = r.id ORDER BY r.benchmark, r.model")
    for rid, bench, model, ds, created, fp, rj, nrev in con.execute(q):
        res = json.loads(rj) if rj else {}
        out.append({"run_id": rid, "benchmark": bench, "model": model, "dataset": ds[:12], "created_at": created, "grader_fp": fp,
                    "judge": res.get("judge"), "metric": res.get("metric"), "score": res.get("score"), "ci95": res.get("ci95"),
                    "n": res.get("n"), "n_unscored": res.get("n_unscored"), "n_reviews": nrev})
    return out
