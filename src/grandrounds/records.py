"""Typed, frozen records: the only values that cross module boundaries.

Data flows one way: Sample -> Request -> Response -> Grade -> Result. Every record
turns into plain JSON with :func:`grandrounds.hashing.to_jsonable` and back with the
``from_json`` helpers here, so the store can keep them and any stage can be re-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from grandrounds.hashing import canonical_json, text_hash

Role = Literal["system", "user", "assistant"]
Purpose = Literal["answer", "judge"]
RequestKind = Literal["chat", "next_token", "loglikelihood"]
VerdictStatus = Literal["met", "unmet", "unknown"]


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Criterion:
    """One rubric item. ``points`` is signed: negative points are errors that must be absent."""

    id: str
    text: str
    points: float
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sample:
    """One benchmark item.

    ``target`` is whatever the grader compares against (a letter, a set of letters, a
    label, a number, a reference text). ``choices`` maps option letters to option text for
    multiple-choice items. ``group``/``turn`` chain multi-turn dialogues: turns of one group
    are asked in order with the model's own earlier answers as history.
    """

    id: str
    benchmark: str
    messages: tuple[Message, ...]
    target: Any = None
    choices: Mapping[str, str] = field(default_factory=dict)
    rubric: tuple[Criterion, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    group: str | None = None
    turn: int = 0


@dataclass(frozen=True)
class GenParams:
    temperature: float = 0.0
    max_tokens: int = 1024
    top_p: float | None = None
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    #: Ask for a JSON object (OpenAI ``response_format``; a JSON grammar on llama.cpp). For judges
    #: whose protocol answers in JSON, it turns small local models' prose into readable verdicts.
    json_object: bool = False


@dataclass(frozen=True)
class Request:
    """One model call. Its :meth:`key` is the cache key: everything that changes the output.

    ``kind`` is ``chat`` (generate text), ``next_token`` (log-probability of each of
    ``continuations`` as the very next token) or ``loglikelihood`` (log-likelihood of each
    continuation's full text after the prompt). ``attempt`` separates deliberate re-asks of
    the same prompt (a judge reply that could not be parsed) from cache hits.
    """

    provider: str
    model: str
    messages: tuple[Message, ...]
    params: GenParams = GenParams()
    purpose: Purpose = "answer"
    kind: RequestKind = "chat"
    continuations: tuple[str, ...] = ()
    base_url: str = ""
    attempt: int = 0

    def canonical(self) -> str:
        """Canonical JSON of the request, computed once (records are frozen, so it cannot go stale)."""
        cached = self.__dict__.get("_canonical")
        if cached is None:
            cached = canonical_json(self)
            self.__dict__["_canonical"] = cached
        return cached

    def key(self) -> str:
        """Cache key: sha256 of :meth:`canonical`."""
        cached = self.__dict__.get("_key")
        if cached is None:
            cached = text_hash(self.canonical())
            self.__dict__["_key"] = cached
        return cached


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class Response:
    """The outcome of a call. A failed call carries ``error`` and no text; it is never graded."""

    key: str
    text: str | None = None
    error: str | None = None
    scores: Mapping[str, float] = field(default_factory=dict)
    usage: Usage = Usage()
    latency: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Verdict:
    """A judge's ruling on one criterion: ``met``, ``unmet`` or ``unknown`` (never guessed)."""

    criterion_id: str
    status: VerdictStatus
    explanation: str = ""
    raw: str = ""
    votes: tuple[str, ...] = ()
    attempts: int = 1
    judge_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grade:
    """The grading of one answer. ``value`` None means unscored (failed call, unknown verdict)."""

    sample_id: str
    value: float | None
    extracted: str | None = None
    verdicts: tuple[Verdict, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    judge_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """benchmark x model x grader: the headline number, how sure it is, and what it is made of."""

    benchmark: str
    model: str
    judge: str | None
    metric: str
    score: float | None
    ci95: tuple[float, float] | None
    n: int
    n_unscored: int
    breakdown: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


def message_from_json(d: Mapping[str, Any]) -> Message:
    return Message(role=str(d["role"]), content=str(d["content"]))


def criterion_from_json(d: Mapping[str, Any]) -> Criterion:
    return Criterion(id=str(d["id"]), text=d["text"], points=d["points"], tags=tuple(d.get("tags", ())))


def sample_from_json(d: Mapping[str, Any]) -> Sample:
    return Sample(
        id=d["id"],
        benchmark=d["benchmark"],
        messages=tuple(message_from_json(m) for m in d["messages"]),
        target=d.get("target"),
        choices=dict(d.get("choices") or {}),
        rubric=tuple(criterion_from_json(c) for c in d.get("rubric", ())),
        metadata=dict(d.get("metadata") or {}),
        group=d.get("group"),
        turn=int(d.get("turn", 0)),
    )


def verdict_from_json(d: Mapping[str, Any]) -> Verdict:
    return Verdict(
        criterion_id=str(d["criterion_id"]),
        status=d["status"],
        explanation=d.get("explanation", ""),
        raw=d.get("raw", ""),
        votes=tuple(d.get("votes", ())),
        attempts=int(d.get("attempts", 1)),
        judge_keys=tuple(d.get("judge_keys", ())),
    )


def grade_from_json(d: Mapping[str, Any]) -> Grade:
    return Grade(
        sample_id=d["sample_id"],
        value=d.get("value"),
        extracted=d.get("extracted"),
        verdicts=tuple(verdict_from_json(v) for v in d.get("verdicts", ())),
        details=dict(d.get("details") or {}),
        error=d.get("error"),
        judge_keys=tuple(d.get("judge_keys", ())),
    )


def response_from_json(d: Mapping[str, Any]) -> Response:
    usage = d.get("usage") or {}
    return Response(
        key=d["key"],
        text=d.get("text"),
        error=d.get("error"),
        scores=dict(d.get("scores") or {}),
        usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
        latency=float(d.get("latency", 0.0)),
        cached=bool(d.get("cached", False)),
    )
