"""The team store: SQLite stores published into a private PostgreSQL server (tests/pg_server.py),
then read by the same commands.

One store holds MedQA (two models), HealthBench (judged, some verdicts unknown), VQA-RAD (images)
and AgentClinic (episodes), each run through the command against loopback servers on the real
data files. Publishing twice leaves every table's row count as it was; ``leaderboard``,
``report --format md`` and ``compare`` print byte for byte what they print on the SQLite store;
a re-graded run adds its grading; two publishers at once leave no duplicate; a password never
shows.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grandrounds.testing import LoopbackServer
from tests.conftest import ROOT, offline_env, shared_file
from tests.pg_server import PgServer, pg_db, pg_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.postgres
psycopg = pytest.importorskip("psycopg")

#: Every table the team store mirrors, as counted.
TABLES = (
    "runs", "samples", "answers", "calls", "graders", "grades", "grade_calls", "results", "settled",
    "episodes", "reviews", "review_queue", "judge_agreement", "images", "published_runs",
)  # fmt: skip
N_MEDQA, N_HB, N_VQA, N_CLINIC = 20, 6, 12, 5


def gr(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    full = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(ROOT)),
        "COLUMNS": "200",
        **offline_env(),
        **(env or {}),
    }
    r = subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=900,
    )
    if check:
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
    return r


def _medqa_rule(body: dict) -> str:
    """Candidate "cand" answers A when the question's length is even, else C; "cand2" the other way."""
    text = body["messages"][-1]["content"]
    even = len(text) % 2 == 0
    if body["model"] == "cand2":
        even = not even
    return "The answer is A." if even else "The answer is C."


def build_store(folder: Path) -> Path:
    """The four benchmarks' runs in one SQLite store; its path."""
    from tests.test_agentclinic import FILES, Clinic
    from tests.test_judge_e2e import judge_rule

    db = folder / "team.db"
    common = ["--store", str(db), "--protocol", "grandrounds"]
    medqa = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with LoopbackServer(_medqa_rule) as srv:
        for model in ("cand", "cand2"):
            gr("run", "medqa", "--data", str(medqa), "--limit", str(N_MEDQA), "--model",
               f"openai/{model}", "--base-url", srv.base_url, *common)  # fmt: skip
    hb = shared_file("healthbench", "healthbench_500.jsonl")
    with (
        LoopbackServer(lambda b: "Please see a doctor soon.") as cand,
        LoopbackServer(judge_rule(True)) as judge,
    ):
        gr("run", "healthbench", "--data", str(hb), "--limit", str(N_HB), "--model", "openai/cand",
           "--base-url", cand.base_url, "--judge", f"openai/judge@{judge.base_url}",
           "--max-reask", "1", *common)  # fmt: skip
    from grandrounds.testing.vision import VisionServer

    vqa = shared_file("vqa-rad", "VQA_RAD Dataset Public.json").parent
    with VisionServer(lambda seen: "yes" if seen.images[0].sha256 < "8" else "no") as vsrv:
        gr("run", "vqa-rad", "--data", str(vqa), "--limit", str(N_VQA), "--model", "openai/vlm",
           "--base-url", vsrv.base_url, *common)  # fmt: skip
    clinic = Clinic("medqa")
    with LoopbackServer(clinic.rule) as csrv:
        gr("run", "agentclinic", "--param", "dataset=medqa", "--data",
           str(shared_file("agentclinic", FILES["medqa"])), "--limit", str(N_CLINIC),
           "--model", "openai/doctor", "--base-url", csrv.base_url,
           "--simulator", f"openai/sim@{csrv.base_url}", "--judge", f"openai/mod@{csrv.base_url}",
           *common)  # fmt: skip
    # judge agreement with physicians, measured for the HealthBench judge (generated meta-eval rows)
    from tests.test_healthbench_meta import http_rule, make_rows, write_rows

    meta = write_rows(folder / "meta.jsonl", make_rows(30, 5))
    with LoopbackServer(http_rule({"fail": False})) as jsrv:
        gr("validate-judge", "healthbench-meta", "--judge", f"openai/judge@{jsrv.base_url}",
           "--data", str(meta), "--store", str(db), "--out", str(folder / "agree.json"))  # fmt: skip
    gr("review-queue", "--share", "0.2", "--store", str(db))
    add_review_to(db, "dr-sqlite", "met", "said so in the store itself")
    return db


def hb_target(store) -> tuple[str, str, str, str]:
    """(run, grader, sample, criterion) of the first HealthBench verdict, as the store holds it."""
    run = next(r for r in store.runs() if r.benchmark == "healthbench")
    fp = store.latest_grader_fp(run.id)
    grades = store.grades(run.id, fp)
    sid = sorted(grades)[0]
    return run.id, fp, sid, grades[sid].verdicts[0].criterion_id


def add_review_to(db: Path, reviewer: str, verdict: str, reason: str) -> int:
    from grandrounds.analyses.reviews import add_review
    from grandrounds.store import ReviewInput, Store

    with Store(db) as st:
        run_id, fp, sid, crit = hb_target(st)
        return add_review(
            st,
            ReviewInput(
                run_id=run_id,
                grader_fp=fp,
                sample_id=sid,
                reviewer=reviewer,
                reason=reason,
                criterion_id=crit,
                verdict=verdict,
            ),
        )


@pytest.fixture(scope="module")
def team_db(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("team"))


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as con:
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}


def table_digest(dsn: str) -> dict[str, str]:
    """Each table's rows, hashed in a fixed order: equal digests, equal contents."""
    with psycopg.connect(dsn) as con:
        out = {}
        for t in TABLES:
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND column_name NOT IN ('id', 'seq') ORDER BY ordinal_position",
                    (t,),
                )
            ]
            rows = con.execute(
                f"SELECT {', '.join(cols)} FROM {t} ORDER BY {', '.join(cols[:4])}"
            ).fetchall()
            out[t] = hashlib.sha256(repr(rows).encode()).hexdigest()
        return out


def sqlite_counts(db: Path) -> dict[str, int]:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return {
            t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in TABLES
            if t not in ("images", "calls", "published_runs")
        }
    finally:
        con.close()


def test_published_twice_rows_unchanged_and_outputs_byte_equal(team_db, pg_db, tmp_path):
    first = gr("publish", "--store", str(team_db), "--to", pg_db)
    after_one, digest_one = counts(pg_db), table_digest(pg_db)
    second = gr("publish", "--store", str(team_db), "--to", pg_db)
    after_two, digest_two = counts(pg_db), table_digest(pg_db)
    print("\nrows after the first publish:", after_one)
    print(first.stdout.strip().splitlines()[-1])
    print(second.stdout.strip().splitlines()[-1])
    assert after_two == after_one and digest_two == digest_one
    assert "already there" in second.stdout and "5 runs" in second.stdout
    assert "(0 changed;" in second.stdout
    # every row of the store's tables is there (the call cache is not copied whole: only what rows name)
    want = sqlite_counts(team_db)
    for t, n in want.items():
        assert after_one[t] == n, t
    assert after_one["runs"] == 5 and after_one["episodes"] >= N_CLINIC
    assert after_one["reviews"] == 1 and after_one["review_queue"] > 0
    assert after_one["judge_agreement"] == 1
    images = list((team_db.parent / "team.db.images").glob("??/*"))
    assert after_one["images"] == len(images) > 0
    assert after_one["calls"] > 0

    for args in (
        ("leaderboard",),
        ("leaderboard", "--with-reviews"),
        ("compare", "openai/cand", "openai/cand2"),
    ):
        a = gr(*args, "--store", str(team_db))
        b = gr(*args, "--store", pg_db)
        assert a.stdout == b.stdout, args
        assert a.stdout.strip()
    md_a, md_b = tmp_path / "a.md", tmp_path / "b.md"
    gr("report", "--format", "md", "--out", str(md_a), "--store", str(team_db))
    gr("report", "--format", "md", "--out", str(md_b), "--store", pg_db)
    assert md_a.read_bytes() == md_b.read_bytes()
    text = md_a.read_text(encoding="utf-8")
    assert "healthbench" in text and "vqa-rad" in text and "agentclinic" in text
    board = gr("leaderboard", "--with-reviews", "--store", pg_db).stdout
    assert "judge agreement" in board and "Judge vs clinician reviewers" in board
    print(
        f"leaderboard, compare and report --format md byte-equal ({len(text):,} characters of md)"
    )


def test_a_regraded_run_adds_its_grading_and_new_reviews_land_once(team_db, pg_db, tmp_path):
    import shutil

    from tests.test_judge_e2e import judge_rule

    db = tmp_path / "copy.db"
    shutil.copy(team_db, db)
    shutil.copytree(team_db.parent / "team.db.images", tmp_path / "copy.db.images")
    gr("publish", "--store", str(db), "--to", pg_db)
    before = counts(pg_db)
    board_before = gr("leaderboard", "--with-reviews", "--store", pg_db).stdout
    from grandrounds.store import Store

    with Store(db, readonly=True) as st:
        run_id = next(r.id for r in st.runs() if r.benchmark == "healthbench")
    with LoopbackServer(judge_rule(False)) as judge2:  # a judge that now answers every item
        gr("regrade", "--run", run_id, "--judge", f"openai/judge2@{judge2.base_url}",
           "--max-reask", "1", "--store", str(db))  # fmt: skip
    add_review_to(db, "dr-later", "unmet", "a second look")
    out = gr("publish", "--store", str(db), "--to", pg_db).stdout
    after = counts(pg_db)
    assert after["results"] == before["results"] + 1  # the new grading, beside the first
    assert after["grades"] == before["grades"] + N_HB and after["graders"] == before["graders"] + 1
    assert after["reviews"] == before["reviews"] + 1 and after["runs"] == before["runs"]
    assert "(1 changed;" in out
    with psycopg.connect(pg_db) as con:
        fps = con.execute(
            "SELECT COUNT(DISTINCT grader_fp) FROM results WHERE run_id = %s", (run_id,)
        ).fetchone()[0]
    assert fps == 2
    a = gr("leaderboard", "--with-reviews", "--store", str(db)).stdout
    b = gr("leaderboard", "--with-reviews", "--store", pg_db).stdout
    assert a == b
    assert b != board_before  # the new grading is on the board


def test_two_publishers_at_once_overlapping_runs_no_duplicates_no_error(team_db, pg_db, tmp_path):
    """Two stores (the whole store, and a copy that also holds a run of its own) published at the
    same moment, each twice over, into one database."""
    import shutil

    other = tmp_path / "other.db"
    shutil.copy(team_db, other)
    shutil.copytree(team_db.parent / "team.db.images", tmp_path / "other.db.images")
    medqa = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with LoopbackServer(_medqa_rule) as srv:
        gr("run", "medqa", "--data", str(medqa), "--limit", "7", "--model", "openai/cand3",
           "--base-url", srv.base_url, "--store", str(other), "--protocol", "grandrounds")  # fmt: skip
    procs = []
    for store in (team_db, other, team_db, other):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **offline_env()}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "grandrounds", "publish", "--store", str(store), "--to", pg_db],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        ))  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [o[1][-2000:] for o in outs]
    got = counts(pg_db)
    want = sqlite_counts(other)
    for t, n in want.items():
        assert got[t] == n, t
    assert got["runs"] == 6
    with psycopg.connect(pg_db) as con:  # keys are keys: no table holds a row twice
        assert (
            con.execute("SELECT COUNT(*) FROM (SELECT DISTINCT digest FROM reviews) d").fetchone()[
                0
            ]
            == got["reviews"]
        )
    print(f"\nfour publishers at once (two stores, 5 runs shared): {got}")


def test_unreachable_server_and_newer_schema_are_one_line_errors(team_db, pg_server, pg_db):
    port = pg_server.port
    r = gr(
        "publish",
        "--store",
        str(team_db),
        "--to",
        f"postgresql://u:s3cret-pw@127.0.0.1:{port + 1}/x",
        check=False,
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert (
        lines[0].startswith("error: postgresql://u@127.0.0.1:")
        and "cannot reach the team store" in lines[0]
    )
    assert "s3cret-pw" not in r.stderr + r.stdout
    r = gr("leaderboard", "--store", pg_db, check=False)
    assert r.returncode == 2 and "no grandrounds team store in this database" in r.stderr
    gr("publish", "--store", str(team_db), "--to", pg_db)
    with psycopg.connect(pg_db, autocommit=True) as con:
        con.execute("INSERT INTO schema_migrations VALUES (99, 'later')")
    for args in (("leaderboard",), ("publish", "--to", pg_db)):
        store = pg_db if args[0] == "leaderboard" else str(team_db)
        r = gr(*args, "--store", store, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "schema version 99 is newer than this grandrounds understands" in r.stderr


def test_the_password_is_never_printed_stored_or_logged(team_db, pg_server, tmp_path):
    """A role with a password, the server asking for it: the DSN's password and PGPASSWORD work,
    and the password is in no output, no table and no file the commands write."""
    secret = "Pw-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    db = f"pw{os.getpid()}"
    pg_server.createdb(db)
    pg_server.psql(
        db,
        f"CREATE ROLE publisher LOGIN PASSWORD '{secret}'; GRANT ALL ON SCHEMA public TO publisher",
    )
    pg_server.psql(db, f"ALTER DATABASE {db} OWNER TO publisher")
    base = f"127.0.0.1:{pg_server.port}/{db}"
    with_pw = f"postgresql://publisher:{secret}@{base}"
    out = gr("publish", "--store", str(team_db), "--to", with_pw)
    assert secret not in out.stdout + out.stderr and f"postgresql://publisher@{base}" in out.stdout
    via_env = gr(
        "leaderboard", "--store", f"postgresql://publisher@{base}", env={"PGPASSWORD": secret}
    )
    assert secret not in via_env.stdout + via_env.stderr and "medqa" in via_env.stdout
    wrong = gr("leaderboard", "--store", f"postgresql://publisher:not-{secret}@{base}", check=False)
    assert wrong.returncode == 2 and secret not in wrong.stderr and "not-" not in wrong.stderr
    md = tmp_path / "r.md"
    gr("report", "--format", "md", "--out", str(md), "--store", with_pw)
    assert secret not in md.read_text(encoding="utf-8")
    with psycopg.connect(with_pw) as con:
        for t in TABLES:
            if t == "images":
                continue
            hit = con.execute(
                f"SELECT COUNT(*) FROM {t} WHERE {t}::text LIKE %s", (f"%{secret}%",)
            ).fetchone()[0]
            assert hit == 0, t


@pytest.mark.browser
def test_viewer_on_the_team_store_in_chromium(team_db, pg_db, tmp_path, monkeypatch):
    """``view --store postgresql://...``: a HealthBench item with its verdicts, a VQA-RAD item with
    its image (from the images table), an AgentClinic transcript; a review made in the page lands in
    PostgreSQL, attributed to its reviewer, and ``leaderboard --with-reviews`` reads it back."""
    import urllib.request

    from grandrounds.store.team.connection import TeamStore
    from grandrounds.viewer.server import make_server
    from tests.test_browser import launch_chromium

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gr("publish", "--store", str(team_db), "--to", pg_db)
    board_before = gr("leaderboard", "--with-reviews", "--store", pg_db).stdout
    n_before = counts(pg_db)
    srv = make_server(pg_db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/"

    def first_item(bench: str) -> str:
        with urllib.request.urlopen(base + f"api/items?benchmark={bench}") as r:
            return str(json.loads(r.read())["items"][0]["id"])

    expect = pytest.importorskip("playwright.sync_api").expect
    try:
        with launch_chromium() as browser:
            pg = browser.new_page()
            dialogs: list[str] = []
            pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            # HealthBench: the rubric with each criterion's verdict
            pg.goto(base + "#/item/" + first_item("healthbench"))
            pg.wait_for_selector("#rubric")
            verdicts = pg.locator("#rubric span.verdict").all_text_contents()
            assert len(verdicts) > 3 and set(verdicts) <= {"met", "unmet", "unknown"}
            assert {"met", "unmet"} <= set(verdicts)
            # a review of the first criterion, from the page, by a named reviewer
            pg.fill("#reviewer", "Dr Team 团队")
            form = pg.locator("#rubric form.rv").first
            form.locator("select.rv-verdict").select_option("unmet")
            form.locator("input.rv-reason").fill("checked on the team store")
            form.locator("button.rv-submit").click()
            expect(pg.locator("#status")).to_have_text("review saved")
            pg.locator("#rubric").screenshot(path=str(tmp_path / "healthbench.png"))
            # VQA-RAD: the question's image, served from the images table
            pg.goto(base + "#/item/" + first_item("vqa-rad"))
            pg.wait_for_selector("img.thumb")
            img = pg.locator("img.thumb").first
            expect(img).to_have_js_property("complete", True)
            assert img.evaluate("i => i.naturalWidth") > 50
            src = img.get_attribute("src")
            with urllib.request.urlopen(base + src.lstrip("/")) as r:
                data, ctype = r.read(), r.headers["Content-Type"]
            assert (
                ctype.startswith("image/")
                and hashlib.sha256(data).hexdigest() == src.rsplit("/", 1)[1]
            )
            # AgentClinic: the episode as a transcript
            pg.goto(base + "#/item/" + first_item("agentclinic"))
            pg.wait_for_selector(".transcript")
            text = pg.locator(".transcript").text_content()
            assert "episode 1 · finished" in text and "DIAGNOSIS READY" in text
            pg.locator(".transcript").screenshot(path=str(tmp_path / "transcript.png"))
            assert dialogs == []
            pg.close()
    finally:
        srv.shutdown()
        srv.server_close()
    after = counts(pg_db)
    assert after["reviews"] == n_before["reviews"] + 1
    assert {t: n for t, n in after.items() if t != "reviews"} == {
        t: n for t, n in n_before.items() if t != "reviews"
    }  # the review is the viewer's only write
    with psycopg.connect(pg_db) as con:
        row = con.execute(
            "SELECT reviewer, verdict, reason FROM reviews ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row == ("Dr Team 团队", "unmet", "checked on the team store")
    board = gr("leaderboard", "--with-reviews", "--store", pg_db).stdout
    assert board != board_before
    agreement = board[board.index("Judge vs clinician reviewers") :]
    assert re.search(r"│\s*2\s*│", agreement), (
        agreement
    )  # two criteria rated by judge and reviewers
    # read-only elsewhere: the leaderboard's connection refuses a write
    st = TeamStore(pg_db)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            st.db.execute("DELETE FROM reviews")
    finally:
        st.close()


def test_read_only_roles_as_the_guide_grants_them(team_db, pg_server):
    """The roles of docs/team.md: a reader reads everything and writes nothing; the viewer's role
    adds reviews and nothing else."""
    from grandrounds.core.errors import StoreError
    from grandrounds.store import ReviewInput
    from grandrounds.store.team.connection import TeamStore

    db = f"roles{os.getpid()}"
    pg_server.createdb(db)
    for role in ("owner_r", "reader", "viewer"):
        pg_server.psql(db, f"CREATE ROLE {role} LOGIN")
    pg_server.psql(
        db, f"ALTER DATABASE {db} OWNER TO owner_r; GRANT ALL ON SCHEMA public TO owner_r"
    )
    base = f"127.0.0.1:{pg_server.port}/{db}"
    gr("publish", "--store", str(team_db), "--to", f"postgresql://owner_r@{base}")
    guide = (ROOT / "docs" / "team.md").read_text(encoding="utf-8")
    grants = guide.split("After the first publish has created the tables, as `publisher`:")[1]
    grants = grants.split("```sql")[1].split("```")[0]
    r = subprocess.run(
        [*pg_server.run_as, str(pg_server.bin_dir / "psql"), "-h", "127.0.0.1", "-p",
         str(pg_server.port), "-U", "owner_r", "-d", db, "-v", "ON_ERROR_STOP=1", "-X"],
        input=grants, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    owner = gr("leaderboard", "--store", f"postgresql://owner_r@{base}").stdout
    assert gr("leaderboard", "--store", f"postgresql://reader@{base}").stdout == owner
    target = ReviewInput(
        run_id="x",
        grader_fp="y",
        sample_id="z",
        reviewer="Dr R",
        reason="why",
        criterion_id="",
        score=1.0,
    )
    st = TeamStore(f"postgresql://reader@{base}", reviews=True)
    try:
        with pytest.raises(StoreError, match="cannot add the review"):
            st.put_review(target)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with st.pg.con.transaction():
                st.pg.con.execute("SET TRANSACTION READ WRITE")
                st.pg.con.execute("DELETE FROM runs")
    finally:
        st.close()
    st = TeamStore(f"postgresql://viewer@{base}", reviews=True)
    try:
        assert st.put_review(target) > 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with st.pg.con.transaction():
                st.pg.con.execute("SET TRANSACTION READ WRITE")
                st.pg.con.execute("UPDATE reviews SET reason = 'changed'")
    finally:
        st.close()


def test_sqlite_functions_in_the_team_schema_answer_as_sqlite_does(pg_db):
    """json_valid, json_extract, json_array_length, instr and a sum of comparisons, as the store's
    queries use them, on documents as the store holds them (NaN and Infinity from older versions
    included), in SQLite and in the team schema."""
    import sqlite3

    from grandrounds.store.team.publish import migrate

    migrate(pg_db)
    docs = [
        '{"status":"scored","verdicts":[{"a":1},{"b":2}],"x":"NaN in a string"}',
        '{"status":"answer_failed","verdicts":[]}',
        '{"status":"grader_error","value":NaN,"verdicts":[1]}',
        '{"value":Infinity,"status":"scored"}',
        '{"verdicts":null,"error":"judge call failed"}',
        '{"error":"judge call failed","status":"not_asked","verdicts":{"k":1}}',
        "[1,2,3]",
    ]
    queries = [
        "SELECT json_valid(d) FROM t ORDER BY i",
        "SELECT CASE WHEN json_valid(d) THEN json_extract(d, '$.status') END FROM t ORDER BY i",
        "SELECT CASE WHEN json_valid(d) THEN json_array_length(d, '$.verdicts') END FROM t ORDER BY i",
        'SELECT instr(d, \'"error":"judge call failed\') FROM t ORDER BY i',
        "SELECT SUM(CASE WHEN json_valid(d) THEN json_extract(d, '$.status') END IN ('answer_failed', 'not_asked')), "
        "SUM(instr(d, 'judge call failed') > 0), SUM(i > 100) FROM t",
    ]
    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE t (i INTEGER, d TEXT)")
    lite.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(docs)))
    with psycopg.connect(pg_db, autocommit=True) as con:
        con.execute("CREATE TEMP TABLE t (i bigint, d text)")
        with con.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", list(enumerate(docs)))
        for q in queries:
            want = [
                tuple(bool(v) if "json_valid(d) FROM" in q else v for v in r)
                for r in lite.execute(q)
            ]
            got = [tuple(r) for r in con.execute(q)]
            assert got == want, q
