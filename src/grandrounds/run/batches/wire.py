"""The interface of one provider's batch API (:class:`Wire`: request lines, submission, status,
results) and a batch as its provider last described it (:class:`Remote`). The two
implementations are :mod:`grandrounds.run.batches.openai_wire` and :mod:`grandrounds.run.batches.anthropic_wire`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grandrounds.core.records import Request, Response
from grandrounds.providers.base import Provider, ProviderError
from grandrounds.run.batches.http import BatchHttp, json_object


@dataclass(frozen=True, kw_only=True)
class Remote:
    """A batch as its provider last described it."""

    batch_id: str
    state: str
    done: bool
    counts: Mapping[str, Any] = field(default_factory=dict)
    #: why a batch failed as a whole (OpenAI's validation errors), else ""
    detail: str = ""
    #: where its results are: OpenAI (output file id, error file id); Anthropic (results URL,)
    results: tuple[str | None, ...] = ()


@dataclass(kw_only=True)
class Submission:
    """One batch's submission across its tries: a marker of ours sent with it (where the API
    keeps one), the uploaded input file (OpenAI), when it was first tried, whether a try was sent
    (so a lost reply may have created it), the batch ids already known (never taken for it), and
    whether the batch was found again rather than created."""

    marker: str
    started: float
    known: frozenset[str] = frozenset()
    file_id: str | None = None
    sent: bool = False
    found: bool = False


def object_at(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``body[key]`` where it is a JSON object, else an empty one."""
    value = body.get(key)
    return value if isinstance(value, dict) else {}


class Wire:
    """One provider's batch API: request lines, submission, status and results.

    Each operation uses a client of its own, closed when it ends (the connection pool is the
    endpoint's, kept while the provider or another operation uses it): nothing is left open
    when the run closes its providers.
    """

    name: str = ""
    endpoint: str = ""
    base_url: str = ""
    secrets: tuple[str, ...] = ()

    #: A fresh client for one operation (each wire sets it from its provider's endpoint).
    client: Callable[[], BatchHttp]

    async def _call(self, op: Callable[[BatchHttp], Any]) -> dict[str, Any]:
        """One request through a fresh client: its reply as a JSON object (ProviderError otherwise)."""
        http = self.client()
        try:
            return json_object(await op(http), self.secrets)
        finally:
            await http.aclose()

    async def _lines(self, where: str) -> AsyncIterator[bytes]:
        http = self.client()
        try:
            async for line in http.lines(where):
                yield line
        finally:
            await http.aclose()

    def body(self, provider: Provider, request: Request) -> dict[str, Any]:
        raise NotImplementedError

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        raise NotImplementedError

    async def submit(self, lines: list[bytes], attempt: Submission | None = None) -> Remote:
        """Create a batch of ``lines``. ``attempt`` is kept across the tries of one submission:
        from the second on, the batch a lost reply may have created is looked for first
        (:meth:`find`) and returned instead of creating another."""
        raise NotImplementedError

    async def find(self, attempt: Submission, size: int) -> Remote | None:
        """The batch an earlier try of ``attempt`` created though its reply was lost, or None."""
        return None

    async def status(self, batch_id: str) -> Remote:
        raise NotImplementedError

    def results(self, remote: Remote) -> AsyncIterator[tuple[str, Response | ProviderError]]:
        raise NotImplementedError

    def outcome(self, remote: Remote) -> str:
        """How an ended batch ended: completed, expired, cancelled or failed."""
        return remote.state
