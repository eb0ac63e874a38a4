"""The commands of ``grandrounds`` not exercised elsewhere, through ``typer.testing.CliRunner`` on the
real app (and ``grandrounds.cli.main.main`` where the exit code is its job): runs, regrade and submission
on unknown runs, submission, list, leaderboard, report and compare.

Stores are filled by the real runner with scripted models on the bundled 12-question demo exam,
each model answering right on a known subset of the questions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli import common
from grandrounds.cli import main as cli
from grandrounds.cli.main import app
from grandrounds.core.records import Request
from grandrounds.core.registry import BENCHMARKS, PROVIDERS
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store

DEMO_FILE = Path(__file__).resolve().parents[1] / "src" / "grandrounds" / "data" / "demo_exam.jsonl"
DEMO = [
    json.loads(line) for line in DEMO_FILE.read_text(encoding="utf-8").splitlines() if line.strip()
]
WIDE = {"COLUMNS": "400"}

#: Questions each scripted model gets right (0-based positions in demo_exam.jsonl).
ALPHA = {0, 1, 2, 3, 4, 5, 6, 7, 8}
BETA = {0, 1, 2, 3, 9}


def demo_script(right: set[int]):
    """Answer demo question i with its key when i is in ``right``, else with another letter."""

    def script(req: Request) -> str:
        text = req.messages[-1].content
        [i] = [k for k, q in enumerate(DEMO) if q["question"] in text]
        key = DEMO[i]["answer_idx"]
        return f"Answer: {key if i in right else next(x for x in 'ABCD' if x != key)}"

    return script


def letter_script(req: Request) -> dict[str, float]:
    """Letter mode: the option letters scored, the key of every question highest."""
    text = req.messages[-1].content
    [i] = [k for k, q in enumerate(DEMO) if q["question"] in text]
    key = DEMO[i]["answer_idx"]
    return (
        {c: (0.0 if c == key else -5.0) for c in req.continuations}
        if req.continuations
        else {key: 0.0}
    )


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=WIDE | (env or {}))


def row_with(output: str, *needles: str) -> str:
    rows = [ln for ln in output.splitlines() if all(n in ln for n in needles)]
    assert len(rows) == 1, (needles, output)
    return rows[0]


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripted/alpha (9 of 12 right) and scripted/beta (5 of 12 right) on the demo exam."""
    db = tmp_path_factory.mktemp("demo") / "s.db"
    with Store(db) as st:
        for name, right in (("alpha", ALPHA), ("beta", BETA)):
            asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="demo",
                        model=f"scripted/{name}",
                        provider_options={"script": demo_script(right)},
                    ),
                )
            )
    return db


def run_ids(db: Path) -> dict[str, str]:
    with Store(db) as st:
        return {r.model: r.id for r in st.runs()}


# ---- runs ---------------------------------------------------------------------------------------


def test_runs_lists_each_run_with_model_mode_and_dataset(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/alpha",
                    provider_options={"script": demo_script(ALPHA)},
                ),
            )
        )
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/lp",
                    options=RunOptions(answer_mode="letter"),
                    provider_options={"script": letter_script},
                ),
            )
        )
    ids = run_ids(db)
    r = invoke("runs", "--store", str(db))
    assert r.exit_code == 0, r.output
    dataset = hashlib.sha256(DEMO_FILE.read_bytes()).hexdigest()[:12]
    gen = row_with(r.output, ids["scripted/alpha"])
    let = row_with(r.output, ids["scripted/lp"])
    assert "scripted/alpha" in gen and "generate" in gen and dataset in gen and "demo" in gen
    assert (
        "scripted/lp" in let and "next-token" in let and dataset in let
    )  # "letter" is stored by its current name
    assert r.output.index(ids["scripted/alpha"]) < r.output.index(ids["scripted/lp"]), (
        "oldest first"
    )
    assert "complete" in gen and "reference" in gen


def test_runs_reads_the_store_named_by_the_environment(demo_db: Path) -> None:
    ids = run_ids(demo_db)
    r = invoke("runs", env={"GRANDROUNDS_STORE": str(demo_db)})
    assert r.exit_code == 0, r.output
    assert all(run_id in r.output for run_id in ids.values()) and len(ids) == 2


def test_runs_on_an_empty_store_says_so(tmp_path: Path) -> None:
    with Store(tmp_path / "empty.db"):
        pass
    r = invoke("runs", "--store", str(tmp_path / "empty.db"))
    assert r.exit_code == 0, r.output
    assert "no runs in" in r.output and "scripted/" not in r.output


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["leaderboard"],
        ["report", "--out", "r.html"],
        ["compare", "a", "b"],
        ["regrade", "--run", "x"],
        ["submission", "--run", "x", "--out", "s.jsonl"],
    ],
)
def test_read_commands_refuse_a_missing_store_and_never_create_it(
    tmp_path: Path, command: list[str]
) -> None:
    missing = tmp_path / "typo.db"
    r = invoke(*command, "--store", str(missing))
    assert r.exit_code == 2, r.output
    assert f"no store at {missing}" in r.output
    assert not missing.exists()


# ---- unknown run ids ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["regrade"], ["submission", "--out", "sub.jsonl"]])
def test_an_unknown_run_id_is_a_config_error(demo_db: Path, command: list[str]) -> None:
    r = invoke(*command, "--run", "deadbeefdeadbeef", "--store", str(demo_db))
    assert r.exit_code == 2
    assert (
        f"error: no run 'deadbeefdeadbeef' in {demo_db}" in r.output and "Traceback" not in r.output
    )


@pytest.mark.parametrize("command", ["regrade", "submission"])
def test_main_turns_an_unknown_run_into_one_line_and_exit_2(
    demo_db: Path,
    tmp_path: Path,
    command: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    argv = ["grandrounds", command, "--run", "nope0000", "--store", str(demo_db)]
    if command == "submission":
        argv += ["--out", str(tmp_path / "sub.jsonl")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no run 'nope0000' in ") and err.endswith("\n")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "sub.jsonl").exists()


def test_a_run_that_fails_before_its_first_call_prints_its_error_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """No empty progress bar before the error: the bar is shown from the first task on."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "options": {"A": "x"}}\n', encoding="utf-8")
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "grandrounds",
            "run",
            "medqa",
            "--data",
            str(bad),
            "--model",
            "scripted/always-a",
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {bad}, line 1: missing field 'answer_idx'") and err.count("\n") == 1
    ), repr(err)


def test_regrade_of_a_stored_exam_run_gives_the_same_score_without_the_model(demo_db: Path) -> None:
    """The scripted model is not reachable here (no script is passed): the answers come from the store."""
    ids = run_ids(demo_db)
    r = invoke("regrade", "--run", ids["scripted/beta"], "--store", str(demo_db))
    assert r.exit_code == 0, r.output
    row = row_with(r.output, "scripted/beta", "accuracy")
    assert f"{len(BETA) / 12:.3f}" in row and " 12 " in row


def test_regrade_takes_a_run_id_prefix_and_refuses_an_unknown_one(demo_db: Path) -> None:
    ids = run_ids(demo_db)
    r = invoke("regrade", "--run", ids["scripted/beta"][:8], "--store", str(demo_db))
    assert r.exit_code == 0, r.output
    assert f"{len(BETA) / 12:.3f}" in row_with(r.output, "scripted/beta", "accuracy")
    r = invoke("regrade", "--run", "ffffffffff", "--store", str(demo_db))
    assert r.exit_code == 2 and "no run 'ffffffffff'" in r.output


# ---- submission ---------------------------------------------------------------------------------


def write_medbench(path: Path) -> Path:
    rows = [
        {
            "question": "单选题：发热首选检查？\nA. 血常规\nB. 头颅CT",
            "answer": "",
            "other": {"id": 1, "source": "MedExam_V4"},
        },
        {
            "question": "问答题：如何预防流感？",
            "answer": "",
            "other": {"id": 2, "source": "MedExam_V4"},
        },
        {
            "question": "单选题：成人正常体温？\nA. 36.5℃\nB. 39℃",
            "answer": "",
            "other": {"id": 3, "source": "MedExam_V4"},
        },
    ]
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8"
    )
    return path


def medbench_script(req: Request) -> str | Exception:
    q = req.messages[-1].content
    if "流感" in q:
        return RuntimeError(
            "the model is down for this one"
        )  # the scripted provider raises it: a failed call
    return "<think>先想一想。</think>A" if "发热" in q else "A"


def test_submission_writes_stored_answers_and_names_the_missing(tmp_path: Path) -> None:
    data = write_medbench(tmp_path / "MedExam_V4.jsonl")
    db = tmp_path / "s.db"
    with Store(db) as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medbench",
                    model="scripted/zh",
                    data=data,
                    provider_options={"script": medbench_script},
                ),
            )
        )
    assert [r.ok for r in out.responses.values()].count(False) == 1
    target = tmp_path / "submission.jsonl"
    r = invoke("submission", "--run", out.run.id, "--out", str(target), "--store", str(db))
    assert r.exit_code == 0, r.output
    assert "wrote 2 answers" in r.output and "1 without an answer" in r.output
    written = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    source = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    assert [w["other"] for w in written] == [
        s["other"] for s in source
    ]  # every line, in source order
    assert [w["question"] for w in written] == [s["question"] for s in source]
    assert [w["answer"] for w in written] == [
        "A",
        "",
        "A",
    ]  # reasoning stripped; the failed one left empty


# ---- list -----------------------------------------------------------------------------------------


def test_list_names_every_benchmark_and_provider_with_descriptions() -> None:
    r = invoke("list")
    assert r.exit_code == 0, r.output
    first_cells = {ln.split("│")[1].strip() for ln in r.output.splitlines() if ln.startswith("│")}
    for name in BENCHMARKS.names() + PROVIDERS.names():
        assert name in first_cells, name
    assert "Bundled 12-question" in r.output  # the demo's description
    assert "gaps --scoring" not in r.output  # the full listing is -v's


def declared_block(output: str, header: str) -> list[str]:
    lines = output.splitlines()
    start = lines.index(header)
    block = []
    for ln in lines[start + 1 :]:
        if not ln.startswith("  "):
            break
        block.append(ln.strip())
    return block


def test_list_verbose_prints_each_declared_option_under_its_owner() -> None:
    r = invoke("list", "-v")
    assert r.exit_code == 0, r.output
    assert declared_block(r.output, "llmeval-med --param") == [
        "judge_runs: int = 3 - judge runs averaged per answer (--judge-runs overrides)"
    ]
    gaps = declared_block(r.output, "gaps --scoring")
    assert [ln.split(":")[0] for ln in gaps] == ["gaps_min_valid", "gaps_irrelevant"]
    assert gaps[0].startswith("gaps_min_valid: int = 2")
    assert gaps[1].startswith("gaps_irrelevant: str (conservative|majority|average)")
    assert declared_block(r.output, "scripted --model-opt")[0].startswith("script: Callable")
    for name in BENCHMARKS.names():
        cls = BENCHMARKS.get(name)
        if cls.parameters:
            assert [ln.split(":")[0] for ln in declared_block(r.output, f"{name} --param")] == [
                p.name for p in cls.parameters
            ]
        else:
            assert f"{name} --param" not in r.output.splitlines()
    assert invoke("list", "--verbose").output == r.output  # -v is --verbose


def test_a_broken_plugin_is_shown_unavailable_without_hiding_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(BENCHMARKS._paths, "zz-broken-bench", "gr_no_such_plugin_module:Bench")
    monkeypatch.setitem(PROVIDERS._paths, "zz-broken-prov", "gr_no_such_plugin_module:Prov")
    for args in (["list"], ["list", "-v"]):
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert "unavailable" in row_with(r.output, "zz-broken-bench")
        assert "unavailable" in row_with(r.output, "zz-broken-prov")
        assert "medqa" in r.output and "scripted" in r.output
    assert "zz-broken-bench" not in BENCHMARKS._loaded


# ---- leaderboard ------------------------------------------------------------------------------------


def test_leaderboard_on_an_empty_store_succeeds_and_says_so(tmp_path: Path) -> None:
    with Store(tmp_path / "empty.db"):
        pass
    r = invoke("leaderboard", "--store", str(tmp_path / "empty.db"))
    assert r.exit_code == 0, r.output
    assert r.exception is None
    assert "no results in" in r.output and "accuracy" not in r.output and "rank" not in r.output


def test_leaderboard_shows_each_models_accuracy(demo_db: Path) -> None:
    r = invoke("leaderboard", "--store", str(demo_db), "--no-breakdowns")
    assert r.exit_code == 0, r.output
    assert f"{len(ALPHA) / 12:.3f}" in row_with(r.output, "scripted/alpha")
    assert f"{len(BETA) / 12:.3f}" in row_with(r.output, "scripted/beta")
    assert r.output.index("scripted/alpha") < r.output.index("scripted/beta"), "ranked by score"
    other = invoke("leaderboard", "--store", str(demo_db), "--benchmark", "medqa")
    assert other.exit_code == 0 and "scripted/alpha" not in other.output


# ---- report ---------------------------------------------------------------------------------------


def test_report_md_names_the_runs_models_with_their_scores(demo_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    r = invoke("report", "--format", "md", "--out", str(out), "--store", str(demo_db))
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    board = [ln for ln in text.splitlines() if ln.startswith("| demo |") and "scripted/" in ln]
    alpha = [ln for ln in board if "scripted/alpha" in ln]
    assert any(f"{len(ALPHA) / 12:.4f}" in ln for ln in alpha)
    assert any(f"{len(BETA) / 12:.4f}" in ln for ln in board if "scripted/beta" in ln)
    # one row per answer: 12 for each model
    assert sum(1 for ln in board if "scripted/alpha" in ln) >= 12


def test_report_json_holds_the_leaderboard_and_every_answer(demo_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    r = invoke("report", "-f", "json", "-o", str(out), "--store", str(demo_db))
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text(encoding="utf-8"))
    board = {e["model"]: e for e in d["leaderboard"]}
    assert set(board) == {"scripted/alpha", "scripted/beta"}
    assert board["scripted/alpha"]["score"] == pytest.approx(len(ALPHA) / 12)
    assert board["scripted/beta"]["score"] == pytest.approx(len(BETA) / 12)
    assert board["scripted/alpha"]["n"] == 12
    samples = [s for s in d["samples"] if s["model"] == "scripted/beta"]
    assert len(samples) == 12
    for s in samples:
        i = int(s["sample_id"])
        assert s["value"] == (1.0 if i in BETA else 0.0)
        key = DEMO[i]["answer_idx"]
        assert s["answer"] == f"Answer: {key if i in BETA else next(x for x in 'ABCD' if x != key)}"


def test_report_in_an_unknown_format_is_a_usage_error(demo_db: Path, tmp_path: Path) -> None:
    r = invoke(
        "report", "--format", "pdf", "--out", str(tmp_path / "r.pdf"), "--store", str(demo_db)
    )
    assert r.exit_code == 2
    assert "unknown format 'pdf'" in r.output
    assert not (tmp_path / "r.pdf").exists()


# ---- compare ----------------------------------------------------------------------------------------


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p: binomial(b + c, 1/2) tail at min(b, c), doubled, capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n)


@pytest.mark.parametrize(
    "a, b, sa, sb", [("alpha", "beta", ALPHA, BETA), ("beta", "scripted/alpha", BETA, ALPHA)]
)
def test_compare_reports_the_known_accuracy_gap(
    demo_db: Path, a: str, b: str, sa: set[int], sb: set[int]
) -> None:
    r = invoke("compare", a, b, "--store", str(demo_db))
    assert r.exit_code == 0, r.output
    row = row_with(r.output, "demo")
    diff = (len(sa) - len(sb)) / 12
    only_a, only_b = len(sa - sb), len(sb - sa)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[1] == "12"
    assert cells[2] == f"{len(sa) / 12:.4f}" and cells[3] == f"{len(sb) / 12:.4f}"
    assert cells[4] == f"{diff:+.4f}"
    assert cells[6] == f"{only_a}/{only_b}/p={mcnemar_p(only_a, only_b):.3g}"


def test_compare_all_right_against_all_wrong_is_decided(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/top",
                    provider_options={"script": demo_script(set(range(12)))},
                ),
            )
        )
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/bottom",
                    provider_options={"script": demo_script(set())},
                ),
            )
        )
    r = invoke("compare", "top", "bottom", "--store", str(db))
    assert r.exit_code == 0, r.output
    cells = [c.strip() for c in row_with(r.output, "demo").split("│")[1:-1]]
    assert cells[2:5] == ["1.0000", "0.0000", "+1.0000"]
    assert cells[5] == "[+1.0000, +1.0000]"  # every resample has the same difference
    assert cells[6] == f"12/0/p={mcnemar_p(12, 0):.3g}"
    assert cells[7] == "A better"
    r = invoke("compare", "bottom", "top", "--store", str(db))
    assert row_with(r.output, "demo").split("│")[-2].strip() == "B better"


def test_compare_with_a_model_that_has_no_results_exits_1(demo_db: Path) -> None:
    r = invoke("compare", "alpha", "gamma", "--store", str(demo_db))
    assert r.exit_code == 1
    assert "no benchmark has results for both 'alpha' and 'gamma'" in r.output


def test_a_run_whose_every_call_fails_exits_3_with_a_truthful_summary(tmp_path: Path) -> None:
    from grandrounds.testing import Fault, LoopbackServer

    with LoopbackServer(lambda body: Fault("400")) as srv:
        r = invoke(
            "run",
            "demo",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(tmp_path / "s.db"),
            env={"OPENAI_API_KEY": "sk-test"},
        )
    assert r.exit_code == common.NOTHING_SCORED == 3, r.output
    assert "answers: 12 calls made, 0 from the store, 12 failed, 0 retries" in r.output
    assert "failures: HTTP 400: injected 400 x12" in r.output
    assert (
        "nothing could be scored in 1 run(s)" in r.output
        and "re-running the same command retries" in r.output
    )
    listing = invoke("runs", "--store", str(tmp_path / "s.db"), env={"COLUMNS": "220"})
    assert "with failures (12 answers)" in listing.output


def test_a_benchmark_that_scores_nothing_by_design_is_not_a_failure(tmp_path: Path) -> None:
    """A run whose grades are unscored without any failed call (no answer key here) exits 0."""
    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/ok",
                    provider_options={"script": lambda req: "A"},
                ),
            )
        )
    assert not common.any_failed(out)


def test_results_in_an_80_column_terminal_cut_no_name(tmp_path: Path) -> None:
    r = invoke(
        "run",
        "demo",
        "--model",
        "scripted/a-model-with-a-long-name",
        "--answer-mode",
        "next-token",
        "--store",
        str(tmp_path / "s.db"),
        env={"COLUMNS": "80"},
    )
    # scripted/ answers text, so no next-token scores are read: every answer is unscored, which exits 3 and says why
    assert r.exit_code == 3 and "100% of the answers have no score" in " ".join(r.output.split()), (
        r.output
    )
    results = r.output[r.output.index("Results") :]  # the progress bar above may shorten itself
    assert "…" not in results
    assert "demo · scripted/a-model-with-a-long-name (next-token) · protocol reference" in results
    assert "accuracy" in r.output and "95% CI" in r.output


def test_two_runs_of_one_model_are_compared_by_run_id_never_with_themselves(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as st:
        full = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/m",
                    provider_options={"script": demo_script(set(range(12)))},
                ),
            )
        )
        part = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/m",
                    limit=6,
                    provider_options={"script": demo_script(set(range(12)))},
                ),
            )
        )
    assert full.run.id != part.run.id
    same = invoke("compare", "scripted/m", "m", "--store", str(db))
    assert (
        same.exit_code == 2
        and "select the same run" in same.output
        and "pass run ids" in same.output
    )
    r = invoke("compare", full.run.id, part.run.id[:8], "--store", str(db))
    assert r.exit_code == 0, r.output
    cells = [c.strip() for c in row_with(r.output, "demo").split("│")[1:-1]]
    assert cells[1] == "6" and cells[2:5] == [
        "1.0000",
        "1.0000",
        "+0.0000",
    ]  # paired on the 6 both answered


def test_the_program_exits_with_the_commands_code_and_all_its_output(tmp_path: Path) -> None:
    """``python -m grandrounds`` (as the console script) ends without the interpreter's teardown:
    the exit code is still the command's, and everything written reaches the pipe."""
    import subprocess

    from tests.conftest import offline_env

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200", **offline_env()}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    ok = subprocess.run(
        [sys.executable, "-m", "grandrounds", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert (
        "medqa" in ok.stdout
        and "healthbench" in ok.stdout
        and ok.stdout.rstrip().endswith(("┘", "┛", "╯", "+", "─", "━"))
    )
    db = tmp_path / "s.db"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "grandrounds",
            "run",
            "demo",
            "--model",
            "scripted/a",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "run " in run.stderr and "12 calls made" in run.stderr, (
        "the call summary, written last, is all there"
    )
    with Store(db, readonly=True) as st:
        assert len(st.runs()) == 1
    bad = subprocess.run(
        [sys.executable, "-m", "grandrounds", "run", "nosuch"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip().startswith(
        "error: unknown benchmark 'nosuch'"
    )
    usage = subprocess.run(
        [sys.executable, "-m", "grandrounds", "run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
