"""Protocols: named presets of everything around a benchmark's arithmetic.

A benchmark's number is only comparable with its authors' when the whole protocol matches:
prompt text, system message, generation settings of the candidate and of the judge, the judge
model, the extraction rule and the aggregation convention. Every benchmark declares two presets:

- ``reference`` (the default): the official setup end to end, as the authors' own code runs it;
  its headline equals what that code prints for the same replies.
- ``grandrounds``: our refinements (temperature 0, tolerant extraction, unknown-aware aggregation,
  failed calls excluded), each named in the preset's description.

The chosen protocol and every setting it fixes go into the run's fingerprint; an explicit flag
(``--temperature``, ``--max-tokens``, ``--judge-temperature``, ``--judge-max-tokens``) overrides the
preset and is recorded there as a deviation. Results of different protocols are never ranked
against each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import GenParams
from grandrounds.sources.upstream import TextRef

PROTOCOL_NAMES = ("reference", "grandrounds")
DEFAULT_PROTOCOL = "reference"


def check_protocol(name: str) -> str:
    """``name`` if it names a protocol, else a one-line ConfigError (graders' parameter check)."""
    if name not in PROTOCOL_NAMES:
        raise ConfigError(f"unknown protocol {name!r} (protocols: {', '.join(PROTOCOL_NAMES)})")
    return name


@dataclass(frozen=True)
class Generation:
    """Sampling settings a protocol fixes for one role (the candidate, or the judge)."""

    temperature: float = 0.0
    max_tokens: int = 1024
    top_p: float | None = None
    #: System message sent before the benchmark's own messages (None: none is sent); upstream text
    #: (read from the official file at run time) or our own string.
    system: str | TextRef | None = None

    def params(self, seed: int | None = 0, **kw: Any) -> GenParams:
        return GenParams(
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            top_p=self.top_p,
            seed=seed,
            **kw,
        )


#: Our defaults: deterministic answers, room for reasoning, deterministic judges.
OUR_ANSWER = Generation(temperature=0.0, max_tokens=1024)
OUR_JUDGE = Generation(temperature=0.0, max_tokens=2048)


@dataclass(frozen=True, kw_only=True)
class Protocol:
    """One named preset. ``source`` says where the reference is defined (a URL, or ``ours``)."""

    name: str
    answer: Generation = OUR_ANSWER
    judge: Generation = OUR_JUDGE
    #: The judge the official protocol uses (``provider/model``), or its panel (a tuple), the default
    #: ``--judge``; None = none named.
    judge_model: str | tuple[str, ...] | None = None

    @property
    def judge_models(self) -> tuple[str, ...]:
        if self.judge_model is None:
            return ()
        return (self.judge_model,) if isinstance(self.judge_model, str) else tuple(self.judge_model)

    #: How answers are read (one line, shown in the fingerprint and the README's table).
    extraction: str = ""
    #: How item values become the headline (one line).
    aggregation: str = ""
    source: str = "ours"
    #: Anything else this preset fixes (prompt names, modes), recorded in the fingerprint.
    settings: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "answer": _gen_dict(self.answer),
            "judge": _gen_dict(self.judge),
            "extraction": self.extraction,
            "aggregation": self.aggregation,
            "source": self.source,
        }
        if self.judge_model:
            out["judge_model"] = self.judge_model
        if self.settings:
            out["settings"] = dict(self.settings)
        return out


def _gen_dict(g: Generation) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(g):
        value = getattr(g, f.name)
        if isinstance(value, TextRef):
            value = value.describe()
        if value is not None:
            out[f.name] = value
    return out


def system_text(g: Generation) -> str | None:
    """The system message ``g`` sends, as text (upstream text rendered), or None."""
    if isinstance(g.system, TextRef):
        return g.system.load().render()
    return g.system


def ours(reference: Protocol, **changes: Any) -> Protocol:
    """The ``grandrounds`` preset beside ``reference``: our generation settings unless ``changes`` say otherwise."""
    base: dict[str, Any] = {
        "answer": OUR_ANSWER,
        "judge": OUR_JUDGE,
        "judge_model": reference.judge_model,
        "source": "ours",
        "settings": {},
    }
    return replace(reference, name="grandrounds", **(base | changes))


def same_as_ours(
    extraction: str, aggregation: str, note: str = "the benchmark publishes no protocol"
) -> dict[str, Protocol]:
    """Presets for a benchmark whose authors publish no prompt or settings: both are ours, and say so."""
    ref = Protocol(
        name="reference", extraction=extraction, aggregation=aggregation, source=f"ours ({note})"
    )
    return {"reference": ref, "grandrounds": replace(ref, name="grandrounds", source="ours")}


#: Generation fields an explicit flag may override (recorded as deviations).
OVERRIDABLE = ("temperature", "max_tokens", "top_p")


def resolve_generation(
    preset: Generation, given: GenParams | None, overrides: Mapping[str, Any], seed: int | None
) -> tuple[GenParams, dict[str, Any]]:
    """The generation parameters a role runs with, and what deviates from the preset.

    ``given`` (a complete GenParams from a caller) wins over the preset; otherwise the preset
    with ``overrides`` (explicit flags, None = not given) applied. Deviations are every
    overridable field whose value differs from the preset: ``{field: {"preset": a, "used": b}}``.
    """
    base = preset.params(seed=seed)
    if given is not None:
        used = given
    else:
        used = replace(
            base, **{k: v for k, v in overrides.items() if v is not None and k in OVERRIDABLE}
        )
    deviations = {
        k: {"preset": getattr(base, k), "used": getattr(used, k)}
        for k in OVERRIDABLE
        if getattr(base, k) != getattr(used, k)
    }
    return used, deviations
