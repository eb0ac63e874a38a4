"""Prices, token counts and what a run cost.

- :class:`PriceTable`: US dollars per million input and output tokens per model, from the
  packaged ``data/prices.toml`` with a user file read on top (``--prices FILE`` or
  ``$GRANDROUNDS_PRICES``); the batch APIs' discount per provider; providers that run models
  locally (no per-token price: their cost is "local", never zero).
- :func:`token_counter`: how many tokens a prompt is. OpenAI models are counted with tiktoken
  where its encoding file can be had (it is fetched once, then cached in ``$TIKTOKEN_CACHE_DIR``);
  everything else, and OpenAI models when the file cannot be fetched, is an estimate said to be
  one: about 4 characters per token, one per CJK character.
- :func:`run_usage`: the tokens and cost of the calls behind one result, answers, each judge and
  an agent benchmark's simulator separately, from the usage the servers reported (a call whose
  server reported none is counted as such, not as zero tokens).
"""

from __future__ import annotations

import math
import os
import re
import threading
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import canonical_json
from grandrounds.core.records import Message, Result

PRICES_ENV = "GRANDROUNDS_PRICES"
_DATED = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


# ---- prices -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """What one model costs, in US dollars per million tokens."""

    model: str
    input: float
    output: float
    #: Share taken off both prices when the call goes through the provider's batch API.
    batch_discount: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int, batch: bool = False) -> float:
        usd = (prompt_tokens * self.input + completion_tokens * self.output) / 1e6
        return usd * (1.0 - self.batch_discount) if batch else usd


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    models: Mapping[str, tuple[float, float]]
    batch_discount: Mapping[str, float] = field(default_factory=dict)
    local: frozenset[str] = frozenset()
    as_of: str = ""
    #: Where the prices came from, as shown beside every cost.
    origin: str = "packaged price table"

    def price(self, spec: str) -> Price | None:
        """The price of ``provider/model`` (a dated snapshot takes its undated name's), or None."""
        spec = spec.split("@", 1)[0]
        for name in (spec, _DATED.sub("", spec)):
            if name in self.models:
                provider = name.partition("/")[0]
                inp, out = self.models[name]
                return Price(name, inp, out, self.batch_discount.get(provider, 0.0))
        return None

    def is_local(self, spec: str) -> bool:
        """Whether ``spec`` runs on the user's own hardware (and has no entry of its own)."""
        return self.price(spec) is None and spec.partition("/")[0] in self.local

    def describe(self) -> str:
        return f"{self.origin}" + (f" (as of {self.as_of})" if self.as_of else "")


def _read_toml(path: Path | str, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"prices file {path}: {e}") from None


def _number(path: Path | str, where: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(
            f"prices file {path}: {where} must be a number of at least 0, got {value!r}"
        )
    return float(value)


def _merge(table: PriceTable, raw: Mapping[str, Any], path: Path | str, origin: str) -> PriceTable:
    """``table`` with the entries of one parsed price file read on top."""
    known = {"as_of", "batch_discount", "local", "models"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(
            f"prices file {path}: unknown key {unknown[0]!r} (expected: {', '.join(sorted(known))})"
        )
    models = dict(table.models)
    entries = raw.get("models", {})
    if not isinstance(entries, dict):
        raise ConfigError(
            f'prices file {path}: [models] must be a table of "provider/model" = {{ input = ..., output = ... }}'
        )
    for name, entry in entries.items():
        if "/" not in name:
            raise ConfigError(
                f'prices file {path}: model {name!r} must be written provider/model, e.g. "openai/{name}"'
            )
        if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
            raise ConfigError(
                f"prices file {path}: models.{name!r} must have exactly input and output (USD per million tokens)"
            )
        models[name] = (
            _number(path, f"models.{name!r}.input", entry["input"]),
            _number(path, f"models.{name!r}.output", entry["output"]),
        )
    discounts = dict(table.batch_discount)
    for provider, share in (raw.get("batch_discount") or {}).items():
        share = _number(path, f"batch_discount.{provider}", share)
        if share > 1:
            raise ConfigError(
                f"prices file {path}: batch_discount.{provider} is a share between 0 and 1, got {share}"
            )
        discounts[provider] = share
    local = table.local
    if "local" in raw:
        providers = (raw["local"] or {}).get("providers")
        if not isinstance(providers, list) or not all(isinstance(p, str) for p in providers):
            raise ConfigError(
                f"prices file {path}: local.providers must be a list of provider names"
            )
        local = frozenset(providers)
    as_of = raw.get("as_of", table.as_of)
    return PriceTable(
        models=models, batch_discount=discounts, local=local, as_of=str(as_of), origin=origin
    )


@lru_cache(maxsize=1)
def _packaged() -> PriceTable:
    text = (files("grandrounds") / "data" / "prices.toml").read_text(encoding="utf-8")
    return _merge(
        PriceTable(models={}),
        _read_toml("(packaged) prices.toml", text),
        "(packaged) prices.toml",
        "packaged price table",
    )


def load_prices(path: Path | str | None = None) -> PriceTable:
    """The packaged prices with ``path`` (else ``$GRANDROUNDS_PRICES``, if set) read on top."""
    table = _packaged()
    user = path or os.environ.get(PRICES_ENV) or None
    if user is None:
        return table
    p = Path(user)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"prices file {p}: cannot be read ({e.strerror or e})") from None
    return _merge(table, _read_toml(p, text), p, f"packaged price table with {p} on top")


# ---- tokens -------------------------------------------------------------------------------------

#: Tokens a chat message costs beyond its text, and the reply's priming (OpenAI cookbook, "How to
#: count tokens with tiktoken": 3 per message, 3 for the reply, for the gpt-4o/gpt-4 families).
PER_MESSAGE = 3
PER_REPLY = 3
#: How long tiktoken may take to fetch an encoding file before counting falls back to the estimate.
FETCH_SECONDS = 10.0
ESTIMATE_LABEL = "estimated: ~4 characters per token (1 per CJK character)"
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)


def estimate_tokens(text: str) -> int:
    """About 4 characters per token, each CJK character a token of its own (no tokenizer applies)."""
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of texts and chat prompts for one model; ``exact`` when a real tokenizer does."""

    label: str
    exact: bool
    _count: Callable[[str], int] = estimate_tokens

    def text(self, text: str) -> int:
        return self._count(text)

    def messages(self, messages: Sequence[Message]) -> int:
        return (
            sum(
                PER_MESSAGE
                + self._count(m.text)
                + sum(image_tokens(i.width, i.height) for i in m.images)
                for m in messages
            )
            + PER_REPLY
        )


def image_tokens(width: int, height: int) -> int:
    """An estimate of the prompt tokens of one image: width x height / 750, Anthropic's published
    approximation (docs.anthropic.com, "Vision": "tokens = (width px * height px)/750"), at least 85
    (OpenAI's base cost of an image at low detail); a size not known counts 1,000 tokens."""
    if width <= 0 or height <= 0:
        return 1000
    return max(85, math.ceil(width * height / 750))


_ENCODINGS: dict[str, Any] = {}
_FAILED: dict[str, str] = {}
_LOCK = threading.Lock()


def _encoding(name: str) -> tuple[Any, str]:
    """tiktoken's encoding ``name`` (None and the reason when it cannot be had within FETCH_SECONDS).

    tiktoken downloads the file on first use without a timeout; it is loaded in a daemon thread
    so an unreachable host never hangs the command.
    """
    with _LOCK:
        if name in _ENCODINGS:
            return _ENCODINGS[name], ""
        if name in _FAILED:
            return None, _FAILED[name]
    import tiktoken

    box: dict[str, Any] = {}

    def load() -> None:
        try:
            box["enc"] = tiktoken.get_encoding(name)
        except Exception as e:  # network, a damaged cache file: fall back to the estimate
            box["err"] = type(e).__name__

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(FETCH_SECONDS)
    with _LOCK:
        if "enc" in box:
            _ENCODINGS[name] = box["enc"]
            return box["enc"], ""
        _FAILED[name] = box.get("err") or f"not fetched within {FETCH_SECONDS:g} s"
        return None, _FAILED[name]


def token_counter(spec: str) -> TokenCounter:
    """The token counter for ``provider/model``: tiktoken for OpenAI models where its encoding file can
    be had, else the estimate (with why in the label)."""
    provider, _, model = spec.split("@", 1)[0].partition("/")
    if provider != "openai":
        return TokenCounter(ESTIMATE_LABEL, False)
    try:
        import tiktoken
    except ImportError:
        return TokenCounter(
            f"{ESTIMATE_LABEL}; install tiktoken to count OpenAI tokens exactly", False
        )
    try:
        name = tiktoken.encoding_name_for_model(model)
    except (
        KeyError
    ):  # a model tiktoken does not know (a local model behind an OpenAI-compatible server)
        return TokenCounter(ESTIMATE_LABEL, False)
    enc, why = _encoding(name)
    if enc is None:
        return TokenCounter(
            f"{ESTIMATE_LABEL}; tiktoken's {name} file could not be fetched ({why})", False
        )
    return TokenCounter(
        f"tiktoken {name}", True, lambda text: len(enc.encode(text, disallowed_special=()))
    )


# ---- what a run cost ----------------------------------------------------------------------------


@dataclass(kw_only=True)
class Tally:
    """Calls, tokens and cost of one model's calls behind a result."""

    model: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Successful calls whose server reported no token usage (their tokens are not in the sums).
    no_usage: int = 0

    def block(self, prices: PriceTable, batch: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "calls_without_usage": self.no_usage,
        }
        price = prices.price(self.model)
        if price is not None:
            out["cost_usd"] = round(
                price.cost(self.prompt_tokens, self.completion_tokens, batch), 6
            )
            if batch and price.batch_discount:
                out["batch"] = True
        else:
            out["cost_usd"] = None
            out["cost_note"] = (
                "local model: no per-token price"
                if prices.is_local(self.model)
                else "no price for this model in the price table"
            )
        return out


def judge_of(judge: str | None, judges: Sequence[str]) -> str:
    """The judge a call is counted under: the vote's, else the only judge, else ``unattributed``."""
    if judge is not None and judge in judges:
        return judge
    return judges[0] if len(judges) == 1 else "unattributed"


def run_usage(
    model: str,
    answers: Any,
    judge_calls: Sequence[Any],
    judges: Sequence[str],
    prices: PriceTable | None = None,
    batch: Any = None,
    simulator: tuple[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``usage`` block of one result: calls, tokens and cost of its answers and of each judge.

    ``simulator``: (model, the store's count of its calls, None where no step names one) for a run
    whose episodes ask a simulator model (AgentClinic's patient): its calls are a role of their own,
    ``simulators`` (a list, as ``judges``), priced by the simulator model's price and never batched;
    a run without a simulator has no ``simulators`` key.

    ``answers`` and ``judge_calls`` are the store's counts (:class:`grandrounds.store.CallUsage`:
    each distinct stored call once, so a call two samples share was paid once; ``who`` names the
    judge). Costs use ``prices`` (default: :func:`load_prices`); a model without a price has
    ``cost_usd`` None with the reason, and the total then covers the priced parts only
    (``cost_complete`` False). ``batch`` is the run's batch settings (``covers("answers" |
    "judges")``): the calls of a role the run sends through a batch API are priced with the
    provider's batch discount (calls of that role stored by an earlier live run are priced so too).
    """
    prices = prices or load_prices()

    def tally(name: str, counted: Any) -> Tally:
        if counted is None:
            return Tally(model=name)
        return Tally(
            model=name,
            calls=counted.calls,
            prompt_tokens=counted.prompt_tokens,
            completion_tokens=counted.completion_tokens,
            no_usage=counted.no_usage,
        )

    by_judge = {j: Tally(model=j) for j in judges}
    for counted in judge_calls:
        by_judge[counted.who] = tally(counted.who, counted)
    batched = {
        role: bool(batch is not None and batch.covers(role)) for role in ("answers", "judges")
    }
    parts = [tally(model, answers).block(prices, batched["answers"])] + [
        t.block(prices, batched["judges"]) for t in by_judge.values()
    ]
    sims = []
    if simulator is not None:
        sims = [tally(simulator[0], simulator[1]).block(prices)]
        if simulator[1] is None:
            sims[0]["note"] = "no simulator call is named in the stored episodes"
    priced = [p["cost_usd"] for p in parts + sims if p["cost_usd"] is not None]
    return {
        "answers": parts[0],
        "judges": parts[1:],
        **({"simulators": sims} if sims else {}),
        "prompt_tokens": sum(p["prompt_tokens"] for p in parts + sims),
        "completion_tokens": sum(p["completion_tokens"] for p in parts + sims),
        "cost_usd": round(sum(priced), 6) if priced else None,
        "cost_complete": all(p["cost_usd"] is not None or p["calls"] == 0 for p in parts + sims),
        "prices": prices.describe(),
    }


def fmt_usd(value: float | None) -> str:
    """``$0.0123``; small amounts with more digits so they never read as zero."""
    if value is None:
        return "n/a"
    if value == 0:
        return "$0"
    return (
        f"${value:,.2f}" if value >= 1 else f"${value:.4f}" if value >= 0.0001 else f"${value:.2g}"
    )


def usage_cells(extra: Mapping[str, Any]) -> tuple[str, str]:
    """(tokens, cost) of a result's ``usage`` block for a table: "" where the result has none.

    Tokens read ``in+out``; a cost that leaves out models without a price is marked ``+``, a run
    of local models only reads "local".
    """
    usage = extra.get("usage")
    if not isinstance(usage, Mapping):
        return "", ""
    tokens = (
        f"{int(usage.get('prompt_tokens') or 0):,}+{int(usage.get('completion_tokens') or 0):,}"
    )
    cost = usage.get("cost_usd")
    parts = usage_parts(usage)
    if cost is None:
        local = all(
            str(p.get("cost_note", "")).startswith("local") for p in parts if p.get("calls")
        )
        return tokens, "local" if local and any(p.get("calls") for p in parts) else "n/a"
    return tokens, fmt_usd(cost) + ("" if usage.get("cost_complete", True) else "+")


def usage_parts(usage: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The blocks of a ``usage`` block, one per model and role: answers, judges, simulators."""
    return [
        usage.get("answers") or {},
        *(usage.get("judges") or []),
        *(usage.get("simulators") or []),
    ]


def with_usage(
    store: Any,
    run_id: str,
    result: Result,
    answers: Any,
    judge_calls: Sequence[Any],
    prices: PriceTable | None = None,
    batch: Any = None,
) -> Result:
    """``result`` with its ``usage`` block in ``extra``, stored in place of the result the run stored.

    A result whose fingerprint names a simulator model has that model's calls counted from the
    stored episodes (``store.simulator_usage``).

    The run stored its result a moment before under its grading's fingerprint (the newest of the
    run); it is replaced only when it is this very result, so a concurrent grading is never overwritten.
    """
    judges = [j.strip() for j in (result.judge or "").split(",") if j.strip()]
    sim = (result.fingerprint or {}).get("simulator")
    simulator = (
        (str(sim.get("model")), store.simulator_usage(run_id))
        if isinstance(sim, Mapping) and sim.get("model")
        else None
    )
    usage = run_usage(result.model, answers, judge_calls, judges, prices, batch, simulator)
    new = replace(result, extra=dict(result.extra) | {"usage": usage})
    fp = store.latest_grader_fp(run_id)
    stored = store.result(run_id, fp) if fp is not None else None
    if stored is not None and canonical_json(stored.get("fingerprint")) == canonical_json(
        result.fingerprint
    ):
        store.put_result(run_id, fp, new)
    return new


def usage_line(extra: Mapping[str, Any]) -> str:
    """One line for the end of a run: tokens in and out, and the cost, of the calls behind the result."""
    usage = extra.get("usage")
    if not isinstance(usage, Mapping):
        return ""
    _, cost = usage_cells(extra)
    missing = sum(int(p.get("calls_without_usage") or 0) for p in usage_parts(usage))
    note = f" ({missing} calls reported no usage)" if missing else ""
    priced = (
        f" at the {usage.get('prices')}"
        if cost not in ("local", "n/a") and usage.get("prices")
        else ""
    )
    return f"tokens: {int(usage.get('prompt_tokens') or 0):,} in, {int(usage.get('completion_tokens') or 0):,} out{note}; cost {cost}{priced}"
