"""The viewer's search index: a sidecar SQLite file derived from the store, rebuilt when it changes.

One row per question (benchmark, dataset, sample) with flags the filters need, one row per
answer with its verdict counts, the dimensions of each question, and an FTS5 table (trigram
tokenizer, so Chinese text and substrings match) over questions and answers. The store is
never written here; delete the sidecar at any time and it is rebuilt.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from grandrounds.records import grade_from_json

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE items (id INTEGER PRIMARY KEY, benchmark TEXT, dataset TEXT, sample_id TEXT, idx INTEGER, question TEXT,
                    disagree INTEGER, n_unknown INTEGER);
CREATE TABLE answers (item_id INTEGER, run_id TEXT, grader_fp TEXT, model TEXT, value REAL,
                      n_met INTEGER, n_unmet INTEGER, n_unknown INTEGER, panel_split INTEGER);
CREATE TABLE dims (item_id INTEGER, dim TEXT);
CREATE INDEX items_bench ON items(benchmark, id);
CREATE INDEX answers_item ON answers(item_id);
CREATE INDEX answers_model ON answers(model, item_id);
CREATE INDEX dims_dim ON dims(dim, item_id);
CREATE VIRTUAL TABLE fts USING fts5(question, answers, tokenize='trigram');
"""


def index_path(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".viewer-index")


def stamp(store: sqlite3.Connection) -> str:
    """What the index depends on: changes whenever samples, answers or grades change."""
    row = store.execute(
        "SELECT (SELECT COUNT(*) FROM samples), (SELECT COUNT(*) FROM answers), (SELECT COUNT(*) FROM grades), "
        "(SELECT MAX(created_at) FROM grades), (SELECT COUNT(*) FROM results)"
    ).fetchone()
    return json.dumps(list(row))


def is_current(path: Path, store: sqlite3.Connection) -> bool:
    if not path.exists():
        return False
    try:
        con = sqlite3.connect(path)
        row = con.execute("SELECT value FROM meta WHERE key = 'stamp'").fetchone()
        con.close()
    except sqlite3.DatabaseError:
        return False
    return bool(row) and row[0] == stamp(store)


def build(path: Path, store: sqlite3.Connection) -> None:
    """(Re)build the index at ``path`` from an open store connection; atomic via rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.executescript(SCHEMA)
    con.execute("BEGIN")
    st = stamp(store)
    runs = {r[0]: (r[1], r[2], r[3]) for r in store.execute("SELECT id, benchmark, dataset_sha256, model FROM runs")}
    item_ids: dict[tuple[str, str, str], int] = {}
    texts: dict[int, list[str]] = {}
    questions: dict[int, str] = {}
    for bench, ds, sid, idx, sj in store.execute("SELECT benchmark, dataset_sha256, sample_id, idx, sample_json FROM samples ORDER BY benchmark, dataset_sha256, idx"):
        s = json.loads(sj)
        iid = len(item_ids) + 1
        item_ids[(bench, ds, sid)] = iid
        q = _question(s)
        questions[iid], texts[iid] = q, []
        dims = {str(t) for c in s.get("rubric", ()) for t in c.get("tags", ())}
        dims |= {f"{k}:{v}" for k, v in (s.get("metadata") or {}).items() if k in ("category", "dimension", "theme", "subject", "specialty") and isinstance(v, (str, int))}
        con.executemany("INSERT INTO dims VALUES (?, ?)", [(iid, d) for d in sorted(dims)])
        con.execute("INSERT INTO items VALUES (?,?,?,?,?,?,0,0)", (iid, bench, ds, sid, idx, q[:300]))
    statuses: dict[int, dict[str, set[str]]] = {}
    values: dict[int, set[float]] = {}
    unknown: dict[int, int] = {}
    answer_text = store.execute("SELECT a.run_id, a.sample_id, c.text FROM answers a LEFT JOIN calls c ON c.key = a.request_key")
    text_of = {(r, s): t or "" for r, s, t in answer_text}
    for run_id, fp, sid, value, gj in store.execute("SELECT run_id, grader_fp, sample_id, value, grade_json FROM grades"):
        run = runs.get(run_id)
        iid = item_ids.get((run[0], run[1], sid)) if run else None
        if iid is None:
            continue
        g = grade_from_json(json.loads(gj))
        counts = {"met": 0, "unmet": 0, "unknown": 0}
        split = 0
        for v in g.verdicts:
            counts[v.status] = counts.get(v.status, 0) + 1
            statuses.setdefault(iid, {}).setdefault(v.criterion_id, set()).add(v.status)
            split |= len({x for x in v.votes if x != "unknown"}) > 1
        if value is not None:
            values.setdefault(iid, set()).add(round(value, 6))
        unknown[iid] = unknown.get(iid, 0) + counts["unknown"] + (value is None)
        con.execute("INSERT INTO answers VALUES (?,?,?,?,?,?,?,?,?)", (iid, run_id, fp, run[2], value, counts["met"], counts["unmet"], counts["unknown"], split))
        texts[iid].append(text_of.get((run_id, sid), ""))
    for iid in questions:
        crit_split = any({"met", "unmet"} <= s for s in statuses.get(iid, {}).values())
        disagree = crit_split or len(values.get(iid, ())) > 1 and not statuses.get(iid)
        con.execute("UPDATE items SET disagree = ?, n_unknown = ? WHERE id = ?", (int(disagree), unknown.get(iid, 0), iid))
        con.execute("INSERT INTO fts(rowid, question, answers) VALUES (?,?,?)", (iid, questions[iid], "\n".join(texts[iid])))
    con.execute("INSERT INTO meta VALUES ('stamp', ?)", (st,))
    con.execute("COMMIT")
    con.close()
    tmp.replace(path)


def _question(s: dict[str, Any]) -> str:
    msgs = s.get("messages") or []
    for m in reversed(msgs):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    return str(msgs[-1].get("content", "")) if msgs else ""
