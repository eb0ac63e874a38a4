"""Log-probabilities that are right or refused: a server is probed before a log-probability run.

An OpenAI-compatible server scores a continuation by echoing the prompt's log-probabilities
(``/v1/completions`` with ``echo`` and ``logprobs``). Servers get this wrong in ways that give a
score and no warning: llama-cpp-python (0.3.x) pairs each echoed token with the next token's
log-probability when the model adds no BOS (a shift by one token), can leave a token out of the
echo, and reads ``max_tokens: 0`` as "no limit", so the tokens it then generates were added to
the option's log-probability. Before the first call of a ``letter-loglik``, ``text-loglik`` or
``next-token`` run, :func:`probe` asks the server two questions whose answers it gives twice:

1. The context alone, and the context with the token the server itself generated after it.
   Each echo must spell its prompt exactly, token by token at the offsets it reports (a dropped or
   misplaced token fails), and both must agree on the log-probability of every token of the shared
   prefix.
2. The generated token's log-probability after the context (from the first request) must equal
   the log-probability the second request's echo gives that same token at that same place. A
   shifted echo gives the next token's figure instead.

What is sent, for every server family: ``max_tokens: 1`` (never 0, which llama-cpp-python
reads as unlimited and vLLM refuses), and only the log-probabilities of the prompt's own tokens
are summed; the one generated token is ignored (:meth:`OpenAIProvider._loglikelihood`). A server
that fails the probe is refused before any call is made, with what failed and what works instead.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grandrounds.core.errors import ConfigError

#: A context whose next token is a plain word or number for any model (never end-of-text).
PROBE_CONTEXT = "Count with me: one, two, three, four, five, six,"
#: Log-probabilities are floats sent as JSON text: agreement within this is agreement.
TOLERANCE = 1e-4
ALTERNATIVES = (
    "score in process with the llamacpp/ provider (llamacpp/PATH.gguf evaluates the same GGUF directly), "
    "or answer by generating text (--answer-mode generate)"
)

Post = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Echo:
    """One completion's echo: tokens, their log-probabilities and offsets, and the prompt length."""

    tokens: list[str]
    logprobs: list[float | None]
    offsets: list[int]
    prompt_len: int

    @property
    def prompt_tokens(self) -> int:
        """How many echoed entries belong to the prompt (start before its end)."""
        return sum(1 for off in self.offsets if off < self.prompt_len)


class NoEcho(ConfigError):
    """The server gives no echoed log-probabilities at all (so the probe cannot ask)."""


def _echo(out: dict[str, Any], prompt: str) -> Echo:
    try:
        lp = out["choices"][0]["logprobs"]
        tokens = [str(t) for t in lp["tokens"]]
        values = [None if x is None else float(x) for x in lp["token_logprobs"]]
        offsets = [int(o) for o in lp["text_offset"]]
    except (KeyError, IndexError, TypeError, ValueError):
        raise NoEcho(
            str(
                _refuse(
                    "it returned no echoed log-probabilities (choices[0].logprobs with tokens, token_logprobs, text_offset)"
                )
            )
        ) from None
    if not (len(tokens) == len(values) == len(offsets)):
        raise _refuse(
            f"its echo lists {len(tokens)} tokens, {len(values)} log-probabilities and {len(offsets)} offsets"
        )
    return Echo(tokens, values, offsets, len(prompt))


def _refuse(why: str) -> ConfigError:
    return ConfigError(
        f"the server's log-probabilities failed the check made before a log-probability run: {why}. "
        f"Its scores would be wrong, so none are made; instead {ALTERNATIVES}"
    )


def check_spelling(echo: Echo, prompt: str, what: str) -> None:
    """The echoed prompt tokens, at their offsets, spell ``prompt`` exactly (nothing dropped or moved)."""
    at = 0
    for token, off in zip(echo.tokens, echo.offsets):
        if off >= len(prompt):
            break
        if off != at or prompt[off : off + len(token)] != token:
            raise _refuse(
                f"the echo of {what} does not spell the prompt: token {token!r} at offset {off}, where "
                f"{prompt[at : at + max(1, len(token))]!r} at offset {at} was due (a token dropped or shifted)"
            )
        at += len(token)
    if at != len(prompt):
        raise _refuse(
            f"the echo of {what} covers {at} of its {len(prompt)} characters (a token left out)"
        )
    generated = len(echo.tokens) - echo.prompt_tokens
    if generated > 1:
        raise _refuse(
            f"it generated {generated} tokens after {what} when asked for at most 1 (max_tokens not honoured)"
        )


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=0.0, abs_tol=TOLERANCE)


def compare(alone: Echo, joined: Echo, context: str) -> None:
    """The two questions of the module's docstring, on two echoes already spelt right."""
    n = alone.prompt_tokens
    if len(alone.tokens) <= n or alone.logprobs[n] is None:
        raise _refuse(
            "it gave no generated token with a log-probability after the probe's context (max_tokens 1)"
        )
    shared = min(n, joined.prompt_tokens)
    for i in range(shared):
        if alone.tokens[i] != joined.tokens[i]:
            break  # the tokenisation of the two prompts parts here; what came before is compared
        if not _close(alone.logprobs[i], joined.logprobs[i]):
            raise _refuse(
                f"the same prefix gets two log-probabilities for token {i} ({alone.tokens[i]!r}): "
                f"{alone.logprobs[i]} alone, {joined.logprobs[i]} with one more token"
            )
    at = [i for i, off in enumerate(joined.offsets) if off == len(context)]
    if not at or joined.tokens[at[0]] != alone.tokens[n]:
        raise _refuse(
            f"the echo does not hold the generated token {alone.tokens[n]!r} where it was appended"
        )
    echoed, generated = joined.logprobs[at[0]], alone.logprobs[n]
    if not _close(echoed, generated):
        raise _refuse(
            f"the token {alone.tokens[n]!r} after the same context has log-probability {generated} as the next token "
            f"but {echoed} in the echo (an echo shifted by one token)"
        )


async def probe(
    post: Post, model: str, context: str = PROBE_CONTEXT, *, echo_needed: bool = True
) -> bool:
    """Ask the server the probe's two questions through ``post`` (path, body -> JSON): True if it
    passes, else a :class:`ConfigError` naming what failed and what works instead. Where the run
    does not score by echo (``next-token`` reads the chat endpoint's top log-probabilities) and the
    server echoes nothing, there is nothing to compare: False (not checked)."""
    body = {"model": model, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0.0}
    try:
        first = await post("/completions", body | {"prompt": context})
        alone = _echo(first, context)
    except NoEcho:
        if echo_needed:
            raise
        return False
    except Exception as e:  # the provider's error for a server without /completions
        if echo_needed:
            raise _refuse(f"its completions endpoint failed: {e}") from None
        return False
    check_spelling(alone, context, "the context")
    n = alone.prompt_tokens
    if len(alone.tokens) <= n:
        raise _refuse("it gave no generated token after the probe's context (max_tokens 1)")
    joined_prompt = context + alone.tokens[n]
    second = await post("/completions", body | {"prompt": joined_prompt})
    joined = _echo(second, joined_prompt)
    check_spelling(joined, joined_prompt, "the context with one more token")
    compare(alone, joined, context)
    return True


def prompt_sum(echo_tokens: Sequence[tuple[float | None, int]], start: int, end: int) -> float:
    """The summed log-probability of the echoed tokens starting in ``[start, end)``: the
    continuation's own tokens, never a generated one after the prompt."""
    return float(sum(x for x, off in echo_tokens if start <= off < end and x is not None))
