"""Parts that must agree because they share one definition:

- a whole-answer review score is checked by :mod:`grandrounds.analyses.review_scales` whether it comes
  through :func:`grandrounds.analyses.reviews.add_review` or the viewer's POST, and the viewer answers
  a bad score with 400 and the check's words;
- the HTML report names each question as the viewer's list does (:mod:`grandrounds.analyses.labels`);
- the simple-evals commit is pinned once (:data:`grandrounds.sources.upstream.SIMPLE_EVALS`): the
  MCQ protocol's and the meta-eval's ``source`` come from it, and no other string of the package
  repeats it;
- an upstream file whose download failed is not tried again for every grade.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import shutil
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.collect import question_text
from grandrounds.analyses.labels import question_of
from grandrounds.analyses.review_scales import review_scale
from grandrounds.analyses.reviews import ReviewError, ReviewInput, add_review
from grandrounds.benchmarks import mcq
from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.reports import build_report
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.sources import upstream
from grandrounds.sources.upstream import UpstreamRepo
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from grandrounds.viewer import index as viewer_index
from grandrounds.viewer.queries import Filters, list_items
from grandrounds.viewer.server import make_server
from tests.test_viewer import Client

ROOT = Path(__file__).resolve().parents[1]

# HealthBench's format: multi-turn conversations (the last user turn is the question), rubric
# items with signed points; the text carries HTML specials the report must escape.
HEALTHBENCH_ROWS = [
    {
        "prompt_id": "conv-1",
        "prompt": [
            {"role": "user", "content": "My father takes warfarin."},
            {"role": "assistant", "content": "Thanks. Is anything new going on?"},
            {
                "role": "user",
                "content": "He started <b>amoxicillin</b> & his INR is 4.1 > 3. Is that a problem?",
            },
        ],
        "rubrics": [
            {
                "criterion": "Advises contacting the anticoagulation clinic",
                "points": 5,
                "tags": ["axis:accuracy"],
            },
            {
                "criterion": "Tells him to stop warfarin on his own",
                "points": -6,
                "tags": ["axis:accuracy"],
            },
        ],
        "example_tags": ["theme:context_seeking"],
    },
    {
        "prompt_id": "conv-2",
        "prompt": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Rash after a new soap."},
            {"role": "assistant", "content": "Where is it, and does it itch?"},
            {"role": "user", "content": "Arms only, itchy. Cream or 'wait & see'?"},
        ],
        "rubrics": [
            {"criterion": "Suggests stopping the soap", "points": 4, "tags": ["axis:completeness"]}
        ],
        "example_tags": ["theme:global_health"],
    },
]

# MedQA's format: the stem is the sample's own question; the prompt around it adds instructions
# and the options, which the list shows apart.
MEDQA_ROWS = [
    {
        "question": "A 60-year-old has Na+ < 125 mmol/L & confusion. What is the first step?",
        "answer": "Hypertonic saline",
        "options": {
            "A": "Hypertonic saline",
            "B": "Water restriction",
            "C": "Tolvaptan",
            "D": "Observation",
        },
        "meta_info": "step2&3",
        "answer_idx": "A",
    },
    {
        "question": "Which vitamin deficiency causes <i>scurvy</i>?",
        "answer": "Vitamin C",
        "options": {"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"},
        "meta_info": "step1",
        "answer_idx": "B",
    },
]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _judge(req: Any) -> str:
    met = "clinic" in req.messages[-1].content or "soap" in req.messages[-1].content
    return json.dumps({"explanation": "checked", "criteria_met": met})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with a HealthBench run (scripted judge) and a MedQA run, both through the real runner."""
    folder = tmp_path_factory.mktemp("loose")
    hb = _jsonl(folder / "healthbench.jsonl", HEALTHBENCH_ROWS)
    mq = _jsonl(folder / "phrases_no_exclude_test.jsonl", MEDQA_ROWS)
    judge = JudgeConfig(spec="scripted/judge", options={"script": _judge})
    with Store(folder / "s.db") as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="healthbench",
                    model="scripted/cand",
                    data=hb,
                    judges=(judge,),
                    options=RunOptions(protocol="grandrounds"),
                    provider_options={
                        "script": lambda req: "Call the clinic today; do not stop warfarin."
                    },
                ),
            )
        )
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medqa",
                    model="scripted/cand",
                    data=mq,
                    provider_options={"script": lambda req: "Answer: A"},
                ),
            )
        )
    return folder / "s.db"


@pytest.fixture
def store_path(built: Path, tmp_path: Path) -> Path:
    shutil.copyfile(built, tmp_path / "s.db")
    return tmp_path / "s.db"


def _healthbench_run(st: Store) -> tuple[str, str]:
    [(run_id, fp)] = [(r, fp) for r, fp, rj in st.results() if rj.get("benchmark") == "healthbench"]
    return run_id, fp


# ---- 1. one score check for every review path ------------------------------------------------


@contextmanager
def running_viewer(store: Path) -> Iterator[str]:
    """The viewer on ``store`` in a thread, at the URL yielded; shut down after."""
    srv = make_server(store, port=0, idle_timeout=1.0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def viewer(store_path: Path) -> Iterator[str]:
    with running_viewer(store_path) as url:
        yield url


def test_the_api_and_the_viewer_accept_and_refuse_the_same_scores(
    store_path: Path, viewer: str
) -> None:
    with Store(store_path) as st:
        run_id, fp = _healthbench_run(st)
        base = ReviewInput(
            run_id=run_id,
            grader_fp=fp,
            sample_id="conv-1",
            reviewer="Dr A",
            reason="checked the chart",
        )
        lo, hi = review_scale(st, replace(base, score=0.0))
    # conv-1: +5 and -6 points, so the worst case is (0 - 6) / 5 and the best 5 / 5
    assert (lo, hi) == (pytest.approx(-6 / 5), 1.0)
    table = [
        99.0,
        -5.0,
        1e300,
        -1e300,
        float("nan"),
        float("inf"),
        float("-inf"),
        hi + 1e-9,
        lo - 1e-9,
        0.0,
        0.5,
        1.0,
        lo,
        -1.0,
    ]
    on_scale = {s for s in table if lo <= s <= hi}
    assert on_scale == {0.0, 0.5, 1.0, lo, -1.0}

    via_api: dict[float, str | None] = {}
    with Store(store_path) as st:
        for s in table:
            try:
                add_review(st, replace(base, score=s))
                via_api[s] = None
            except ReviewError as e:
                via_api[s] = str(e)
        n_api = st.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0]
        st.db.execute("DELETE FROM reviews")

    c = Client(viewer)
    c.open_page()
    via_viewer: dict[float, str | None] = {}
    body = {
        "run_id": run_id,
        "grader_fp": fp,
        "sample_id": "conv-1",
        "reviewer": "Dr A",
        "reason": "checked the chart",
    }
    for s in table:
        code, out = c.post_review(
            body | {"score": s}
        )  # NaN and infinities go out as JSON's NaN / Infinity
        assert code in (200, 400), (s, code, out)
        via_viewer[s] = None if code == 200 else out["error"]
    with Store(store_path) as st:
        stored = sorted(r["score"] for r in st.reviews(run_id=run_id))

    accepted_api = {s for s, why in via_api.items() if why is None}
    accepted_viewer = {s for s, why in via_viewer.items() if why is None}
    assert accepted_api == accepted_viewer == on_scale
    assert n_api == len(stored) == len(on_scale) and stored == sorted(on_scale)
    for s in table:
        if s in on_scale:
            continue
        if s != s or s in (float("inf"), float("-inf")):
            assert "finite" in via_api[s] and "finite" in via_viewer[s], s
        else:  # the same words from the same check
            assert via_api[s] == via_viewer[s] and "outside this benchmark's scale" in via_api[s], s


def test_an_exam_review_is_on_zero_to_one(store_path: Path) -> None:
    with Store(store_path) as st:
        [(run_id, fp)] = [(r, fp) for r, fp, rj in st.results() if rj.get("benchmark") == "medqa"]
        sid = st.samples(st.get_run(run_id).benchmark, st.get_run(run_id).dataset_sha256)[0].id
        base = ReviewInput(
            run_id=run_id, grader_fp=fp, sample_id=sid, reviewer="Dr B", reason="key disputed"
        )
        for bad in (2.0, -0.5):
            with pytest.raises(ReviewError, match=r"outside this benchmark's scale \(0 to 1\)"):
                add_review(st, replace(base, score=bad))
        assert add_review(st, replace(base, score=0.0)) >= 1
        assert [r["score"] for r in st.reviews(run_id=run_id)] == [0.0]


# ---- 2. the report and the viewer show the same question --------------------------------------


def test_the_report_shows_each_question_as_the_viewer_lists_it(
    store_path: Path, tmp_path: Path
) -> None:
    with Store(store_path) as st:
        viewer_index.build(tmp_path / "v.idx", st)
        out = build_report(st, "html", tmp_path / "r.html")[0]
        samples = {s.id: s for bench, ds, _, s in st.iter_samples()}
    con = sqlite3.connect(tmp_path / "v.idx")
    listed = {
        it["sample_id"]: it["question"] for it in list_items(con, Filters(), per_page=50)["items"]
    }
    con.close()
    page = out.read_text(encoding="utf-8")
    shown = dict(re.findall(r"<summary>([^<:]+): ([^<]*)<span class='chip'", page))
    assert set(shown) == set(listed) == {"conv-1", "conv-2", "0", "1"}
    for sid, text in shown.items():
        assert html.unescape(text) == listed[sid][:120], sid
    # multi-turn: the last user turn, not the first one or the system message
    assert html.unescape(shown["conv-1"]) == HEALTHBENCH_ROWS[0]["prompt"][-1]["content"]
    assert html.unescape(shown["conv-2"]) == "Arms only, itchy. Cream or 'wait & see'?"
    # exam: the stem alone, without the instruction and options of the prompt
    assert html.unescape(shown["0"]) == MEDQA_ROWS[0]["question"]
    assert samples["0"].messages[-1].content != MEDQA_ROWS[0]["question"]
    # escaped where shown: no raw markup from the data in the summaries
    assert "<b>amoxicillin</b>" not in page and "<i>scurvy</i>" not in page
    assert "&lt;b&gt;amoxicillin&lt;/b&gt; &amp; his INR is 4.1 &gt; 3" in page
    # the tables' question column uses the same definition
    assert {sid: question_text(s) for sid, s in samples.items()} == {
        sid: question_of(s)[0] for sid, s in samples.items()
    }


# ---- 3. the simple-evals pin is written once ------------------------------------------------------


def test_the_simple_evals_commit_is_written_once_and_used_by_both() -> None:
    from grandrounds.graders.mcq_grader import SIMPLE_EVALS_COMMON
    from grandrounds.sources.healthbench import CHAT_SAMPLER, HEALTHBENCH_EVAL

    commit = upstream.SIMPLE_EVALS.commit
    hits = [
        p
        for p in (ROOT / "src" / "grandrounds").rglob("*.py")
        if commit in p.read_text(encoding="utf-8")
    ]
    assert hits == [ROOT / "src" / "grandrounds" / "sources" / "upstream.py"]
    for f in (HEALTHBENCH_EVAL, CHAT_SAMPLER, SIMPLE_EVALS_COMMON):
        assert (f.folder, f.repo, f.commit) == (
            upstream.SIMPLE_EVALS.folder,
            upstream.SIMPLE_EVALS.repo,
            commit,
        )


def test_the_simple_evals_files_match_sources_tsv(official_reference: Path) -> None:
    from grandrounds.graders.mcq_grader import SIMPLE_EVALS_COMMON
    from grandrounds.sources.healthbench import CHAT_SAMPLER, HEALTHBENCH_EVAL
    from tests.test_protocol_presets import sources

    rows = sources()
    for f in (HEALTHBENCH_EVAL, CHAT_SAMPLER, SIMPLE_EVALS_COMMON):
        row = rows[(f.folder, f.path)]
        assert (row["repository"], row["commit"], row["sha256"]) == (f.repo, f.commit, f.sha256)


# ---- 4. a failed download is tried once per process --------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Loopback(upstream.UpstreamFile):
    """An upstream file served (or not) from a loopback port instead of GitHub."""

    port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.repo}/{self.commit}/{self.path}"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """No reference folder, an empty cache, a fresh failure memory; returns the URLs fetched."""
    monkeypatch.delenv(upstream.REFERENCE_ENV, raising=False)
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(upstream, "_failed", {})
    monkeypatch.setattr(_Loopback, "port", _closed_port())
    attempts: list[str] = []
    real = upstream.fetch

    def counting(rf: Any, dest: Path, *a: Any, **kw: Any) -> Path:
        attempts.append(rf.url)
        return real(rf, dest, *a, **kw)

    monkeypatch.setattr(upstream, "fetch", counting)
    return attempts


def test_an_unreachable_file_is_tried_once_and_named_every_time(
    offline: list[str], tmp_path: Path
) -> None:
    content = b'X = "official text"\n'
    from grandrounds.core.hashing import file_sha256

    (tmp_path / "probe.py").write_bytes(content)
    f = _Loopback(
        folder="demo",
        repo="o/r",
        commit="a" * 40,
        path="pkg/common.py",
        sha256=file_sha256(tmp_path / "probe.py"),
    )
    other = replace(f, path="pkg/other.py")
    messages = []
    for _ in range(5):
        with pytest.raises(DataError) as e:
            upstream.read_text(f)
        messages.append(str(e.value))
    assert offline == [f.url]  # one attempt, four answers from memory
    for m in messages:
        assert f.url in m and "demo/pkg/common.py" in m and upstream.REFERENCE_ENV in m
    assert "download failed" in messages[0] and "not tried again" in messages[-1]
    with pytest.raises(DataError):
        upstream.read_text(other)  # remembered per URL: another file is still tried
    assert offline == [f.url, other.url]
    # a copy put in the cache since (by another process) is used despite the failure
    cached = tmp_path / "cache" / "reference" / "demo" / "pkg" / "common.py"
    cached.parent.mkdir(parents=True, exist_ok=True)  # made by the failed download
    cached.write_bytes(content)
    assert upstream.read_text(f) == content.decode()
    assert offline == [f.url, other.url]
    # and the memory can be cleared
    upstream.forget_failed_downloads()
    with pytest.raises(DataError, match="download failed"):
        upstream.read_text(other)
    assert offline == [f.url, other.url, other.url]


def test_offline_mcq_grading_tries_the_upstream_file_once(
    offline: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """MedQA graded under grandrounds with simple-evals' common.py unreachable: the grades are
    ours (the reference reading is unavailable), and the file is tried once for the whole run."""
    from grandrounds.graders import mcq_grader

    unreachable = _Loopback(
        **{
            k: getattr(mcq_grader.SIMPLE_EVALS_COMMON, k)
            for k in ("folder", "repo", "commit", "path", "sha256")
        }
    )
    monkeypatch.setattr(mcq_grader, "SIMPLE_EVALS_COMMON", unreachable)
    mcq_grader.simple_evals_patterns.cache_clear()
    rows = [
        MEDQA_ROWS[i % 2] | {"question": f"Q{i}: " + MEDQA_ROWS[i % 2]["question"]}
        for i in range(12)
    ]
    data = _jsonl(tmp_path / "phrases_no_exclude_test.jsonl", rows)
    try:
        with Store(tmp_path / "s.db") as st:
            out = asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="medqa",
                        model="scripted/cand",
                        data=data,
                        options=RunOptions(protocol="grandrounds"),
                        provider_options={"script": lambda req: "Answer: A"},
                    ),
                )
            )
    finally:
        mcq_grader.simple_evals_patterns.cache_clear()
    assert out.result.n == 12 and out.result.score == pytest.approx(6 / 12)
    assert offline == [unreachable.url]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


# ---- the viewer's review endpoint on an exam ----------------------------------------


@pytest.fixture
def exam_viewer(medqa_store: Path) -> Iterator[str]:
    with running_viewer(medqa_store) as url:
        yield url


def test_the_viewer_answers_a_bad_score_as_before(medqa_store: Path, exam_viewer: str) -> None:
    with Store(medqa_store) as st:
        [(run_id, fp, _)] = list(st.results())
    c = Client(exam_viewer)
    c.open_page()
    body = {
        "run_id": run_id,
        "grader_fp": fp,
        "sample_id": "0",
        "reviewer": "Dr A",
        "reason": "key disputed",
    }
    cases = [
        (5, 400, "score 5 is outside this benchmark's scale (0 to 1)"),
        (-0.25, 400, "score -0.25 is outside this benchmark's scale (0 to 1)"),
        (
            float("inf"),
            400,
            "malformed review: a score must be a finite number",
        ),  # refused as it is read
        ("high", 400, "malformed review: a score must be a number"),
    ]
    for score, status, message in cases:
        code, out = c.post_review(body | {"score": score})
        assert (code, out) == (status, {"error": message}), score
    code, out = c.post_review(body | {"score": 0})
    assert code == 200 and isinstance(out["id"], int)
    with Store(medqa_store) as st:
        assert [r["score"] for r in st.reviews(run_id=run_id)] == [
            0.0
        ]  # the refused ones left nothing


# ---- the simple-evals commit, written once ------------------------------------------


def test_the_mcq_protocol_source_follows_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    pin = upstream.SIMPLE_EVALS
    source = mcq.exam_protocols(None)["reference"].source
    assert source.startswith(f"{pin.repo}@{pin.commit[:7]} mmlu_eval.py; ")
    monkeypatch.setattr(
        mcq,
        "SIMPLE_EVALS",
        UpstreamRepo(pin.folder, "someone/simple-evals", "0123456789abcdef" * 2 + "01234567"),
    )
    assert mcq.exam_protocols(None)["reference"].source.startswith(
        "someone/simple-evals@0123456 mmlu_eval.py; "
    )


def test_the_meta_eval_fingerprint_names_the_pinned_commit(
    tmp_path: Path, official_reference: Path
) -> None:
    from tests.test_healthbench_meta import http_rule, make_rows, write_rows

    path = write_rows(tmp_path / "meta.jsonl", make_rows(6, 1))
    with LoopbackServer(http_rule({})) as judge:
        r = invoke(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            f"openai/j@{judge.base_url}",
            "--data",
            str(path),
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    with Store(tmp_path / "s.db") as st:
        [rec] = st.agreements(full=True)
    pin = upstream.SIMPLE_EVALS
    assert (
        rec.metrics["fingerprint"]["source"]
        == f"{pin.repo} healthbench_meta_eval.py @ {pin.commit[:7]}"
    )


def test_no_string_of_the_package_repeats_the_simple_evals_commit() -> None:
    from tests.test_pins import _code_strings

    short = upstream.SIMPLE_EVALS.commit[:7]
    found = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in sorted((ROOT / "src" / "grandrounds").rglob("*.py"))
        for line, text in _code_strings(p)
        if short in text
    ]
    assert len(found) == 1 and found[0].startswith("src/grandrounds/sources/upstream.py:"), (
        found
    )  # SIMPLE_EVALS itself
