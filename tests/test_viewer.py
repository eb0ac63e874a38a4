"""The viewer's JSON API over a real loopback server: pages, filters, search, drill-down, reviews."""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grandrounds.analyses.reviews import fill_queue
from grandrounds.store import Store
from grandrounds.viewer.page import APP_JS
from grandrounds.viewer.server import make_server
from tests.synthetic import XSS, SynthSpec, build_store


@pytest.fixture
def viewer(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "v.db"
    st = build_store(db, SynthSpec(n_samples=120, n_models=4))
    fill_queue(st, share=0.0)
    st.close()
    srv = make_server(db, port=0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", db
    srv.shutdown()
    srv.server_close()


def get(base: str, path: str, **params: Any) -> Any:
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url) as r:
        return json.load(r)


class Client:
    """Raw HTTP to a viewer, with the Host, cookies, Origin and CSRF token under the test's control."""

    def __init__(self, base: str, host: str | None = None) -> None:
        self.base = base
        self.port = int(base.rsplit(":", 1)[1])
        self.host = host if host is not None else f"127.0.0.1:{self.port}"
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        con = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            con.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            hdrs = (
                {"Host": self.host}
                | (
                    {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
                    if self.cookies
                    else {}
                )
                | (headers or {})
            )
            for k, v in hdrs.items():
                if v is not None:
                    con.putheader(k, v)
            if body is not None and "Content-Length" not in hdrs:
                con.putheader("Content-Length", str(len(body)))
            con.endheaders(body)
            r = con.getresponse()
            data = r.read()
            for c in r.headers.get_all("Set-Cookie") or ():
                name, _, rest = c.partition("=")
                self.cookies[name] = rest.split(";", 1)[0]
            return r.status, dict(r.headers), data
        finally:
            con.close()

    def open_page(self) -> str:
        """Load the page as a browser would: keeps its session cookie and CSRF token."""
        code, _, page = self.request("GET", "/")
        assert code == 200
        self.csrf = re.search(r'name="csrf-token" content="([^"]+)"', page.decode()).group(1)
        return page.decode()

    def post_review(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, csrf: bool = True
    ) -> tuple[int, Any]:
        data = json.dumps(({"csrf": self.csrf} if csrf else {}) | body).encode()
        hdrs = {"Content-Type": "application/json", "Origin": f"http://{self.host}"} | (
            headers or {}
        )
        code, _, out = self.request("POST", "/api/review", data, hdrs)
        return code, json.loads(out) if out.startswith(b"{") else out.decode()


def post(base: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """A review posted from the viewer's own page (a session, its CSRF token and Origin)."""
    c = Client(base)
    c.open_page()
    return c.post_review(body, headers)


def test_pages_and_facets(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    f = get(base, "/api/facets")
    assert (
        f["benchmarks"] == ["healthbench"]
        and len(f["models"]) == 4
        and "axis:accuracy" in f["dimensions"]
    )
    p1, p3 = get(base, "/api/items", per_page=50), get(base, "/api/items", per_page=50, page=3)
    assert p1["total"] == 120 and len(p1["items"]) == 50 and len(p3["items"]) == 20
    assert {i["sample_id"] for i in p1["items"]}.isdisjoint(i["sample_id"] for i in p3["items"])
    assert len(p1["items"][0]["values"]) == 4


def test_filters_match_the_store(viewer: tuple[str, Path]) -> None:
    base, db = viewer
    st = Store(db)
    statuses: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    unknown_items = set()
    for sid, gj in st.db.execute("SELECT sample_id, grade_json FROM grades"):
        for v in json.loads(gj)["verdicts"]:
            statuses[sid][v["criterion_id"]].add(v["status"])
            if v["status"] == "unknown":
                unknown_items.add(sid)
    st.close()
    disagree = {s for s, cs in statuses.items() if any({"met", "unmet"} <= x for x in cs.values())}
    assert get(base, "/api/items", disagree=1, per_page=200)["total"] == len(disagree)
    got = {i["sample_id"] for i in get(base, "/api/items", unknown=1, per_page=200)["items"]}
    assert got == unknown_items and got
    assert get(base, "/api/items", verdict="unknown", per_page=200)["total"] == len(unknown_items)
    theme = get(base, "/api/items", dimension="theme:hedging", per_page=200)
    assert theme["total"] == 24 and all(int(i["sample_id"][1:]) % 5 == 1 for i in theme["items"])
    assert get(base, "/api/items", model="scripted/model-03")["total"] == 120
    assert get(base, "/api/items", model="nobody")["total"] == 0
    assert get(base, "/api/items", queued=1, per_page=200)["total"] >= len(unknown_items)


def test_search_fts_chinese_and_injection(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    hit = get(base, "/api/items", q="window.__pwned")
    assert [i["sample_id"] for i in hit["items"]] == ["s0"]  # found in an answer
    zh = get(base, "/api/items", q="患者", per_page=200)  # two characters: LIKE fallback
    assert zh["total"] > 0 and all(int(i["sample_id"][1:]) % 7 == 3 for i in zh["items"])
    assert get(base, "/api/items", q="Question 17:")["items"][0]["sample_id"] == "s17"
    for nasty in ['" OR', "AND (", "a*", "%", "_", "NEAR(x y)"]:
        get(base, "/api/items", q=nasty)  # no FTS syntax error reaches the user


def test_item_drilldown_keeps_payload_as_data(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    first = get(base, "/api/items", per_page=1)["items"][0]
    d = get(base, f"/api/item/{first['id']}")
    assert d["sample"]["id"] == "s0" and len(d["answers"]) == 4
    a0 = next(a for a in d["answers"] if a["model"] == "scripted/model-00")
    assert XSS in a0["text"] and len(a0["verdicts"]) == 6
    a1 = next(a for a in d["answers"] if a["model"] == "scripted/model-01")
    assert XSS in next(v["explanation"] for v in a1["verdicts"] if v["criterion_id"] == "c0")
    with pytest.raises(urllib.error.HTTPError):
        get(base, "/api/item/999999")


def test_review_post_validation_and_csrf(viewer: tuple[str, Path]) -> None:
    base, db = viewer
    d = get(base, "/api/item/2")
    a = d["answers"][0]
    body = {
        "run_id": a["run_id"],
        "grader_fp": a["grader_fp"],
        "sample_id": d["sample"]["id"],
        "criterion_id": "c1",
        "verdict": "met",
        "reviewer": "Dr A",
        "reason": "clear",
    }
    code, out = post(base, body)
    assert code == 200 and out["id"] >= 1
    assert post(base, body | {"reviewer": ""})[0] == 400
    assert post(base, body | {"verdict": "<b>"})[0] == 400
    assert post(base, body | {"criterion_id": "", "verdict": None, "score": "abc"})[0] == 400
    assert post(base, body, {"Origin": "http://evil.example"})[0] == 403
    assert post(base, body, {"Content-Type": "text/plain"})[0] == 415
    again = get(base, "/api/item/2")["answers"][0]
    assert [r["verdict"] for r in again["reviews"]] == ["met"]
    assert again["verdicts"] == a["verdicts"]  # the judge's verdicts are untouched
    st = Store(db)
    assert st.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 1
    st.close()


def test_page_headers_and_script_never_uses_innerhtml(viewer: tuple[str, Path]) -> None:
    base, _ = viewer
    with urllib.request.urlopen(base + "/") as r:
        csp = r.headers["Content-Security-Policy"]
        page = r.read().decode()
    assert (
        "script-src 'self'" in csp
        and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    )
    assert (
        '<script src="/app.js">' in page
        and "innerHTML" not in APP_JS
        and "insertAdjacentHTML" not in APP_JS
    )


def test_index_rebuilds_when_the_store_changes(viewer: tuple[str, Path]) -> None:
    import time

    base, db = viewer
    assert get(base, "/api/items")["total"] == 120
    st = build_store(
        db.with_name("other.db"),
        SynthSpec(n_samples=5, n_models=1, benchmark="healthbench_hard", seed=3),
    )
    st.close()
    st = Store(db)
    src = Store(db.with_name("other.db"))
    for table in ("samples", "runs", "calls", "answers", "graders", "grades", "results"):
        rows = src.db.execute(f"SELECT * FROM {table}").fetchall()
        st.db.executemany(
            f"INSERT OR IGNORE INTO {table} VALUES ({','.join('?' * len(rows[0]))})",
            [tuple(r) for r in rows],
        )
    st.close()
    src.close()
    time.sleep(2.1)
    assert get(base, "/api/items")["total"] == 125
    assert get(base, "/api/items", benchmark="healthbench_hard")["total"] == 5


# ---- columns per run, the question itself, log-prob answers -------------------------------


def _demo_store(db: Path) -> dict[str, Any]:
    """The demo exam answered by one scripted model four ways; returns the runs by name."""
    import asyncio

    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.run.config import RunConfig
    from grandrounds.run.runner import run

    def script(req: Any) -> Any:
        if req.kind == "chat":
            return "Answer: B"
        return {
            c: -1.0 - i for i, c in enumerate(req.continuations)
        }  # the first option most likely

    st = Store(db)
    runs = {}
    for name, mode, limit, shuffle in (
        ("gen", "generate", None, False),
        ("gen5", "generate", 5, False),
        ("tok", "next-token", None, False),
        ("txt", "text-loglik", None, True),
    ):
        opts = RunOptions(protocol="grandrounds", answer_mode=mode, shuffle_options=shuffle, seed=7)
        runs[name] = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/a",
                    limit=limit,
                    options=opts,
                    provider_options={"script": script},
                ),
            )
        )
    st.close()
    return runs


@pytest.fixture
def demo_viewer(tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    db = tmp_path / "demo.db"
    runs = _demo_store(db)
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", runs
    srv.shutdown()
    srv.server_close()


def test_columns_per_run_with_labels_that_tell_them_apart(
    demo_viewer: tuple[str, dict[str, Any]],
) -> None:
    base, runs = demo_viewer
    cols = get(base, "/api/facets")["columns"]
    assert sorted(c["run_id"] for c in cols) == sorted(
        o.run.id for o in runs.values()
    )  # four runs of one model, four columns
    by_run = {c["run_id"]: c for c in cols}
    assert len({c["label"] for c in cols}) == 4
    assert (
        by_run[runs["tok"].run.id]["label"] == f"scripted/a · next-token · {runs['tok'].run.id[:8]}"
    )
    assert (
        by_run[runs["gen5"].run.id]["label"]
        == f"scripted/a · generate · limit 5 · {runs['gen5'].run.id[:8]}"
    )
    assert (
        by_run[runs["txt"].run.id]["label"]
        == f"scripted/a · text-loglik · {runs['txt'].run.id[:8]}"
    )
    # the full label is the leaderboard's: the protocol, the same for all, is only there
    assert (
        by_run[runs["tok"].run.id]["title"]
        == f"scripted/a · next-token · grandrounds · {runs['tok'].run.id[:8]}"
    )
    items = get(base, "/api/items", per_page=12)["items"]
    assert (
        len(items[0]["values"]) == 4 and len(items[-1]["values"]) == 3
    )  # the limit-5 run answered the first five only
    tok = by_run[runs["tok"].run.id]["col"]
    assert [i["values"][tok]["value"] for i in items] == [g.value for g in runs["tok"].grades]
    assert (
        get(base, "/api/items", col=tok)["total"] == 12
        and get(base, "/api/items", run=runs["gen5"].run.id)["total"] == 5
    )
    home = get(base, "/api/runs")
    assert {r["label"] for r in home} == {c["label"] for c in cols}


def test_question_list_shows_the_question_not_the_instruction(
    demo_viewer: tuple[str, dict[str, Any]],
) -> None:
    base, runs = demo_viewer
    items = get(base, "/api/items", per_page=12)["items"]
    stems = [s.metadata["question"] for s in runs["gen"].samples]
    assert [i["question"] for i in items] == [q[:200] for q in stems]
    assert not any(i["question"].startswith("Answer the following") for i in items)
    assert (
        runs["gen"].samples[0].messages[-1].content.startswith("Answer the following")
    )  # what the list used to show
    opt = runs["gen"].samples[3].choices["C"]
    assert [i["sample_id"] for i in get(base, "/api/items", q=opt)["items"]][:1] == [
        runs["gen"].samples[3].id
    ]  # options are searchable


def test_logprob_answers_show_option_probabilities(demo_viewer: tuple[str, dict[str, Any]]) -> None:
    base, runs = demo_viewer
    d = get(base, "/api/item/1")
    by_run = {a["run_id"]: a for a in d["answers"]}
    tok, txt, gen = (
        by_run[runs["tok"].run.id],
        by_run[runs["txt"].run.id],
        by_run[runs["gen"].run.id],
    )
    assert gen["options"] is None and gen["text"] == "Answer: B" and gen["judge"] is None
    sample = runs["tok"].samples[0]
    assert [o["letter"] for o in tok["options"]] == list(sample.choices) and [
        o["text"] for o in tok["options"]
    ] == list(sample.choices.values())
    assert [o["logprob"] for o in tok["options"]] == [-1.0, -2.0, -3.0, -4.0]
    assert [o["chosen"] for o in tok["options"]] == [True, False, False, False] and tok[
        "extracted"
    ] == "A"
    assert [o["target"] for o in tok["options"]] == [k == sample.target for k in sample.choices]
    assert sum(o["share"] for o in tok["options"]) == pytest.approx(1.0)
    # shuffled: the shown first option (most likely) is the one chosen, reported under its source letter
    perm = runs["txt"].grades[0].details["permutation"]
    chosen = [o for o in txt["options"] if o["chosen"]]
    assert len(chosen) == 1 and chosen[0]["shown"] == "A" and chosen[0]["letter"] == perm[0]
    assert (
        chosen[0]["logprob"] == -1.0 and chosen[0]["continuation"] == " " + sample.choices[perm[0]]
    )


def test_every_judge_of_a_run_gets_a_column(tmp_path: Path) -> None:
    from grandrounds.core.hashing import content_hash
    from grandrounds.core.records import Grade, Result

    db = tmp_path / "j.db"
    st = build_store(db, SynthSpec(n_samples=20, n_models=2, panel=False))
    spec = dict(st.grader_spec(st.latest_grader_fp("run00")) or {}) | {
        "judges": [{"model": "scripted/judge-z", "params": {}}]
    }
    fp2 = content_hash(spec)
    st.put_grader(fp2, spec)
    for sid in (f"s{i}" for i in range(20)):  # run00 re-judged by another judge: every answer 1.0
        st.put_grade("run00", fp2, Grade(sample_id=sid, value=1.0))
    st.put_result(
        "run00",
        fp2,
        Result(
            benchmark="healthbench",
            model="scripted/model-00",
            judge="scripted/judge-z",
            metric="m",
            score=1.0,
            ci95=None,
            n=20,
            n_unscored=0,
            fingerprint=spec | {"run_id": "run00"},
        ),
    )
    st.close()
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        cols = get(base, "/api/facets")["columns"]
        run00 = [c for c in cols if c["run_id"] == "run00"]
        assert len(cols) == 3 and len(run00) == 2
        assert {
            ("judge scripted/judge-z" in c["label"], "judge scripted/judge-a" in c["label"])
            for c in run00
        } == {(True, False), (False, True)}
        z = next(c["col"] for c in run00 if "judge-z" in c["label"])
        items = get(base, "/api/items", per_page=20, model="scripted/model-00")["items"]
        assert all(len(i["values"]) == 3 and i["values"][z]["value"] == 1.0 for i in items)
        assert sum(1 for a in get(base, "/api/item/1")["answers"] if a["run_id"] == "run00") == 2
    finally:
        srv.shutdown()
        srv.server_close()


def test_shared_instruction_lines_are_left_out_of_the_list(tmp_path: Path) -> None:
    from grandrounds.analyses.labels import question_of, strip_shared_lines
    from grandrounds.core.records import Message, Sample

    intro = "Each text below is a clinical note.\nFind the error, if any.\n\n"
    texts = [
        intro + "Text ID: t1\n0 A 53-year-old man.",
        intro + "Text ID: t2\n0 A 7-year-old girl.",
    ]
    assert strip_shared_lines(texts) == [
        "Text ID: t1\n0 A 53-year-old man.",
        "Text ID: t2\n0 A 7-year-old girl.",
    ]
    assert strip_shared_lines(["Question 1: a", "Question 2: b"]) == [
        "Question 1: a",
        "Question 2: b",
    ]  # only whole lines
    assert strip_shared_lines([intro + "x", intro + "x"]) == [intro + "x", intro + "x"]
    pub = Sample(
        id="1",
        benchmark="pubmedqa",
        messages=(Message("user", "prompt"),),
        metadata={"question": "Context: long\n\nQuestion: Q?", "pubmed_question": "Q?"},
    )
    calc = Sample(
        id="2",
        benchmark="medcalc-bench",
        messages=(Message("system", "s"), Message("user", "u")),
        metadata={"question": "What is the score?", "note": "A 70-year-old."},
    )
    assert question_of(pub) == ("Q?", True) and question_of(calc) == (
        "What is the score? — A 70-year-old.",
        True,
    )
    db = tmp_path / "m.db"
    st = Store(db)
    st.put_samples(
        "medec",
        "d" * 64,
        [
            Sample(id=f"t{i}", benchmark="medec", messages=(Message("user", t),))
            for i, t in enumerate(texts)
        ],
    )
    st.close()
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        items = get(f"http://127.0.0.1:{srv.server_address[1]}", "/api/items")["items"]
        assert [i["question"] for i in items] == [
            "Text ID: t1\n0 A 53-year-old man.",
            "Text ID: t2\n0 A 7-year-old girl.",
        ]
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_question_link_names_it_by_benchmark_dataset_and_id_and_stays_right_as_runs_are_added(
    viewer: tuple[str, Path],
) -> None:
    """The list links each question as ``#/q?b=BENCHMARK&d=DATASET&s=SAMPLE`` (not by its place in the
    index, which moves when runs of a benchmark that sorts first are added)."""
    import time

    base, db = viewer
    it = get(base, "/api/items", per_page=1, page=7)["items"][0]
    ref = {"b": it["benchmark"], "d": it["dataset"], "s": it["sample_id"]}
    before = get(base, "/api/item", **ref)
    assert before["sample"]["id"] == it["sample_id"] and before["id"] == it["id"]
    st = build_store(
        db.with_name("first.db"), SynthSpec(n_samples=9, n_models=1, benchmark="aaa_first", seed=5)
    )
    st.close()
    st, src = Store(db), Store(db.with_name("first.db"))
    for table in ("samples", "runs", "calls", "answers", "graders", "grades", "results"):
        rows = src.db.execute(f"SELECT * FROM {table}").fetchall()
        st.db.executemany(
            f"INSERT OR IGNORE INTO {table} VALUES ({','.join('?' * len(rows[0]))})",
            [tuple(r) for r in rows],
        )
    st.close()
    src.close()
    time.sleep(2.1)
    after = get(base, "/api/item", **ref)
    assert after["sample"] == before["sample"] and after["benchmark"] == it["benchmark"]
    with pytest.raises(urllib.error.HTTPError):
        get(base, "/api/item", b=it["benchmark"], d="zz", s=it["sample_id"])
