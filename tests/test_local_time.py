"""The line a run on the local model prints before it starts: its calls and prompt tokens from the
dry-run plan, and a time from the speeds docs/cpu.md measured; nothing for a run with no local model."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli.main import app
from grandrounds.run import local_time
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.plan import plan
from tests.conftest import shared_file


def healthbench_cfg(model: str, judge: str) -> RunConfig:
    return RunConfig(
        benchmark="healthbench",
        model=model,
        data=shared_file("healthbench", "healthbench_500.jsonl"),
        limit=3,
        options=RunOptions(protocol="grandrounds"),
        judges=(JudgeConfig(spec=judge),),
    )


def test_a_local_judge_is_announced_with_the_plans_calls_and_tokens() -> None:
    cfg = healthbench_cfg("openai/remote", "llamacpp/smollm2")
    p = plan(None, cfg)
    judge = [line for line in p.lines if line.model == "llamacpp/smollm2"]
    assert len(judge) == 1 and judge[0].to_make > 3  # one call per rubric criterion
    line = local_time.local_time_line(p)
    assert line is not None
    m = re.search(r"about ([\d,]+) calls of up to ([\d,]+) tokens, ([\d,]+) prompt tokens", line)
    assert m, line
    calls, each, prompt = (int(g.replace(",", "")) for g in m.groups())
    assert calls == judge[0].to_make and prompt == judge[0].prompt_tokens
    assert each == judge[0].largest_output
    lt = local_time
    low = (
        prompt / lt.QUICK_PREFILL_TOKENS_PER_S
        + judge[0].output_bound * lt.QUICK_OUTPUT_SHARE / lt.QUICK_DECODE_TOKENS_PER_S
    )
    high = prompt / lt.PREFILL_TOKENS_PER_S + judge[0].output_bound / lt.DECODE_TOKENS_PER_S
    assert f"expect {lt.fmt_span(low)} to {lt.fmt_span(high)} here" in line
    # the answers go to a remote model: only the judge's calls are the local model's
    assert p.lines[0].to_make == 3 and calls == p.to_make - 3


def test_no_line_without_a_local_model_and_one_before_a_local_run(tmp_path: Path) -> None:
    said: list[str] = []
    local_time.announce(healthbench_cfg("openai/a", "openai/b"), None, said.append)
    assert said == []
    r = CliRunner().invoke(
        app,
        ["run", "demo", "--model", "llamacpp/smollm2", "--answer-mode", "next-token"]
        + ["--protocol", "grandrounds", "--limit", "1", "--store", str(tmp_path / "s.db")],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("local model on the CPU: about 1 calls"), r.output
    again = CliRunner().invoke(
        app,
        ["run", "demo", "--model", "llamacpp/smollm2", "--answer-mode", "next-token"]
        + ["--protocol", "grandrounds", "--limit", "1", "--store", str(tmp_path / "s.db")],
        env={"COLUMNS": "200"},
    )
    assert "nothing to ask (every call is stored)" in again.output, again.output
