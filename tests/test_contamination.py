"""Contamination probes on a scripted model that has "memorised" half of MedQA's items by rule.

The model knows the items whose id hashes even: shown such an item's own question it writes the
hidden option's exact text, and its log-probs of that question's words are high; for anything else
(the other items, and every reworded control) it writes something else and its log-probs are low.
The probes must find the planted share in the original wording, about nothing in the control, and
a paired difference whose CI covers what was planted; a re-run makes no call; results are stored
apart from scores.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.collect import result_rows
from grandrounds.analyses.contamination import (
    MAX_WORDS,
    PREFIX,
    ProbeConfig,
    hidden_letter,
    normalise,
    read_guess,
    reword,
    run_probes,
    stored_results,
)
from grandrounds.analyses.labels import question_of
from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Request
from grandrounds.run.config import build_benchmark
from grandrounds.store import Store
from tests.conftest import shared_file

LIMIT = 160
HIGH, LOW = -0.1, -5.0


def _memorised(sample_id: str) -> bool:
    return hashlib.sha256(sample_id.encode()).digest()[0] % 2 == 0


class Memoriser:
    """The scripted model: chat replies and word log-probs by the rule above; counts its calls."""

    def __init__(self, data: Path) -> None:
        samples = list(build_benchmark("medqa", {}).iter_samples(data))[:LIMIT]
        self.samples = samples
        self.known = {
            question_of(s)[0]: s.choices[hidden_letter(s)]
            for s in samples
            if _memorised(s.id) and hidden_letter(s)
        }
        self.prefixes = {" ".join(q.split()[:MAX_WORDS]) for q in self.known}
        self.calls = 0

    def __call__(self, req: Request) -> Any:
        self.calls += 1
        if req.kind == "chat":
            prompt = req.messages[-1].text
            return next(
                (
                    f"Option: {hidden}"
                    for q, hidden in self.known.items()
                    if f"\n\n{q}\n\n" in prompt
                ),
                "I cannot recall it.",
            )
        first = req.messages[-1].text
        return {c: self._sum(first, c) for c in req.continuations}

    def _sum(self, first: str, cont: str) -> float:
        words = [first, *cont.split()]
        total = 0.0
        for i in range(1, len(words)):
            seen = " ".join(words[: i + 1])
            total += (
                HIGH if any(p == seen or p.startswith(seen + " ") for p in self.prefixes) else LOW
            )
        return total


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    tmp = tmp_path_factory.mktemp("contam")
    bot = Memoriser(data)
    cfg = ProbeConfig(
        benchmark="medqa",
        model="scripted/memo",
        data=data,
        limit=LIMIT,
        provider_options={"script": bot},
    )
    with Store(tmp / "s.db") as st:
        results, _ = asyncio.run(run_probes(st, cfg))
        first_calls = bot.calls
        again, _ = asyncio.run(run_probes(st, cfg))
        stored = stored_results(st, "medqa")
        rows = result_rows(st)
    return {
        "bot": bot,
        "results": {r.probe: r for r in results},
        "again": {r.probe: r for r in again},
        "first_calls": first_calls,
        "stored": stored,
        "rows": rows,
        "db": tmp / "s.db",
        "data": data,
    }


def test_masked_option_finds_the_planted_share_and_the_control_finds_none(probed):
    r = probed["results"]["masked-option"]
    bot = probed["bot"]
    planted = sum(_memorised(s.id) for s in bot.samples if hidden_letter(s)) / r.n_items
    assert 0.4 < planted < 0.6 and r.n_items == LIMIT and r.n_paired == LIMIT
    assert r.original == pytest.approx(planted), (
        "every memorised item, and only those, is guessed word for word"
    )
    assert r.control is not None and r.control <= 0.02, (
        "the reworded control is about never matched"
    )
    assert r.ci95[0] <= 0.5 <= r.ci95[1] and r.ci95[0] <= r.difference <= r.ci95[1]
    assert r.ci95[0] > 0.3, "the difference is told from zero"


def test_min_k_separates_the_memorised_questions(probed):
    r = probed["results"]["min-k"]
    bot = probed["bot"]
    planted = sum(_memorised(s.id) for s in bot.samples) / LIMIT
    per_item = HIGH - LOW  # a memorised question scores HIGH on its own wording, LOW once reworded
    assert r.n_paired == LIMIT
    assert r.difference == pytest.approx(planted * per_item, abs=0.05 * per_item)
    assert r.ci95[0] <= 0.5 * per_item <= r.ci95[1], (
        "the CI covers the planted effect (half the items)"
    )
    hits = [
        i
        for i in r.items
        if i.original is not None and i.control is not None and i.original - i.control > 1.0
    ]
    assert {i.sample_id for i in hits} == {s.id for s in bot.samples if _memorised(s.id)}


def test_a_rerun_makes_no_call_and_results_are_stored_apart_from_scores(probed):
    assert probed["bot"].calls == probed["first_calls"], "every call is in the store"
    assert (
        probed["again"]["masked-option"].difference == probed["results"]["masked-option"].difference
    )
    assert sorted(x["extra"]["probe"] for x in probed["stored"]) == ["masked-option", "min-k"]
    assert all(x["benchmark"] == PREFIX + "medqa" for x in probed["stored"])
    assert not any(row.benchmark.startswith(PREFIX) for row in probed["rows"]), (
        "never among the leaderboard's scores"
    )


def test_leaderboard_shows_the_probes_in_a_section_of_their_own(probed):
    r = CliRunner().invoke(
        app, ["leaderboard", "--store", str(probed["db"])], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert (
        "Contamination probes (not scores" in r.output
        and "masked-option" in r.output
        and "min-k" in r.output
    )


def test_cli_command_runs_and_reruns_from_the_store(tmp_path, probed):
    from grandrounds.core.registry import PROVIDERS
    from grandrounds.providers.scripted import ScriptedProvider

    bot = probed["bot"]

    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=bot, **options)

    args = [
        "contamination",
        "medqa",
        "--model",
        "memo/x",
        "--data",
        str(probed["data"]),
        "--limit",
        "20",
        "--probe",
        "masked-option",
        "--store",
        str(tmp_path / "c.db"),
    ]
    with PROVIDERS.registered("memo", Bot):
        before = bot.calls
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert r.exit_code == 0, (r.output, r.exception)
        assert bot.calls - before == 40, (
            "two prompts per item: the original and the reworded control"
        )
        r2 = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r2.exit_code == 0 and bot.calls - before == 40
    assert "masked-option" in r.output and "exact-match rate" in r.output


def test_rules_are_fixed_and_readable():
    assert (
        reword("The patient presents with severe pain.")
        == "This individual comes accompanied by serious discomfort."
    )
    assert reword(reword("Aspirin")) == "Aspirin", "a word the table does not hold stays"
    assert normalise("  Beta-blocker,  ORAL! ") == "beta blocker oral"
    assert read_guess('Option: "Metformin"\nbecause ...') == "Metformin"
    assert read_guess("B. Metformin") == "Metformin"
    assert read_guess(None) == ""


def test_min_k_needs_log_probabilities():
    from grandrounds.analyses.contamination import check_probes

    with pytest.raises(ConfigError, match="min-k needs prompt log-probabilities"):
        check_probes(["min-k"], frozenset({"chat"}))
    with pytest.raises(ConfigError, match="choose from masked-option, min-k"):
        check_probes(["guess"], frozenset({"chat"}))
    assert check_probes([], frozenset({"chat"})) == ["masked-option"]
