"""Messages with images as each API takes them, and the limits checked before any call.

A message whose content is a plain string is sent as that string, exactly as before images
existed. A message of parts is sent as a list: OpenAI-compatible servers take
``{"type": "image_url", "image_url": {"url": "data:<media type>;base64,<data>"}}`` parts (and
``detail`` where the user sets it); Anthropic takes ``{"type": "image", "source": {"type":
"base64", "media_type", "data"}}`` blocks. Each image is base64-encoded once per process
(:func:`encoded`, keyed by its sha256), however many calls send it.

Limits (:class:`ImageLimits`) are checked per sample before the first call, so a run never
starts and then stops on the one oversized image: Anthropic's published limits (docs.anthropic.com,
"Vision": JPEG, PNG, GIF and WebP; at most 8,000 px a side; 5 MB an image through the API; at most
100 images and 32 MB a request), and for OpenAI-compatible servers OpenAI's published ones (20 MB an
image, 500 images and 50 MB a request), each settable (``--model-opt max_image_mb``, ``max_images``,
``max_request_mb``); elsewhere (llama.cpp) 100 images and 64 MB a request. Every copy of a repeated
image counts toward a request's limits (each travels in full) and the refusal says how many are
repeats; its base64 is made once. OpenAI's ``detail`` is part of the image part (``--param
image_detail``), so it is in every request's key.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import ImagePart, Message, Sample, TextPart
from grandrounds.providers.base import ProviderError

#: How many encoded images are kept: enough for a benchmark's distinct images (SLAKE has 180).
_KEEP = 512
_ENCODED: OrderedDict[str, str] = OrderedDict()
_LOCK = threading.Lock()


def encoded(part: ImagePart) -> str:
    """The image's bytes in base64, encoded once per process."""
    with _LOCK:
        hit = _ENCODED.get(part.sha256)
        if hit is not None:
            _ENCODED.move_to_end(part.sha256)
            return hit
    if part.data is None:
        raise ProviderError(
            f"image {part.sha256[:12]}: its bytes were not loaded with the sample", retryable=False
        )
    text = base64.b64encode(part.data).decode("ascii")
    with _LOCK:
        _ENCODED[part.sha256] = text
        while len(_ENCODED) > _KEEP:
            _ENCODED.popitem(last=False)
    return text


def openai_content(message: Message) -> Any:
    """A message's ``content`` as the Chat Completions API takes it."""
    if isinstance(message.content, str):
        return message.content
    out: list[dict[str, Any]] = []
    for p in message.content:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif not isinstance(p, ImagePart):
            raise TypeError(
                f"a {type(p).__name__} is not message content (tool turns have their own form)"
            )
        else:
            url: dict[str, Any] = {"url": f"data:{p.media_type};base64,{encoded(p)}"}
            if p.detail:
                url["detail"] = p.detail
            out.append({"type": "image_url", "image_url": url})
    return out


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": openai_content(m)} for m in messages]


def anthropic_content(message: Message) -> Any:
    """A message's ``content`` as the Messages API takes it."""
    if isinstance(message.content, str):
        return message.content
    out: list[dict[str, Any]] = []
    for p in message.content:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif not isinstance(p, ImagePart):
            raise TypeError(
                f"a {type(p).__name__} is not message content (tool turns have their own form)"
            )
        else:
            out.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": p.media_type, "data": encoded(p)},
                }
            )
    return out


#: Images one request may carry, and the bytes they may make (base64, as sent), where the API
#: publishes no limit (llama.cpp, the scripted provider): a request past them is refused before any
#: call, since every copy of an image travels in full (a row naming one 5 MB image 150 times makes
#: a 1 GB request). ``--model-opt max_images=N`` / ``max_request_mb=M`` raise them where offered.
DEFAULT_MAX_IMAGES = 100
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ImageLimits:
    """What an API accepts: media types, pixels a side, bytes an image, images and bytes a request
    (None: no limit). Every copy of a repeated image counts: each travels in the request."""

    media_types: frozenset[str] | None = None
    max_side: int | None = None
    max_image_bytes: int | None = None
    max_request_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES
    max_images: int | None = DEFAULT_MAX_IMAGES
    #: what the refusal names as the limit's source
    source: str = ""
    #: how to raise the request limits, where they can be raised (said in the refusal)
    raise_with: str = ""

    def check(self, sample: Sample) -> None:
        """A one-line ConfigError naming the sample and the image that breaks a limit."""
        total = 0
        images = [im for m in sample.messages for im in m.images]
        distinct = len({im.sha256 for im in images})
        repeats = (
            f" ({len(images) - distinct} of them repeats: {distinct} distinct)"
            if distinct < len(images)
            else ""
        )
        how = f"; {self.raise_with}" if self.raise_with else ""
        if self.max_images is not None and len(images) > self.max_images:
            raise ConfigError(
                f"sample {sample.id}: {len(images)} images in one request{repeats}, over the "
                f"limit of {self.max_images:,} ({self.source}){how}"
            )
        for i, img in enumerate(images):
            where = f"sample {sample.id}, image {i + 1} ({img.sha256[:12]}, {img.media_type}, {img.width}x{img.height})"
            size = len(img.data) if img.data is not None else 0
            total += size
            if self.media_types is not None and img.media_type not in self.media_types:
                raise ConfigError(
                    f"{where}: {self.source} takes {', '.join(sorted(self.media_types))}; "
                    "re-encode with --param image_format=png or jpeg"
                )
            if self.max_side is not None and max(img.width, img.height) > self.max_side:
                raise ConfigError(
                    f"{where}: larger than {self.max_side} px a side ({self.source}); "
                    f"shrink it with --param image_max_side={self.max_side}"
                )
            if self.max_image_bytes is not None and size > self.max_image_bytes:
                raise ConfigError(
                    f"{where}: {size:,} bytes, over the limit of {self.max_image_bytes:,} an image "
                    f"({self.source}; --model-opt max_image_mb where offered); "
                    "re-encode or shrink it (--param image_format=jpeg, image_max_side=N)"
                )
            if self.max_request_bytes is not None and total * 4 // 3 > self.max_request_bytes:
                # stopped at the image that passes the bound: a 300-copy row is not summed to the end
                raise ConfigError(
                    f"sample {sample.id}: its {len(images)} images{repeats} make a request over "
                    f"the limit of {self.max_request_bytes:,} bytes of base64 ({self.source}){how}"
                )


ANTHROPIC_LIMITS = ImageLimits(
    media_types=frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"}),
    max_side=8000,
    max_image_bytes=5 * 1024 * 1024,
    max_request_bytes=32 * 1024 * 1024,
    # docs.anthropic.com, "Vision": up to 100 images in one API request
    max_images=100,
    source="Anthropic's API",
)


def anthropic_limits(max_images: int = 100, max_request_mb: float = 32.0) -> ImageLimits:
    """Anthropic's published limits, with the request's images and bytes raised where a proxy or a
    newer API takes more (``--model-opt max_images``, ``max_request_mb``)."""
    return replace(
        ANTHROPIC_LIMITS,
        max_images=max_images,
        max_request_bytes=int(max_request_mb * 1024 * 1024),
        raise_with="--model-opt max_images=N or max_request_mb=M raises the request's limits",
    )


#: OpenAI's published request limits (platform.openai.com, "Images and vision": up to 500 images
#: and a 50 MB payload a request), the defaults for every OpenAI-compatible server.
OPENAI_MAX_IMAGES = 500
OPENAI_MAX_REQUEST_MB = 50.0


def openai_limits(
    max_image_mb: float,
    max_images: int = OPENAI_MAX_IMAGES,
    max_request_mb: float = OPENAI_MAX_REQUEST_MB,
) -> ImageLimits:
    return ImageLimits(
        max_image_bytes=int(max_image_mb * 1024 * 1024),
        max_images=max_images,
        max_request_bytes=int(max_request_mb * 1024 * 1024),
        source="the server's, OpenAI's published ones unless set",
        raise_with="--model-opt max_images=N or max_request_mb=M raises the request's limits",
    )
