"""The judge flags every judging command takes (``run``, ``regrade``, ``validate-judge``), declared once.

Each is a typer option used as a parameter's default. Where commands say different things about a
default (a run's default is the protocol's; a re-grade's is the run's last grading), the option is
made by a function that takes that wording; everything else about a flag (name, range, check) is
the same for every command that has it.
"""

from __future__ import annotations

from typing import Any

import typer

from grandrounds.cli.common import JUDGE_RPM_HELP, JUDGE_TPM_HELP, SEED_MAX, TEMPERATURE_MAX
from grandrounds.cli.flags import TPM_METAVAR, tpm_option

#: What ``--flagged`` does with an answer that addresses its grader.
FLAGGED_HELP = (
    "answers that address the grader (a verdict of their own, the judge's markers, words to the grader): "
    "keep (default) | exclude (unscored) | score-zero; counted in every result. Under exclude and "
    "score-zero, an answer whose judges' replies stay unreadable after every re-ask counts as flagged too"
)

JudgeBaseUrlOpt: Any = typer.Option(
    "",
    "--judge-base-url",
    help="base URL for judges given without @BASE_URL (else $OPENAI_BASE_URL)",
)
JudgeJsonOpt: Any = typer.Option(
    False,
    "--judge-json",
    help="ask judges for a JSON object (response_format / llama.cpp JSON grammar)",
)
JudgeConcurrencyOpt: Any = typer.Option(
    None, "--judge-concurrency", min=1, help="judge calls in flight per judge endpoint"
)
JudgeRpmOpt: Any = typer.Option(None, "--judge-rpm", min=1, help=JUDGE_RPM_HELP)
JudgeTpmOpt: Any = typer.Option(
    None, "--judge-tpm", callback=tpm_option, metavar=TPM_METAVAR, help=JUDGE_TPM_HELP
)
MaxReaskOpt: Any = typer.Option(
    2, "--max-reask", min=0, help="re-asks of an unreadable judge reply"
)
FlaggedOpt: Any = typer.Option("keep", "--flagged", help=FLAGGED_HELP)
OutOpt: Any = typer.Option(None, "--out", help="write results.json and samples.jsonl here")


def judge_temperature_opt(default: str = "the protocol's") -> Any:
    return typer.Option(
        None,
        "--judge-temperature",
        min=0.0,
        max=TEMPERATURE_MAX,
        help=f"judge temperature (default: {default})",
    )


def judge_max_tokens_opt(default: str = "the protocol's") -> Any:
    return typer.Option(
        None, "--judge-max-tokens", min=1, help=f"judge max tokens (default: {default})"
    )


def seed_opt(what: str) -> Any:
    return typer.Option(0, "--seed", min=0, max=SEED_MAX, help=f"seed of {what}")
