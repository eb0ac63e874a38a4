"""The Store's public API on a real temporary store: every method writes or reads what it says.

Rows are written through the API and read back through it; a second, raw SQLite connection is
used only to check what actually reached the file (e.g. that leaving ``with Store(...)``
flushed rows buffered by write-behind).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path

import pytest

from grandrounds.core.errors import StoreError
from grandrounds.core.records import (
    Criterion,
    Grade,
    Message,
    Request,
    Response,
    Sample,
    Verdict,
    Vote,
)
from grandrounds.store import (
    AnswerText,
    QueueEntry,
    ReviewInput,
    RunRecord,
    Store,
    StoredGrade,
    StoredSample,
    VerdictCounts,
)

BENCH, DS, OTHER_DS = "healthbench", "d" * 64, "e" * 64
FP, FP2 = "f" * 64, "9" * 64


def sample(i: int, benchmark: str = BENCH) -> Sample:
    rubric = (
        Criterion("c0", "mentions dose", 5.0, ("axis:accuracy",)),
        Criterion("c1", "is harmful", -3.0, ("axis:safety",)),
    )
    return Sample(
        id=f"s{i}",
        benchmark=benchmark,
        messages=(Message("user", f"Question {i}?"),),
        rubric=rubric,
        metadata={"theme": "hedging"},
    )


def run_record(run_id: str = "r1", model: str = "scripted/a", dataset: str = DS) -> RunRecord:
    return RunRecord(
        id=run_id,
        benchmark=BENCH,
        benchmark_spec=BENCH,
        model=model,
        options={"answer_mode": "generate"},
        dataset_sha256=dataset,
        package_version="0.1.0",
        gen_params={"temperature": 0.0},
        data_source="test",
    )


def grade(sid: str, value: float | None, *statuses: str) -> Grade:
    verdicts = tuple(
        Verdict(
            f"c{j}",
            s,
            f"why {j}",
            votes=(Vote(judge="judge-a", status=s), Vote(judge="judge-b", status=s)),
        )
        for j, s in enumerate(statuses)
    )  # type: ignore[arg-type]
    return Grade(sample_id=sid, value=value, verdicts=verdicts)


def request(text: str, purpose: str = "answer") -> Request:
    return Request(
        provider="scripted", model="a", messages=(Message("user", text),), purpose=purpose
    )  # type: ignore[arg-type]


def rows_on_disk(path: Path, table: str) -> int:
    """Rows committed to the file, seen from an independent connection."""
    con = sqlite3.connect(path)
    try:
        return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        con.close()


@pytest.fixture
def st(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db") as store:
        store.ensure_run(run_record())
        store.put_grader(FP, {"grader": {"name": "healthbench", "args": {}}, "judges": ["judge-a"]})
        yield store


# ---- context manager ------------------------------------------------------------------------
def test_with_block_returns_the_store_and_closes_it(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as st:
        assert isinstance(st, Store)
        st.ensure_run(run_record())
    with pytest.raises(sqlite3.ProgrammingError):
        st.runs()  # the connection is closed
    with Store(tmp_path / "s.db") as again:
        assert [r.id for r in again.runs()] == ["r1"]


def test_leaving_the_block_flushes_write_behind_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as st:
        st.ensure_run(run_record())
        st.put_grader(FP, {"grader": {"name": "healthbench", "args": {}}})
        holder = st.write_behind(
            max_rows=1000, max_age=1000
        )  # a holder that never leaves (e.g. interrupted)
        holder.__enter__()
        st.put_call(request("q0"), Response(key="k0", text="answer 0"))
        st.put_answer("r1", "s0", "k0", {"messages": [{"role": "user", "content": "q0"}]})
        st.put_grade("r1", FP, grade("s0", 1.0, "met"))
        assert st.get_call("k0") == Response(
            key="k0", text="answer 0", cached=True
        )  # buffered calls are readable
        assert (
            rows_on_disk(path, "calls") == rows_on_disk(path, "answers") == 0
        )  # nothing committed yet
    assert (
        rows_on_disk(path, "calls"),
        rows_on_disk(path, "answers"),
        rows_on_disk(path, "grades"),
    ) == (1, 1, 1)


def test_leaving_the_block_on_an_error_still_flushes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with pytest.raises(KeyboardInterrupt), Store(path) as st:
        holder = st.write_behind(max_rows=1000, max_age=1000)
        holder.__enter__()
        st.put_call(request("q0"), Response(key="k0", text="kept"))
        raise KeyboardInterrupt
    with Store(path) as again:
        assert again.get_call("k0").text == "kept"  # type: ignore[union-attr]


def test_close_closes_the_connection_even_when_the_flush_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = Store(tmp_path / "s.db")

    def broken() -> None:
        raise sqlite3.OperationalError("disk full")

    monkeypatch.setattr(st, "flush", broken)
    with pytest.raises(sqlite3.OperationalError, match="disk full"):
        st.close()
    with pytest.raises(sqlite3.ProgrammingError):
        st.db.execute("SELECT 1")


def test_reopening_does_not_migrate_twice(tmp_path: Path) -> None:
    for _ in range(2):
        with Store(tmp_path / "s.db"):
            pass
    con = sqlite3.connect(tmp_path / "s.db")
    from grandrounds.store.migrations import MIGRATIONS

    assert [
        r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY 1")
    ] == sorted(v for v, _ in MIGRATIONS)
    con.close()


# ---- calls, runs ----------------------------------------------------------------------------
def test_calls_cache_successes_and_never_replace_them_by_failures(st: Store) -> None:
    st.put_call(request("q"), Response(key="k", error="timeout"))
    assert st.get_call("k") is None  # a failure is not a cache hit
    assert st.calls_by_key(["k"])["k"].error == "timeout"  # but it is stored
    st.put_call(request("q"), Response(key="k", text="fine"))
    st.put_call(request("q"), Response(key="k", error="later failure"))
    assert st.get_call("k") == Response(key="k", text="fine", cached=True)
    assert set(st.calls_by_key(["k", "missing"])) == {"k"}


def test_runs_are_kept_once_and_listed_oldest_first(st: Store) -> None:
    first = st.get_run("r1")
    assert (
        first is not None
        and first.options == {"answer_mode": "generate"}
        and first.gen_params == {"temperature": 0.0}
    )
    assert (
        st.ensure_run(run_record("r1", model="scripted/changed")).model == "scripted/a"
    )  # kept, not replaced
    time.sleep(0.005)
    st.ensure_run(run_record("r2", model="scripted/b"))
    assert [r.id for r in st.runs()] == ["r1", "r2"]
    assert st.get_run("nope") is None


# ---- samples --------------------------------------------------------------------------------
def test_samples_one_dataset_one_sample_and_all(st: Store) -> None:
    st.put_samples(BENCH, DS, [sample(2), sample(0), sample(1)])  # source order, not id order
    st.put_sample("medqa", OTHER_DS, 0, sample(9, "medqa"))
    assert [s.id for s in st.samples(BENCH, DS)] == ["s2", "s0", "s1"]
    assert st.sample_ids(BENCH, DS) == {"s0", "s1", "s2"}
    assert st.sample(BENCH, DS, "s1") == sample(1)  # round-trips exactly
    assert st.sample(BENCH, OTHER_DS, "s1") is None and st.sample(BENCH, DS, "nope") is None
    got = list(st.iter_samples())
    assert got[0] == StoredSample(BENCH, DS, 0, sample(2))
    assert [(s.benchmark, s.index, s.sample.id) for s in got] == [
        (BENCH, 0, "s2"),
        (BENCH, 1, "s0"),
        (BENCH, 2, "s1"),
        ("medqa", 0, "s9"),
    ]


def test_put_samples_keeps_existing_rows_and_joins_an_open_batch(st: Store) -> None:
    st.put_samples(BENCH, DS, [sample(0)])
    changed = Sample(id="s0", benchmark=BENCH, messages=(Message("user", "changed"),))
    with st.batch():
        st.put_samples(BENCH, DS, [changed, sample(1)])
    assert st.sample(BENCH, DS, "s0") == sample(0)
    assert st.sample_ids(BENCH, DS) == {"s0", "s1"}


# ---- answers --------------------------------------------------------------------------------
def test_answers_answer_prompts_and_texts(st: Store) -> None:
    st.put_call(request("q0"), Response(key="k0", text="zero"))
    st.put_call(request("q1"), Response(key="k1", error="HTTP 500"))
    st.put_answer("r1", "s0", "k0", {"messages": [{"role": "user", "content": "q0"}]})
    st.put_answer("r1", "s1", "k1", {"messages": [{"role": "user", "content": "q1"}]})
    st.put_answer("r1", "s2", "k-never-stored", {"messages": []})
    answers = st.answers("r1")
    assert answers["s0"] == ("k0", Response(key="k0", text="zero", cached=True))
    assert answers["s1"][1] is not None and answers["s1"][1].error == "HTTP 500"
    assert answers["s2"] == ("k-never-stored", None)
    assert st.answer("r1", "s0") == answers["s0"] and st.answer("r1", "s2") == (
        "k-never-stored",
        None,
    )
    assert st.answer("r1", "nope") is None and st.answers("other-run") == {}
    assert st.answer_prompts("r1")["s1"] == {"messages": [{"role": "user", "content": "q1"}]}
    assert sorted(st.iter_answer_texts()) == [
        AnswerText("r1", "s0", "zero"),
        AnswerText("r1", "s1", None),
        AnswerText("r1", "s2", None),
    ]


# ---- grades ---------------------------------------------------------------------------------
def test_grader_spec_round_trips(st: Store) -> None:
    assert st.grader_spec(FP) == {
        "grader": {"name": "healthbench", "args": {}},
        "judges": ["judge-a"],
    }
    st.put_grader(FP, {"other": True})  # a fingerprint's spec is never replaced
    assert st.grader_spec(FP)["judges"] == ["judge-a"]  # type: ignore[index]
    assert st.grader_spec("missing") is None


def test_grades_one_all_values_and_iteration(st: Store) -> None:
    st.put_grader(FP2, {"grader": {"name": "mcq", "args": {}}})
    st.put_grade("r1", FP, grade("s0", 0.5, "met", "unknown"))
    st.put_grade("r1", FP, grade("s1", None, "unknown", "unknown"))
    st.put_grade("r1", FP2, Grade(sample_id="s0", value=1.0, extracted="B"))
    g = st.grade("r1", FP, "s0")
    assert g is not None and g.value == 0.5 and [v.status for v in g.verdicts] == ["met", "unknown"]
    assert g.verdicts[0].statuses == ("met", "met") and g.verdicts[0].votes[1].judge == "judge-b"
    assert st.grade("r1", FP, "missing") is None and st.grade("r1", FP2, "s1") is None
    assert set(st.grades("r1", FP)) == {"s0", "s1"} and st.grades("r1", FP2)["s0"].extracted == "B"
    assert st.grade_values("r1", FP) == {"s0": 0.5, "s1": None}
    assert st.grade_values("r1", FP2) == {"s0": 1.0}
    got = sorted(st.iter_grades(), key=lambda x: (x.grader_fp, x.grade.sample_id))
    assert [(x.run_id, x.grader_fp, x.grade.sample_id) for x in got] == [
        ("r1", FP2, "s0"),
        ("r1", FP, "s0"),
        ("r1", FP, "s1"),
    ]
    assert isinstance(got[0], StoredGrade) and got[0].grade == Grade(
        sample_id="s0", value=1.0, extracted="B"
    )


def test_a_new_grade_replaces_the_old_one(st: Store) -> None:
    st.put_grade("r1", FP, grade("s0", 0.0, "unmet"))
    st.put_grade("r1", FP, grade("s0", 1.0, "met"))
    assert st.grade_values("r1", FP) == {"s0": 1.0}
    assert [v.status for v in st.grade("r1", FP, "s0").verdicts] == ["met"]  # type: ignore[union-attr]


def test_verdict_counts(st: Store) -> None:
    assert st.verdict_counts("r1", FP) == VerdictCounts(0, 0, 0, 0)
    st.put_grade("r1", FP, grade("s0", 0.5, "met", "unknown", "unmet"))
    st.put_grade("r1", FP, grade("s1", None, "unknown", "unknown"))
    st.put_grade("r1", FP, grade("s2", 1.0))
    assert st.verdict_counts("r1", FP) == VerdictCounts(
        n_grades=3, n_verdicts=5, n_unknown=3, n_unscored=1
    )


# ---- results --------------------------------------------------------------------------------
def test_results_one_all_and_the_latest_grader(st: Store) -> None:
    st.ensure_run(run_record("r2"))
    assert st.latest_grader_fp("r1") is None and st.result("r1", FP) is None
    st.put_result("r1", FP, {"score": 0.5, "judge": "judge-a"})
    time.sleep(0.005)
    st.put_result("r2", FP, {"score": 0.9})
    time.sleep(0.005)
    st.put_result("r1", FP2, {"score": 0.7, "judge": None})
    assert st.result("r1", FP) == {"score": 0.5, "judge": "judge-a"}
    assert [(r, fp, res["score"]) for r, fp, res in st.results()] == [
        ("r1", FP, 0.5),
        ("r2", FP, 0.9),
        ("r1", FP2, 0.7),
    ]
    assert st.latest_grader_fp("r1") == FP2 and st.latest_grader_fp("r2") == FP
    time.sleep(0.005)
    st.put_result("r1", FP, {"score": 0.6})  # graded again with the first grader: the newest wins
    assert st.latest_grader_fp("r1") == FP and st.result("r1", FP) == {"score": 0.6}


# ---- reviews and the queue ------------------------------------------------------------------
def test_reviews_are_appended_and_filtered(st: Store) -> None:
    st.ensure_run(run_record("r2"))
    a = st.put_review(
        ReviewInput(
            run_id="r1",
            grader_fp=FP,
            sample_id="s0",
            reviewer="Dr A",
            reason="guideline",
            criterion_id="c0",
            verdict="unmet",
        )
    )
    b = st.put_review(
        ReviewInput(
            run_id="r1", grader_fp=FP, sample_id="s1", reviewer="Dr B", reason="unsafe", score=0.25
        )
    )
    c = st.put_review(
        ReviewInput(
            run_id="r2",
            grader_fp=FP2,
            sample_id="s0",
            reviewer="Dr A",
            reason="fine",
            criterion_id="c1",
            verdict="met",
        )
    )
    assert 0 < a < b < c
    every = st.reviews()
    assert [r["id"] for r in every] == [a, b, c]
    first = every[0]
    assert {
        k: first[k]
        for k in (
            "run_id",
            "grader_fp",
            "sample_id",
            "criterion_id",
            "reviewer",
            "verdict",
            "score",
            "reason",
        )
    } == {  # type: ignore[literal-required]
        "run_id": "r1",
        "grader_fp": FP,
        "sample_id": "s0",
        "criterion_id": "c0",
        "reviewer": "Dr A",
        "verdict": "unmet",
        "score": None,
        "reason": "guideline",
    }
    assert first["created_at"]
    assert (
        every[1]["criterion_id"] == "" and every[1]["score"] == 0.25 and every[1]["verdict"] is None
    )
    assert [r["id"] for r in st.reviews(run_id="r1")] == [a, b]
    assert [r["id"] for r in st.reviews(sample_id="s0")] == [a, c]
    assert [r["id"] for r in st.reviews(run_id="r1", grader_fp=FP, sample_id="s1")] == [b]
    assert st.reviews(grader_fp="nobody") == []
    assert st.review_counts() == {"r1": 2, "r2": 1}


def test_queue_adds_only_new_items_and_lists_the_unreviewed(st: Store) -> None:
    entries = [
        QueueEntry("r1", FP, "s0", "c0", "unknown verdict", 7),
        QueueEntry("r1", FP, "s0", "c1", "judges disagree", 7),
        QueueEntry("r1", FP, "s1", "", "random 0.1", 7),
    ]
    assert st.enqueue_reviews(entries) == entries
    again = [
        QueueEntry("r1", FP, "s0", "c0", "random 0.1", 8),
        QueueEntry("r1", FP, "s2", "c0", "unknown verdict", 8),
    ]
    assert st.enqueue_reviews(again) == again[1:]  # same answer and criterion: already queued
    open_items = st.unreviewed_queue()
    assert [(q["sample_id"], q["criterion_id"], q["reason"], q["seed"]) for q in open_items] == [
        ("s0", "c0", "unknown verdict", 7),
        ("s0", "c1", "judges disagree", 7),
        ("s1", "", "random 0.1", 7),
        ("s2", "c0", "unknown verdict", 8),
    ]
    assert [q["id"] for q in open_items] == sorted(q["id"] for q in open_items)
    st.put_review(
        ReviewInput(
            run_id="r1",
            grader_fp=FP,
            sample_id="s0",
            reviewer="Dr A",
            reason="checked",
            criterion_id="c0",
            verdict="met",
        )
    )
    st.put_review(
        ReviewInput(
            run_id="r1",
            grader_fp=FP2,
            sample_id="s0",
            reviewer="Dr A",
            reason="other grader",
            criterion_id="c1",
            verdict="met",
        )
    )  # not this item
    assert [(q["sample_id"], q["criterion_id"]) for q in st.unreviewed_queue(limit=2)] == [
        ("s0", "c1"),
        ("s1", ""),
    ]
    assert st.queued_answers() == {
        ("r1", FP, "s0"),
        ("r1", FP, "s1"),
        ("r1", FP, "s2"),
    }  # reviewed or not


def test_enqueue_is_all_or_nothing(st: Store) -> None:
    def entries() -> Iterator[QueueEntry]:
        yield QueueEntry("r1", FP, "s0", "c0", "unknown verdict")
        raise RuntimeError("the scan failed half-way")

    with pytest.raises(RuntimeError, match="half-way"):
        st.enqueue_reviews(entries())
    assert (
        st.unreviewed_queue() == [] and st.queued_answers() == set()
    )  # the first entry was rolled back
    assert not st.db.in_transaction


# ---- change stamp ---------------------------------------------------------------------------
def test_change_stamp_follows_what_derived_data_depends_on(st: Store) -> None:
    seen = [st.change_stamp()]

    def changed() -> bool:
        seen.append(st.change_stamp())
        return seen[-1] != seen[-2]

    st.put_samples(BENCH, DS, [sample(0)])
    assert changed()
    st.put_answer("r1", "s0", "k0", {})
    assert changed()
    st.put_grade("r1", FP, grade("s0", 1.0, "met"))
    assert changed()
    time.sleep(0.005)
    st.put_grade("r1", FP, grade("s0", 0.0, "unmet"))  # replaced: same count, newer time
    assert changed()
    st.put_result("r1", FP, {"score": 0.0})
    assert changed()
    st.enqueue_reviews([QueueEntry("r1", FP, "s0", "c0", "unknown verdict")])
    assert changed()
    st.put_review(
        ReviewInput(
            run_id="r1",
            grader_fp=FP,
            sample_id="s0",
            reviewer="Dr A",
            reason="r",
            criterion_id="c0",
            verdict="met",
        )
    )
    assert not changed()  # reviews are read live, nothing is derived from them


# ---- the store owns its SQL -----------------------------------------------------------------
def test_no_sql_on_store_tables_outside_the_store() -> None:
    """Only the store runs SQL on its tables; the viewer's index runs SQL on its own file only."""
    src = Path(__file__).resolve().parents[1] / "src" / "grandrounds"
    own_index = {src / "viewer" / "index.py", src / "viewer" / "queries.py"}
    offenders = []
    for path in src.rglob("*.py"):
        if (src / "store") in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        if (
            ".db.execute" in text
            or "ATTACH" in text
            or ("execute(" in text.replace("_execute(", "") and path not in own_index)
        ):
            offenders.append(str(path.relative_to(src)))
    assert offenders == []


def test_a_flush_writes_many_rows_per_insert_and_lands_what_executemany_would() -> None:
    """commit_groups turns a group of rows for one INSERT into multi-row statements; the rows land
    exactly as one executemany per group lands them: in order, a replace or an upsert meeting a
    row written earlier in the same statement, more rows than one statement takes, and
    statements that are not INSERTs (run as they are)."""
    from grandrounds.store import connection

    schema = [
        "CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL, n INTEGER NOT NULL DEFAULT 1)",
        "CREATE TABLE log (i INTEGER, k TEXT)",
    ]
    upsert = "INSERT INTO t VALUES (?,?,?) ON CONFLICT(k) DO UPDATE SET v = excluded.v, n = t.n + excluded.n WHERE t.v < excluded.v"
    groups = [
        (
            "INSERT OR REPLACE INTO t VALUES (?,?,?)",
            [(f"k{i % 90}", i, 1) for i in range(200)],
        ),  # repeats within a statement
        (upsert, [(f"k{i % 7}", i % 11, 1) for i in range(150)]),
        ("DELETE FROM t WHERE k = ?", [("k3",), ("k50",)]),
        ("INSERT INTO log VALUES (?,?)", [(i, f"k{i}") for i in range(130)]),
        ("INSERT INTO log VALUES (?,?)", [(999, "one")]),
    ]

    def state(write: Callable[[sqlite3.Connection], None]) -> tuple[list[tuple], list[tuple], int]:
        db = sqlite3.connect(":memory:", isolation_level=None)
        for q in schema:
            db.execute(q)
        steps: list[str] = []
        db.set_trace_callback(steps.append)
        write(db)
        db.set_trace_callback(None)
        inserts = sum(1 for q in steps if q.startswith("INSERT"))
        return (
            list(db.execute("SELECT * FROM t ORDER BY k")),
            list(db.execute("SELECT * FROM log")),
            inserts,
        )

    def one_by_one(db: sqlite3.Connection) -> None:
        with connection.transaction(db):
            for sql, rows in groups:
                db.executemany(sql, rows)

    got_t, got_log, got_inserts = state(lambda db: connection.commit_groups(db, groups))
    want_t, want_log, want_inserts = state(one_by_one)
    assert got_t == want_t and got_log == want_log
    assert len(got_t) == 88 and len(got_log) == 131
    assert want_inserts == 200 + 150 + 130 + 1  # executemany: one statement per row
    assert got_inserts == 4 + 3 + 3 + 1  # at most 64 rows per statement, 999 values at most


def test_a_new_store_whose_wal_switch_is_refused_as_locked_retries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs started together on a new store: SQLite refuses the WAL switch at once, without
    its busy wait, while the other process converts the file; opening retries the switch."""
    from grandrounds.store import sqlite as connection

    refused: list[str] = []
    real = connection._raw_execute

    def execute(db: sqlite3.Connection, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "PRAGMA journal_mode=WAL" and len(refused) < 3:
            refused.append(sql)
            raise sqlite3.OperationalError("database is locked")
        return real(db, sql, *args)

    monkeypatch.setattr(connection, "_raw_execute", execute)
    with Store(tmp_path / "new.db") as st:
        assert st.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        st.ensure_run(run_record())
    assert len(refused) == 3
    assert rows_on_disk(tmp_path / "new.db", "runs") == 1
    with Store(tmp_path / "new.db"):
        pass  # already in WAL mode: not switched again
    assert len(refused) == 3

    # Any other failure, or "locked" past the wait, is the store's one-line error.
    monkeypatch.setattr(connection, "WAL_SWITCH_WAIT", 0.05)
    refused.clear()
    monkeypatch.setattr(
        connection,
        "_raw_execute",
        lambda db, sql, *a: (
            (_ for _ in ()).throw(sqlite3.OperationalError("database is locked"))
            if sql.endswith("=WAL")
            else real(db, sql, *a)
        ),
    )
    with pytest.raises(StoreError, match="locked by another process"):
        Store(tmp_path / "newer.db")


def test_row_times_are_iso_utc_milliseconds_in_order():
    """store.connection.now formats a second once and adds the milliseconds: the same text as
    datetime's isoformat, and never out of order with it."""
    from datetime import datetime

    from grandrounds.store.connection import now

    def iso() -> str:
        return datetime.now(UTC).isoformat(timespec="milliseconds")

    for _ in range(20000):
        before, t, after = iso(), now(), iso()
        assert before <= t <= after and len(t) == len(before) == 29
    assert datetime.fromisoformat(t).tzinfo == UTC
