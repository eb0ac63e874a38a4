"""What a provider is, how a model spec names one, and which failures are worth retrying."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from grandrounds.errors import ConfigError
from grandrounds.records import Request, Response


class ProviderError(Exception):
    """A failed call. ``retryable`` is True only for 429, 5xx, timeouts, dropped connections and
    malformed bodies; ``retry_after`` carries a server's Retry-After in seconds."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class ModelSpec:
    """``provider/model`` as typed on the command line, plus the endpoint it goes to."""

    provider: str
    model: str
    base_url: str = ""

    @classmethod
    def parse(cls, text: str, base_url: str = "") -> "ModelSpec":
        provider, sep, model = text.partition("/")
        if not sep or not provider or not model:
            raise ConfigError(f"model spec {text!r} must look like PROVIDER/MODEL, e.g. openai/gpt-4o or llamacpp/smollm2")
        return cls(provider, model, base_url)

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


class Provider(ABC):
    """One model behind one endpoint. Retries, concurrency and caching live in the runner."""

    #: Answer modes this backend can serve beyond plain chat.
    supports: frozenset[str] = frozenset({"chat"})
    #: Default number of requests in flight to this endpoint.
    default_concurrency: int = 16

    def __init__(self, spec: ModelSpec, **options: Any) -> None:
        self.spec = spec
        self.options = options

    @property
    def endpoint(self) -> str:
        """Requests to one endpoint share one connection limit."""
        return self.spec.base_url or self.spec.provider

    def request_base_url(self) -> str:
        """The base URL recorded in request keys (answers from different servers never mix)."""
        return self.spec.base_url

    @abstractmethod
    async def call(self, request: Request) -> Response:
        """Perform one call; raise ProviderError on failure."""

    async def aclose(self) -> None:
        return None
