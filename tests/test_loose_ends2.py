"""Loose ends, each checked where it shows:

- ``--encoding`` names a run of its own (run id, stored run, result fingerprint), only when given,
  so the id of every run made without it stays what it was;
- the viewer's review endpoint leaves the score check to :func:`grandrounds.analyses.reviews.add_review`
  and still answers a bad score with 400 and the check's words;
- the simple-evals commit in the MCQ protocol's and the meta-eval's ``source`` comes from
  :data:`grandrounds.sources.upstream.SIMPLE_EVALS`, with no copy of it in any string of the package;
- ``compare`` names the engine (vLLM/SGLang and version) that served each side;
- the robustness attacker shares the runs' endpoint limits: connection slots, and the request
  rate when it is the candidate's own model there (vendors limit each model apart).
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.robustness import Attacker, rewrite_questions
from grandrounds.benchmarks import mcq
from grandrounds.cli.main import app
from grandrounds.core.hashing import content_hash
from grandrounds.run import limits
from grandrounds.run.config import RunConfig
from grandrounds.run.limits import EndpointLimits
from grandrounds.run.runner import run
from grandrounds.sources import upstream
from grandrounds.sources.upstream import UpstreamRepo
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_rate_limits import Arrivals, most_in_window
from tests.test_shared_definitions import running_viewer
from tests.test_viewer import Client

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def medqa_records(n: int) -> list[dict[str, Any]]:
    path = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]], encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(encoding)
    )
    return path


# ---- 1. --encoding and the run id ---------------------------------------------------------------


def _runs(db: Path) -> dict[str, Any]:
    with Store(db) as st:
        return {r.id: (r, st.result(r.id, st.latest_grader_fp(r.id))) for r in st.runs()}


def _ident(rec: Any) -> dict[str, Any]:
    """What named a run before ``--encoding`` had a say, read back from its stored record:
    benchmark, model, base URL (none for scripted models), the options that change outputs,
    generation parameters, dataset and limit."""
    options = {
        k: v
        for k, v in rec.options.items()
        if k not in ("bench_params", "limit", "encoding", "engine")
    }
    return {
        "benchmark": rec.benchmark_spec,
        "model": rec.model,
        "base_url": "",
        "options": options,
        "gen": rec.gen_params,
        "dataset": rec.dataset_sha256,
        "limit": rec.options["limit"],
    }


def test_encoding_is_in_the_run_id_only_when_given(tmp_path: Path) -> None:
    rows = medqa_records(4)
    for (
        r
    ) in rows:  # a curly apostrophe (0x92 in Windows-1252, a C1 control in Latin-1) and an accent
        r["question"] = (
            r["question"].replace("'", "\u2019")
            + " He mentions M\u00e9ni\u00e8re\u2019s disease in his father."
        )
    cp1252 = write_jsonl(tmp_path / "cp1252" / "phrases_no_exclude_test.jsonl", rows, "cp1252")
    utf8 = write_jsonl(tmp_path / "utf8" / "phrases_no_exclude_test.jsonl", rows)
    db = tmp_path / "s.db"
    common = ["run", "medqa", "--model", "scripted/cand", "--store", str(db)]

    # no flag: the id is the one the same configuration always had; nothing about encodings is stored
    r = invoke(*common, "--data", str(utf8))
    assert r.exit_code == 0, r.output
    [(plain_id, (plain, plain_result))] = _runs(db).items()
    assert plain_id == content_hash(_ident(plain))[:16]
    assert "encoding" not in plain.options and "encoding" not in plain_result["fingerprint"]

    # the same bytes named as UTF-8: a run of its own, and the fingerprint says how it was read
    r = invoke(*common, "--data", str(utf8), "--encoding", "UTF-8")
    assert r.exit_code == 0, r.output
    named = {k: v for k, v in _runs(db).items() if k != plain_id}
    [(named_id, (rec, result))] = named.items()
    assert named_id != plain_id
    # read through a named codec, the bytes are a dataset of their own (samples stored apart)
    assert rec.dataset_sha256 == content_hash(
        {"dataset": plain.dataset_sha256, "encoding": "utf-8"}
    )
    assert rec.options["encoding"] == result["fingerprint"]["encoding"] == "utf-8"
    assert named_id == content_hash(_ident(rec) | {"encoding": "utf-8"})[:16]

    # one file read as Windows-1252 and as Latin-1: two runs (before, one id for both)
    for enc in (
        "cp1252",
        "latin-1",
        "windows-1252",
    ):  # windows-1252 is cp1252 by another name: no third run
        r = invoke(*common, "--data", str(cp1252), "--encoding", enc)
        assert r.exit_code == 0, r.output
    by_data = [
        (rec, res)
        for rec, res in _runs(db).values()
        if rec.data_source.startswith(str(cp1252.parent))
    ]
    assert sorted(rec.options["encoding"] for rec, _ in by_data) == ["cp1252", "iso8859-1"]
    assert sorted(res["fingerprint"]["encoding"] for _, res in by_data) == ["cp1252", "iso8859-1"]
    assert (
        len({rec.id for rec, _ in by_data}) == 2
        and len({rec.dataset_sha256 for rec, _ in by_data}) == 2
    )
    # the second read really is different text: its answers are other calls, and each run's stored
    # samples (what the viewer, the report and regrade show) are its own read's
    with Store(db) as st:
        prompts = [
            json.dumps(list(st.answer_prompts(rec.id).values()), ensure_ascii=False)
            for rec, _ in by_data
        ]
        stored = [
            json.dumps(
                [s.metadata.get("question") for s in st.samples(rec.benchmark, rec.dataset_sha256)],
                ensure_ascii=False,
            )
            for rec, _ in by_data
        ]
    assert ("Ménière’s" in prompts[0]) != ("Ménière’s" in prompts[1])
    assert [("Ménière’s" in p) for p in prompts] == [("Ménière’s" in q) for q in stored]


# ---- 2. the viewer's review endpoint ----------------------------------------------------------


@pytest.fixture
def exam_store(tmp_path: Path) -> Path:
    data = write_jsonl(tmp_path / "mq" / "phrases_no_exclude_test.jsonl", medqa_records(3))
    with Store(tmp_path / "s.db") as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    "medqa",
                    "scripted/cand",
                    data=data,
                    provider_options={"script": lambda req: "Answer: A"},
                ),
            )
        )
    return tmp_path / "s.db"


@pytest.fixture
def viewer(exam_store: Path) -> Iterator[str]:
    with running_viewer(exam_store) as url:
        yield url


def test_the_viewer_answers_a_bad_score_as_before(exam_store: Path, viewer: str) -> None:
    with Store(exam_store) as st:
        [(run_id, fp, _)] = list(st.results())
    c = Client(viewer)
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
    with Store(exam_store) as st:
        assert [r["score"] for r in st.reviews(run_id=run_id)] == [
            0.0
        ]  # the refused ones left nothing


# ---- 3. the simple-evals commit, written once --------------------------------------------------


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


def _code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """String constants of a module that are not docstrings (f-string parts included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def test_no_string_of_the_package_repeats_the_simple_evals_commit() -> None:
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


# ---- 4. compare names the engine -------------------------------------------------------------


def test_compare_shows_the_engine_of_each_side(tmp_path: Path) -> None:
    from tests.test_engines import gr, medqa

    db = tmp_path / "s.db"
    for version in ("0.9.1", "0.9.2"):
        p = gr(*medqa(tmp_path, "vllm/fake-model", limit=4), FAKE_ENGINE_VERSION=version)
        assert p.returncode == 0, p.stderr
    with Store(db) as st:
        ids = {
            st.result(r.id, st.latest_grader_fp(r.id))["fingerprint"]["engine"]["version"]: r.id
            for r in st.runs()
        }
    assert sorted(ids) == ["0.9.1", "0.9.2"]
    r = invoke("compare", ids["0.9.1"], ids["0.9.2"], "--store", str(db))
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if "benchmark" in line)
    assert "A engine" in header and "B engine" in header
    row = next(line for line in r.output.splitlines() if line.strip("│ ").startswith("medqa"))
    assert row.index("vllm 0.9.1") < row.index("vllm 0.9.2")  # A's, then B's
    assert "0.0000" in row  # the same answers on both versions: compared, not refused

    # a model no engine served: its side is empty, the other still named
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    r = invoke(
        "run",
        "medqa",
        "--data",
        str(data),
        "--limit",
        "4",
        "--model",
        "scripted/plain",
        "--store",
        str(db),
    )
    assert r.exit_code == 0, r.output
    r = invoke("compare", "scripted/plain", ids["0.9.2"], "--store", str(db))
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.strip("│ ").startswith("medqa"))
    assert [c.strip() for c in row.strip("│ ").split("│")][1:3] == ["", "vllm 0.9.2"]


def test_compare_without_engines_has_no_engine_columns(exam_store: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "mq2" / "phrases_no_exclude_test.jsonl", medqa_records(3))
    with Store(exam_store) as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    "medqa",
                    "scripted/other",
                    data=data,
                    provider_options={"script": lambda req: "Answer: B"},
                ),
            )
        )
    r = invoke("compare", "scripted/cand", "scripted/other", "--store", str(exam_store))
    assert r.exit_code == 0, r.output
    assert "engine" not in r.output and "medqa" in r.output


# ---- 7. the attacker shares the runs' endpoint limits --------------------------------------------

DETAIL = "His neighbour, a retired nurse, insists it is always the first option."
WINDOW = 0.5
SLACK = 0.1  # arrival times jitter against the limiter's starts (see test_rate_limits)


def attack_reply(body: dict[str, Any]) -> str:
    """The candidate answers A; the attacker (model ``att``) prepends DETAIL to the question."""
    text = body["messages"][-1]["content"]
    if body.get("model") == "att":
        q = text.split("Question:\n", 1)[1].split("\n\nOptions:\n", 1)[0]
        return f"<question>{DETAIL} {q}</question>"
    return "Answer: A"


def _concurrently(db: Path, data: Path, srv: LoopbackServer, shared: bool) -> None:
    """The candidate's run and the attacker's rewrites at once, one connection each, on one server."""
    with Store(tmp := db.with_suffix(".samples.db")) as st:
        samples = asyncio.run(run(st, RunConfig("medqa", "scripted/c", data=data, limit=6))).samples
    tmp.unlink()

    async def both() -> None:
        limits = EndpointLimits()
        cfg = RunConfig(
            "medqa", "openai/cand", data=data, base_url=srv.base_url, concurrency=1, limit=6
        )
        attacker = Attacker("openai/att", srv.base_url, concurrency=1)
        await asyncio.gather(
            run(st, cfg, None, limits),
            rewrite_questions(st, samples, attacker, 0, None, limits if shared else None),
        )

    with Store(db) as st:
        asyncio.run(both())


def test_attacker_and_candidate_on_one_server_share_its_slot(tmp_path: Path) -> None:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with LoopbackServer(Arrivals(attack_reply), latency=0.03) as srv:
        _concurrently(tmp_path / "apart.db", data, srv, shared=False)
        assert srv.stats.max_in_flight == 2  # apart, they overlap: the measure sees it
    with LoopbackServer(seen := Arrivals(attack_reply), latency=0.03) as srv:
        _concurrently(tmp_path / "shared.db", data, srv, shared=True)
        assert srv.stats.max_in_flight == 1
    assert seen.models.count("cand") == 6 and seen.models.count("att") == 6


@pytest.fixture
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "RATE_WINDOW", WINDOW)


def robustness(srv: str, attacker: str, db: Path, *flags: str) -> Any:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    return invoke(
        "robustness",
        "medqa",
        "--data",
        str(data),
        "--limit",
        "6",
        "--model",
        "openai/cand",
        "--base-url",
        srv,
        "--attacker",
        attacker,
        "--concurrency",
        "1",
        *flags,
        "--store",
        str(db),
    )


def test_robustness_attacker_on_the_candidates_server_keeps_its_rpm(
    tmp_path: Path, short_window: None
) -> None:
    """An attacker of another model on the candidate's server shares its connection slot, not its
    rate (vendors limit each model); the candidate's own model as attacker shares both."""
    with LoopbackServer(seen := Arrivals(attack_reply)) as srv:
        r = robustness(srv.base_url, f"openai/att@{srv.base_url}", tmp_path / "s.db", "--rpm", "5")
        assert r.exit_code == 0, r.output
        assert srv.stats.max_in_flight == 1
    assert (
        seen.models.count("att") == 6 and seen.models.count("cand") == 12
    )  # unperturbed, then rewritten
    cand = [t for t, m in zip(seen.times, seen.models) if m == "cand"]
    assert most_in_window(cand, WINDOW - SLACK) <= 5
    att = [t for t, m in zip(seen.times, seen.models) if m == "att"]
    # the attacker's six rewrites were not held to the candidate's rate (at 5 a window they would span 0.5 s)
    assert max(att) - min(att) < WINDOW / 2

    def same_model(body: dict[str, Any]) -> str:  # the attacker's prompt asks for a <question>
        return attack_reply(
            body | {"model": "att"} if "<question>" in body["messages"][-1]["content"] else body
        )

    with LoopbackServer(both := Arrivals(same_model)) as srv:
        r = robustness(
            srv.base_url, f"openai/cand@{srv.base_url}", tmp_path / "s2.db", "--rpm", "5"
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.max_in_flight == 1
    assert len(both.times) == 6 + 12
    assert (
        most_in_window(both.times, WINDOW - SLACK) <= 5
    )  # one model: one rate for its answers and rewrites
    assert (
        max(both.times) - min(both.times) >= (18 // 5 - 1) * WINDOW - SLACK
    )  # 18 starts at 5 a window


def test_attacker_rpm_on_its_own_server_and_the_lower_on_a_shared_one(
    tmp_path: Path, short_window: None
) -> None:
    cand, att = Arrivals(attack_reply), Arrivals(attack_reply)
    with LoopbackServer(cand) as c, LoopbackServer(att) as a:
        r = robustness(
            c.base_url, f"openai/att@{a.base_url}", tmp_path / "s.db", "--attacker-rpm", "3"
        )
        assert r.exit_code == 0, r.output
    assert len(att.times) == 6 and most_in_window(att.times, WINDOW - SLACK) <= 3
    assert (
        len(cand.times) == 12 and most_in_window(cand.times, WINDOW) > 3
    )  # the attacker's limit is not the candidate's

    with LoopbackServer(seen := Arrivals(attack_reply)) as srv:
        r = robustness(
            srv.base_url,
            f"openai/att@{srv.base_url}",
            tmp_path / "t.db",
            "--rpm",
            "600",
            "--attacker-rpm",
            "4",
        )
        assert r.exit_code == 0, r.output
    att_times = [t for t, m in zip(seen.times, seen.models) if m == "att"]
    assert len(att_times) == 6 and most_in_window(att_times, WINDOW - SLACK) <= 4


def test_a_bad_attacker_rpm_is_refused_before_any_call(tmp_path: Path) -> None:
    with LoopbackServer(seen := Arrivals(attack_reply)) as srv:
        r = robustness(
            srv.base_url, f"openai/att@{srv.base_url}", tmp_path / "s.db", "--attacker-rpm", "0"
        )
    assert r.exit_code == 2 and "Invalid value for '--attacker-rpm'" in r.output
    assert not seen.times and not (tmp_path / "s.db").exists()
