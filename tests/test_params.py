"""Declared options: every --param, --scoring, run option and --model-opt is checked before any call.

The command-line tests drive the real CLI (typer's CliRunner on ``grandrounds.cli.main.app``) against a
loopback OpenAI-compatible server and assert that a refused run made no request at all and ended
with exit code 2 and a one-line message naming the bad key or value.
"""

from __future__ import annotations

import asyncio
import csv
import inspect
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks import base as bench_base
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.gaps import GAPS
from grandrounds.benchmarks.healthbench import HealthBench
from grandrounds.benchmarks.llmeval_med import LLMEvalMed
from grandrounds.benchmarks.medqa import MedQA
from grandrounds.benchmarks.mmlu_medical import SUBJECTS, MMLUMedical
from grandrounds.benchmarks.pubmedqa import PubMedQA
from grandrounds.cli import main as cli
from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param, check_values, coerce, is_default, without_defaults
from grandrounds.core.records import AnswerMode, RequestKind
from grandrounds.core.registry import BENCHMARKS, PROVIDERS
from grandrounds.graders.mcq_grader import MODE_ALIASES
from grandrounds.providers.base import ModelSpec, Provider, check_model
from grandrounds.providers.openai_compat import OpenAIProvider
from grandrounds.run.config import RunConfig, check_run
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer


class ChatOnlyProvider(OpenAIProvider):
    """An OpenAI-compatible endpoint that can only chat (no log-probabilities)."""

    request_kinds = frozenset({"chat"})
    example = "chatonly/M"


@pytest.fixture
def chatonly():
    """The chat-only provider, registered for one test and gone afterwards."""
    with PROVIDERS.registered("chatonly", ChatOnlyProvider):
        yield
    assert "chatonly" not in PROVIDERS.names()


# ---- helpers ---------------------------------------------------------------------------------


def gr(*args: str) -> Any:
    """Invoke the real CLI in-process; stderr is kept apart from stdout."""
    return CliRunner().invoke(cli.app, list(args))


def answer_a(body: dict[str, Any]) -> str:
    return "A" if body.get("logprobs") else "Answer: A"


def write_medqa(tmp: Path, n: int = 4) -> Path:
    """A small MedQA-format file written here (not benchmark items)."""
    path = tmp / "exam.jsonl"
    rows = [
        {
            "question": f"Test question number {i}?",
            "options": {"A": "one", "B": "two", "C": "three", "D": "four"},
            "answer_idx": "ABCD"[i % 4],
            "meta_info": "step1",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_mmlu(tmp: Path, rows_per_subject: int = 2) -> Path:
    """One small headerless CSV per MMLU medical subject."""
    folder = tmp / "mmlu"
    folder.mkdir()
    for subject in SUBJECTS:
        with open(folder / f"{subject}_test.csv", "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            for i in range(rows_per_subject):
                w.writerow([f"{subject} question {i}?", "w", "x", "y", "z", "ABCD"[i % 4]])
    return folder


def write_pubmedqa(tmp: Path) -> Path:
    """ori_pqal.json with three PMIDs and a test key naming two of them."""
    folder = tmp / "pubmedqa"
    folder.mkdir()
    ori = {
        pmid: {
            "QUESTION": f"Does treatment {pmid} help?",
            "CONTEXTS": [f"Background for {pmid}."],
            "LABELS": ["BACKGROUND"],
            "final_decision": label,
            "YEAR": "2001",
        }
        for pmid, label in (("101", "yes"), ("102", "no"), ("103", "maybe"))
    }
    (folder / "ori_pqal.json").write_text(json.dumps(ori), encoding="utf-8")
    (folder / "test_ground_truth.json").write_text(
        json.dumps({"101": "yes", "102": "no"}), encoding="utf-8"
    )
    return folder


def refused(srv: LoopbackServer, tmp: Path, *args: str) -> str:
    """Run the CLI against ``srv``; assert it was refused before any request; return stderr."""
    r = gr("run", *args, "--base-url", srv.base_url, "--store", str(tmp / "s.db"))
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert srv.stats.requests == 0, "nothing may be asked before the options are checked"
    message = r.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message, "one line"
    return message


def result_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]


@pytest.fixture
def srv():
    with LoopbackServer(answer_a) as server:
        yield server


# ---- unknown and ill-typed values, refused before any call ----------------------------------


def test_unknown_param_is_refused_by_name_before_any_call(srv, tmp_path):
    folder = write_mmlu(tmp_path)
    msg = refused(
        srv,
        tmp_path,
        "mmlu-medical",
        "--data",
        str(folder),
        "--model",
        "openai/m",
        "--param",
        "subjectt=anatomy",
    )
    assert "'subjectt'" in msg and "did you mean subjects?" in msg and "accepted: subjects" in msg


def test_the_same_param_spelled_right_runs_and_is_recorded_coerced(srv, tmp_path):
    folder = write_mmlu(tmp_path)
    out = tmp_path / "out"
    r = gr(
        "run",
        "mmlu-medical",
        "--data",
        str(folder),
        "--model",
        "openai/m",
        "--base-url",
        srv.base_url,
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(out),
        "--param",
        "subjects=anatomy",
    )
    assert r.exit_code == 0, r.output
    assert srv.stats.requests == 2, "only the anatomy questions are asked"
    res = result_of(out)
    assert res["fingerprint"]["benchmark"] == 'mmlu-medical{"subjects":["anatomy"]}'
    assert res["n"] == 2


def test_a_benchmark_without_params_refuses_any(srv, tmp_path):
    msg = refused(srv, tmp_path, "demo", "--model", "openai/m", "--param", "subset=all")
    assert "demo: unknown --param 'subset' (it accepts none)" in msg


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("pubmedqa", "--param", "contexts=maybe"),
            "pubmedqa: --param contexts='maybe' is not true or false",
        ),
        (
            ("pubmedqa", "--param", "split=train"),
            "pubmedqa: --param split='train' is not one of test, all",
        ),
        (
            ("mmlu-medical", "--param", "subjects=anatomy,astronomy"),
            "subjects='astronomy' is not one of anatomy",
        ),
        (
            ("llmeval-med", "--param", "judge_runs=three"),
            "llmeval-med: --param judge_runs='three' is not an integer",
        ),
        (("llmeval-med", "--param", "judge_runs=0"), "judge_runs=0 is not at least 1"),
        (
            ("gaps", "--scoring", "gaps_min_valid=1.5"),
            "gaps: --scoring gaps_min_valid='1.5' is not an integer",
        ),
        (
            ("gaps", "--scoring", "gaps_irrelevant=yes"),
            "gaps_irrelevant='yes' is not one of conservative, majority, average",
        ),
        (("demo", "--param", "novalue"), "--param 'novalue' must be KEY=VALUE"),
    ],
)
def test_ill_typed_values_are_refused_before_any_call(srv, tmp_path, args, expected):
    msg = refused(srv, tmp_path, *args, "--model", "openai/m")
    assert expected in msg


@pytest.mark.parametrize(
    "args, expected",
    [
        (("pubmedqa", "--param", "splt=all"), "unknown --param 'splt'; did you mean split?"),
        (("pubmedqa", "--param", "split=tset"), "is not one of test, all; did you mean test?"),
        (("mmlu-medical", "--param", "subjects=anatomyy"), "did you mean anatomy?"),
        (("demo", "--answer-mode", "leter"), "unknown --answer-mode 'leter'; did you mean letter?"),
        (
            ("healthbench", "--judge-mode", "batchd"),
            "healthbench: unknown --judge-mode 'batchd'; did you mean batched?",
        ),
        (
            ("gaps", "--scoring", "gaps_min_vald=1"),
            "unknown --scoring 'gaps_min_vald'; did you mean gaps_min_valid?",
        ),
        (
            ("demo", "--model-opt", "timout=5"),
            "provider openai: unknown option 'timout'; did you mean timeout?",
        ),
    ],
)
def test_misspellings_get_a_did_you_mean(srv, tmp_path, args, expected):
    msg = refused(srv, tmp_path, *args, "--model", "openai/m")
    assert expected in msg


# ---- run options a benchmark does not use ----------------------------------------------------


@pytest.mark.parametrize(
    "bench, flags, expected",
    [
        ("medqa", ("--judge-mode", "batched"), "medqa does not use --judge-mode"),
        ("medqa", ("--judge-runs", "2"), "medqa does not use --judge-runs"),
        ("medqa", ("--max-reask", "5"), "medqa does not use --max-reask"),
        ("medcalc-bench", ("--shuffle-options",), "medcalc-bench does not use --shuffle-options"),
        ("gaps", ("--judge-mode", "batched"), "gaps does not use --judge-mode"),
        ("healthbench", ("--judge-runs", "3"), "healthbench does not use --judge-runs"),
        (
            "healthbench",
            ("--answer-mode", "letter"),
            "healthbench supports --answer-mode generate, not 'letter'",
        ),
    ],
)
def test_options_a_benchmark_does_not_use_are_refused(srv, tmp_path, bench, flags, expected):
    data = write_medqa(tmp_path)
    msg = refused(srv, tmp_path, bench, "--data", str(data), "--model", "openai/m", *flags)
    assert expected in msg


def test_unknown_scoring_key_is_refused(srv, tmp_path):
    data = write_medqa(tmp_path)
    msg = refused(
        srv,
        tmp_path,
        "medqa",
        "--data",
        str(data),
        "--model",
        "openai/m",
        "--scoring",
        "gaps_min_valid=1",
    )
    assert "medqa: unknown --scoring 'gaps_min_valid' (it accepts none)" in msg


def test_unused_options_at_their_default_are_reset_not_refused():
    opts = MedQA().check_options(
        RunOptions(judge_mode="default", judge_runs=None, max_reask=2, seed=3)
    )
    assert opts == RunOptions(seed=3)
    # the seed is kept: it drives shuffling, bootstrap CIs and retry jitter for every benchmark
    assert HealthBench().check_options(RunOptions(seed=9)).seed == 9


# ---- coercion -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "param, raw, want",
    [
        (Param(name="n", type=int, default=1), "3", 3),
        (Param(name="n", type=int, default=1), " 7 ", 7),
        (Param(name="n", type=int, default=1), 4, 4),
        (Param(name="x", type=float, default=1.0), "0.25", 0.25),
        (Param(name="x", type=float, default=1.0), 2, 2.0),
        (Param(name="b", type=bool, default=True), "false", False),
        (Param(name="b", type=bool, default=True), "Yes", True),
        (Param(name="b", type=bool, default=True), "0", False),
        (Param(name="s", type=str, default="a"), "text", "text"),
        (Param(name="l", type=list[str], default=()), "a, b,,c", ["a", "b", "c"]),
        (Param(name="l", type=list[str], default=()), '["a", "b"]', ["a", "b"]),
        (Param(name="l", type=list[str], default=()), ("a",), ["a"]),
        (Param(name="o", type=int), None, None),
    ],
)
def test_values_are_coerced_to_the_declared_type(param, raw, want):
    got = coerce(param, raw, "t: --param x")
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    "param, raw",
    [
        (Param(name="n", type=int, default=1), "3.5"),
        (Param(name="n", type=int, default=1), True),  # a bool is not a number here
        (Param(name="n", type=int, default=1), None),  # None only where the default is None
        (Param(name="x", type=float, default=1.0), "fast"),
        (Param(name="b", type=bool, default=True), "maybe"),
        (Param(name="b", type=bool, default=True), 1),
        (Param(name="s", type=str, default="a"), 5),
        (Param(name="l", type=list[str], default=()), '["a", 1]'),
        (Param(name="l", type=list[str], default=()), "[broken"),
        (Param(name="c", type=str, default="a", choices=("a", "b")), "c"),
        (Param(name="m", type=int, default=2, minimum=1), "0"),
    ],
)
def test_ill_typed_values_are_one_line_config_errors(param, raw):
    with pytest.raises(ConfigError) as err:
        coerce(param, raw, f"t: --param {param.name}")
    assert str(err.value).startswith(f"t: --param {param.name}=") and "\n" not in str(err.value)


def test_check_values_coerces_only_what_was_given_and_defaults_drop_out():
    declared = (
        Param(name="split", type=str, default="test", choices=("test", "all")),
        Param(name="contexts", type=bool, default=True),
    )
    assert check_values(declared, {}, "b", "--param") == {}
    got = check_values(declared, {"split": "all", "contexts": "true"}, "b", "--param")
    assert got == {"split": "all", "contexts": True}
    assert without_defaults(declared, got) == {"split": "all"}
    assert is_default(Param(name="l", type=list[str], default=("a", "b")), ["a", "b"])
    assert not is_default(Param(name="n", type=int, default=1), True), (
        "True is not the integer default 1"
    )


def test_benchmark_params_are_coerced_and_defaults_do_not_change_the_spec():
    assert PubMedQA(contexts="false").contexts is False
    assert PubMedQA(split="test", contexts="true").spec() == PubMedQA().spec()
    assert str(PubMedQA(split="all").spec()) == 'pubmedqa{"split":"all"}'
    assert MMLUMedical(subjects=list(reversed(SUBJECTS))).spec() == MMLUMedical().spec(), (
        "all six in any order = default"
    )
    assert MMLUMedical(subjects="medical_genetics,anatomy").subjects == [
        "anatomy",
        "medical_genetics",
    ]
    assert LLMEvalMed(judge_runs="2").param("judge_runs") == 2
    with pytest.raises(ConfigError, match="subjects is empty"):
        MMLUMedical(subjects="")


def test_scoring_options_are_coerced_and_their_defaults_dropped():
    gaps = GAPS()
    assert gaps.check_options(RunOptions(extra={"gaps_min_valid": "1"})).extra == {
        "gaps_min_valid": 1
    }
    assert gaps.check_options(RunOptions(extra={"gaps_min_valid": "2"})).extra == {}
    assert gaps.check_options(RunOptions(extra={"gaps_irrelevant": "majority"})).extra == {
        "gaps_irrelevant": "majority"
    }


# ---- the same setting gives the same fingerprint and run id ---------------------------------


def test_params_at_their_default_leave_run_id_and_fingerprint_unchanged(srv, tmp_path):
    folder = write_pubmedqa(tmp_path)
    common = (
        "run",
        "pubmedqa",
        "--data",
        str(folder),
        "--model",
        "openai/m",
        "--base-url",
        srv.base_url,
        "--store",
        str(tmp_path / "s.db"),
    )
    r1 = gr(*common, "--out", str(tmp_path / "a"))
    r2 = gr(
        *common,
        "--out",
        str(tmp_path / "b"),
        "--param",
        "split=test",
        "--param",
        "contexts=true",
        "--judge-mode",
        "default",
        "--max-reask",
        "2",
    )
    assert r1.exit_code == 0 and r2.exit_code == 0, (r1.output, r2.output)
    a, b = result_of(tmp_path / "a"), result_of(tmp_path / "b")
    assert a["fingerprint"] == b["fingerprint"] and a["fingerprint"]["benchmark"] == "pubmedqa"
    assert srv.stats.requests == 2, (
        "the second command is the same run: every answer came from the store"
    )


def test_judge_settings_spelled_out_or_left_default_are_one_setting():
    assert HealthBench().check_options(
        RunOptions(judge_mode="per-criterion")
    ) == HealthBench().check_options(RunOptions())
    assert HealthBench().check_options(RunOptions()).judge_mode == "per-criterion"
    assert LLMEvalMed().check_options(RunOptions(judge_runs=3)) == LLMEvalMed().check_options(
        RunOptions()
    )
    assert LLMEvalMed(judge_runs=2).check_options(RunOptions()).judge_runs == 2
    assert LLMEvalMed(judge_runs=2).check_options(RunOptions(judge_runs=5)).judge_runs == 5, (
        "--judge-runs wins"
    )


def test_the_runner_checks_and_records_normalised_params_before_calling(tmp_path):
    folder = write_pubmedqa(tmp_path)
    calls: list[Any] = []

    def script(req: Any) -> str:
        calls.append(req)
        return "Answer: B"

    bad = RunConfig(
        benchmark="pubmedqa",
        model="scripted/s",
        bench_params={"contexts": "nope"},
        data=folder,
        provider_options={"script": script},
    )
    with pytest.raises(ConfigError, match="contexts='nope'"):
        asyncio.run(run(Store(tmp_path / "s.db"), bad))
    assert calls == []
    good = RunConfig(
        benchmark="pubmedqa",
        model="scripted/s",
        bench_params={"contexts": "false", "split": "test"},
        data=folder,
        provider_options={"script": script},
    )
    out = asyncio.run(run(Store(tmp_path / "s.db"), good))
    assert len(calls) == 2 and out.run.benchmark_spec == 'pubmedqa{"contexts":false}'
    assert out.run.options["bench_params"] == {"contexts": False}
    assert not any("Background" in m.content for r in calls for m in r.messages), (
        "contexts=false took effect"
    )


def test_check_run_returns_the_config_it_was_given_normalised():
    cfg = RunConfig(
        benchmark="llmeval-med",
        model="openai/m",
        bench_params={"judge_runs": "2"},
        options=RunOptions(extra={}),
        provider_options={"timeout": "30"},
    )
    checked = check_run(cfg)
    assert isinstance(checked, RunConfig)
    assert checked.bench_params == {"judge_runs": 2} and checked.options.judge_runs == 2
    assert checked.provider_options == {"timeout": 30.0}
    assert cfg.bench_params == {"judge_runs": "2"}, "the caller's config is not changed"


# ---- providers: declared options, --threads, request kinds ----------------------------------


def test_threads_on_a_provider_without_threads_is_refused(srv, tmp_path):
    msg = refused(srv, tmp_path, "demo", "--model", "openai/m", "--threads", "4")
    assert (
        "provider openai: unknown option 'threads'" in msg
        and "accepted: timeout, api_key_env, max_response_mb" in msg
    )


def test_model_options_are_checked_and_coerced():
    assert check_model("openai/m", {"max_response_mb": "2", "timeout": "5"}) == {
        "max_response_mb": 2.0,
        "timeout": 5.0,
    }
    assert check_model("openai/m@http://127.0.0.1:1/v1", {}) == {}
    assert check_model("llamacpp/smollm2", {"threads": "2"}, "next_token") == {"threads": 2}
    with pytest.raises(ConfigError, match="max_response_mb"):
        check_model("openai/m", {"max_response_mb": "lots"})
    with pytest.raises(ConfigError, match="script='A' is not a Callable"):
        check_model("scripted/x", {"script": "A"})


def test_threads_is_llamacpps_thread_count():
    from grandrounds.providers.llamacpp import LlamaCppProvider

    assert {p.name for p in LlamaCppProvider.model_options} >= {"threads", "n_ctx"}
    try:
        provider = LlamaCppProvider(ModelSpec("llamacpp", "smollm2"), threads=3)
    except ConfigError as e:  # the packaged model is not installed here
        pytest.skip(str(e))
    assert provider.n_threads == 3, "the model is not loaded until the first call"


def test_model_options_reach_the_provider_through_the_cli(srv, tmp_path):
    r = gr(
        "run",
        "demo",
        "--model",
        "openai/m",
        "--base-url",
        srv.base_url,
        "--store",
        str(tmp_path / "s.db"),
        "--limit",
        "2",
        "--model-opt",
        "max_response_mb=2",
        "--model-opt",
        "timeout=30",
    )
    assert r.exit_code == 0, r.output
    assert srv.stats.requests == 2


def test_letter_mode_on_a_chat_only_provider_is_refused_before_any_call(srv, tmp_path, chatonly):
    msg = refused(srv, tmp_path, "demo", "--model", "chatonly/m", "--answer-mode", "letter")
    assert "provider chatonly cannot serve next_token requests (it serves chat)" in msg
    msg = refused(srv, tmp_path, "demo", "--model", "chatonly/m", "--answer-mode", "loglik")
    assert "cannot serve loglikelihood requests" in msg
    r = gr(
        "run",
        "demo",
        "--model",
        "chatonly/m",
        "--base-url",
        srv.base_url,
        "--store",
        str(tmp_path / "s.db"),
        "--limit",
        "3",
    )
    assert r.exit_code == 0 and srv.stats.requests == 3, ("chat is what it serves", r.output)


def test_letter_mode_on_a_provider_with_log_probs_runs(srv, tmp_path):
    r = gr(
        "run",
        "demo",
        "--model",
        "openai/m",
        "--base-url",
        srv.base_url,
        "--store",
        str(tmp_path / "s.db"),
        "--answer-mode",
        "letter",
        "--limit",
        "3",
    )
    assert r.exit_code == 0, r.output
    # three answers, and the log-probability probe's one question (this server echoes no prompt,
    # so a next-token run, which reads the chat endpoint's top log-probabilities, goes on unprobed)
    assert srv.stats.requests == 3 + 1


def test_every_provider_declares_kinds_options_and_an_example():
    kinds = set(get_args(RequestKind))
    assert not hasattr(Provider, "supports"), "one declaration: request_kinds"
    for name in PROVIDERS.names():
        cls = PROVIDERS.get(name)
        assert cls.request_kinds and set(cls.request_kinds) <= kinds, name
        assert cls.example, name
        assert all(isinstance(p, Param) for p in cls.model_options), name


def test_list_shows_provider_examples_and_options_from_the_classes(chatonly):
    r = gr("list", "--verbose")
    assert r.exit_code == 0, r.output
    assert ChatOnlyProvider.example in r.stdout
    assert "max_response_mb: float = 8.0" in r.stdout
    assert "split: str = test (test|all)" in r.stdout
    assert cli.bench_options(HealthBench) == "--judge-mode per-criterion|batched"
    assert (
        cli.bench_options(GAPS)
        == "--param subset, rubric_column; --scoring gaps_min_valid, gaps_irrelevant"
    )
    assert cli.bench_options(PubMedQA) == "--param split, contexts; --shuffle-options"


def test_the_cli_names_no_provider_in_its_checks():
    source = inspect.getsource(cli)
    assert 'startswith("llamacpp' not in source and "n_threads" not in source
    assert '"openai":' not in source, "provider examples come from the provider classes"


# ---- one vocabulary for answer modes ----------------------------------------------------------


def test_answer_modes_come_from_one_literal():
    assert not hasattr(bench_base, "ANSWER_MODES")
    modes = set(get_args(AnswerMode))
    assert set(bench_base.ANSWER_KINDS) == modes
    assert set(MedQA.answer_modes) | set(MODE_ALIASES) == modes  # earlier names accepted as aliases
    for name in BENCHMARKS.names():
        assert set(BENCHMARKS.get(name).answer_modes) <= modes, name
    r = gr("run", "--help")
    words = r.stdout.replace("│", " ").split()  # the list wraps over lines in the help box
    assert all(f"{m}" in words for m in get_args(AnswerMode)) and words.count("|") >= len(modes) - 1


# ---- every built-in declaration is consistent with itself ------------------------------------


@pytest.mark.parametrize("name", BENCHMARKS.names())
def test_declared_defaults_pass_their_own_checks(name):
    cls = BENCHMARKS.get(name)
    for p in (*cls.parameters, *cls.scoring_options):
        value = coerce(p, p.default, f"{name}: {p.name}")
        assert is_default(p, value), (name, p.name)
        assert p.help, f"{name}: {p.name} needs a help text"
    defaults = {p.name: p.default for p in cls.parameters}
    assert cls(**defaults).spec() == cls().spec(), "spelling out the defaults is the same benchmark"
    assert cls().check_options(RunOptions(answer_mode=cls.answer_modes[0])).extra == {}
