"""Typed, frozen records: the only values that cross module boundaries.

Data flows one way: Sample -> Request -> Response -> Grade -> Result. Every record
turns into plain JSON with :func:`grandrounds.core.hashing.to_jsonable` and back with the
``from_json`` helpers here, so the store can keep them and any stage can be re-run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from grandrounds.core.hashing import canonical_json, dataclass_dict, text_hash

Purpose = Literal["answer", "judge", "attack", "simulate"]
RequestKind = Literal["chat", "next_token", "loglikelihood"]
VerdictStatus = Literal["met", "unmet", "unknown"]
#: Why a grade has the value it has. Only ``scored`` grades carry a value; the others are counted
#: and shown as unscored, each for its own reason, and never parsed back out of a message.
GradeStatus = Literal[
    "scored", "answer_failed", "unreadable", "grader_error", "not_asked", "flagged"
]
#: Grades the runner redoes on the next run: the answer or the grader may succeed this time.
REDO_STATUSES: frozenset[str] = frozenset({"answer_failed", "grader_error", "not_asked"})
#: Answer modes of exam benchmarks: extract a letter from generated text (``generate``); rank the
#: choices lm-evaluation-harness's task file lists (option letters, shown in the context) by summed
#: log-likelihood (``letter-loglik``); rank option texts by log-likelihood (``text-loglik``); rank
#: option letters by next-token log-probability (``next-token``). ``letter`` and ``loglik`` are the
#: earlier names of ``next-token`` and ``text-loglik``, still accepted and mapped to them.
AnswerMode = Literal["generate", "letter-loglik", "text-loglik", "next-token", "letter", "loglik"]


@dataclass(frozen=True)
class TextPart:
    """Text inside a message that also holds images."""

    text: str
    type: Literal["text"] = "text"


#: Fields of a record that travel with it but are never written to JSON (never in a key).
NOT_IN_JSON: Mapping[str, Any] = {"json": False}
#: Fields added after records were first stored: left out of JSON while empty, so the text and the
#: keys of records that do not use them are what they were before the field existed.
OMIT_EMPTY: Mapping[str, Any] = {"omit_empty": True}


@dataclass(frozen=True, kw_only=True)
class ImagePart:
    """An image inside a message, named by the sha256 of the bytes that are sent and their media
    type: that is what a request's key holds, never the bytes. ``data`` (the bytes, as prepared)
    and the pixel size travel beside it for the provider and the image store."""

    sha256: str
    media_type: str
    type: Literal["image"] = "image"
    #: OpenAI's ``detail`` (``low`` / ``high`` / ``auto``) where a run sets it: it changes what the model sees
    detail: str = ""
    data: bytes | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_JSON)
    width: int = field(default=0, compare=False, metadata=NOT_IN_JSON)
    height: int = field(default=0, compare=False, metadata=NOT_IN_JSON)


@dataclass(frozen=True)
class ToolCallPart:
    """A tool call inside an assistant message (or a reply): the call's id as the model gave it,
    the tool's name and its arguments as the JSON text the model wrote (kept as written, so a
    malformed call is stored as it came and the environment says what was wrong)."""

    id: str
    name: str
    arguments: str
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolResultPart:
    """What a tool (or the environment) answered to the call ``call_id``, in a ``tool`` message."""

    call_id: str
    content: str
    name: str = ""
    type: Literal["tool_result"] = "tool_result"


Part = TextPart | ImagePart | ToolCallPart | ToolResultPart


@dataclass(frozen=True)
class ToolSpec:
    """A tool a model may call: its name, what it does and its parameters as a JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Message:
    """One message. ``content`` is a plain string, or a tuple of parts where the message holds
    images; a text-only message stays a string, so its JSON (and every key built on it) is what
    it was before images existed."""

    role: str
    content: str | tuple[Part, ...]

    @property
    def text(self) -> str:
        """The message's text: the string itself, or its text parts joined by newlines."""
        c = self.content
        return c if isinstance(c, str) else "\n".join(p.text for p in c if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        c = self.content
        return () if isinstance(c, str) else tuple(p for p in c if isinstance(p, ImagePart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        c = self.content
        return () if isinstance(c, str) else tuple(p for p in c if isinstance(p, ToolCallPart))

    @property
    def tool_results(self) -> tuple[ToolResultPart, ...]:
        c = self.content
        return () if isinstance(c, str) else tuple(p for p in c if isinstance(p, ToolResultPart))


@dataclass(frozen=True)
class Criterion:
    """One rubric item. ``points`` is signed: negative points are errors that must be absent."""

    id: str
    text: str
    points: float
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class GenParams:
    temperature: float = 0.0
    max_tokens: int = 1024
    top_p: float | None = None
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    #: Ask for a JSON object (OpenAI ``response_format``; a JSON grammar on llama.cpp). For judges
    #: whose protocol answers in JSON, it turns small local models' prose into readable verdicts.
    json_object: bool = False


@dataclass(frozen=True, kw_only=True)
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
    #: Tools the model may call, and OpenAI-style ``tool_choice`` (``auto``, ``required``, ``none``
    #: or a tool's name); both left out of the key while empty, so keys of tool-less requests are
    #: what they were before tools existed.
    tools: tuple[ToolSpec, ...] = field(default=(), metadata=OMIT_EMPTY)
    tool_choice: str = field(default="", metadata=OMIT_EMPTY)
    #: The item asked, where sampling (temperature > 0) makes each ask a draw of its own and an
    #: earlier item has the same prompt: identical prompts of different items are then asked
    #: separately, as the authors' loops ask every item. Empty (and left out of the key) otherwise:
    #: greedy requests of one prompt share one reply.
    item: str = field(default="", metadata=OMIT_EMPTY)

    def canonical(self) -> str:
        """Canonical JSON of the request, computed once (records are frozen, so it cannot go stale)."""
        cached = self.__dict__.get("_canonical")
        if cached is None:
            cached = canonical_json(self._plain())
            self.__dict__["_canonical"] = cached
        return cached

    def _plain(self) -> dict[str, Any]:
        """The request as :func:`canonical_json` writes it, its messages and parameters already
        dicts: the same text (a dataclass is written as the dict of its fields), without orjson
        calling back into Python for each of them (about 7 us of a judge call's 17)."""
        out = dataclass_dict(self) or {}
        out["messages"] = [dataclass_dict(m) or m for m in self.messages]
        out["params"] = dataclass_dict(self.params) or self.params
        return out

    def key(self) -> str:
        """Cache key: sha256 of :meth:`canonical`."""
        cached = self.__dict__.get("_key")
        if cached is None:
            cached = text_hash(self.canonical())
            self.__dict__["_key"] = cached
        return cached


#: finish reasons that mean the reply was cut off by the token limit, across providers.
TRUNCATED_REASONS = frozenset({"length", "max_tokens"})


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class Response:
    """The outcome of a call. A failed call carries ``error`` and no text; it is never graded."""

    key: str
    text: str | None = None
    error: str | None = None
    scores: Mapping[str, float] = field(default_factory=dict)
    usage: Usage = Usage()
    latency: float = 0.0
    cached: bool = False
    #: Why generation stopped, as the provider says it ("stop", "length", ...); None = not reported.
    #: On a failed call, ``context_length`` marks a failure no retry can mend (the prompt alone is
    #: over the model's context): later runs take it from the store instead of asking again.
    finish_reason: str | None = None
    #: The tools the reply calls (native tool use), in the order the model gave them.
    tool_calls: tuple[ToolCallPart, ...] = field(default=(), metadata=OMIT_EMPTY)
    #: What the server says answered: its ``system_fingerprint`` and, where the reply names a model
    #: other than the one asked, that model (``fp_x; model gpt-x-2024``); None = not reported.
    #: Recorded per call, never part of a key.
    system_fingerprint: str | None = field(default=None, metadata=OMIT_EMPTY)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def truncated(self) -> bool:
        """The reply was cut off by the token limit (OpenAI "length"; Anthropic "max_tokens")."""
        return self.finish_reason in TRUNCATED_REASONS


@dataclass(frozen=True, kw_only=True)
class Vote:
    """One judge's say on one criterion, or on a whole answer (one run of a judge that scores).

    ``status`` is met / unmet / unknown; ``score`` holds a numeric verdict where the protocol
    scores (LLMEval-Med's 1-5). ``attempts`` counts the prompts sent for it so far (re-asks use
    the next attempt numbers, so none repeats a cached reply); ``keys`` are those calls' keys.
    ``error`` is set when the judge call itself failed (the vote is then unknown).
    """

    judge: str
    status: VerdictStatus
    score: float | None = None
    explanation: str = ""
    raw: str = ""
    attempts: int = 0
    keys: tuple[str, ...] = ()
    error: str | None = None
    run: int = 0
    #: A reply behind this vote was cut off by the judge's token limit.
    truncated: bool = False


@dataclass(frozen=True)
class Verdict:
    """The decision on one criterion, made from the votes of every judge (never guessed)."""

    criterion_id: str
    status: VerdictStatus
    explanation: str = ""
    votes: tuple[Vote, ...] = ()

    @property
    def statuses(self) -> tuple[str, ...]:
        """Each judge's vote, in panel order."""
        return tuple(v.status for v in self.votes)

    @property
    def raw(self) -> str:
        """The reply behind the decision (every reply, separated, when the decision is unknown)."""
        chosen = [v for v in self.votes if v.status == self.status and v.raw]
        if chosen and self.status != "unknown":
            return chosen[0].raw
        return "\n---\n".join(v.raw for v in self.votes if v.raw)

    @property
    def attempts(self) -> int:
        return max((v.attempts for v in self.votes), default=0)

    @property
    def judge_keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for v in self.votes for k in v.keys))


@dataclass(frozen=True, kw_only=True)
class Grade:
    """The grading of one answer. ``value`` None means unscored; ``status`` says why.

    ``verdicts`` are per-criterion decisions; ``votes`` are whole-answer votes (a judge that
    scores the answer, once per run). ``error`` is the human-readable reason for the status.
    """

    sample_id: str
    value: float | None
    extracted: str | None = None
    verdicts: tuple[Verdict, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    judge_keys: tuple[str, ...] = ()
    status: GradeStatus = "scored"
    votes: tuple[Vote, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One row of a breakdown: a score with its sample size, unscored count, CI and extra metrics."""

    score: float | None
    n: int
    n_unscored: int = 0
    ci95: tuple[float, float] | None = None
    metrics: Mapping[str, float | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a cell of no scored items has no score: an unknown, never a zero
        if self.n == 0 and self.score is not None:
            object.__setattr__(self, "score", None)
            object.__setattr__(self, "ci95", None)


#: family (subject, theme, axis, dimension, error_type, category, kind...) -> key -> cell.
Breakdown = Mapping[str, Mapping[str, Cell]]


@dataclass(frozen=True, kw_only=True)
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
    breakdown: Breakdown = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


def part_from_json(d: Mapping[str, Any]) -> Part:
    kind = d.get("type")
    if kind == "image":
        return ImagePart(
            sha256=str(d["sha256"]),
            media_type=str(d["media_type"]),
            detail=str(d.get("detail") or ""),
        )
    if kind == "tool_call":
        return ToolCallPart(id=str(d["id"]), name=str(d["name"]), arguments=str(d["arguments"]))
    if kind == "tool_result":
        return ToolResultPart(
            call_id=str(d["call_id"]), content=str(d["content"]), name=str(d.get("name") or "")
        )
    return TextPart(text=str(d["text"]))


def tool_spec_from_json(d: Mapping[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=str(d["name"]),
        description=str(d.get("description") or ""),
        parameters=dict(d.get("parameters") or {}),
    )


def message_from_json(d: Mapping[str, Any]) -> Message:
    content = d["content"]
    if isinstance(content, list):
        return Message(role=str(d["role"]), content=tuple(part_from_json(p) for p in content))
    return Message(role=str(d["role"]), content=str(content))


def criterion_from_json(d: Mapping[str, Any]) -> Criterion:
    return Criterion(
        id=str(d["id"]), text=d["text"], points=d["points"], tags=tuple(d.get("tags", ()))
    )


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


def vote_from_json(d: Any) -> Vote:
    if isinstance(d, str):  # stores written before votes were typed kept only the status
        return Vote(judge="", status=d)  # type: ignore[arg-type]  # a stored status, as written
    score = d.get("score")
    return Vote(
        judge=str(d.get("judge", "")),
        status=d["status"],
        score=None if score is None else float(score),
        explanation=d.get("explanation", ""),
        raw=d.get("raw", ""),
        attempts=int(d.get("attempts", 0)),
        keys=tuple(d.get("keys", ())),
        error=d.get("error"),
        run=int(d.get("run", 0)),
        truncated=bool(d.get("truncated", False)),
    )


def verdict_from_json(d: Mapping[str, Any]) -> Verdict:
    return Verdict(
        criterion_id=str(d["criterion_id"]),
        status=d["status"],
        explanation=d.get("explanation", ""),
        votes=tuple(vote_from_json(v) for v in d.get("votes", ())),
    )


def _legacy_status(d: Mapping[str, Any]) -> GradeStatus:
    """The status of a grade stored before grades carried one (read once, from its message)."""
    if d.get("value") is not None:
        return "scored"
    err = str(d.get("error") or "")
    if err.startswith(("answer failed", "answer call failed")):
        return "answer_failed"
    if err.startswith("grading failed"):
        return "grader_error"
    if err.startswith("not asked"):
        return "not_asked"
    return "unreadable"


def grade_from_json(d: Mapping[str, Any]) -> Grade:
    return Grade(
        sample_id=d["sample_id"],
        value=d.get("value"),
        extracted=d.get("extracted"),
        verdicts=tuple(verdict_from_json(v) for v in d.get("verdicts", ())),
        details=dict(d.get("details") or {}),
        error=d.get("error"),
        judge_keys=tuple(d.get("judge_keys", ())),
        status=d.get("status") or _legacy_status(d),
        votes=tuple(vote_from_json(v) for v in d.get("votes", ())),
    )


def cell_from_json(d: Mapping[str, Any]) -> Cell:
    ci = d.get("ci95")
    return Cell(
        score=d.get("score"),
        n=int(d.get("n") or 0),
        n_unscored=int(d.get("n_unscored") or 0),
        ci95=(float(ci[0]), float(ci[1])) if ci else None,
        metrics=dict(d.get("metrics") or {}),
    )


def breakdown_from_json(d: Any) -> dict[str, dict[str, Cell]]:
    """A stored breakdown back as cells. Anything not of the typed shape is left out, not guessed."""
    out: dict[str, dict[str, Cell]] = {}
    if not isinstance(d, Mapping):
        return out
    for family, cells in d.items():
        if not isinstance(cells, Mapping):
            continue
        fam = {
            str(k): cell_from_json(c)
            for k, c in cells.items()
            if isinstance(c, Mapping) and "n" in c and "score" in c
        }
        if fam:
            out[str(family)] = fam
    return out


def result_from_json(d: Mapping[str, Any]) -> Result:
    """A stored result (:func:`hashing.canonical_json` of a :class:`Result`) back as one."""
    ci = d.get("ci95")
    return Result(
        benchmark=str(d["benchmark"]),
        model=str(d["model"]),
        judge=d.get("judge"),
        metric=str(d.get("metric", "")),
        score=d.get("score"),
        ci95=(float(ci[0]), float(ci[1])) if ci else None,
        n=int(d.get("n", 0)),
        n_unscored=int(d.get("n_unscored", 0)),
        breakdown=breakdown_from_json(d.get("breakdown")),
        fingerprint=dict(d.get("fingerprint") or {}),
        extra=dict(d.get("extra") or {}),
    )


def judge_call_failed(grade: Grade) -> bool:
    """A judge call behind this grade failed (the vote is unknown with the call's error kept)."""
    return any(v.error for v in grade.votes) or any(
        v.error for verdict in grade.verdicts for v in verdict.votes
    )


def needs_redo(grade: Grade) -> bool:
    """Grades a re-run does again: a failed answer or grader, or a failed judge call.

    Calls that succeeded are cache hits, so redoing such a grade sends only the failed calls.
    """
    return grade.status in REDO_STATUSES or judge_call_failed(grade)


def judge_calls(grade: Grade) -> list[tuple[str | None, str]]:
    """(judge, call key) for every judge call behind ``grade``; judge None where no vote names it."""
    named: dict[str, str] = {}
    for vote in (*grade.votes, *(v for verdict in grade.verdicts for v in verdict.votes)):
        for key in vote.keys:
            named.setdefault(key, vote.judge)
    # --guard's reading (graders.guard), kept in the details, not among the grader's votes
    guard = (grade.details.get("guard") or {}).get("vote") or {}
    for key in guard.get("keys") or ():
        named.setdefault(key, str(guard.get("judge") or ""))
    keys = dict.fromkeys((*named, *grade.judge_keys))
    return [(named.get(k), k) for k in keys]
