"""The viewer's search index: a sidecar SQLite file derived from the store, rebuilt when it changes.

One row per question (benchmark, dataset, sample) with its own question text (not the prompt
around it, see :mod:`grandrounds.analyses.labels`) and the flags the filters need, one row per
column (a grading of a run: run, grader fingerprint, and the facts its label is made of), one
row per answer with its column and verdict counts, the dimensions of each question, and an
FTS5 table (trigram tokenizer, so Chinese text and substrings match) over questions, options
and answers. The store is never written here; delete the sidecar at any time and it is rebuilt.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grandrounds.analyses.labels import question_of, run_facts, strip_shared_lines
from grandrounds.store import Store

#: Bumped when the index's tables change, so an index built by older code is rebuilt.
INDEX_VERSION = 4

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE items (id INTEGER PRIMARY KEY, benchmark TEXT, dataset TEXT, sample_id TEXT, idx INTEGER, question TEXT,
                    disagree INTEGER, n_unknown INTEGER);
CREATE TABLE columns (col TEXT PRIMARY KEY, run_id TEXT, grader_fp TEXT, benchmark TEXT, model TEXT, facts TEXT);
CREATE TABLE answers (item_id INTEGER, run_id TEXT, grader_fp TEXT, model TEXT, col TEXT, value REAL,
                      n_met INTEGER, n_unmet INTEGER, n_unknown INTEGER, panel_split INTEGER, queued INTEGER, flagged INTEGER);
CREATE TABLE dims (item_id INTEGER, dim TEXT);
CREATE INDEX items_bench ON items(benchmark, id);
CREATE INDEX answers_item ON answers(item_id);
CREATE INDEX answers_model ON answers(model, item_id);
CREATE INDEX answers_col ON answers(col, item_id);
CREATE INDEX dims_dim ON dims(dim, item_id);
CREATE VIRTUAL TABLE fts USING fts5(question, answers, tokenize='trigram');
"""
DIM_METADATA = ("category", "dimension", "theme", "subject", "specialty")


def index_path(store_path: Path) -> Path:
    """Where the sidecar index of a store file lives (beside it)."""
    return store_path.with_name(store_path.name + ".viewer-index")


def team_index_path(dsn: str) -> Path:
    """Where the index of a team store lives: this user's cache folder, one file per server,
    database and user (named by a hash of the DSN as shown, so never by its password)."""
    import hashlib
    import os

    from grandrounds.store.team.dsn import shown

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grandrounds" / "team"
    base.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(shown(dsn).encode("utf-8")).hexdigest()[:24]
    return base / f"{name}.viewer-index"


def connect_readonly(
    path: Path, like_bytes: int = 512, cache_kib: int = 16_000
) -> sqlite3.Connection:
    """A read-only connection to the index for serving queries: a page cache of ``cache_kib``
    and SQLite's limits on LIKE patterns and statement length lowered to what the viewer's
    queries need (a longer pattern is an error, not a slow scan)."""
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
    con.execute(f"PRAGMA cache_size = -{int(cache_kib)}")
    con.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, like_bytes)
    con.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 20_000)
    return con


def stamp(store: Store) -> str:
    """What the index depends on: changes whenever the store's data or this index's layout change."""
    return f"{INDEX_VERSION}:{store.change_stamp()}"


def is_current(path: Path, store: Store) -> bool:
    """True when the index at ``path`` was built from the store as it is now."""
    if not path.exists():
        return False
    try:
        con = sqlite3.connect(path)
        row = con.execute("SELECT value FROM meta WHERE key = 'stamp'").fetchone()
        con.close()
    except sqlite3.DatabaseError:
        return False
    return bool(row) and row[0] == stamp(store)


def build(path: Path, store: Store) -> None:
    """(Re)build the index at ``path`` from an open store; atomic via rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.executescript(SCHEMA)
    con.execute("BEGIN")
    built_from = stamp(store)
    items = _add_items(con, store)
    answers = _add_answers(con, store, items)
    _add_columns(con, store, answers.columns)
    for iid, question in items.questions.items():
        con.execute(
            "UPDATE items SET disagree = ?, n_unknown = ? WHERE id = ?",
            (int(answers.disagree(iid)), answers.unknown.get(iid, 0), iid),
        )
        con.execute(
            "INSERT INTO fts(rowid, question, answers) VALUES (?,?,?)",
            (iid, question, "\n".join(answers.texts.get(iid, ()))),
        )
    con.execute("INSERT INTO meta VALUES ('stamp', ?)", (built_from,))
    con.execute("COMMIT")
    con.close()
    tmp.replace(path)


@dataclass
class _Items:
    """Index item ids by (benchmark, dataset, sample id), and each item's question."""

    ids: dict[tuple[str, str, str], int] = field(default_factory=dict)
    questions: dict[int, str] = field(default_factory=dict)


def _add_items(con: sqlite3.Connection, store: Store) -> _Items:
    """One item row (and its dimension rows) per stored sample, in source order.

    The row's question is the sample's own (see :func:`question_of`); where it is the prompt
    itself, the lines every sample of the dataset opens with are left out. The searchable text
    is the question and the options."""
    out = _Items()
    group: list[
        tuple[int, str, str]
    ] = []  # (item id, question, options) of the current dataset's prompt-only questions
    current: tuple[str, str] | None = None
    for bench, ds, idx, s in store.iter_samples():  # ordered by benchmark, dataset, index
        if (bench, ds) != current:
            _flush_questions(con, out, group)
            current, group = (bench, ds), []
        iid = len(out.ids) + 1
        out.ids[(bench, ds, s.id)] = iid
        q, own = question_of(s)
        options = "\n".join(f"{k}. {v}" for k, v in (s.choices or {}).items())
        dims = {str(t) for c in s.rubric for t in c.tags}
        dims |= {
            f"{k}:{v}"
            for k, v in (s.metadata or {}).items()
            if k in DIM_METADATA and isinstance(v, (str, int))
        }
        con.executemany("INSERT INTO dims VALUES (?, ?)", [(iid, d) for d in sorted(dims)])
        con.execute(
            "INSERT INTO items VALUES (?,?,?,?,?,?,0,0)", (iid, bench, ds, s.id, idx, q[:300])
        )
        if own:
            out.questions[iid] = q + ("\n" + options if options else "")
        else:
            group.append((iid, q, options))
    _flush_questions(con, out, group)
    return out


def _flush_questions(
    con: sqlite3.Connection, out: _Items, group: list[tuple[int, str, str]]
) -> None:
    """Store one dataset's prompt-only questions without the lines all of them open with."""
    stripped = strip_shared_lines([q for _, q, _ in group])
    for (iid, q, options), shown in zip(group, stripped):
        if shown != q:
            con.execute("UPDATE items SET question = ? WHERE id = ?", (shown[:300], iid))
        out.questions[iid] = shown + ("\n" + options if options else "")


@dataclass(kw_only=True)
class _Answers:
    """What the item flags are computed from, gathered while answers are added."""

    statuses: dict[int, dict[str, set[str]]] = field(default_factory=dict)
    values: dict[int, set[float]] = field(default_factory=dict)
    unknown: dict[int, int] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    columns: dict[tuple[str, str], str] = field(
        default_factory=dict
    )  # (run id, grader fp) -> column key

    def disagree(self, iid: int) -> bool:
        """Some criterion both met and unmet across answers, or (no verdicts) different values."""
        statuses = self.statuses.get(iid)
        if statuses:
            return any({"met", "unmet"} <= s for s in statuses.values())
        return len(self.values.get(iid, ())) > 1


def _add_answers(con: sqlite3.Connection, store: Store, items: _Items) -> _Answers:
    """One answer row per stored grade whose run and sample are known, with its verdict counts."""
    runs = {r.id: r for r in store.runs()}
    text_of = {(a.run_id, a.sample_id): a.text or "" for a in store.iter_answer_texts()}
    queued = store.queued_answers()
    out = _Answers()
    for run_id, fp, g in store.iter_grades():
        run = runs.get(run_id)
        iid = items.ids.get((run.benchmark, run.dataset_sha256, g.sample_id)) if run else None
        if run is None or iid is None:
            continue
        counts = {"met": 0, "unmet": 0, "unknown": 0}
        split = False
        for v in g.verdicts:
            counts[v.status] = counts.get(v.status, 0) + 1
            out.statuses.setdefault(iid, {}).setdefault(v.criterion_id, set()).add(v.status)
            split |= len({x for x in v.statuses if x != "unknown"}) > 1
        if g.value is not None:
            out.values.setdefault(iid, set()).add(round(g.value, 6))
        out.unknown[iid] = out.unknown.get(iid, 0) + counts["unknown"] + (g.value is None)
        col = out.columns.setdefault((run_id, fp), column_key(run_id, fp))
        row = (
            iid,
            run_id,
            fp,
            run.model,
            col,
            g.value,
            counts["met"],
            counts["unmet"],
            counts["unknown"],
            int(split),
            int((run_id, fp, g.sample_id) in queued),
            int(bool(g.details.get("flags"))),
        )  # the answer addresses the grader (graders.flags)
        con.execute("INSERT INTO answers VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", row)
        out.texts.setdefault(iid, []).append(text_of.get((run_id, g.sample_id), ""))
    return out


def column_key(run_id: str, grader_fp: str) -> str:
    """A column's key in the API: the run id and the start of the grader fingerprint."""
    return f"{run_id}/{grader_fp[:12]}"


def _add_columns(
    con: sqlite3.Connection, store: Store, columns: dict[tuple[str, str], str]
) -> None:
    """One row per grading with answers: its run, grader and the facts its label is made of."""
    runs = {r.id: r for r in store.runs()}
    results = {(run_id, fp): res for run_id, fp, res in store.results()}
    for (run_id, fp), col in columns.items():
        res = results.get((run_id, fp))
        fingerprint = (res or {}).get("fingerprint") or store.grader_spec(fp) or {}
        facts = run_facts(run_id, fp, runs.get(run_id), fingerprint, (res or {}).get("judge"))
        con.execute(
            "INSERT INTO columns VALUES (?,?,?,?,?,?)",
            (col, run_id, fp, facts.benchmark, facts.model, json.dumps(asdict(facts))),
        )
