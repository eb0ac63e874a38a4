"""What a provider is, how a model spec names one, and which failures are worth retrying.

A provider declares what it accepts and serves: its options (``--model-opt KEY=VALUE`` and the
generic ``--threads``) as :class:`~grandrounds.core.params.Param` tuples, and the request kinds it can
answer. :func:`check_model` checks a run against both before anything is loaded or called.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from grandrounds.core.errors import ConfigError
from grandrounds.core.params import Param, check_values
from grandrounds.core.records import Request, RequestKind, Response
from grandrounds.core.registry import PROVIDERS


class ProviderError(Exception):
    """A failed call. ``retryable`` is True only for 429, 5xx, timeouts, dropped connections and
    malformed bodies; ``retry_after`` carries a server's Retry-After in seconds.

    ``kind`` names failures a caller may act on: ``context_length`` (the prompt and max_tokens do
    not fit the model's context; ``context_limit`` and ``prompt_tokens`` hold the numbers the
    server gave, None where it gave none), ``too_large`` (the reply is over the size cap),
    ``timeout``, ``rate_limited`` (429) and ``overloaded`` (503). None for every other failure.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        kind: str | None = None,
        context_limit: int | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.kind = kind
        self.context_limit = context_limit
        self.prompt_tokens = prompt_tokens


@dataclass(frozen=True)
class ModelSpec:
    """``provider/model`` as typed on the command line, plus the endpoint it goes to.

    ``base_url`` is what the call uses, credentials included (``https://user:pass@host/v1``); its
    repr and :func:`public_url` leave them out.
    """

    provider: str
    model: str
    base_url: str = ""

    def __repr__(self) -> str:
        return f"ModelSpec(provider={self.provider!r}, model={self.model!r}, base_url={public_url(self.base_url)!r})"

    @classmethod
    def parse(cls, text: str, base_url: str = "") -> ModelSpec:
        provider, sep, model = text.partition("/")
        if not sep or not provider or not model:
            raise ConfigError(
                f"model spec {text!r} must look like PROVIDER/MODEL, e.g. openai/gpt-4o or llamacpp/smollm2"
            )
        return cls(provider, model, base_url)

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


#: Whether a provider being made must find its credentials (an API key) now. A dry run makes
#: providers only to build and count their requests, so one that would refuse to start without
#: a key is made all the same there (:func:`without_credentials`); a real run still refuses.
CREDENTIALS_REQUIRED: ContextVar[bool] = ContextVar(
    "grandrounds_credentials_required", default=True
)


@contextmanager
def without_credentials() -> Iterator[None]:
    """Providers made inside need no API key (they must not be called: a dry run)."""
    token = CREDENTIALS_REQUIRED.set(False)
    try:
        yield
    finally:
        CREDENTIALS_REQUIRED.reset(token)


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
    #: True where the provider sends images (:meth:`image_limits` says what it takes); a benchmark
    #: asked with images is refused, before it loads anything, for a provider that does not.
    sees_images: ClassVar[bool] = False
    #: True where the provider sends tools and reads tool calls back (native tool use); an agent
    #: benchmark's native-tool protocol is refused, before anything runs, for a provider that does not.
    supports_tools: ClassVar[bool] = False

    def __init__(self, spec: ModelSpec, **options: Any) -> None:
        self.spec = spec
        self.options = options

    @property
    def endpoint(self) -> str:
        """Requests to one endpoint share one connection limit."""
        return public_url(self.spec.base_url) or self.spec.provider

    @property
    def rate_key(self) -> str:
        """What a vendor's request and token limits count against: one model at one endpoint.
        Vendors limit each model apart (OpenAI's and Anthropic's rate-limit guides), so a candidate
        and a judge that are the same model at the same endpoint share its limits, and two models
        there each have their own (their calls still share the endpoint's connection slots)."""
        return f"{self.endpoint} ({self.spec.model})"

    #: A non-secret label of the account a gateway is called with ("" for the default one): a
    #: gateway may route two accounts to two models, so their answers must never be shared.
    account: str = ""

    def request_base_url(self) -> str:
        """The base URL recorded in request keys (answers from different servers never mix),
        without credentials, and the account label where one is set: it reaches the store, the
        run id and the fingerprint."""
        ident = self.options.get("endpoint_id")
        url = f"endpoint:{ident}" if ident else public_url(self.spec.base_url)
        return f"{url}#account:{self.account}" if self.account else url

    @abstractmethod
    async def call(self, request: Request) -> Response:
        """Perform one call; raise ProviderError on failure."""

    @classmethod
    def sees_images_with(cls, options: Mapping[str, Any]) -> bool:
        """Whether the provider, with these model options, sends images (checked before anything loads)."""
        return cls.sees_images

    def image_limits(self) -> Any:
        """What images this provider can send (a ``providers.images.ImageLimits``), or None where it
        cannot send images: a benchmark with images is then refused before any call."""
        return None

    async def server_slots(self) -> tuple[int, str] | None:
        """How many requests the server works on at once, as it reports it, and where it said so
        (e.g. ``(1, "llama.cpp /props total_slots")``); None where it does not say. Asked once
        per endpoint before the first call when no ``--concurrency`` is given."""
        return None

    async def check_logprobs(self, kind: str) -> bool:
        """Probe the endpoint's log-probabilities before a log-probability run of ``kind``; a
        ConfigError where they are not right, False where they could not be checked. A provider
        that computes them itself (or serves none) has nothing to probe: True."""
        return True

    async def aclose(self) -> None:
        return None


#: ``--model-opt endpoint_id=NAME``: the name of one service reached at several URLs (a Kubernetes
#: Service, a vLLM data-parallel endpoint, a KubeRay RayService, one server as 127.0.0.1 and as
#: localhost); it replaces the URL in request keys and run ids, so their answers are shared.
ENDPOINT_ID = Param(
    name="endpoint_id",
    type=str,
    default="",
    help="name of the service behind the URL, recorded in keys and run ids in place of the URL (one service at several URLs)",
)


def split_endpoint(spec_text: str, base_url: str = "") -> tuple[str, str]:
    """``provider/model@http://host/v1`` -> (``provider/model``, URL); without ``@`` the URL is ``base_url``."""
    if "@" in spec_text:
        spec_text, base_url = spec_text.split("@", 1)
    return spec_text, base_url


def check_model(
    model: str, options: Mapping[str, Any], kind: RequestKind = "chat"
) -> dict[str, Any]:
    """``options`` coerced for the provider of ``model``, which must serve ``kind`` requests.

    Called before a run loads data or makes a call: an undeclared or ill-typed option, or a
    log-prob answer mode on a provider that cannot compute log-probabilities, is a one-line
    ConfigError instead of a failure on every sample.
    """
    spec = ModelSpec.parse(split_endpoint(model)[0])
    cls = PROVIDERS.get(spec.provider)
    if kind not in cls.request_kinds:
        served = ", ".join(sorted(cls.request_kinds))
        raise ConfigError(
            f"provider {spec.provider} cannot serve {kind} requests (it serves {served}): use another --answer-mode or model"
        )
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


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``https://user:pass@host/v1`` -> (``https://host/v1``, user, password); (url, None, None) without."""
    if "@" not in url:
        return url, None, None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.netloc.rpartition("@")[2]
    return (
        urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)),
        parts.username,
        parts.password,
    )


@functools.lru_cache(maxsize=256)
def public_url(url: str) -> str:
    """``url`` without the user name and password it may carry: what may be stored or shown.
    (Remembered: every call asks it of its provider's URL two or three times.)"""
    return split_userinfo(url)[0]


#: Token shapes redacted from any text a server sends back: an Authorization value (Bearer or
#: Basic), and API keys with well-known prefixes (OpenAI/Anthropic/DeepSeek ``sk-``, Google
#: ``AIza``, Hugging Face ``hf_``, Groq ``gsk_``, xAI ``xai-``).
_SECRET_SHAPES = re.compile(
    r"\b(?P<scheme>[Bb]earer|BEARER|[Bb]asic|BASIC)(?P<sep>\s+)(?![a-z]+(?![\w.~+/=-]))[\w.~+/=-]{8,}"  # not a plain word
    r"|\b(?:sk|gsk|xai|hf)[-_][A-Za-z0-9_-]{8,}"
    r"|\bAIza[A-Za-z0-9_-]{20,}"
)
REDACTED = "[redacted]"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret in ``secrets`` and anything shaped like a token replaced by "[redacted]".

    Applied to whatever a server sends back before it becomes an error message (and so reaches
    the store): a gateway that echoes the request's Authorization header or the key it refused
    must not put the key on disk.
    """
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return _SECRET_SHAPES.sub(
        lambda m: f"{m['scheme']}{m['sep']}{REDACTED}" if m["scheme"] else REDACTED, text
    )


def account_label(api_key_env: str, default_env: str, user: str | None) -> str:
    """The account a gateway is called with, as a label that shows nothing secret: the first 12
    hex digits of the sha256 of the key's variable NAME and the URL's user name ("" for the
    provider's default variable and no user, so default runs keep their keys)."""
    if api_key_env == default_env and not user:
        return ""
    import hashlib

    return hashlib.sha256(f"{api_key_env}|{user or ''}".encode()).hexdigest()[:12]
