"""Prices, token counting and the tokens and cost a finished run records.

The price table is the packaged TOML with a user file read over it; tokens are tiktoken's for
OpenAI models when its encoding can be had, an estimate said to be one otherwise; a run's
``usage`` block adds up the usage the servers reported, answers and each judge apart, and shows
in results.json, the run's summary, the leaderboard and the reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Message
from grandrounds.run import costs
from grandrounds.run.costs import (
    PriceTable,
    estimate_tokens,
    load_prices,
    token_counter,
    usage_cells,
)
from grandrounds.testing import LoopbackServer
from tests.conftest import offline_env, shared_file

ROOT = Path(__file__).resolve().parents[1]
MET = "```json\n" + json.dumps({"explanation": "ok", "criteria_met": True}) + "\n```"


# ---- prices ---------------------------------------------------------------------------------------


def test_packaged_prices_and_dated_snapshots(monkeypatch):
    monkeypatch.delenv("GRANDROUNDS_PRICES", raising=False)
    t = load_prices()
    mini = t.price("openai/gpt-4o-mini")
    assert (mini.input, mini.output, mini.batch_discount) == (0.15, 0.60, 0.5)
    assert t.price("openai/gpt-4o-mini-2024-07-18") == mini
    assert t.price("openai/gpt-4.1-2025-04-14").model == "openai/gpt-4.1"
    assert t.price("openai/gpt-4.1-mini@http://host/v1").model == "openai/gpt-4.1-mini"
    assert t.price("anthropic/claude-sonnet-4-5-20250929").model == "anthropic/claude-sonnet-4-5"
    assert t.price("anthropic/claude-sonnet-4-20250514").model == "anthropic/claude-sonnet-4"
    assert (
        t.price("openai/o3-mini").input != t.price("openai/o3").input
    )  # never the shorter name's price
    assert (
        t.price("openai/gpt-4o-mini-fast") is None
    )  # a suffix that is not a date is another model
    assert t.price("openai/qwen2.5-7b") is None and not t.is_local("openai/qwen2.5-7b")
    assert t.price("vllm/Qwen/Qwen2.5-7B") is None and t.is_local("vllm/Qwen/Qwen2.5-7B")
    assert "as of" in t.describe()


def test_price_arithmetic_and_batch_discount():
    p = load_prices().price("openai/gpt-4.1")
    assert p.cost(1_000_000, 1_000_000) == pytest.approx(10.0)
    assert p.cost(250_000, 50_000) == pytest.approx(0.5 + 0.4)
    assert p.cost(1_000_000, 1_000_000, batch=True) == pytest.approx(5.0)


def test_user_price_file_is_read_over_the_packaged_one(tmp_path, monkeypatch):
    f = tmp_path / "mine.toml"
    f.write_text(
        'as_of = "2030-01-01"\n[batch_discount]\nopenai = 0.4\n'
        '[models]\n"openai/gpt-4o-mini" = { input = 1, output = 2 }\n"vllm/my-model" = { input = 0.01, output = 0.02 }\n',
        encoding="utf-8",
    )
    t = load_prices(f)
    assert (t.price("openai/gpt-4o-mini").input, t.price("openai/gpt-4o-mini").batch_discount) == (
        1.0,
        0.4,
    )
    assert t.price("openai/gpt-4.1").input == 2.0  # packaged entries stay
    assert t.price("vllm/my-model").output == 0.02 and not t.is_local("vllm/my-model")
    assert str(f) in t.describe() and "2030-01-01" in t.describe()
    monkeypatch.setenv("GRANDROUNDS_PRICES", str(f))
    assert load_prices().price("openai/gpt-4o-mini").input == 1.0


@pytest.mark.parametrize(
    "text, problem",
    [
        (
            '[models]\n"openai/x" = { input = 1 }\n',
            "models.'openai/x' must have exactly input and output",
        ),
        (
            '[models]\n"openai/x" = { input = -1, output = 1 }\n',
            "models.'openai/x'.input must be a number of at least 0, got -1",
        ),
        ('[models]\n"x" = { input = 1, output = 1 }\n', "model 'x' must be written provider/model"),
        ("[batch_discount]\nopenai = 2\n", "batch_discount.openai is a share between 0 and 1"),
        ("currency = 'EUR'\n", "unknown key 'currency'"),
        ("[local]\nproviders = 'vllm'\n", "local.providers must be a list of provider names"),
        ('[models]\n"openai/x" = { input = 1, output = \n', "at line 2"),
    ],
)
def test_bad_price_files_are_one_line_errors_naming_the_file(tmp_path, text, problem):
    f = tmp_path / "p.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_prices(f)
    assert (
        str(e.value).startswith(f"prices file {f}: ")
        and problem in str(e.value)
        and "\n" not in str(e.value)
    )


def test_missing_price_file(tmp_path):
    with pytest.raises(ConfigError, match=r"prices file .*nope.toml: cannot be read"):
        load_prices(tmp_path / "nope.toml")


# ---- tokens ---------------------------------------------------------------------------------------


def test_estimate_is_labelled_and_counts_cjk_characters_one_each():
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("胸痛三天") == 4
    assert estimate_tokens("胸痛 chest") == 2 + 2  # 2 CJK, then " chest" = 6 characters -> 2
    c = token_counter("anthropic/claude-sonnet-4-5")
    assert not c.exact and c.label.startswith("estimated: ~4 characters per token")
    # 3 tokens per message and 3 for the reply, beside the text (OpenAI's counting of chat prompts)
    assert (
        c.messages([Message("system", "abcd"), Message("user", "abcdabcd")])
        == (3 + 1) + (3 + 2) + 3
    )


def _byte_encoding():
    """A real tiktoken Encoding without merges (one token per byte), as if o200k_base had been fetched."""
    import tiktoken

    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )


def test_openai_models_use_tiktoken_when_the_encoding_can_be_had(monkeypatch):
    pytest.importorskip("tiktoken")
    monkeypatch.setattr(costs, "_ENCODINGS", {"o200k_base": _byte_encoding()})
    monkeypatch.setattr(costs, "_FAILED", {})
    c = token_counter("openai/gpt-4o-mini")
    assert c.exact and c.label == "tiktoken o200k_base"
    assert c.text("héllo") == 6  # bytes, with this merge-less encoding
    assert not token_counter(
        "openai/my-local-model"
    ).exact  # a name tiktoken does not know: estimate


def test_an_encoding_that_cannot_be_fetched_falls_back_in_time(monkeypatch):
    tiktoken = pytest.importorskip("tiktoken")
    monkeypatch.setattr(costs, "_ENCODINGS", {})
    monkeypatch.setattr(costs, "_FAILED", {})
    monkeypatch.setattr(costs, "FETCH_SECONDS", 0.3)
    monkeypatch.setattr(
        tiktoken, "get_encoding", lambda name: time.sleep(5)
    )  # a host that never answers
    start = time.monotonic()
    c = token_counter("openai/gpt-4o")
    assert time.monotonic() - start < 2
    assert (
        not c.exact
        and "tiktoken's o200k_base file could not be fetched (not fetched within 0.3 s)" in c.label
    )
    assert c.label.startswith("estimated: ~4 characters per token")


# ---- what a run cost ------------------------------------------------------------------------------


def gr(*args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "COLUMNS": "250",
        **offline_env(),
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def reported(body: dict, text: str) -> tuple[int, int]:
    """The usage the loopback server reports for one chat request (words in, words out)."""
    return sum(len(str(m.get("content", "")).split()) for m in body["messages"]), len(text.split())


def test_run_records_answer_and_judge_tokens_and_cost(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[models]\n"openai/cand" = { input = 1.0, output = 4.0 }\n"openai/judge" = { input = 10.0, output = 20.0 }\n',
        encoding="utf-8",
    )
    answer = "Drink water and rest; see a doctor if the fever lasts."
    db, out = tmp_path / "s.db", tmp_path / "out"
    with (
        LoopbackServer(lambda b: answer, keep_bodies=True) as cand,
        LoopbackServer(lambda b: MET, keep_bodies=True) as judge,
    ):
        r = gr(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "12",
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/judge@{judge.base_url}",
            "--store",
            str(db),
            "--out",
            str(out),
            "--prices",
            str(prices),
        )
        assert r.returncode == 0, r.stderr
        cand_in = sum(reported(b, answer)[0] for b in cand.stats.bodies)
        cand_out = sum(reported(b, answer)[1] for b in cand.stats.bodies)
        judge_in = sum(reported(b, MET)[0] for b in judge.stats.bodies)
        judge_out = sum(reported(b, MET)[1] for b in judge.stats.bodies)
        n_judge = judge.stats.requests
    usage = json.loads((out / "results.json").read_text())["results"][0]["extra"]["usage"]
    assert usage["answers"] == {
        "model": "openai/cand",
        "calls": 12,
        "prompt_tokens": cand_in,
        "completion_tokens": cand_out,
        "calls_without_usage": 0,
        "cost_usd": round((cand_in * 1 + cand_out * 4) / 1e6, 6),
    }
    [j] = usage["judges"]
    assert (j["model"], j["calls"], j["prompt_tokens"], j["completion_tokens"]) == (
        "openai/judge",
        n_judge,
        judge_in,
        judge_out,
    )
    assert j["cost_usd"] == round((judge_in * 10 + judge_out * 20) / 1e6, 6)
    assert (
        usage["prompt_tokens"] == cand_in + judge_in
        and usage["completion_tokens"] == cand_out + judge_out
    )
    assert (
        usage["cost_usd"] == pytest.approx(usage["answers"]["cost_usd"] + j["cost_usd"])
        and usage["cost_complete"]
    )
    assert (
        f"tokens: {cand_in + judge_in:,} in, {cand_out + judge_out:,} out; cost {costs.fmt_usd(usage['cost_usd'])} at the "
        in r.stderr
    )

    # a re-run makes no call and records the same usage: it is the usage of the calls behind the result
    # (the servers are gone: a call it needed would fail and change the figures)
    r = gr(
        "run",
        "healthbench",
        "--data",
        str(data),
        "--limit",
        "12",
        "--model",
        "openai/cand",
        "--base-url",
        cand.base_url,
        "--judge",
        f"openai/judge@{judge.base_url}",
        "--store",
        str(db),
        "--out",
        str(tmp_path / "again"),
        "--prices",
        str(prices),
    )
    assert r.returncode == 0, r.stderr
    assert "answers: 0 calls made, 12 from the store" in r.stderr
    assert (
        json.loads((tmp_path / "again" / "results.json").read_text())["results"][0]["extra"][
            "usage"
        ]
        == usage
    )
    run_id = json.loads((out / "results.json").read_text())["results"][0]["fingerprint"]["run_id"]
    r = gr(
        "regrade",
        "--run",
        run_id,
        "--judge",
        f"openai/judge@{judge.base_url}",
        "--store",
        str(db),
        "--out",
        str(tmp_path / "re"),
        GRANDROUNDS_PRICES=str(prices),
    )
    assert r.returncode == 0, r.stderr
    assert f"0 calls made, {n_judge} from the store" in r.stderr
    assert (
        json.loads((tmp_path / "re" / "results.json").read_text())["results"][0]["extra"]["usage"]
        == usage
    )

    # the leaderboard, the HTML report and the csv show the same figures
    tokens, cost = usage_cells({"usage": usage})
    assert (
        tokens == f"{usage['prompt_tokens']:,}+{usage['completion_tokens']:,}"
        and cost == costs.fmt_usd(usage["cost_usd"])
    )
    board = gr("leaderboard", "--store", str(db), "--no-breakdowns")
    assert board.returncode == 0, board.stderr
    assert "tokens" in board.stdout and tokens in board.stdout and cost in board.stdout
    assert gr("report", "--store", str(db), "--out", str(tmp_path / "r.html")).returncode == 0
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<th>tokens</th><th>cost</th>" in html and f"<td>{tokens}</td><td>{cost}</td>" in html
    assert (
        gr(
            "report", "--store", str(db), "--format", "csv", "--out", str(tmp_path / "r.csv")
        ).returncode
        == 0
    )
    import csv

    with open(tmp_path / "r.csv", encoding="utf-8", newline="") as f:
        cols = next(csv.DictReader(f))
    assert (
        float(cols["cost_usd"]) == pytest.approx(usage["cost_usd"])
        and int(cols["prompt_tokens"]) == usage["prompt_tokens"]
    )


def test_usage_cells_never_show_an_unknown_as_zero():
    assert usage_cells({}) == ("", "")
    local = {
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "cost_usd": None,
            "cost_complete": False,
            "answers": {
                "calls": 3,
                "cost_usd": None,
                "cost_note": "local model: no per-token price",
            },
            "judges": [],
        }
    }
    assert usage_cells(local) == ("10+2", "local")
    unpriced = {
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "cost_usd": None,
            "cost_complete": False,
            "answers": {
                "calls": 3,
                "cost_usd": None,
                "cost_note": "no price for this model in the price table",
            },
            "judges": [],
        }
    }
    assert usage_cells(unpriced)[1] == "n/a"
    partial = {
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "cost_usd": 0.5,
            "cost_complete": False,
        }
    }
    assert usage_cells(partial)[1] == "$0.5000+"
    assert (
        costs.fmt_usd(0.00001234) == "$1.2e-05"
        and costs.fmt_usd(12.5) == "$12.50"
        and costs.fmt_usd(None) == "n/a"
    )


def test_price_table_lookup_without_entries():
    t = PriceTable(models={})
    assert t.price("openai/gpt-4o") is None and not t.is_local("vllm/x")
