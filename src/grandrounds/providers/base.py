"""What a provider is, how a model spec names one, and which failures are worth retrying.

A provider declares what it accepts and serves: its options (``--model-opt KEY=VALUE`` and the
generic ``--threads``) as :class:`~grandrounds.params.Param` tuples, and the request kinds it can
answer. :func:`check_model` checks a run against both before anything is loaded or called.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from grandrounds.errors import ConfigError
from grandrounds.params import Param, check_values
from grandrounds.records import Request, RequestKind, Response
from grandrounds.registry import PROVIDERS


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

    #: Request kinds this backend can answer (chat; next_token and loglikelihood for log-prob modes).
    request_kinds: ClassVar[frozenset[RequestKind]] = frozenset({"chat"})
    #: Options the constructor takes (``--model-opt``; ``threads`` is what ``--threads`` sets).
    model_options: ClassVar[tuple[Param, ...]] = ()
    #: A model spec shown by ``grandrounds list``.
    example: ClassVar[str] = ""
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


def split_endpoint(spec_text: str, base_url: str = "") -> tuple[str, str]:
    """``provider/model@http://host/v1`` -> (``provider/model``, URL); without ``@`` the URL is ``base_url``."""
    if "@" in spec_text:
        spec_text, base_url = spec_text.split("@", 1)
    return spec_text, base_url


def check_model(model: str, options: Mapping[str, Any], kind: RequestKind = "chat") -> dict[str, Any]:
    """``options`` coerced for the provider of ``model``, which must serve ``kind`` requests.

    Called before a run loads data or makes a call: an undeclared or ill-typed option, or a
    log-prob answer mode on a provider that cannot compute log-probabilities, is a one-line
    ConfigError instead of a failure on every sample.
    """
    spec = ModelSpec.parse(split_endpoint(model)[0])
    cls = PROVIDERS.get(spec.provider)
    if kind not in cls.request_kinds:
        served = ", ".join(sorted(cls.request_kinds))
        raise ConfigError(f"provider {spec.provider} cannot serve {kind} requests (it serves {served}): use another --answer-mode or model")
    return check_values(cls.model_options, options, f"provider {spec.provider}", "option")


def error_reason(body: Any) -> str:
    """The reason an OpenAI-compatible server gives in an error body, whatever its shape.

    OpenAI nests it (``{"error": {"message": ...}}``), vLLM and others send it flat
    (``{"object": "error", "message": ...}``), some send ``{"error": "text"}`` or FastAPI's
    ``{"detail": ...}``. "" when there is none.
    """
    if not isinstance(body, dict):
        return ""
    err = body.get("error")
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(err, str) and err:
        return err
    for key in ("message", "detail"):
        if body.get(key):
            return str(body[key])
    return ""
