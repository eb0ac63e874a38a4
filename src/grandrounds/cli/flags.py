"""Command-line flags shared by several commands (their help and checks), kept light: the command
modules import this at start-up, and a check's own imports happen only when its flag is given."""

from __future__ import annotations

import typer

#: Help of ``--rpm`` and ``--tpm`` (``run`` and ``robustness``).
RPM_HELP = "answer calls started per minute of the candidate's model at its endpoint, retries included (vendor rate limits; default: no limit)"
TPM_HELP = (
    "tokens of answer calls started per minute of the candidate's model at its endpoint, retries included: N counts prompt + max tokens "
    "(corrected to reported usage); input=N,output=N sets separate limits, as Anthropic's (default: no limit)"
)

#: How a token limit is written on the command line (``--tpm``, ``--judge-tpm``, ``--attacker-tpm``).
TPM_METAVAR = "N|input=N,output=N"


def tpm_option(value: str | None) -> str | None:
    """A token limit, checked before anything runs: ``N`` (prompt + output tokens per minute), or
    ``input=N`` and/or ``output=N`` (separate limits, as Anthropic sets them), comma-separated."""
    if value is None:
        return None
    from grandrounds.run.limits import tpm_problem

    why = tpm_problem(value)
    if why is not None:
        raise typer.BadParameter(f"{value}: {why}")
    return value
